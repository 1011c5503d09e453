"""Runs a case on every backend in lockstep and applies the oracle stack after each step.

Per step (DESIGN.md §4):
1. The contract model predicts the rejection, or every tensor's live dims and the dispatch
   log; each backend must match it exactly (errors by class and key).
2. Before the step, every non-constant tensor's slack (allocation past its live bytes) is
   filled with a step-tagged NaN word; after it, the slack must be intact and no live value
   may hold poison (slack canaries).
3. Every op's outputs are compared with its float64 reference evaluated on that backend's own
   inputs to the op, within the op's derived budget (so the first op that leaves its budget
   is named directly), and graph outputs are compared end to end with error bounds
   propagated through the graph.
4. Validation messages and crashes are findings too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_format import (
    DTYPES,
    DeviceError,
    Graph,
    GraphBuildError,
    InputError,
    LoadedGraph,
    ParityError,
    ResizeError,
    Runtime,
    StepResult,
    TensorValue,
)
from harness.case import Case, StepInputs
from harness.contract import ContractModel, ModelStep, expected_build_error
from harness.divergence import MODEL, Divergence, Kind, blame_from
from harness.numerics import compare
from harness.ops import model_for
from harness.reference import ReferenceEvaluator, op_args

# Slack poison is a quiet NaN carrying a marker bit that arithmetic never sets on its own
# (canonical NaNs are 0x7FC00000), tagged with the tensor it was written into and the step.
# Distinct tags per tensor make a slack-to-slack copy visible as a write, and let a stale
# read name the tensor and step its value came from.
POISON_MARK = 0x7FE00000
POISON_MASK = 0xFFE00000


def poison_word(step: int, tensor_id: int) -> int:
    """The u32 written into the slack of canaried tensor `tensor_id` before step `step`."""
    return POISON_MARK | ((tensor_id & 0x1FF) << 12) | (step & 0xFFF)


def decode_poison(word: int) -> tuple[int, int]:
    """(tensor id, step) of a poison word."""
    return (word >> 12) & 0x1FF, word & 0xFFF


def error_key(err: BaseException) -> tuple[Any, ...]:
    """What must match between two rejections: class and structured key."""
    if isinstance(err, ResizeError | InputError):
        return (type(err).__name__, *err.key())
    if isinstance(err, GraphBuildError):
        return (type(err).__name__, err.op, err.tensor)
    return (type(err).__name__,)


@dataclass
class BackendStep:
    """What one backend reported for one step (summaries only, no tensors)."""

    error: str | None = None
    cur_dims: dict[str, list[int]] = field(default_factory=dict)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    utilization: dict[str, float] = field(default_factory=dict)  # "op.slot" or "out:<name>"
    validation_messages: list[str] = field(default_factory=list)


@dataclass
class StepRecord:
    """Everything the oracle saw in one step."""

    index: int
    inputs: dict[str, Any]
    expected_error: str | None
    expected_cur_dims: dict[str, list[int]]
    expected_dispatches: list[dict[str, Any]]
    backends: dict[str, BackendStep]
    divergences: list[Divergence]


@dataclass
class CaseResult:
    """The outcome of one case."""

    name: str
    steps: list[StepRecord]
    divergences: list[Divergence]
    duration_s: float
    adapters: dict[str, dict[str, Any]]

    @property
    def ok(self) -> bool:
        """No divergence at all."""
        return not self.divergences

    @property
    def max_utilization(self) -> float:
        """Largest error/budget ratio seen in any finite comparison."""
        values = [
            u for s in self.steps for b in s.backends.values() for u in b.utilization.values()
        ]
        finite = [u for u in values if np.isfinite(u)]
        return max(finite, default=0.0)


def _dispatch_json(record: tuple[str, str, Any, Any, bool]) -> dict[str, Any]:
    op, kernel, wg, count, ran = record
    return {"op": op, "kernel": kernel, "wg": list(wg), "count": list(count), "ran": ran}


class LockstepRunner:
    """Runs cases on several runtimes side by side.

    Args:
        runtimes: the backends, usually WebGPU and Vulkan (one is enough to test a backend
            against the contract and the reference).
        canaries: poison and check slack regions.
        per_op: check every op against its reference on the backend's own inputs (reads
            back every intermediate); graph outputs are always checked end to end.
    """

    def __init__(
        self, runtimes: Sequence[Runtime], *, canaries: bool = True, per_op: bool = True
    ) -> None:
        self.runtimes = list(runtimes)
        self.canaries = canaries
        self.per_op = per_op
        self.adapters = {rt.name: rt.info() for rt in self.runtimes}

    # ------------------------------------------------------------------ case

    def run(self, case: Case) -> CaseResult:
        """Build the case's graph on every runtime and run all its steps."""
        start = time.perf_counter()
        graph = case.graph
        divergences: list[Divergence] = []
        loaded: dict[str, LoadedGraph] = {}
        try:
            divergences += self._load(graph, loaded)
            steps: list[StepRecord] = []
            built = len(loaded) == len(self.runtimes) and not divergences
            if built and expected_build_error(graph) is None:
                steps = self._run_steps(case, loaded)
            for step in steps:
                divergences += step.divergences
        finally:
            for lg in loaded.values():
                lg.close()
        return CaseResult(case.name, steps, divergences, time.perf_counter() - start, self.adapters)

    def _load(self, graph: Graph, loaded: dict[str, LoadedGraph]) -> list[Divergence]:
        expected = expected_build_error(graph)
        errors: dict[str, BaseException | None] = {}
        for rt in self.runtimes:
            try:
                loaded[rt.name] = rt.load(graph)
                errors[rt.name] = None
            except GraphBuildError as err:
                errors[rt.name] = err
        want = error_key(expected) if expected else None
        wrong = {name: (error_key(err) if err else None) != want for name, err in errors.items()}
        if not any(wrong.values()):
            return []
        got = {name: str(err) if err else "loaded" for name, err in errors.items()}
        return [
            Divergence(
                -1,
                Kind.BUILD_ERROR,
                blame_from(wrong, len({str(v) for v in got.values()}) == 1),
                f"load: expected {str(expected) if expected else 'success'}, got {got}",
                op=expected.op if expected else None,
                details={"expected": str(expected) if expected else None, "got": got},
            )
        ]

    def _run_steps(self, case: Case, loaded: dict[str, LoadedGraph]) -> list[StepRecord]:
        graph = case.graph
        model = ContractModel(graph)
        reference = ReferenceEvaluator(graph)
        written = [n for node in graph.ops for n in node.outputs.values()]
        intermediates = [
            n
            for n in written
            if isinstance(graph.values[n], TensorValue) and n not in graph.outputs
        ]
        states = [t.name for t in graph.tensors() if t.state]
        canaried = [t.name for t in graph.tensors() if t.constant is None and not t.state]
        # Pre-step state of each backend, for the per-op check of ops that update state.
        backend_state: dict[str, dict[str, np.ndarray]] = {
            name: {s: graph.initial_data(graph.tensor(s)).copy() for s in states}  # type: ignore[union-attr]
            for name in loaded
        }
        records = []
        for index, inputs in enumerate(case.steps):
            records.append(
                self._step(
                    index,
                    graph,
                    inputs,
                    model,
                    reference,
                    loaded,
                    intermediates if self.per_op else [],
                    states,
                    canaried,
                    backend_state,
                )
            )
        return records

    # ------------------------------------------------------------------ step

    def _step(
        self,
        index: int,
        graph: Graph,
        inputs: StepInputs,
        model: ContractModel,
        reference: ReferenceEvaluator,
        loaded: Mapping[str, LoadedGraph],
        intermediates: list[str],
        states: list[str],
        canaried: list[str],
        backend_state: dict[str, dict[str, np.ndarray]],
    ) -> StepRecord:
        before = {name: lg.cur_dims() for name, lg in loaded.items()}
        expected = model.try_step(inputs)
        fill: dict[str, tuple[int, int]] = {}
        if isinstance(expected, ModelStep) and self.canaries:
            for tensor_id, name in enumerate(canaried):
                live = (
                    int(np.prod(expected.cur_dims[name]))
                    * DTYPES[graph.tensor(name).dtype].itemsize
                )
                fill[name] = ((live + 3) // 4 * 4, poison_word(index, tensor_id))
        results: dict[str, StepResult] = {}
        failures: dict[str, BaseException] = {}
        for name, lg in loaded.items():
            try:
                results[name] = lg.execute(
                    inputs, read=[*intermediates, *states], read_raw=list(fill), fill=fill
                )
            except Exception as err:  # every failure is evidence, not a harness crash
                failures[name] = err
        record = StepRecord(
            index=index,
            inputs={
                k: list(v.shape) if isinstance(v, np.ndarray) else int(v) for k, v in inputs.items()
            },
            expected_error=None
            if isinstance(expected, ModelStep)
            else f"{type(expected).__name__}: {expected}",
            expected_cur_dims={k: list(v) for k, v in expected.cur_dims.items()}
            if isinstance(expected, ModelStep)
            else {},
            expected_dispatches=[_dispatch_json(d) for d in expected.dispatches]
            if isinstance(expected, ModelStep)
            else [],
            backends={},
            divergences=[],
        )
        for name in loaded:
            step = BackendStep()
            if name in failures:
                err = failures[name]
                step.error = f"{type(err).__name__}: {err}"
            else:
                res = results[name]
                step.cur_dims = {k: list(v) for k, v in res.cur_dims.items()}
                step.dispatches = [
                    _dispatch_json(d.logical()) | {"grid": list(d.physical_grid)}
                    for d in res.dispatches
                ]
                step.validation_messages = list(res.validation_messages)
            record.backends[name] = step

        div = record.divergences
        div += self._check_errors(index, expected, failures, results, loaded, before)
        if isinstance(expected, ModelStep) and results:
            div += self._check_metadata(index, expected, results)
            div += self._check_grids(index, results)
            div += self._check_validation(index, results)
            if self.canaries:
                div += self._check_canaries(index, graph, expected, results, fill)
            values, errors, _ = reference.step(inputs)
            div += self._check_numerics(
                index, graph, inputs, values, errors, results, record, backend_state, states
            )
        return record

    # ------------------------------------------------------------------ oracles

    def _check_errors(
        self,
        index: int,
        expected: ModelStep | ParityError,
        failures: Mapping[str, BaseException],
        results: Mapping[str, StepResult],
        loaded: Mapping[str, LoadedGraph],
        before: Mapping[str, dict[str, Any]],
    ) -> list[Divergence]:
        out: list[Divergence] = []
        for name, err in failures.items():
            if isinstance(err, DeviceError):
                out.append(
                    Divergence(
                        index,
                        Kind.CRASH,
                        name,
                        f"{name}: {err}",
                        details={"messages": err.messages},
                    )
                )
            elif not isinstance(err, ParityError):
                out.append(
                    Divergence(
                        index, Kind.CRASH, name, f"{name} crashed: {type(err).__name__}: {err}"
                    )
                )
        if isinstance(expected, ModelStep):
            for name, err in failures.items():
                if isinstance(err, ResizeError | InputError):
                    out.append(
                        Divergence(
                            index,
                            Kind.ERROR_ASYMMETRY,
                            name,
                            f"{name} rejected a step the contract accepts: {err}",
                            details={"key": list(error_key(err))},
                        )
                    )
            return out
        want = error_key(expected)
        got = {name: error_key(failures[name]) if name in failures else None for name in loaded}
        wrong = {name: key != want for name, key in got.items()}
        if any(wrong.values()):
            out.append(
                Divergence(
                    index,
                    Kind.ERROR_ASYMMETRY,
                    blame_from(wrong, len({str(v) for v in got.values()}) == 1),
                    f"expected rejection {want}, got {got}",
                    details={
                        "expected": list(want),
                        "got": {k: list(v) if v else None for k, v in got.items()},
                    },
                )
            )
        for name, lg in loaded.items():
            if name in failures and lg.cur_dims() != before[name]:
                changed = [t for t, d in lg.cur_dims().items() if d != before[name][t]]
                out.append(
                    Divergence(
                        index,
                        Kind.STATE_AFTER_REJECT,
                        name,
                        f"{name} rejected the step but changed live dims of {changed}",
                        details={"tensors": changed},
                    )
                )
        return out

    def _check_metadata(
        self, index: int, expected: ModelStep, results: Mapping[str, StepResult]
    ) -> list[Divergence]:
        out: list[Divergence] = []
        for tensor, want in expected.cur_dims.items():
            got = {name: tuple(res.cur_dims.get(tensor, ())) for name, res in results.items()}
            wrong = {name: dims != want for name, dims in got.items()}
            if any(wrong.values()):
                out.append(
                    Divergence(
                        index,
                        Kind.CUR_DIMS,
                        blame_from(wrong, len(set(got.values())) == 1),
                        f"cur_dims of {tensor!r}: contract {list(want)}, "
                        + ", ".join(f"{n} {list(d)}" for n, d in got.items()),
                        tensor=tensor,
                        details={
                            "expected": list(want),
                            "got": {n: list(d) for n, d in got.items()},
                        },
                    )
                )
        # One divergence per op whose dispatch slots differ anywhere.
        want_by_op = _by_op(expected.dispatches)
        got_by_op = {
            name: _by_op([d.logical() for d in res.dispatches]) for name, res in results.items()
        }
        ops = list(dict.fromkeys([*want_by_op, *(op for g in got_by_op.values() for op in g)]))
        for op in ops:
            want = want_by_op.get(op, [])
            got = {name: by_op.get(op, []) for name, by_op in got_by_op.items()}
            wrong = {name: entries != want for name, entries in got.items()}
            if not any(wrong.values()):
                continue
            out.append(
                Divergence(
                    index,
                    Kind.DISPATCH,
                    blame_from(wrong, len({tuple(v) for v in got.values()}) == 1),
                    f"dispatches of {op!r}: contract {_brief(want)}, "
                    + ", ".join(f"{n} {_brief(e)}" for n, e in got.items()),
                    op=op,
                    details={
                        "expected": [_dispatch_json(d) for d in want],
                        "got": {n: [_dispatch_json(d) for d in e] for n, e in got.items()},
                    },
                )
            )
        return out

    def _check_grids(self, index: int, results: Mapping[str, StepResult]) -> list[Divergence]:
        out: list[Divergence] = []
        for name, res in results.items():
            limit = int(self.adapters[name].get("max_workgroups_per_dim", 65535))
            for d in res.dispatches:
                if not d.ran:
                    continue
                need = int(np.prod(d.logical_count))
                have = int(np.prod(d.physical_grid))
                # A fold may waste less than one row of the physical grid.
                bad = (
                    any(g > limit or g < 1 for g in d.physical_grid)
                    or have < need
                    or have - need >= max(d.physical_grid[0], 1)
                )
                if bad:
                    out.append(
                        Divergence(
                            index,
                            Kind.PHYSICAL_GRID,
                            name,
                            f"{name}: {d.op}/{d.kernel} grid {d.physical_grid} for logical "
                            f"{d.logical_count} (limit {limit}/dim)",
                            op=d.op,
                        )
                    )
        return out

    def _check_validation(self, index: int, results: Mapping[str, StepResult]) -> list[Divergence]:
        return [
            Divergence(index, Kind.VALIDATION, name, f"{name}: {msg}", details={"message": msg})
            for name, res in results.items()
            for msg in res.validation_messages
        ]

    def _check_canaries(
        self,
        index: int,
        graph: Graph,
        expected: ModelStep,
        results: Mapping[str, StepResult],
        fill: Mapping[str, tuple[int, int]],
    ) -> list[Divergence]:
        out: list[Divergence] = []
        canaried = list(fill)
        for name, res in results.items():
            for tensor, (offset, word) in fill.items():
                raw = res.raw[tensor]
                slack = raw[offset : len(raw) // 4 * 4].view(np.uint32)
                hit = np.flatnonzero(slack != word)
                if hit.size:
                    itemsize = DTYPES[graph.tensor(tensor).dtype].itemsize
                    first = (offset + 4 * int(hit[0])) // itemsize
                    elements = sorted({(offset + 4 * int(h)) // itemsize for h in hit[:4096]})
                    out.append(
                        Divergence(
                            index,
                            Kind.CANARY_WRITE,
                            name,
                            f"{name} wrote {hit.size} word(s) past the live size of {tensor!r} "
                            f"(first at element {first}; live numel "
                            f"{int(np.prod(expected.cur_dims[tensor]))})",
                            op=_producer(graph, tensor),
                            tensor=tensor,
                            details={
                                "words": int(hit.size),
                                "first_element": first,
                                "elements": elements[:256],
                                "live_numel": int(np.prod(expected.cur_dims[tensor])),
                                "max_numel": int(np.prod(graph.tensor(tensor).dims)),
                            },
                        )
                    )
            live_values = {**res.outputs, **res.tensors}
            for tensor, array in live_values.items():
                if array.dtype.itemsize != 4 or graph.tensor(tensor).state:
                    continue
                words = np.ascontiguousarray(array).view(np.uint32).ravel()
                poisoned = np.flatnonzero((words & POISON_MASK) == POISON_MARK)
                if poisoned.size:
                    origins = sorted(
                        {
                            (canaried[t] if t < len(canaried) else f"#{t}", step)
                            for t, step in (decode_poison(int(w)) for w in words[poisoned[:256]])
                        }
                    )
                    sources = ", ".join(f"{t} at step {st}" for t, st in origins[:4])
                    out.append(
                        Divergence(
                            index,
                            Kind.STALE_READ,
                            name,
                            f"{name}: {poisoned.size} live element(s) of {tensor!r} hold slack "
                            f"poison (from {sources}); first flat index {int(poisoned[0])}",
                            op=_producer(graph, tensor),
                            tensor=tensor,
                            details={
                                "elements": int(poisoned.size),
                                "first": int(poisoned[0]),
                                "indices": [int(i) for i in poisoned[:256]],
                                "origins": [list(o) for o in origins],
                            },
                        )
                    )
        return out

    def _check_numerics(
        self,
        index: int,
        graph: Graph,
        inputs: StepInputs,
        ref_values: Mapping[str, np.ndarray],
        ref_errors: Mapping[str, Any],
        results: Mapping[str, StepResult],
        record: StepRecord,
        backend_state: dict[str, dict[str, np.ndarray]],
        states: list[str],
    ) -> list[Divergence]:
        out: list[Divergence] = []
        for name, res in results.items():
            util = record.backends[name].utilization
            observed: dict[str, np.ndarray] = {**res.outputs, **res.tensors}
            local: list[Divergence] = []
            if self.per_op:
                local = self._check_ops(
                    index, graph, inputs, name, res, observed, backend_state[name], states, util
                )
            for s in states:
                backend_state[name][s] = observed[s].copy()
            out += local
            for tensor in graph.outputs:
                cmp = compare(res.outputs[tensor], ref_values[tensor], ref_errors[tensor])
                util[f"out:{tensor}"] = cmp.utilization
                # With per-op checks on, an output failure is reported on its own only when
                # every op was within budget on its own inputs: error then accumulated across
                # ops beyond the propagated bound.
                if not cmp.ok and not local:
                    out.append(
                        self._numeric_divergence(
                            index, name, _producer(graph, tensor), tensor, cmp, "graph"
                        )
                    )
        return _merge_blame(out)

    def _check_ops(
        self,
        index: int,
        graph: Graph,
        inputs: StepInputs,
        backend: str,
        res: StepResult,
        observed: Mapping[str, np.ndarray],
        pre_state: Mapping[str, np.ndarray],
        states: list[str],
        util: dict[str, float],
    ) -> list[Divergence]:
        """Each op against its reference evaluated on this backend's own inputs to the op."""
        values: dict[str, np.ndarray] = {
            n: np.asarray(v).astype(np.float64)
            for n, v in inputs.items()
            if isinstance(v, np.ndarray)
        }
        for t in graph.tensors():
            if t.constant is not None:
                values[t.name] = graph.constants[t.constant].astype(np.float64)
        values.update({s: pre_state[s].astype(np.float64) for s in states})
        values.update({n: v.astype(np.float64) for n, v in observed.items() if n not in states})
        out: list[Divergence] = []
        for node in graph.ops:
            model = model_for(node.op)
            args = op_args(graph, node, values, res.symints)
            outs = model.reference(node, args)
            budgets = model.budget(node, args, {}, outs)
            checks = [
                (node.outputs[slot], outs[slot], budgets[slot])
                for slot in node.outputs
                if isinstance(graph.values[node.outputs[slot]], TensorValue)
            ]
            # State tensors the op updates in place (KV caches): after vs reference-updated.
            checks += [
                (arg, args[slot], budgets.get(slot, np.zeros(1)))
                for slot, arg in node.args.items()
                if isinstance(arg, str) and arg in states
            ]
            for tensor, ref, budget in checks:
                cmp = compare(observed[tensor], ref, budget)
                util[f"{node.name}:{tensor}"] = cmp.utilization
                if not cmp.ok:
                    out.append(
                        self._numeric_divergence(index, backend, node.name, tensor, cmp, "op")
                    )
        return out

    @staticmethod
    def _numeric_divergence(
        index: int, backend: str, op: str | None, tensor: str, cmp: Any, scope: str
    ) -> Divergence:
        if cmp.nan_mismatch or not cmp.shape_ok:
            kind = Kind.NAN_INF if cmp.shape_ok else Kind.NUMERIC
            msg = (
                f"{backend}: {tensor!r} has {cmp.nan_mismatch} non-finite value(s) where the "
                "reference is finite"
                if cmp.shape_ok
                else f"{backend}: {tensor!r} has the wrong shape"
            )
        else:
            kind = Kind.NUMERIC
            msg = (
                f"{backend}: {tensor!r} is {cmp.utilization:.3g}x over its error budget "
                f"(max abs error {cmp.max_abs_error:.3g} at {cmp.worst_index})"
            )
        return Divergence(
            index,
            kind,
            backend,
            msg,
            op=op,
            tensor=tensor,
            factor=None if not np.isfinite(cmp.utilization) else cmp.utilization,
            details={
                "scope": scope,
                "worst_index": cmp.worst_index,
                "max_abs_error": cmp.max_abs_error,
            },
        )


def _by_op(log: Sequence[tuple[str, str, Any, Any, bool]]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for entry in log:
        grouped.setdefault(entry[0], []).append(entry)
    return grouped


def _brief(entries: Sequence[tuple[str, str, Any, Any, bool]]) -> str:
    return (
        "["
        + ", ".join(
            f"{kernel} x{tuple(count)}" + ("" if ran else " skipped")
            for _, kernel, _, count, ran in entries
        )
        + "]"
    )


def _producer(graph: Graph, tensor: str) -> str | None:
    node = graph.producer(tensor)
    return node.name if node else None


def _merge_blame(divergences: list[Divergence]) -> list[Divergence]:
    """Fold the same numeric finding on several backends into one blamed on "both"."""
    merged: dict[tuple[Any, ...], Divergence] = {}
    rest: list[Divergence] = []
    for d in divergences:
        if d.kind not in (Kind.NUMERIC, Kind.NAN_INF):
            rest.append(d)
            continue
        key = (d.kind, d.op, d.tensor, d.details.get("scope"))
        if key in merged and merged[key].blame != d.blame:
            first = merged[key]
            first.blame = "both" if first.blame != MODEL else first.blame
            first.message += f"; {d.message}"
            first.factor = max(first.factor or 0.0, d.factor or 0.0) or None
        else:
            merged[key] = d
    return rest + list(merged.values())
