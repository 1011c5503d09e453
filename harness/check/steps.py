"""The one step loop: a case loaded on some runtimes and executed step by step, in lockstep.

Three things run a case step by step, and they must see the same thing: the lockstep run
that judges it (`harness.check.lockstep`), the evidence a bundle keeps of a divergent case
(`harness.run.bundle.capture_evidence`) and the re-runs that tell deterministic results from
flaky ones (`harness.check.repeatability.run_hash`). They differ only in what they ask for: which
tensors to read back, whether slack canaries are filled (which needs the contract model's
live dims), and where to stop. Everything else is here, once: loading the graph on every
runtime (a refusal, a kernel that does not build or a crash is kept as that runtime's load
error, never dropped), the contract model's prediction of each step, the canary fill, one
execute per runtime with every exception kept as that runtime's failure of the step, the
live dims before and after, and closing every loaded graph however the loop ends.

    with StepLoop(runtimes, case, reads=intermediates(case.graph)) as loop:
        ...  # loop.load_errors: each runtime's load error, None where it loaded
        for step in loop.steps():  # on the runtimes that loaded
            ...  # step.expected, step.results, step.failures, step.fill
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from graph_format import (
    Graph,
    LoadedGraph,
    ParityError,
    Runtime,
    StepResult,
    TensorValue,
    runtime_api,
)
from graph_format.kernels import BACKENDS, KernelManifest
from graph_format.runtime import Dims
from harness.check import timing
from harness.check.contract import BackendKernels, ContractModel, ModelStep, Verdict
from harness.check.oracles import canary_fill
from harness.gen.case import Case, StepInputs

# A canary fill: tensor -> (first slack byte, poison word).
Fill = dict[str, tuple[int, int]]


def intermediates(graph: Graph) -> list[str]:
    """Tensors ops write that are not graph outputs (read back to judge each op)."""
    return [
        n
        for node in graph.ops
        for n in node.outputs.values()
        if isinstance(graph.values[n], TensorValue) and n not in graph.outputs
    ]


def states(graph: Graph) -> list[str]:
    """State tensors (KV caches): updated in place, read back to follow them across steps."""
    return [t.name for t in graph.tensors() if t.state]


def canaried(graph: Graph) -> list[str]:
    """Tensors whose slack is poisoned before each step: every one that is resized (not a
    constant, not state)."""
    return [t.name for t in graph.tensors() if t.constant is None and not t.state]


def grid_limit(runtimes: Sequence[Runtime]) -> int | None:
    """Workgroups per grid dimension every runtime honours (the smallest of theirs)."""
    limits = [int(rt.info().get("max_workgroups_per_dim", 65535)) for rt in runtimes]
    return min(limits, default=None)


def runtime_limit(runtime: Runtime) -> int:
    """The workgroups per grid dimension `runtime` honours."""
    return int(runtime.info().get("max_workgroups_per_dim", 65535))


def runtime_manifest(runtime: Runtime) -> KernelManifest | None:
    """The kernel manifest `runtime` was built with (docs/design.md §9), or None."""
    manifest = getattr(runtime, "manifest", None)
    return manifest if isinstance(manifest, KernelManifest) else None


def backend_kernels(runtimes: Sequence[Runtime]) -> dict[str, BackendKernels]:
    """Per runtime that replaces a slot through its manifest: what the contract model needs
    to predict its own dispatches and refusals."""
    out: dict[str, BackendKernels] = {}
    for rt in runtimes:
        manifest = runtime_manifest(rt)
        # The manifest's section of the runtime's API: `[webgpu.<slot>]` for every WebGPU
        # implementation's runtime.
        api = runtime_api(rt.name)
        backend = next((b for b in BACKENDS if b == api), None)
        if manifest is not None and backend is not None and manifest.slots(backend):
            out[rt.name] = BackendKernels(backend, manifest, runtime_limit(rt))
    return out


@dataclass
class StepRun:
    """One step as every runtime ran it.

    Attributes:
        index: the step's position in the case.
        inputs: its inputs.
        expected: the contract model's prediction (a `ModelStep`, or the error it expects
            the step to be refused with); None when the loop runs without the model.
        expected_by: per runtime that runs a manifest's kernels, its own prediction
            (`ContractModel.verdicts`); the others are held to `expected`.
        fill: the canary fill handed to every runtime (empty when canaries are off or the
            model expects a refusal).
        results: per runtime that executed the step, what it reported.
        failures: per runtime that raised, the exception (a refusal, a crash).
        before: per runtime, every tensor's live dims before the step.
        after: the same after it.
    """

    index: int
    inputs: StepInputs
    expected: ModelStep | ParityError | None
    expected_by: dict[str, Verdict] = field(default_factory=dict)
    fill: Fill = field(default_factory=dict)
    results: dict[str, StepResult] = field(default_factory=dict)
    failures: dict[str, BaseException] = field(default_factory=dict)
    before: dict[str, dict[str, Dims]] = field(default_factory=dict)
    after: dict[str, dict[str, Dims]] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        """The contract model accepts the step (its prediction is a `ModelStep`)."""
        return isinstance(self.expected, ModelStep)


class Journal(Protocol):
    """Something that notes every loop a runtime runs (harness.check.history.History)."""

    def entered(self, loop: StepLoop) -> None:
        """`loop` is about to load its case."""

    def stepped(self, loop: StepLoop, index: int) -> None:
        """`loop` ran its step `index` on every loaded runtime."""


# Per runtime, the journal of what it runs (`keep_journal`); weak, so a journal goes with its
# runtimes.
_JOURNALS: weakref.WeakKeyDictionary[Runtime, Journal] = weakref.WeakKeyDictionary()


def keep_journal(runtimes: Sequence[Runtime], journal: Journal) -> None:
    """Have every loop that runs on any of `runtimes` noted in `journal` from now on."""
    for rt in runtimes:
        _JOURNALS[rt] = journal


class StepLoop:
    """A case loaded on several runtimes; `steps()` executes it step by step.

    Use it as a context manager: entering loads the graph on every runtime (each failure
    kept in `load_errors`), leaving closes every graph that loaded.

    Args:
        runtimes: the runtimes to run on, in order.
        case: the case.
        reads: tensors every runtime reads back after each step (at their live size).
        canaries: poison every resized tensor's slack before each step and read the
            allocations back raw (needs `contract`).
        contract: predict each step with the contract model (`StepRun.expected`).
        limit: the workgroups-per-dimension limit the contract model honours (None: the
            smallest of the runtimes').
    """

    def __init__(
        self,
        runtimes: Sequence[Runtime],
        case: Case,
        *,
        reads: Sequence[str] = (),
        canaries: bool = True,
        contract: bool = True,
        limit: int | None = None,
    ) -> None:
        if canaries and not contract:
            raise ValueError("canaries need the contract model's live dims: pass contract=True")
        self.runtimes = list(runtimes)
        self.case = case
        self.reads = list(reads)
        self.canaries = canaries
        self.contract = contract
        self.limit = limit
        self.loaded: dict[str, LoadedGraph] = {}
        # Per runtime, the exception its load raised, or None when it loaded.
        self.load_errors: dict[str, BaseException | None] = {}
        self.journal = next((j for rt in self.runtimes if (j := _JOURNALS.get(rt))), None)

    def __enter__(self) -> StepLoop:
        if self.journal is not None:
            self.journal.entered(self)
        started = time.perf_counter()
        try:
            for rt in self.runtimes:
                try:
                    self.loaded[rt.name] = rt.load(self.case.graph)
                    self.load_errors[rt.name] = None
                except Exception as err:  # a refusal, a kernel that does not build, a crash
                    self.load_errors[rt.name] = err
        except BaseException:
            self.close()
            raise
        timing.add("build", time.perf_counter() - started)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every loaded graph (idempotent)."""
        started = time.perf_counter()
        loaded, self.loaded = self.loaded, {}
        for lg in loaded.values():
            lg.close()
        timing.add("build", time.perf_counter() - started)

    def steps(self, until: int | None = None) -> Iterator[StepRun]:
        """Execute the case's steps on every loaded runtime, yielding each as it ran.

        Args:
            until: the last step to run (default: all of them).
        """
        graph = self.case.graph
        model = None
        if self.contract:
            limit = self.limit if self.limit is not None else grid_limit(self.runtimes)
            model = ContractModel(graph, limit, backend_kernels(self.runtimes))
        tagged = canaried(graph) if self.canaries else []
        for index, inputs in enumerate(self.case.steps):
            if until is not None and index > until:
                return
            step = StepRun(index, inputs, None)
            if model is not None:
                step.expected, step.expected_by = model.verdicts(inputs)
            if isinstance(step.expected, ModelStep) and self.canaries:
                step.fill = canary_fill(index, graph, step.expected, tagged)
            step.before = {name: lg.cur_dims() for name, lg in self.loaded.items()}
            started = time.perf_counter()
            for name, lg in self.loaded.items():
                try:
                    step.results[name] = lg.execute(
                        inputs, read=self.reads, read_raw=list(step.fill), fill=step.fill
                    )
                except Exception as err:  # every failure is evidence, not a harness crash
                    step.failures[name] = err
            timing.add("execute", time.perf_counter() - started)
            step.after = {name: lg.cur_dims() for name, lg in self.loaded.items()}
            if self.journal is not None:
                self.journal.stepped(self, index)
            yield step
