"""The oracle stack of docs/design.md §6, one function per oracle, each returning divergences.

The lockstep runner (harness/check/lockstep.py) decides when each runs; these functions only
compare what the backends reported with what the contract model and the float64 reference
predict, classify each difference and say which side is to blame.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from graph_format import (
    DTYPES,
    DeviceError,
    DispatchRecord,
    Graph,
    GraphBuildError,
    InputError,
    KernelBuildError,
    KernelValuesError,
    OpError,
    ParityError,
    PropagationError,
    ResizeError,
    StepResult,
    SymIntValue,
    TensorValue,
)
from harness.check.contract import KERNELS_OWN_WORKGROUP, ModelStep
from harness.check.divergence import (
    MODEL,
    AsymmetryDetails,
    BitDetails,
    BitPair,
    BugKey,
    BuildErrorDetails,
    CanaryDetails,
    CrashDetails,
    CurDimsDetails,
    DispatchDetails,
    Divergence,
    GridDetails,
    Kind,
    LoggedDispatch,
    NumericDetails,
    StaleReadDetails,
    StateDetails,
    Upstream,
    ValidationDetails,
    blame_from,
    blame_of,
    blamed_backends,
    key_dtype,
)
from harness.check.reference import OpEvaluation, op_args
from harness.model import ExpectedDispatch, arg_values, local_budgets, op_dtype
from harness.model.numerics import F32, Arithmetic, Comparison, compare
from harness.ops import model_for

# ---------------------------------------------------------------------------- errors


def error_key(err: BaseException) -> tuple[Any, ...]:
    """What must match between two rejections: class and structured key."""
    if isinstance(err, ResizeError | InputError):
        return (type(err).__name__, *err.key())
    if isinstance(err, GraphBuildError):
        return (type(err).__name__, err.op, err.tensor)
    return (type(err).__name__,)


def error_op(graph: Graph, err: BaseException) -> str | None:
    """The op an error is about, for signatures and per-op views.

    An op's own check names the op (an `InputError` subject, a build error's op); a refused
    tensor names the op that writes it, or for a graph input the first op that reads it; a
    resize engine that does not converge names the first op whose hook still ran; an op
    whose own code raised (`OpError`) is named by the runtime.
    """
    if isinstance(err, GraphBuildError | KernelBuildError | OpError):
        return err.op
    if isinstance(err, PropagationError):
        named = [*err.ops, *(p for v in err.values if (p := producer(graph, v)))]
        return min(named, key=_op_order(graph).__getitem__) if named else None
    if isinstance(err, InputError):
        subject = err.subject
    elif isinstance(err, ResizeError):
        subject = err.tensor
    else:
        return None
    if subject in _op_order(graph):
        return subject
    return producer(graph, subject) or consumer(graph, subject)


def _op_order(graph: Graph) -> dict[str, int]:
    return {node.name: i for i, node in enumerate(graph.ops)}


def upstream_origin(
    graph: Graph, expected: ModelStep, live: Mapping[str, Any], op: str
) -> Upstream | None:
    """Where a wrong value that made `op` refuse an accepted step was produced.

    `live` holds the values the backend had when it refused (`ParityError.live`). If an
    input of `op` differs from the contract's value, its producer made it wrong, unless
    the producer's own inputs were wrong too: the chain is followed to the first op whose
    inputs were right and whose output was not. None when every input of `op` was right
    (the refusal is the op's own).
    """
    nodes = {node.name: node for node in graph.ops}
    seen: set[str] = set()

    def wrong_input(name: str) -> Upstream | None:
        node = nodes[name]
        seen.add(name)
        for value in arg_values(node):
            kind = graph.values.get(value)
            if isinstance(kind, TensorValue):
                want: Any = expected.cur_dims.get(value)
            elif isinstance(kind, SymIntValue):
                want = expected.symints.get(value)
            else:
                continue
            got = live.get(value)
            source = producer(graph, value)
            if got is None or want is None or source is None or source in seen:
                continue
            if _plain_value(got) != _plain_value(want):
                return wrong_input(source) or Upstream(
                    source, nodes[source].op, value, _plain_value(want), _plain_value(got)
                )
        return None

    return wrong_input(op) if op in nodes else None


def _plain_value(value: Any) -> Any:
    return [int(v) for v in value] if isinstance(value, tuple | list) else int(value)


def check_build(
    expected: GraphBuildError | None, errors: Mapping[str, BaseException | None]
) -> list[Divergence]:
    """Load-time rejection (or acceptance) must match the contract on every backend.

    A kernel that does not build is a finding of its own on the backend that built it,
    with the compiler's whole output; any other exception at load is a crash (of the op
    whose builder raised it, when the runtime names it: `OpError`).
    """
    out: list[Divergence] = []
    compared: dict[str, BaseException | None] = {}
    for name, err in errors.items():
        if isinstance(err, KernelBuildError):
            out.append(kernel_build_divergence(-1, name, err))
        elif isinstance(err, OpError):
            out.append(op_crash(-1, name, err))
        elif err is not None and not isinstance(err, ParityError):
            out.append(
                Divergence(-1, Kind.CRASH, name, f"{name} crashed at load: {_error_text(err)}")
            )
        else:
            compared[name] = err
    want = error_key(expected) if expected else None
    wrong = {name: (error_key(err) if err else None) != want for name, err in compared.items()}
    if not any(wrong.values()):
        return out
    got = {name: str(err) if err else "loaded" for name, err in compared.items()}
    refused = [e.op for e in compared.values() if isinstance(e, GraphBuildError)]
    out.append(
        Divergence(
            -1,
            Kind.BUILD_ERROR,
            blame_from(wrong, len(set(got.values())) == 1),
            f"load: expected {expected if expected else 'success'}, got {got}",
            op=expected.op if expected else next(iter(refused), None),
            details=BuildErrorDetails(expected=str(expected) if expected else None, got=got),
        )
    )
    return out


def op_crash(step: int, backend: str, err: OpError) -> Divergence:
    """A crash in an op's own code (`OpError`), blamed on its backend and keyed by the op."""
    where = "at load" if step < 0 else f"in its {err.stage} code"
    return Divergence(
        step,
        Kind.CRASH,
        backend,
        f"{backend}: op {err.op!r} ({err.op_type}) crashed {where}: {err.error}",
        op=err.op,
        details=CrashDetails(stage=err.stage, error=err.error),
    )


