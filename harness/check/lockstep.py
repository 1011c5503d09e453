"""Runs a case on every backend in lockstep and applies the oracle stack after each step.

Per step (docs/design.md §6; the oracles are in harness/check/oracles/):
1. The contract model predicts the rejection, or every tensor's live dims and the dispatch
   log; each backend must match it exactly (errors by class and key).
2. Before the step, every non-constant tensor's slack (allocation past its live bytes) is
   filled with a step- and tensor-tagged NaN word; after it, the slack must be intact and no
   live value may hold poison (slack canaries).
3. Every op's outputs are compared with its float64 reference evaluated on that backend's own
   inputs to the op, within the op's derived budget (so the first op that leaves its budget
   is named directly), and graph outputs are compared end to end with error bounds
   propagated through the graph.
4. Validation messages and crashes are findings too; so is a case too degenerate to fail.
   Any exception a backend raises (at load or on a step the contract accepts) is a finding
   blamed on that backend: nothing a backend does is dropped.
Coverage (regimes, folded grids and kernel variants per op and backend) is recorded as the
case runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_format import (
    BackendUnavailable,
    FeatureUnavailable,
    Graph,
    Runtime,
    StepResult,
)
from graph_format.kernels import KernelEntry, KernelRequirementError
from harness.check import oracles, timing
from harness.check.contract import ModelStep, coarsest_arithmetic, expected_build_error
from harness.check.coverage import Coverage, max_state, op_regimes, workgroups_regimes
from harness.check.divergence import Divergence, FirstDivergent, Kind, primary
from harness.check.reference import ReferenceEvaluator
from harness.check.steps import StepLoop, StepRun, backend_kernels, intermediates, states
from harness.gen.case import Case, StepInputs
from harness.model import LiveState, op_dtype

# Per backend, values by name (the values each op saw, its float64 references).
_PerBackend = dict[str, dict[str, np.ndarray]]

# Re-exported for callers that inspect rejections and poison words.
error_key = oracles.error_key
poison_word = oracles.poison_word


@dataclass
class BackendStep:
    """What one backend reported for one step (summaries only, no tensors)."""

    error: str | None = None
    cur_dims: dict[str, list[int]] = field(default_factory=dict)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    utilization: dict[str, float] = field(default_factory=dict)  # "op:tensor" or "out:tensor"
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
    coverage: Coverage = field(default_factory=Coverage)
    # Why the case could not run on some backends ("" when it ran on all): their devices lack
    # a feature its graph needs (`FeatureUnavailable`: f16 on a device without half
    # precision). Those backends sat the case out; the others ran it (`steps` is empty when
    # none could). Not a divergence.
    unavailable: str = ""
    # `op_type|kernels|a~b` -> the largest ULP distance between backends a and b over the
    # case's steps where that op's inputs were bit-identical on both (`oracles.compare_bits`),
    # and the tolerance the kernels declare for that pair (None: nothing declared, not checked).
    bits: dict[str, tuple[int, int | None]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No divergence at all."""
        return not self.divergences

    @property
    def max_utilization(self) -> float:
        """Largest error/budget ratio seen in any finite comparison (rigorous budgets)."""
        values = [
            u
            for s in self.steps
            for b in s.backends.values()
            for key, u in b.utilization.items()
            if not key.startswith(oracles.STATISTICAL_PREFIX)
        ]
        return max((u for u in values if np.isfinite(u)), default=0.0)

    @property
    def max_statistical_utilization(self) -> float:
        """Largest error/bound ratio under the statistical tier, over the comparisons where
        it is tighter than the rigorous budget (long reductions; 0 when there were none):
        how near the tier came to a `numeric_suspect`."""
        prefix = oracles.STATISTICAL_PREFIX
        values = [
            u
            for s in self.steps
            for b in s.backends.values()
            for key, u in b.utilization.items()
            if key.startswith(prefix)
        ]
        return max((u for u in values if np.isfinite(u)), default=0.0)

    def primary(self) -> Divergence | None:
        """The divergence that stands for the case (see `harness.check.divergence.primary`)."""
        return primary(self.divergences) if self.divergences else None

    def first_divergence(self) -> FirstDivergent | None:
        """The first (step, op, tensor, element) that left its budget while its inputs were
        within theirs (`FirstDivergent`): the earliest op-level finding in graph order (each
        op is judged on its own inputs, so the ops before it in that step were within
        budget)."""
        with_op = [d for d in self.divergences if d.op]
        return FirstDivergent.of(primary(with_op)) if with_op else None


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
        # Per runtime with a manifest: its replaced slots (the contract's per-backend view).
        self.kernels = backend_kernels(self.runtimes)
        # Per runtime with a manifest: each replaced slot -> whether its entry declares
        # `exact` (the exact tier compares a foreign kernel only then).
        self.foreign_exact = {
            name: {s: bool((e := k.entry(s)) and e.exact) for s in k.slots}
            for name, k in self.kernels.items()
        }
        # Workgroups per grid dimension each runtime honours (its device's, or lowered).
        self.limits = {
            name: int(info.get("max_workgroups_per_dim", 65535))
            for name, info in self.adapters.items()
        }

    def run(self, case: Case) -> CaseResult:
        """Build the case's graph on every runtime and run all its steps."""
        return _CaseRun(self, case).run()


