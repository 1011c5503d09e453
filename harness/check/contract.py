"""The contract model of a whole graph: what both backends must report after each step.

It replays the per-op models of `harness.ops` in graph order (no hooks, no fixpoint: a pure
function of the inputs' live shapes and the SymInt values) and yields, for a step, either the
rejection both backends must raise or every tensor's live dims, every SymInt and the exact
dispatch log. A rejected step leaves the model's state unchanged, as it must the backends'.

A backend that runs kernels from a manifest (docs/design.md §9) gets its own prediction
(`ContractModel.verdicts`): the same live dims and refusals, but for each slot the manifest
replaces on it, the dispatches its entry declares (one per `dispatch_list` entry, each count
its expression evaluated on the harness's own slot values, `harness.model.slot_values`),
folded only where the entry says so, and the entry's `requires`, which that backend alone
refuses (`InputError(op, "kernel_requires")`). The other backend keeps the contract's
verdict, so replacing a slot on one backend only is not a divergence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graph_format import (
    DTYPES,
    Dims,
    Graph,
    GraphBuildError,
    InputError,
    OpNode,
    ParityError,
    SymIntValue,
    dtype_slot,
)
from graph_format.kernels import (
    BUILTIN_NAMES,
    MASK_READERS,
    MASK_WRITERS,
    Backend,
    ExpressionError,
    KernelEntry,
    KernelManifest,
    KernelRequirementError,
    Value,
    builtin_entry,
    masked_columns_unwritten,
)
from harness.model import (
    ExpectedDispatch,
    Grid,
    LiveState,
    check_dims,
    kernel_arithmetic,
    op_dtype,
    slot_values,
)
from harness.model.numerics import F32, Arithmetic
from harness.ops import model_for

INT32_MIN, INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


# The workgroup size predicted for a manifest's kernel: its own declaration, which the harness
# does not read (it never parses shaders); a backend's record of such a slot is compared
# with it in its place (`ModelStep.foreign_slots`).
KERNELS_OWN_WORKGROUP: Grid = (0, 0, 0)


@dataclass(frozen=True)
class ModelStep:
    """The contract's prediction for one successful step.

    Attributes:
        foreign_slots: slots whose dispatches a manifest's kernel makes on the backend this
            prediction is for; their workgroup size is the kernel's own
            (`KERNELS_OWN_WORKGROUP` here).
    """

    cur_dims: dict[str, Dims]
    symints: dict[str, int]
    dispatches: list[ExpectedDispatch]
    foreign_slots: frozenset[str] = field(default_factory=frozenset)


Verdict = ModelStep | ParityError


def coarsest_arithmetic(
    per_backend: Iterable[Mapping[str, Arithmetic]],
) -> dict[str, Arithmetic]:
    """Per op, the coarsest (largest unit roundoff) of the arithmetics the backends'
    kernels compute it in (`BackendKernels.arithmetics`): the one a bound shared by the
    backends (the end-to-end propagation) is derived for."""
    out: dict[str, Arithmetic] = {}
    for arithmetics in per_backend:
        for op, found in arithmetics.items():
            if op not in out or found.u > out[op].u:
                out[op] = found
    return out


@dataclass(frozen=True)
class BackendKernels:
    """The manifest one backend runs (its replaced slots) and the per-dimension workgroup
    limit it honours (its `max_workgroups_per_dim`, the value expressions may read)."""

    backend: Backend
    manifest: KernelManifest
    limit: int

    def entry(self, slot: str) -> KernelEntry | None:
        """The manifest's entry for `slot` on this backend, or None (the project's kernel)."""
        return self.manifest.entry(self.backend, slot)

    @property
    def slots(self) -> frozenset[str]:
        """The slots replaced on this backend."""
        return frozenset(self.manifest.slots(self.backend))

    def arithmetics(self, graph: Graph) -> dict[str, Arithmetic]:
        """Per op of `graph` whose kernels on this backend compute in another arithmetic
        than f32 (a manifest entry's `precision = "f16"`, `kernel_arithmetic`), that
        arithmetic: what its budget is derived for."""
        out: dict[str, Arithmetic] = {}
        for node in graph.ops:
            found = kernel_arithmetic(graph, node, self._precision)
            if found is not F32:
                out[node.name] = found
        return out

    def _precision(self, slot: str) -> str | None:
        entry = self.entry(slot)
        return entry.precision if entry is not None else None

    def values(self, node_values: Mapping[str, Value]) -> dict[str, Value]:
        """A slot's values with the names every expression may read besides them."""
        (limit,) = BUILTIN_NAMES  # the one name: max_workgroups_per_dim
        return {**node_values, limit: self.limit}

    def dispatches(
        self, op: str, entry: KernelEntry, values: Mapping[str, Value], ran: bool
    ) -> list[ExpectedDispatch]:
        """The dispatch records of `entry`'s kernel for one step: one per dispatch of its
        split, all skipped when the op skips the slot (whatever the formula says).

        Raises:
            InputError: a `requires` the values break ("kernel_requires"), when the slot runs.
            ExpressionError: an expression fails on these values (the backend reports it as
                a kernel that does not build).
        """
        wg = KERNELS_OWN_WORKGROUP
        if not ran:
            return [(op, entry.slot, wg, (0, 0, 0), False) for _ in entry.dispatches]
        unmet = entry.unmet_requirements(values)
        if unmet:
            raise InputError(
                op,
                "kernel_requires",
                f"{self.backend}: op {op!r}: the kernel of slot {entry.slot} "
                f"({entry.source.name}) requires {unmet[0]}",
            )
        out: list[ExpectedDispatch] = []
        for dispatch in entry.dispatches:
            count = dispatch.workgroups(values)
            grid: Grid = (count, 1, 1) if isinstance(count, int) else count
            out.append((op, entry.slot, wg, grid, True) if 0 not in grid else _skipped(op, entry))
        return out

    def check_grids(self, dispatches: list[ExpectedDispatch]) -> None:
        """Refuse a count this backend cannot dispatch: past the limit per dimension for a
        kernel that does not fold (a manifest's without `fold`, or an [x, y, z] count), past
        the folded grid for one that does (the project's kernels)."""
        limit = self.limit
        for op, slot, _, (x, y, z), ran in dispatches:
            entry = self.entry(slot)
            folds = (y, z) == (1, 1) and (entry is None or entry.fold)
            fits = x <= limit * limit if folds else max(x, y, z) <= limit
            if ran and not fits:
                raise InputError(
                    op,
                    "grid_limit",
                    f"{self.backend}: op {op!r}: kernel {slot} needs {(x, y, z)} workgroups, "
                    f"past what a {limit}-per-dimension grid holds"
                    + ("" if folds else " without folding"),
                )

    def requirement_broken_at_load(self, graph: Graph, err: KernelRequirementError) -> bool:
        """Whether the graph breaks the requirement a backend refused it for at load: one of
        the slot's entry's `requires`, false on the harness's values of that op's slot
        (those fixed at load are all a load-time requirement reads; taken at max dims)."""
        entry = self.entry(err.slot)
        node = next((n for n in graph.ops if n.name == err.op), None)
        if entry is not None and node is not None and err.slot in MASK_READERS:
            # A softmax reading masked columns that the op's qk kernel of this precision
            # leaves unwritten (the project's, where the manifest replaces only the other)
            qk_slot = dtype_slot(MASK_WRITERS[0], op_dtype(graph, node))
            qk = self.entry(qk_slot) or builtin_entry(self.backend, qk_slot, Path(qk_slot))
            if err.requirement == masked_columns_unwritten(qk, entry):
                return True
        if entry is None or node is None or err.requirement not in (r.text for r in entry.requires):
            return False
        live = LiveState(
            graph,
            {t.name: t.dims for t in graph.tensors()},
            {n: 0 for n, v in graph.values.items() if isinstance(v, SymIntValue)},
        )
        try:
            values = self.values(slot_values(node, live, err.slot))
            return err.requirement in entry.unmet_requirements(values)
        except (ExpressionError, ParityError, KeyError, ValueError):
            return True  # values not defined at max dims: the backend's word stands


def _skipped(op: str, entry: KernelEntry) -> ExpectedDispatch:
    return (op, entry.slot, KERNELS_OWN_WORKGROUP, (0, 0, 0), False)


def expected_build_error(graph: Graph) -> GraphBuildError | None:
    """The load-time rejection both backends must raise for `graph`, if any (first op first)."""
    for node in graph.ops:
        try:
            model_for(node.op).check(node, graph)
        except GraphBuildError as err:
            return err
    return None


def host_dims(graph: Graph, name: str, value: object) -> Dims:
    """Validate one host input against the rules both backends apply; return its dims."""
    tensor = graph.tensor(name)
    if not isinstance(value, np.ndarray):
        raise InputError(name, "dtype", f"{name!r} must be a numpy array")
    want = DTYPES[tensor.dtype]
    if value.dtype != want:
        if not (want == np.int32 and value.dtype == np.int64):
            raise InputError(name, "dtype", f"{name!r} must be {tensor.dtype}")
        info = np.iinfo(np.int32)
        if value.size and (int(value.min()) < info.min or int(value.max()) > info.max):
            raise InputError(name, "int_range", f"{name!r} does not fit int32")
    dims = tuple(int(d) for d in value.shape)
    check_dims(name, dims, tensor.dims)
    return dims


class ContractModel:
    """Evolves the live state of a graph step by step, as both backends must.

    Args:
        max_workgroups_per_dim: the workgroups per grid dimension both backends may
            dispatch. A logical count above it folds into a 2-D grid of at most that many
            rows (the backends' business); a count above its square fits no grid, and the
            step is refused (`InputError(op, "grid_limit")`) once every op has resized.
            None: no limit (a device's own, 65535 or more, is never reached).
    """

    def __init__(
        self,
        graph: Graph,
        max_workgroups_per_dim: int | None = None,
        kernels: Mapping[str, BackendKernels] | None = None,
    ) -> None:
        self.graph = graph
        self.max_workgroups_per_dim = max_workgroups_per_dim
        # backend -> the manifest it runs (only backends that replace a slot).
        self.kernels = {name: k for name, k in (kernels or {}).items() if k.slots}
        self.state = LiveState(
            graph,
            {t.name: t.dims for t in graph.tensors()},
            {n: 0 for n, v in graph.values.items() if isinstance(v, SymIntValue)},
        )

    def step(self, inputs: Mapping[str, object]) -> ModelStep:
        """Predict one execute.

        Raises:
            ResizeError, InputError: the rejection both backends must raise (same class and
                key); the model's state is then unchanged.
        """
        verdict = self.verdicts(inputs)[0]
        if isinstance(verdict, ParityError):
            raise verdict
        return verdict

    def verdicts(self, inputs: Mapping[str, object]) -> tuple[Verdict, dict[str, Verdict]]:
        """Predict one execute: the contract's verdict, and that of each backend that runs a
        manifest's kernels (see the module's docstring); a backend not in the second is
        held to the first. The model's state follows the contract's verdict."""
        graph = self.graph
        live = LiveState(graph, dict(self.state.dims), dict(self.state.symints))
        dispatches: list[ExpectedDispatch] = []
        own: dict[str, list[ExpectedDispatch]] = {name: [] for name in self.kernels}
        refused: dict[str, Verdict] = {}
        try:
            self._read_inputs(inputs, live)
            for node in graph.ops:
                model = model_for(node.op)
                model.resize(node, live)
                design = model.dispatches(node, live)
                dispatches += design
                for name, kernels in self.kernels.items():
                    if name not in refused:
                        try:
                            own[name] += _backend_dispatches(kernels, node, live, design)
                        except InputError as err:
                            refused[name] = err
        except ParityError as err:  # every backend refuses as the contract, or earlier
            return err, {name: refused.get(name, err) for name in self.kernels}
        contract: Verdict
        try:
            self._check_grids(dispatches)
            self._check_symints(live)
            contract = ModelStep(dict(live.dims), dict(live.symints), dispatches)
        except ParityError as err:
            contract = err
        per_backend = self._backend_verdicts(live, own, refused)
        if isinstance(contract, ModelStep):
            live.host = {}  # this step's data is not state
            self.state = live
        return contract, per_backend

    def _backend_verdicts(
        self,
        live: LiveState,
        own: Mapping[str, list[ExpectedDispatch]],
        refused: Mapping[str, Verdict],
    ) -> dict[str, Verdict]:
        """The verdict of each backend that runs a manifest's kernels, on a step the
        contract's model got through: its own refusal, a grid or SymInt its kernels cannot
        take, or its own dispatches."""
        per_backend: dict[str, Verdict] = {}
        for name, kernels in self.kernels.items():
            if name in refused:
                per_backend[name] = refused[name]
                continue
            try:
                kernels.check_grids(own[name])
                self._check_symints(live)
                per_backend[name] = ModelStep(
                    dict(live.dims), dict(live.symints), own[name], kernels.slots
                )
            except ParityError as err:
                per_backend[name] = err
        return per_backend

    def _read_inputs(self, inputs: Mapping[str, object], live: LiveState) -> None:
        """Check the step's inputs into `live` (dims, SymInts, host data of op inputs)."""
        graph = self.graph
        for name in graph.inputs:
            if name not in inputs:
                raise InputError(name, "missing", f"input {name!r} is missing")
        for name in inputs:
            if name not in graph.inputs:
                raise InputError(name, "unknown", f"{name!r} is not a graph input")
        for name in graph.inputs:
            value = inputs[name]
            if isinstance(graph.values[name], SymIntValue):
                if isinstance(value, bool) or not isinstance(value, int | np.integer):
                    raise InputError(name, "dtype", f"SymInt {name!r} must be an int")
                live.symints[name] = int(value)
            else:
                live.dims[name] = host_dims(graph, name, value)
                live.host[name] = np.asarray(value)
        # Host-side checks of op inputs (token ids) come before any resize, as on the backends.
        for node in graph.ops:
            model_for(node.op).check_host(node, live)

    @staticmethod
    def _check_symints(live: LiveState) -> None:
        """Kernels read SymInts as int32: one that passed every op's checks but does not fit
        is refused last (so an op's own key, such as sdpa's cache_overflow, comes first)."""
        for name, value in live.symints.items():
            if not INT32_MIN <= value <= INT32_MAX:
                raise InputError(name, "int_range", f"SymInt {name!r} = {value} does not fit int32")

    def _check_grids(self, dispatches: list[ExpectedDispatch]) -> None:
        """Refuse a logical count that no grid within the limit holds (graph order)."""
        limit = self.max_workgroups_per_dim
        if limit is None:
            return
        for op, kernel, _, (x, y, z), ran in dispatches:
            # A 1-D count folds into up to `limit` rows; a 2-D or 3-D one must fit as it is.
            fits = x <= limit * limit if (y, z) == (1, 1) else max(x, y, z) <= limit
            if ran and not fits:
                raise InputError(
                    op,
                    "grid_limit",
                    f"op {op!r}: kernel {kernel} needs {(x, y, z)} workgroups, more than a "
                    f"{limit} x {limit} grid holds",
                )

    def try_step(self, inputs: Mapping[str, object]) -> ModelStep | ParityError:
        """`step`, returning the expected rejection instead of raising it."""
        return self.verdicts(inputs)[0]


def _backend_dispatches(
    kernels: BackendKernels, node: OpNode, live: LiveState, design: list[ExpectedDispatch]
) -> list[ExpectedDispatch]:
    """One op's dispatches on a backend with a manifest: the design's, each slot the
    manifest replaces swapped for its kernel's own dispatches.

    Raises:
        InputError: a replaced slot's `requires` broken ("kernel_requires").
    """
    out: list[ExpectedDispatch] = []
    for expected in design:
        slot, ran = expected[1], expected[4]
        entry = kernels.entry(slot)
        if entry is None:
            out.append(expected)
            continue
        values = kernels.values(slot_values(node, live, slot))
        try:
            out += kernels.dispatches(node.name, entry, values, ran)
        except ExpressionError:
            # The backend cannot evaluate it either: it reports a kernel that does not
            # build, a finding of its own; the design stands in for the prediction.
            out.append(expected)
    return out