def kernel_build_divergence(step: int, backend: str, err: KernelBuildError) -> Divergence:
    """A kernel that did not compile or validate, blamed on the backend that built it; or a
    manifest kernel whose expressions fail on a step's values (no compiler output then)."""
    if isinstance(err, KernelValuesError):
        return Divergence(
            step,
            Kind.BUILD_ERROR,
            backend,
            f"{backend}: kernel {err.kernel!r}: its manifest fails on this step's values: "
            f"{err.compiler.removeprefix(f'{err.kernel}: ')}",
            op=err.op,
            details=BuildErrorDetails(
                kernel=err.kernel, shader=err.shader, manifest_values=err.compiler
            ),
        )
    return Divergence(
        step,
        Kind.BUILD_ERROR,
        backend,
        f"{backend}: kernel {err.kernel!r} does not build: {compiler_headline(err.compiler)} "
        "(the whole compiler output is in the details)",
        op=err.op,
        details=BuildErrorDetails(kernel=err.kernel, shader=err.shader, compiler=err.compiler),
    )


def compiler_headline(text: str) -> str:
    """The line of a compiler's output that says what is wrong, with naga's location.

    naga opens with "Validation Error" and a "Caused by" chain before the message and a
    `wgsl:LINE:COL` marker; glslc prints `file:LINE: error: ...` lines.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    head = next((line for line in lines if "error:" in line.lower()), lines[0] if lines else "")
    where = next((m.group(0) for line in lines if (m := _WGSL_LOCATION.search(line))), None)
    return f"{head} (at {where})" if where else head


_WGSL_LOCATION = re.compile(r"wgsl:\d+:\d+")


def _error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def check_errors(
    step: int,
    graph: Graph,
    expected: ModelStep | ParityError,
    failures: Mapping[str, BaseException],
    backends: Sequence[str],
    dims_before: Mapping[str, dict[str, Any]],
    dims_after: Mapping[str, dict[str, Any]],
    expected_by: Mapping[str, ModelStep | ParityError] | None = None,
) -> list[Divergence]:
    """Crashes, rejections the contract does not predict (or predicted ones that did not
    happen, or happened for another reason), and rejections that changed the graph.

    On a step the contract accepts, any exception is a finding blamed on the backend that
    raised it: a crash (a lost device, an exception this project does not raise on
    purpose), a build error (a kernel that does not build), or an error asymmetry (any
    other refusal: a bad shape, a resize engine that does not converge, a build or format
    error at execute). Each names the op it is about, and an asymmetry caused by a wrong
    value from upstream names where that value was produced (`upstream_origin`).

    Args:
        expected_by: a backend's own prediction where it runs a manifest's kernels (its
            kernels' `requires` and grids); the others are held to `expected`.
    """
    own = expected_by or {}

    def want_of(name: str) -> ModelStep | ParityError:
        return own.get(name, expected)

    out: list[Divergence] = []
    for name, err in failures.items():
        found = _failure_divergence(step, graph, name, err, want_of(name))
        if found is not None:
            out.append(found)
    wrong_refusal = _wrong_refusals(step, graph, failures, backends, want_of)
    if wrong_refusal is not None:
        out.append(wrong_refusal)
    for name in backends:
        if name in failures and dims_after[name] != dims_before[name]:
            changed = [t for t, d in dims_after[name].items() if d != dims_before[name][t]]
            out.append(
                Divergence(
                    step,
                    Kind.STATE_AFTER_REJECT,
                    name,
                    f"{name} rejected the step but changed live dims of {changed}",
                    op=error_op(graph, failures[name]) or _refusal_op(graph, want_of(name)),
                    details=StateDetails(changed),
                )
            )
    return out


def _failure_divergence(
    step: int, graph: Graph, name: str, err: BaseException, want: ModelStep | ParityError
) -> Divergence | None:
    """What backend `name`'s exception on this step is: a crash, a build error, or a
    refusal of a step the contract accepts; None for a refusal the contract predicts
    (`_wrong_refusals` judges its reason)."""
    op = error_op(graph, err)
    if isinstance(err, DeviceError):
        return Divergence(
            step,
            Kind.CRASH,
            name,
            f"{name}: {err}",
            op=op,
            details=CrashDetails(messages=list(err.messages)),
        )
    if isinstance(err, KernelBuildError):
        return kernel_build_divergence(step, name, err)
    if isinstance(err, OpError):
        return op_crash(step, name, err)
    if not isinstance(err, ParityError):
        return Divergence(step, Kind.CRASH, name, f"{name} crashed: {_error_text(err)}")
    if isinstance(want, ModelStep):
        return _unexpected_rejection(step, graph, name, err, want, op)
    return None


def _unexpected_rejection(
    step: int, graph: Graph, name: str, err: ParityError, want: ModelStep, op: str | None
) -> Divergence:
    """A refusal of a step the contract accepts, naming where a wrong input value was
    produced when one was (`upstream_origin`): that producer's bug is its cause."""
    details = AsymmetryDetails(key=list(error_key(err)), error=_error_text(err))
    message = f"{name} rejected a step the contract accepts: {_error_text(err)}"
    origin = upstream_origin(graph, want, err.live, op) if err.live and op else None
    cause = None
    if origin is not None:
        details.upstream = origin
        message += (
            f" (its input {origin.value!r} was {origin.got} where the contract "
            f"has {origin.expected}: produced by {origin.op!r})"
        )
        # The producer's bug, under the key it has where nothing refuses.
        source = next(n for n in graph.ops if n.name == origin.op)
        dtype = key_dtype(op_dtype(graph, source))
        cause = BugKey(source.op, str(Kind.CUR_DIMS), name, dtype=dtype)
    return Divergence(
        step, Kind.ERROR_ASYMMETRY, name, message, op=op, details=details, cause=cause
    )


def _wrong_refusals(
    step: int,
    graph: Graph,
    failures: Mapping[str, BaseException],
    backends: Sequence[str],
    want_of: Callable[[str], ModelStep | ParityError],
) -> Divergence | None:
    """The backends a predicted refusal went wrong on (no refusal, or another reason), as
    one error asymmetry; None when every backend refused as predicted (or none was)."""
    refusing = [name for name in backends if isinstance(want_of(name), ParityError)]
    if not refusing:
        return None
    wants = {name: error_key(cast(ParityError, want_of(name))) for name in refusing}
    got = {name: error_key(failures[name]) if name in failures else None for name in refusing}
    wrong = {name: got[name] != wants[name] for name in refusing}
    wrong |= {name: False for name in backends if name not in wrong}
    if not any(wrong.values()):
        return None
    # The op of a wrong backend's own error says most about its bug; else the contract's
    # refusal names the op that should have refused.
    named = [
        *(error_op(graph, failures[n]) for n, bad in wrong.items() if bad and n in failures),
        *(_refusal_op(graph, want_of(n)) for n, bad in wrong.items() if bad),
    ]
    same = len({str(got[n]) for n in refusing}) == 1 and len(refusing) == len(backends)
    one_want = len(set(wants.values())) == 1
    return Divergence(
        step,
        Kind.ERROR_ASYMMETRY,
        blame_from(wrong, same),
        f"expected rejection {next(iter(wants.values())) if one_want else wants}, got {got}",
        op=next((o for o in named if o), None),
        details=AsymmetryDetails(
            expected=list(wants[refusing[0]])
            if one_want
            else {n: list(k) for n, k in wants.items()},
            got={k: list(v) if v else None for k, v in got.items()},
        ),
    )


def _refusal_op(graph: Graph, want: ModelStep | ParityError) -> str | None:
    """The op a predicted refusal is about (None for an accepted step)."""
    return error_op(graph, want) if isinstance(want, ParityError) else None


# ---------------------------------------------------------------------------- metadata


def _logged(entry: ExpectedDispatch) -> LoggedDispatch:
    """A dispatch log entry as a divergence's details hold it."""
    return LoggedDispatch(**dispatch_json(entry))


def _index(index: tuple[int, ...] | None) -> list[int] | None:
    """An element's index as its details hold it (a list, as JSON reads it back)."""
    return list(index) if index is not None else None


def dispatch_json(entry: ExpectedDispatch) -> dict[str, Any]:
    """A dispatch log entry as plain data."""
    op, kernel, wg, count, ran = entry
    return {"op": op, "kernel": kernel, "wg": list(wg), "count": list(count), "ran": ran}


def _by_op(log: Sequence[ExpectedDispatch]) -> dict[str, list[ExpectedDispatch]]:
    grouped: dict[str, list[ExpectedDispatch]] = {}
    for entry in log:
        grouped.setdefault(entry[0], []).append(entry)
    return grouped


def _brief(entries: Sequence[ExpectedDispatch]) -> str:
    parts = [
        f"{kernel} x{tuple(count)}" + ("" if ran else " skipped")
        for _, kernel, _, count, ran in entries
    ]
    return "[" + ", ".join(parts) + "]"


def check_metadata(
    step: int,
    graph: Graph,
    expected: ModelStep,
    results: Mapping[str, StepResult],
    expected_by: Mapping[str, ModelStep | ParityError] | None = None,
) -> list[Divergence]:
    """Every tensor's cur_dims, every SymInt and every op's dispatch slots, exactly as the
    contract says; a backend that runs a manifest's kernels is held to its own dispatches
    (`expected_by`: the manifest's counts for its replaced slots, whose workgroup size is
    the kernel's own and not compared)."""
    out: list[Divergence] = []
    for tensor, want in expected.cur_dims.items():
        got = {name: tuple(res.cur_dims.get(tensor, ())) for name, res in results.items()}
        wrong = {name: dims != want for name, dims in got.items()}
        if any(wrong.values()):
            out.append(
                Divergence(
                    step,
                    Kind.CUR_DIMS,
                    blame_from(wrong, len(set(got.values())) == 1),
                    f"cur_dims of {tensor!r}: contract {list(want)}, "
                    + ", ".join(f"{n} {list(d)}" for n, d in got.items()),
                    op=writer(graph, tensor),
                    tensor=tensor,
                    details=CurDimsDetails(list(want), {n: list(d) for n, d in got.items()}),
                )
            )
    # SymInts are live metadata too (input_pos, a sym_size of a live dim).
    for symint, value in expected.symints.items():
        got_int = {name: res.symints.get(symint) for name, res in results.items()}
        wrong = {name: v != value for name, v in got_int.items()}
        if any(wrong.values()):
            out.append(
                Divergence(
                    step,
                    Kind.CUR_DIMS,
                    blame_from(wrong, len(set(got_int.values())) == 1),
                    f"SymInt {symint!r}: contract {value}, "
                    + ", ".join(f"{n} {v}" for n, v in got_int.items()),
                    op=producer(graph, symint),
                    tensor=symint,
                    details=CurDimsDetails(value, dict(got_int)),
                )
            )
    own = {name: want for name, want in (expected_by or {}).items() if isinstance(want, ModelStep)}
    want_by_op = _by_op(expected.dispatches)
    wants_by_op = {
        name: _by_op(own[name].dispatches) if name in own else want_by_op for name in results
    }
    got_by_op = {
        name: _by_op([_as_predicted(d, own.get(name)) for d in res.dispatches])
        for name, res in results.items()
    }
    for op in dict.fromkeys(
        [*want_by_op, *(op for g in [*got_by_op.values(), *wants_by_op.values()] for op in g)]
    ):
        want_slots = want_by_op.get(op, [])
        got_slots = {name: by_op.get(op, []) for name, by_op in got_by_op.items()}
        wrong = {
            name: entries != wants_by_op[name].get(op, []) for name, entries in got_slots.items()
        }
        if not any(wrong.values()):
            continue
        foreign = {
            name: [_logged(d) for d in wants_by_op[name].get(op, [])]
            for name in own
            if name in results
        }
        out.append(
            Divergence(
                step,
                Kind.DISPATCH,
                blame_from(wrong, len({tuple(v) for v in got_slots.values()}) == 1),
                f"dispatches of {op!r}: contract {_brief(want_slots)}, "
                + ", ".join(f"{n} {_brief(e)}" for n, e in got_slots.items()),
                op=op,
                details=DispatchDetails(
                    [_logged(d) for d in want_slots],
                    {n: [_logged(d) for d in e] for n, e in got_slots.items()},
                    foreign or None,
                ),
            )
        )
    return out


def _as_predicted(record: DispatchRecord, own: ModelStep | None) -> ExpectedDispatch:
    """A backend's dispatch record as the contract predicts it: a manifest kernel's
    workgroup size is its own (not predicted)."""
    op, kernel, wg, count, ran = record.logical()
    if own is not None and kernel in own.foreign_slots:
        wg = KERNELS_OWN_WORKGROUP
    return (op, kernel, wg, count, ran)


def check_grids(
    step: int, results: Mapping[str, StepResult], limits: Mapping[str, int]
) -> list[Divergence]:
    """Physical grids within the device's per-dimension limit, covering the logical count
    with less than one row of waste."""
    out: list[Divergence] = []
    for name, res in results.items():
        limit = limits[name]
        for d in res.dispatches:
            if not d.ran:
                continue
            need = int(np.prod(d.logical_count))
            have = int(np.prod(d.physical_grid))
            if (
                any(g > limit or g < 1 for g in d.physical_grid)
                or have < need
                or have - need >= max(d.physical_grid[0], 1)
            ):
                out.append(
                    Divergence(
                        step,
                        Kind.PHYSICAL_GRID,
                        name,
                        f"{name}: {d.op}/{d.kernel} grid {d.physical_grid} for logical "
                        f"{d.logical_count} (limit {limit}/dim)",
                        op=d.op,
                        details=GridDetails(list(d.physical_grid), list(d.logical_count)),
                    )
                )
    return out


def check_validation(step: int, results: Mapping[str, StepResult]) -> list[Divergence]:
    """Any validation message is a finding."""
    return [
        Divergence(step, Kind.VALIDATION, name, f"{name}: {msg}", details=ValidationDetails(msg))
        for name, res in results.items()
        for msg in res.validation_messages
    ]


# ---------------------------------------------------------------------------- canaries

# Slack poison is a quiet NaN whose top 12 bits are 0x7FE (sign 0, exponent all ones, the
# quiet bit and a marker bit) with bit 20 clear, tagged in the low 20 bits with the tensor it
# was written into (9 bits) and the step (11 bits). No canonical NaN matches the mask: x86
# and Arm produce 0x7FC00000 (marker clear), NVIDIA 0x7FFFFFFF (bit 20 set), x86 SSE's
# "indefinite" 0xFFC00000 (sign set). Distinct tags per tensor make a slack-to-slack copy
# visible as a write, and let a stale read name the tensor and step its value came from.
# A copy keeps the tag on every device; arithmetic on poison keeps it where NaN payloads
# propagate (lavapipe) and turns into a canonical NaN where they do not (NVIDIA), which the
# numeric oracle then reports as a NaN.
POISON_MARK = 0x7FE00000
POISON_MASK = 0xFFF00000
# The upper half of a poison word as a 16-bit element (float16 tensors).
POISON_HALF_MARK = POISON_MARK >> 16
POISON_HALF_MASK = POISON_MASK >> 16


def poison_word(step: int, tensor_id: int) -> int:
    """The u32 written into the slack of canaried tensor `tensor_id` before step `step`."""
    return POISON_MARK | ((tensor_id & 0x1FF) << 11) | (step & 0x7FF)


def decode_poison(word: int) -> tuple[int, int]:
    """(tensor id, step) of a poison word."""
    return (word >> 11) & 0x1FF, word & 0x7FF


def canary_fill(
    step: int, graph: Graph, expected: ModelStep, canaried: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Per canaried tensor, (first slack byte, poison word) for the contract's live dims."""
    fill = {}
    for tensor_id, name in enumerate(canaried):
        itemsize = DTYPES[graph.tensor(name).dtype].itemsize
        live = int(np.prod(expected.cur_dims[name])) * itemsize
        fill[name] = ((live + 3) // 4 * 4, poison_word(step, tensor_id))
    return fill


def check_canaries(
    step: int,
    graph: Graph,
    expected: ModelStep,
    results: Mapping[str, StepResult],
    fill: Mapping[str, tuple[int, int]],
) -> list[Divergence]:
    """Slack unchanged after the step (no write past the live size), no guard damaged (no
    write past the allocation), and no poison in any live value read back (no stale read)."""
    out: list[Divergence] = []
    canaried = list(fill)
    for name, res in results.items():
        # One vectorized look over all tensors first (a step has dozens of small ones, and
        # numpy's cost per call is what this check costs); the tensor-by-tensor search only
        # runs to describe what that look found.
        slacks = {t: _slack(res.raw[t], offset) for t, (offset, _) in fill.items()}
        if slacks and _any_word_differs(slacks, fill):
            out += _slack_writes(step, graph, expected, name, slacks, fill)
        # A write past the allocation itself, found in the guard the runtime keeps after it
        # (StepResult.guard_writes); a scratch buffer is named `<op node>.<label>`.
        for tensor, written in res.guard_writes.items():
            owner = next((n.name for n in graph.ops if tensor.startswith(f"{n.name}.")), None)
            out.append(
                Divergence(
                    step,
                    Kind.CANARY_WRITE,
                    name,
                    f"{name} wrote {written} word(s) past the allocation of {tensor!r} (into "
                    "the guard that follows it)",
                    op=writer(graph, tensor) or owner or consumer(graph, tensor),
                    tensor=tensor,
                    details=CanaryDetails(written, past_allocation=True),
                )
            )
        read = {
            tensor: array
            for tensor, array in {**res.outputs, **res.tensors}.items()
            if array.dtype.itemsize in (2, 4) and not graph.tensor(tensor).state
        }
        live = {
            tensor: np.ascontiguousarray(array).view(np.uint32).ravel()
            for tensor, array in read.items()
            if array.dtype.itemsize == 4
        }
        halves = {
            tensor: np.ascontiguousarray(array).view(np.uint16).ravel()
            for tensor, array in read.items()
            if array.dtype.itemsize == 2
        }
        if (live and _any_poison(live)) or (halves and _any_half_poison(halves)):
            out += _stale_reads(step, graph, name, live, halves, canaried)
    return out


def _slack(raw: np.ndarray, offset: int) -> np.ndarray:
    """The whole words of a raw read-back from byte `offset` on, as uint32."""
    return raw[offset : len(raw) // 4 * 4].view(np.uint32)


def _any_word_differs(
    slacks: Mapping[str, np.ndarray], fill: Mapping[str, tuple[int, int]]
) -> bool:
    """Whether any slack holds a word other than its tensor's poison."""
    words = np.array([fill[t][1] for t in slacks], np.uint32)
    expected = np.repeat(words, [s.size for s in slacks.values()])
    return bool((np.concatenate(list(slacks.values())) != expected).any())


def _any_poison(live: Mapping[str, np.ndarray]) -> bool:
    """Whether any live 4-byte word carries the slack poison's mark."""
    return bool(((np.concatenate(list(live.values())) & POISON_MASK) == POISON_MARK).any())


def _any_half_poison(halves: Mapping[str, np.ndarray]) -> bool:
    """Whether any live 16-bit element holds a poison word's upper half."""
    joined = np.concatenate(list(halves.values()))
    return bool(((joined & POISON_HALF_MASK) == POISON_HALF_MARK).any())


def _slack_writes(
    step: int,
    graph: Graph,
    expected: ModelStep,
    name: str,
    slacks: Mapping[str, np.ndarray],
    fill: Mapping[str, tuple[int, int]],
) -> list[Divergence]:
    """A canary write per slack that a backend changed."""
    out: list[Divergence] = []
    for tensor, (offset, word) in fill.items():
        hit = np.flatnonzero(slacks[tensor] != word)
        if not hit.size:
            continue
        itemsize = DTYPES[graph.tensor(tensor).dtype].itemsize
        elements = sorted({(offset + 4 * int(h)) // itemsize for h in hit[:4096]})
        live_numel = int(np.prod(expected.cur_dims[tensor]))
        out.append(
            Divergence(
                step,
                Kind.CANARY_WRITE,
                name,
                f"{name} wrote {hit.size} word(s) past the live size of {tensor!r} "
                f"(first at element {elements[0]}; live numel {live_numel})",
                op=writer(graph, tensor),
                tensor=tensor,
                details=CanaryDetails(
                    int(hit.size),
                    first_element=elements[0],
                    elements=elements[:256],
                    live_numel=live_numel,
                    max_numel=int(np.prod(graph.tensor(tensor).dims)),
                ),
            )
        )
    return out


def _stale_reads(
    step: int,
    graph: Graph,
    name: str,
    live: Mapping[str, np.ndarray],
    halves: Mapping[str, np.ndarray],
    canaried: list[str],
) -> list[Divergence]:
    """A stale read per live value read back that holds slack poison: 4-byte words carrying
    the poison's mark (each names the tensor and step it came from), or 16-bit elements
    holding a poison word's upper half (an f16 NaN no arithmetic produces, 0x7FE0-0x7FEF;
    the tag is split between the halves, so the source is not named)."""
    found: list[tuple[str, np.ndarray, list[tuple[str, int | str]]]] = []
    for tensor, words in live.items():
        poisoned = np.flatnonzero((words & POISON_MASK) == POISON_MARK)
        if poisoned.size:
            origins: list[tuple[str, int | str]] = sorted(
                {
                    (canaried[t] if t < len(canaried) else f"#{t}", st)
                    for t, st in (decode_poison(int(w)) for w in words[poisoned[:256]])
                }
            )
            found.append((tensor, poisoned, origins))
    for tensor, half in halves.items():
        poisoned = np.flatnonzero((half & POISON_HALF_MASK) == POISON_HALF_MARK)
        if poisoned.size:
            found.append((tensor, poisoned, [("a poison word's upper half", "?")]))
    out: list[Divergence] = []
    for tensor, poisoned, named in found:
        sources = ", ".join(f"{t} at step {st}" for t, st in named[:4])
        out.append(
            Divergence(
                step,
                Kind.STALE_READ,
                name,
                f"{name}: {poisoned.size} live element(s) of {tensor!r} hold slack poison "
                f"(from {sources}); first flat index {int(poisoned[0])}",
                op=writer(graph, tensor),
                tensor=tensor,
                details=StaleReadDetails(
                    int(poisoned.size),
                    int(poisoned[0]),
                    [int(i) for i in poisoned[:256]],
                    [list(o) for o in named],
                ),
            )
        )
    return out


# ---------------------------------------------------------------------------- numerics


def numeric_divergence(
    step: int, backend: str, op: str | None, tensor: str, cmp: Comparison, scope: str
) -> Divergence:
    """A numeric, non-finite or shape finding from a failed comparison."""
    if not cmp.shape_ok:
        kind, msg = Kind.NUMERIC, f"{backend}: {tensor!r} has the wrong shape"
    elif cmp.nan_mismatch:
        kind = Kind.NAN_INF
        finite = cmp.finite_where_special
        parts = [
            f"{n} {what}"
            for n, what in (
                (
                    cmp.nan_mismatch - finite,
                    "non-finite where the reference is finite or another non-finite value",
                ),
                (finite, "finite where the reference is non-finite"),
            )
            if n
        ]
        msg = f"{backend}: {tensor!r} has value(s) of the wrong class: {'; '.join(parts)}"
    else:
        kind = Kind.NUMERIC
        msg = (
            f"{backend}: {tensor!r} is {cmp.utilization:.3g}x over its error budget "
            f"(max abs error {cmp.max_abs_error:.3g} at {cmp.worst_index})"
        )
    return Divergence(
        step,
        kind,
        backend,
        msg,
        op=op,
        tensor=tensor,
        factor=cmp.utilization if np.isfinite(cmp.utilization) else None,
        details=NumericDetails(scope, _index(cmp.worst_index), cmp.max_abs_error),
    )


def suspect_divergence(
    step: int, backend: str, op: str, tensor: str, hard: Comparison, statistical: Comparison
) -> Divergence:
    """A `numeric_suspect` finding: within the rigorous budget (`hard`), over the
    statistical tier's bound (`statistical`); both utilizations go with it."""
    return Divergence(
        step,
        Kind.NUMERIC_SUSPECT,
        backend,
        f"{backend}: {tensor!r} is {statistical.utilization:.3g}x over its statistical bound "
        f"and at {hard.utilization:.3g} of its rigorous budget (max abs error "
        f"{statistical.max_abs_error:.3g} at {statistical.worst_index})",
        op=op,
        tensor=tensor,
        factor=statistical.utilization,
        details=NumericDetails(
            "op",
            _index(statistical.worst_index),
            statistical.max_abs_error,
            hard_utilization=hard.utilization,
            statistical_utilization=statistical.utilization,
        ),
    )


def statistical_key(key: str) -> str:
    """The utilization key of an `op:tensor` comparison under the statistical tier, beside
    its rigorous one (recorded only where the two tiers differ)."""
    return f"{STATISTICAL_PREFIX}{key}"


STATISTICAL_PREFIX = "stat:"


def check_ops(
    step: int,
    graph: Graph,
    backend: str,
    values: Mapping[str, np.ndarray],
    observed: Mapping[str, np.ndarray],
    symints: Mapping[str, int],
    states: Sequence[str],
    utilization: dict[str, float],
    shared: Mapping[str, OpEvaluation] | None = None,
    references: dict[str, np.ndarray] | None = None,
    arithmetic: Mapping[str, Arithmetic] | None = None,
) -> list[Divergence]:
    """Each op against its float64 reference evaluated on this backend's own inputs to it.

    Judged on its own inputs, an op's error is its own: the first op that fails is where a
    divergence starts, whatever happens downstream.

    Args:
        values: float64 values of every tensor as this backend saw it: inputs, constants,
            state before the step, and every op output it produced.
        observed: what the backend produced (outputs, intermediates, state after the step).
        shared: the reference evaluator's ops of this step (`ReferenceEvaluator.evaluations`):
            an op whose arguments here are the evaluator's, bit for bit (graph inputs,
            constants, state both hold alike), takes its reference and budget from there
            instead of computing them again.
        references: filled with each compared tensor's reference, by `op:tensor` (what
            the exact tier blames by, `check_exact`).
        arithmetic: per op whose kernels on this backend compute in another arithmetic
            than f32 (a manifest's `precision = "f16"`), that arithmetic: its budgets are
            derived for it.
    """
    out: list[Divergence] = []
    for node in graph.ops:
        model = model_for(node.op)
        args = op_args(graph, node, values, symints)
        known = shared.get(node.name) if shared is not None else None
        own = arithmetic.get(node.name, F32) if arithmetic is not None else F32
        if known is not None and known.arithmetic == own and known.matches(args):
            outs, tiers = known.outputs, known.budgets
            args.update(known.state_after)  # the state as the reference updated it
        else:
            outs = model.reference(node, args)
            tiers = local_budgets(graph, node, args, outs, own)
        checks = [
            (node.outputs[slot], outs[slot], slot)
            for slot in node.outputs
            if isinstance(graph.values[node.outputs[slot]], TensorValue)
        ]
        # State the op updates in place (KV caches): after the step vs the reference's update.
        checks += [
            (arg, args[slot], slot)
            for slot, arg in node.args.items()
            if isinstance(arg, str) and arg in states
        ]
        for tensor, ref, slot in checks:
            hard = tiers.hard.get(slot, _NO_ERROR)
            cmp = compare(observed[tensor], ref, hard)
            key = f"{node.name}:{tensor}"
            utilization[key] = cmp.utilization
            if references is not None:
                references[key] = ref
            if not cmp.ok:
                out.append(numeric_divergence(step, backend, node.name, tensor, cmp, "op"))
                continue
            statistical = tiers.statistical.get(slot, _NO_ERROR)
            if statistical is hard:
                continue
            tight = compare(observed[tensor], ref, statistical)
            utilization[statistical_key(key)] = tight.utilization
            if not tight.ok:
                out.append(suspect_divergence(step, backend, node.name, tensor, cmp, tight))
    return out


# The budget of a state tensor an op's model gives none for: it must come back exact.
_NO_ERROR = np.zeros(1)


def check_outputs(
    step: int,
    graph: Graph,
    backend: str,
    outputs: Mapping[str, np.ndarray],
    ref_values: Mapping[str, np.ndarray],
    ref_errors: Mapping[str, Any],
    utilization: dict[str, float],
) -> list[Divergence]:
    """Graph outputs against the pure float64 reference, with bounds propagated end to end;
    a divergence names the op that wrote the output (`writer`: a state tensor, a KV cache,
    is written in place by an op that has no output)."""
    out = []
    for tensor in graph.outputs:
        cmp = compare(outputs[tensor], ref_values[tensor], ref_errors[tensor])
        utilization[f"out:{tensor}"] = cmp.utilization
        if not cmp.ok:
            out.append(
                numeric_divergence(step, backend, writer(graph, tensor), tensor, cmp, "graph")
            )
    return out


def check_degenerate(
    step: int,
    graph: Graph,
    inputs: Mapping[str, Any],
    ref_values: Mapping[str, np.ndarray],
    ref_errors: Mapping[str, Any],
) -> list[Divergence]:
    """A case that cannot fail proves nothing: a step where nothing carries varying data
    (every float input constant, all zeros say, and no weights or token ids to vary instead),
    or a graph output that lies entirely within its own error budget.

    A constant input beside varying data is allowed: some real inputs are constant (a rope
    table's row at position 0 is cos 1, sin 0), and the outputs' check still decides.
    """
    out = []
    floats = [
        (name, value.ravel())
        for name, value in inputs.items()
        if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.size
    ]
    other_data = any(t.constant is not None for t in graph.tensors()) or any(
        isinstance(value, np.ndarray) and value.dtype != np.float32 for value in inputs.values()
    )

    # One element cannot vary: it is data unless it is zero.
    def constant(flat: np.ndarray) -> bool:
        return bool(np.all(flat == flat[0])) and (flat.size > 1 or flat[0] == 0)

    if floats and not other_data and all(constant(flat) for _, flat in floats):
        values = ", ".join(f"{name} = {float(flat[0])!r}" for name, flat in floats)
        out.append(
            Divergence(
                step,
                Kind.DEGENERATE,
                "case",
                f"every float input is constant ({values}): outputs cannot tell bugs apart",
            )
        )
    for tensor in graph.outputs:
        ref = np.abs(ref_values[tensor])
        floor = np.broadcast_to(np.asarray(ref_errors[tensor]), ref.shape)
        if ref.size and not np.any(ref > floor):
            out.append(
                Divergence(
                    step,
                    Kind.DEGENERATE,
                    "case",
                    f"output {tensor!r} is below its error budget everywhere (max |value| "
                    f"{float(ref.max()):.3g}): any result would pass",
                    tensor=tensor,
                )
            )
    return out


def merge_blame(divergences: list[Divergence], backends: Sequence[str]) -> list[Divergence]:
    """Fold the same numeric finding on several of `backends` into one, blamed on them all
    (`blame_of`: "both" when every backend shows it)."""
    merged: dict[tuple[Any, ...], Divergence] = {}
    rest: list[Divergence] = []
    for d in divergences:
        if d.kind not in (Kind.NUMERIC, Kind.NAN_INF, Kind.NUMERIC_SUSPECT):
            rest.append(d)
            continue
        scope = d.details.scope if isinstance(d.details, NumericDetails) else None
        key = (d.kind, d.op, d.tensor, scope)
        if key in merged and merged[key].blame != d.blame:
            first = merged[key]
            if first.blame != MODEL:
                named = [
                    *blamed_backends(first.blame, backends),
                    *blamed_backends(d.blame, backends),
                ]
                first.blame = blame_of(named, backends)
            first.message += f"; {d.message}"
            # None stands for an infinite factor, which dominates any finite one.
            first.factor = (
                None if first.factor is None or d.factor is None else max(first.factor, d.factor)
            )
        else:
            merged[key] = d
    return rest + list(merged.values())


def producer(graph: Graph, tensor: str) -> str | None:
    """Name of the op that writes `tensor`, if any."""
    node = graph.producer(tensor)
    return node.name if node else None


def writer(graph: Graph, tensor: str) -> str | None:
    """Name of the op whose write `tensor` holds after a step: its producer, or for a state
    tensor the last op (in graph order) that updates it in place, that is binds it
    read-write in a kernel of its model (`update_cache`'s cache, `sdpa_with_kv_cache`'s)."""
    made = producer(graph, tensor)
    if made is not None:
        return made
    last = None
    for node in graph.ops:
        slots = {slot for slot, arg in node.args.items() if arg == tensor}
        if slots and any(
            b.name in slots and b.access == "read_write"
            for spec in model_for(node.op).kernels.values()
            for b in spec.tensors
        ):
            last = node.name
    return last


def consumer(graph: Graph, value: str) -> str | None:
    """Name of the first op (in graph order) that reads `value`, if any."""
    for node in graph.ops:
        for arg in node.args.values():
            if value == arg or (isinstance(arg, tuple) and value in arg):
                return node.name
    return None


# ---------------------------------------------------------------------------- exact tier


@dataclass(frozen=True)
class BitComparison:
    """One op's output on two backends whose inputs to that op were bit-identical.

    Attributes:
        op: the op's name; `op_type` its type.
        tensor: the output (or the state the op updates in place) compared.
        pair: the two backends, in the run's order.
        kernels: the kernel slots the op dispatched (ran) on both.
        ulps: the largest distance between the two in units in the last place of the
            tensor's precision (0: equal, counting +0 and -0 alike and any NaN as any NaN;
            `NOT_CLOSE` where one is NaN and the other is not, or an integer differs).
        differing: how many elements are more than 0 ULPs apart.
        first: the flat index of the first of them (-1 when none).
    """

    op: str
    op_type: str
    tensor: str
    pair: tuple[str, str]
    kernels: tuple[str, ...]
    ulps: int
    differing: int
    first: int


# A distance for elements that are not two floats of one sign of NaN-ness: any tolerance
# rejects it.
NOT_CLOSE = 1 << 40


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance of two arrays of one float (or integer) dtype in units in the
    last place: the difference of their bit patterns mapped onto a line where consecutive
    floats are consecutive integers (+0 and -0 both at 0); two NaNs are 0 apart, a NaN and a
    number `NOT_CLOSE`; integers are 0 or `NOT_CLOSE` apart."""
    x, y = np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel()
    if x.dtype.kind != "f":
        return np.where(x == y, 0, NOT_CLOSE).astype(np.int64)
    bits = x.dtype.itemsize * 8
    unsigned = {16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]

    def line(v: np.ndarray) -> np.ndarray:
        raw = v.view(unsigned).astype(np.int64 if bits < 64 else np.uint64)
        sign = (raw >> (bits - 1)) & 1
        magnitude = (raw & ((1 << (bits - 1)) - 1)).astype(np.int64)
        return np.where(sign == 1, -magnitude, magnitude)

    distance: np.ndarray = np.abs(line(x) - line(y))
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    distance[nan_x & nan_y] = 0
    distance[nan_x ^ nan_y] = NOT_CLOSE
    return distance


def compare_bits(
    graph: Graph,
    backends: Sequence[str],
    observed: Mapping[str, Mapping[str, np.ndarray]],
    values: Mapping[str, Mapping[str, np.ndarray]],
    symints: Mapping[str, Mapping[str, int]],
    dispatches: Mapping[str, Sequence[DispatchRecord]],
    states: Sequence[str],
) -> list[BitComparison]:
    """Every op's outputs on every pair of `backends`, where both ran the op with the same
    kernels on bit-identical inputs (else a difference comes from upstream, or is the
    dispatch oracle's).

    Args:
        observed: per backend, what it produced (outputs, intermediates, state after).
        values: per backend, float64 values of every tensor as it saw it in this step,
            state as before the step (`check_ops`'s `values`).
        symints: per backend, its SymInts' values.
        dispatches: per backend, its dispatch log of the step.
        states: the graph's state tensors. An op sees a state as it was before the step
            until an op that binds it read-write has run; after that the state after the
            step stands for it, and the last such op (`writer`) answers for it.
    """
    out: list[BitComparison] = []
    ran = {name: {(d.op, d.kernel) for d in log if d.ran} for name, log in dispatches.items()}
    written: set[str] = set()
    for node in graph.ops:
        model = model_for(node.op)
        writes = {
            str(node.args[b.name])
            for spec in model.kernels.values()
            for b in spec.tensors
            if b.access == "read_write" and isinstance(node.args.get(b.name), str)
        } & set(states)
        kernels = {
            name: tuple(sorted(k for op, k in ran[name] if op == node.name)) for name in backends
        }
        outputs = [
            node.outputs[slot]
            for slot in node.outputs
            if isinstance(graph.values[node.outputs[slot]], TensorValue)
        ] + [s for s in sorted(writes) if writer(graph, s) == node.name]
        for i, a in enumerate(backends):
            for b in backends[i + 1 :]:
                if not kernels[a] or kernels[a] != kernels[b]:
                    continue
                if not _same_inputs(graph, node, (a, b), observed, values, symints, written):
                    continue
                for tensor in outputs:
                    first, second = observed[a].get(tensor), observed[b].get(tensor)
                    if first is None or second is None or first.shape != second.shape:
                        continue
                    distance = ulp_distance(first, second)
                    differ = np.flatnonzero(distance)
                    out.append(
                        BitComparison(
                            node.name,
                            node.op,
                            tensor,
                            (a, b),
                            kernels[a],
                            int(distance.max(initial=0)),
                            int(differ.size),
                            int(differ[0]) if differ.size else -1,
                        )
                    )
        written |= writes
    return out


def _same_inputs(
    graph: Graph,
    node: Any,
    pair: tuple[str, str],
    observed: Mapping[str, Mapping[str, np.ndarray]],
    values: Mapping[str, Mapping[str, np.ndarray]],
    symints: Mapping[str, Mapping[str, int]],
    written: set[str],
) -> bool:
    """Whether both backends of `pair` gave `node` bit-identical inputs."""
    a, b = pair
    for name in arg_values(node):
        kind = graph.values.get(name)
        if isinstance(kind, SymIntValue):
            if symints[a].get(name) != symints[b].get(name):
                return False
            continue
        if not isinstance(kind, TensorValue):
            continue
        if name in written:
            first, second = observed[a].get(name), observed[b].get(name)
        else:
            first, second = values[a].get(name), values[b].get(name)
        if first is None or second is None:
            continue  # a constant or input both hold alike
        if first.shape != second.shape or first.tobytes() != second.tobytes():
            return False
    return True


def same_device(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether two runtimes' adapters (`Runtime.info()`) are one device: their adapter names
    alike but for case and punctuation (wgpu's `llvmpipe (LLVM 15.0.6, 256 bits)` is Dawn's
    `llvmpipe-llvm-15-0-6-256-bits-`)."""

    def norm(info: Mapping[str, Any]) -> str:
        return re.sub(r"[^a-z0-9]", "", str(info.get("adapter", "")).lower())

    return bool(norm(first)) and norm(first) == norm(second)


def exact_tolerance(
    op_type: str,
    kernels: Sequence[str],
    pair: tuple[str, str],
    adapters: Mapping[str, Mapping[str, Any]],
    replaced: Mapping[str, Mapping[str, bool]],
) -> int | None:
    """How many ULPs apart two backends' outputs of an op may be, given bit-identical inputs,
    by the declarations of the kernels it ran (`KernelSpec.exact`, `KernelSpec.webgpu_ulps`):
    0 on one device where every kernel is declared exact; between two WebGPU implementations
    on different devices (the same WGSL), the largest of the kernels' `webgpu_ulps`; None
    (not compared) where a kernel declares nothing for the pair.

    Args:
        replaced: per backend running a manifest, each slot it replaces -> whether its
            entry declares `exact` (a foreign kernel promises nothing unless it does; it
            declares no `webgpu_ulps`).
    """
    a, b = pair
    foreign = {k for side in (a, b) for k in replaced.get(side, {})}
    if any(
        not flag for side in (a, b) for k, flag in replaced.get(side, {}).items() if k in kernels
    ):
        return None
    specs = model_for(op_type).kernels
    declared = [specs[k] for k in kernels if k in specs]
    if len(declared) != len(kernels) or not all(spec.exact for spec in declared):
        return None
    if same_device(adapters.get(a, {}), adapters.get(b, {})):
        return 0
    if any(k in foreign for k in kernels):
        return None
    ulps = [spec.webgpu_ulps for spec in declared]
    if not (a.startswith("webgpu") and b.startswith("webgpu")) or None in ulps:
        return None
    return max(cast(list[int], ulps))


def check_exact(
    step: int,
    comparisons: Sequence[BitComparison],
    observed: Mapping[str, Mapping[str, np.ndarray]],
    references: Mapping[str, Mapping[str, np.ndarray]],
    utilization: Mapping[str, Mapping[str, float]],
    backends: Sequence[str],
    adapters: Mapping[str, Mapping[str, Any]],
    replaced: Mapping[str, Mapping[str, bool]],
) -> list[Divergence]:
    """The exact tier: an op whose kernels are declared to round alike on a pair of backends
    (`exact_tolerance`), given bit-identical inputs there, must give outputs that far apart
    at most; farther is a `bit_mismatch` however far under budget both are.

    Blame, as the numeric tier's, goes by the float64 reference: at the elements that
    differ, the backend whose values are farther from it (summed absolute error) is wrong;
    on a tie, the one with the larger utilization of the op's budget; on a tie there too,
    both. One finding per op and tensor, blamed on every backend some pair blamed.
    """
    found: dict[tuple[str, str], Divergence] = {}
    for c in comparisons:
        allowed = exact_tolerance(c.op_type, c.kernels, c.pair, adapters, replaced)
        if allowed is None or c.ulps <= allowed:
            continue
        a, b = c.pair
        key = f"{c.op}:{c.tensor}"
        far = _farther(observed[a][c.tensor], observed[b][c.tensor], references, key, c.pair)
        if far is None:
            ua, ub = utilization[a].get(key, 0.0), utilization[b].get(key, 0.0)
            far = [a] if ua > ub else [b] if ub > ua else [a, b]
        previous = found.get((c.op, c.tensor))
        named = [*(blamed_backends(previous.blame, backends) if previous else []), *far]
        blame = blame_of(named, backends)
        ulps = "bit-identical" if allowed == 0 else f"within {allowed} ULP"
        message = (
            f"{a} and {b}: {c.tensor!r} differs in {c.differing} element(s) (up to "
            f"{c.ulps} ULP, first at flat index {c.first}) on bit-identical inputs where "
            f"its kernels ({', '.join(c.kernels)}) are declared {ulps}"
        )
        if previous is not None:
            previous.blame = blame
            previous.message += f"; {message}"
            cast(BitDetails, previous.details).pairs.append(_pair_details(c, allowed))
            continue
        found[(c.op, c.tensor)] = Divergence(
            step,
            Kind.BIT_MISMATCH,
            blame,
            message,
            op=c.op,
            tensor=c.tensor,
            details=BitDetails(worst_index=c.first, pairs=[_pair_details(c, allowed)]),
        )
    return list(found.values())


def _pair_details(c: BitComparison, allowed: int) -> BitPair:
    return BitPair(list(c.pair), c.ulps, allowed, c.differing, c.first, list(c.kernels))


def _farther(
    first: np.ndarray,
    second: np.ndarray,
    references: Mapping[str, Mapping[str, np.ndarray]],
    key: str,
    pair: tuple[str, str],
) -> list[str] | None:
    """The backend of `pair` whose values are farther from the float64 reference where the
    two differ (None: no reference, or a tie)."""
    ref = references.get(pair[0], {}).get(key)
    if ref is None:
        ref = references.get(pair[1], {}).get(key)
    if ref is None or ref.size != first.size:
        return None
    differ = ulp_distance(first, second) > 0
    flat = np.asarray(ref, np.float64).ravel()[differ]
    with np.errstate(invalid="ignore", over="ignore"):
        errors = [
            float(np.nansum(np.abs(np.asarray(v, np.float64).ravel()[differ] - flat)))
            for v in (first, second)
        ]
    if errors[0] == errors[1]:
        return None
    return [pair[0]] if errors[0] > errors[1] else [pair[1]]