class _CaseRun:
    """The state of one case on all runtimes while it runs (the steps come from
    `harness.check.steps.StepLoop`; this class judges them)."""

    def __init__(self, runner: LockstepRunner, case: Case) -> None:
        self.runner = runner
        self.case = case
        graph = case.graph
        self.graph = graph
        self.op_types = {node.name: node.op for node in graph.ops}
        self.op_dtypes = {node.name: op_dtype(graph, node) for node in graph.ops}
        self.op_order = {node.name: i for i, node in enumerate(graph.ops)}
        self.intermediates = intermediates(graph)
        self.states = states(graph)
        self.coverage = Coverage()
        self.previous_sizes: dict[str, int] = {}
        self.max_live = max_state(graph)
        # Per runtime, the ops whose kernels there compute in another arithmetic than f32
        # (a manifest's `precision`), and per op the coarsest over the runtimes (the
        # end-to-end bounds' local terms).
        self.arithmetic = {
            name: found
            for name, kernels in runner.kernels.items()
            if (found := kernels.arithmetics(graph))
        }
        self.coarsest = coarsest_arithmetic(self.arithmetic.values())
        # Backends that refused the graph at load as their manifest's `requires` says.
        self.refused_at_load: dict[str, str] = {}
        # Per op type, kernels and pair of backends compared on bit-identical inputs: the
        # largest ULP distance between their outputs (`oracles.compare_bits`) and the
        # declared tolerance (`oracles.exact_tolerance`; None: nothing declared).
        self.bits: dict[str, tuple[int, int | None]] = {}

    def run(self) -> CaseResult:
        start = time.perf_counter()
        steps: list[StepRecord] = []
        divergences: list[Divergence] = []
        graph = self.graph
        reads = [*(self.intermediates if self.runner.per_op else []), *self.states]
        # Both backends refuse a count no grid within the smaller of their limits holds.
        limit = min(self.runner.limits.values(), default=None)
        loop = StepLoop(
            self.runner.runtimes, self.case, reads=reads, canaries=self.runner.canaries, limit=limit
        )
        unavailable = ""
        with loop:
            for error in loop.load_errors.values():
                if isinstance(error, BackendUnavailable):  # a set-up error (glslc missing)
                    raise error
            # A backend refusing a graph its manifest's kernel declares it cannot take is
            # as expected; the others go on with the case.
            kernels = self.runner.kernels
            load_errors = dict(loop.load_errors)
            for name, error in loop.load_errors.items():
                if (
                    isinstance(error, KernelRequirementError)
                    and name in kernels
                    and kernels[name].requirement_broken_at_load(graph, error)
                ):
                    del load_errors[name]
                    self.refused_at_load[name] = str(error)
            missing = {
                name: e for name, e in load_errors.items() if isinstance(e, FeatureUnavailable)
            }
            # A device without the case's precision (f16 on Chrome's SwiftShader, on Dawn on
            # an NVIDIA driver) sits the case out, with the reason; nothing is wrong. The
            # others run it: each is held to the contract and the reference on its own.
            unavailable = "; ".join(str(e) for e in missing.values())
            for name in missing:
                del load_errors[name]
            if load_errors:  # else no device can run it: nothing to compare
                divergences += oracles.check_build(expected_build_error(graph), load_errors)
            loaded = all(error is None for error in load_errors.values()) and bool(loop.loaded)
            if loaded and not divergences and expected_build_error(graph) is None:
                reference = ReferenceEvaluator(graph, arithmetic=self.coarsest)
                # Each backend's state tensors before the step, for the per-op check of ops
                # that update state in place.
                pre_state = {
                    name: {s: _initial(graph, s) for s in self.states} for name in loop.loaded
                }
                steps = [self._judge(step, reference, pre_state) for step in loop.steps()]
            for step in steps:
                divergences += step.divergences
        for d in divergences:
            d.op_type = self.op_types.get(d.op or "")
            d.dtype = self.op_dtypes.get(d.op or "")
        divergences.sort(key=lambda d: (d.step, self.op_order.get(d.op or "", -1)))
        return CaseResult(
            self.case.name,
            steps,
            divergences,
            time.perf_counter() - start,
            self.runner.adapters,
            self.coverage,
            unavailable,
            self.bits,
        )

    def _judge(
        self,
        step: StepRun,
        reference: ReferenceEvaluator,
        pre_state: dict[str, dict[str, np.ndarray]],
    ) -> StepRecord:
        """Apply the oracle stack to one step as every runtime ran it."""
        started = time.perf_counter()
        before = timing.get("reference")
        try:
            return self._judge_step(step, reference, pre_state)
        finally:
            # The oracles' own time: the judging less the references it evaluated.
            referenced = timing.get("reference") - before
            timing.add("oracles", time.perf_counter() - started - referenced)

    def _judge_step(
        self,
        step: StepRun,
        reference: ReferenceEvaluator,
        pre_state: dict[str, dict[str, np.ndarray]],
    ) -> StepRecord:
        graph = self.graph
        index, inputs, expected = step.index, step.inputs, step.expected
        assert expected is not None  # the loop runs with the contract model
        results, fill = step.results, step.fill
        record = self._record(step)

        div = record.divergences
        div += oracles.check_errors(
            index,
            graph,
            expected,
            step.failures,
            list(step.before),
            step.before,
            step.after,
            step.expected_by,
        )
        if not isinstance(expected, ModelStep) or not results:
            return record
        div += oracles.check_metadata(index, graph, expected, results, step.expected_by)
        div += oracles.check_grids(index, results, self.runner.limits)
        div += oracles.check_validation(index, results)
        if self.runner.canaries:
            div += oracles.check_canaries(index, graph, expected, results, fill)
        referenced = time.perf_counter()
        ref_values, ref_errors, _ = reference.step(inputs)
        timing.add("reference", time.perf_counter() - referenced)
        div += oracles.check_degenerate(index, graph, inputs, ref_values, ref_errors)
        numeric, seen, refs = self._check_numerics(
            step, record, reference, pre_state, (ref_values, ref_errors)
        )
        div += oracles.merge_blame(numeric, [rt.name for rt in self.runner.runtimes])
        if self.runner.per_op and len(results) > 1:
            div += self._check_exact(index, results, record, numeric, seen, refs)
        self._cover(expected, results, inputs)
        return record

    def _check_numerics(
        self,
        step: StepRun,
        record: StepRecord,
        reference: ReferenceEvaluator,
        pre_state: dict[str, dict[str, np.ndarray]],
        ends_reference: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
    ) -> tuple[list[Divergence], _PerBackend, _PerBackend]:
        """Each backend's numeric findings (per op, and end to end where every op was within
        its budget), with the values each op saw and its float64 references per backend;
        moves `pre_state` on to this step's state. `ends_reference`: the float64 reference's
        outputs and their error bounds, end to end."""
        graph, index, inputs = self.graph, step.index, step.inputs
        ref_values, ref_errors = ends_reference
        numeric: list[Divergence] = []
        seen: _PerBackend = {}
        refs: _PerBackend = {}
        for name, res in step.results.items():
            util = record.backends[name].utilization
            observed = {**res.outputs, **res.tensors}
            local: list[Divergence] = []
            if self.runner.per_op:
                values = self._backend_values(inputs, observed, pre_state[name], reference)
                seen[name] = values
                local = oracles.check_ops(
                    index,
                    graph,
                    name,
                    values,
                    observed,
                    res.symints,
                    self.states,
                    util,
                    shared=reference.evaluations,
                    references=refs.setdefault(name, {}),
                    arithmetic=self.arithmetic.get(name),
                )
            for s in self.states:
                pre_state[name][s] = observed[s].astype(np.float64)
            ends = oracles.check_outputs(
                index, graph, name, res.outputs, ref_values, ref_errors, util
            )
            # With per-op checks, an end-to-end failure is a finding of its own only when
            # every op was within its (rigorous) budget on its own inputs: the error then
            # accumulated across ops beyond the propagated bound.
            within = all(d.kind == Kind.NUMERIC_SUSPECT for d in local)
            numeric += local + (ends if within else [])
        return numeric, seen, refs

    def _check_exact(
        self,
        index: int,
        results: Mapping[str, StepResult],
        record: StepRecord,
        numeric: list[Divergence],
        seen: _PerBackend,
        refs: _PerBackend,
    ) -> list[Divergence]:
        """The exact tier's findings: the backends' bits compared op by op where every backend
        is within its budget; records the widest distance per kernel pair in `self.bits`."""
        produced = {n: {**r.outputs, **r.tensors} for n, r in results.items()}
        bits = oracles.compare_bits(
            self.graph,
            list(results),
            produced,
            seen,
            {n: r.symints for n, r in results.items()},
            {n: r.dispatches for n, r in results.items()},
            self.states,
        )
        replaced = self.runner.foreign_exact
        for c in bits:
            key = f"{c.op_type}|{'+'.join(c.kernels)}|{c.pair[0]}~{c.pair[1]}"
            allowed = oracles.exact_tolerance(
                c.op_type, c.kernels, c.pair, self.runner.adapters, replaced
            )
            self.bits[key] = (max(self.bits.get(key, (0, None))[0], c.ulps), allowed)
        # An op over its budget is the numeric tier's finding; the exact tier speaks
        # where every backend is within it.
        over = {d.op for d in numeric if d.kind != Kind.NUMERIC_SUSPECT}
        return oracles.check_exact(
            index,
            [c for c in bits if c.op not in over],
            produced,
            refs,
            {n: record.backends[n].utilization for n in results},
            [rt.name for rt in self.runner.runtimes],
            self.runner.adapters,
            replaced,
        )

    def _backend_values(
        self,
        inputs: StepInputs,
        observed: dict[str, np.ndarray],
        pre_state: dict[str, np.ndarray],
        reference: ReferenceEvaluator,
    ) -> dict[str, np.ndarray]:
        """Float64 values of every tensor as one backend saw them in this step (the
        constants as the reference holds them: converted once per case)."""
        values = {
            n: np.asarray(v).astype(np.float64)
            for n, v in inputs.items()
            if isinstance(v, np.ndarray)
        }
        values.update(reference.constants)
        values.update(pre_state)
        values.update(
            {n: v.astype(np.float64) for n, v in observed.items() if n not in self.states}
        )
        return values

    def _record(self, step: StepRun) -> StepRecord:
        index, inputs, expected = step.index, step.inputs, step.expected
        results, failures = step.results, step.failures
        assert expected is not None  # the loop runs with the contract model
        model = expected if isinstance(expected, ModelStep) else None
        record = StepRecord(
            index=index,
            inputs={
                k: list(v.shape) if isinstance(v, np.ndarray) else int(v) for k, v in inputs.items()
            },
            expected_error=None if model else f"{type(expected).__name__}: {expected}",
            expected_cur_dims={k: list(v) for k, v in model.cur_dims.items()} if model else {},
            expected_dispatches=[oracles.dispatch_json(d) for d in model.dispatches]
            if model
            else [],
            backends={},
            divergences=[],
        )
        for name in step.before:  # every runtime that loaded the graph, in order
            seen = BackendStep()
            if name in failures:
                err = failures[name]
                seen.error = f"{type(err).__name__}: {err}"
            else:
                res = results[name]
                seen.cur_dims = {k: list(v) for k, v in res.cur_dims.items()}
                seen.dispatches = [
                    oracles.dispatch_json(d.logical()) | {"grid": list(d.physical_grid)}
                    for d in res.dispatches
                ]
                seen.validation_messages = list(res.validation_messages)
            record.backends[name] = seen
        return record

    def _cover(
        self, expected: ModelStep, results: dict[str, StepResult], inputs: Mapping[str, Any]
    ) -> None:
        # The step's input data too: an op's regimes may depend on it (a -inf mask).
        host = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
        live = LiveState(self.graph, dict(expected.cur_dims), dict(expected.symints), host)
        for node in self.graph.ops:
            size, regimes = op_regimes(
                node, live, self.max_live, self.previous_sizes.get(node.name)
            )
            self.previous_sizes[node.name] = size
            for name, res in results.items():
                ran = [d for d in res.dispatches if d.op == node.name and d.ran]
                # "fold": a count above the per-dimension limit ran as a folded grid.
                folded = {"fold"} if any(d.physical_grid != d.logical_count for d in ran) else set()
                kernels = {d.kernel for d in ran}
                spans = set().union(
                    *(workgroups_regimes(d.kernel, math.prod(d.logical_count)) for d in ran)
                )
                manifest = self.runner.kernels.get(name)
                foreign = kernels & manifest.slots if manifest else set()
                unfolding = {s for s in foreign if manifest and not _folds(manifest.entry(s))}
                self.coverage.add(
                    node.op, name, regimes | folded | spans, kernels, foreign, unfolding
                )


def _folds(entry: KernelEntry | None) -> bool:
    """Whether a manifest's kernel recovers its index from a folded grid (`fold = true`)."""
    return entry is None or entry.fold


def _initial(graph: Graph, name: str) -> np.ndarray:
    """A state tensor's data before the first step, in float64."""
    data = graph.initial_data(graph.tensor(name))
    assert data is not None  # a state tensor always has initial data
    return data.astype(np.float64)
