"""Errors and builds: which backend failed, where, and whether the model agreed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from graph_format import (
    DeviceError,
    Graph,
    GraphBuildError,
    InputError,
    KernelBuildError,
    KernelValuesError,
    OpError,
    ParityError,
    PropagationError,
    ResizeError,
    SymIntValue,
    TensorValue,
)
from harness.check.contract import ModelStep
from harness.check.divergence import (
    AsymmetryDetails,
    BugKey,
    BuildErrorDetails,
    CrashDetails,
    Divergence,
    Kind,
    StateDetails,
    Upstream,
    blame_from,
    key_dtype,
)
from harness.check.oracles.where import consumer, producer
from harness.model import arg_values, op_dtype

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
