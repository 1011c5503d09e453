"""The WebGPU graph: tensors at max size, per-op resize hooks, a bounded fixpoint, one submit.

Resize model (docs/design.md §4.1; upstream's, with its known divergences fixed):
- `set_cur_dims` validates a live shape and marks the tensor dirty only when it changes.
- Ops register resize hooks on the values they read (tensors and SymInts alike). A hook
  recomputes the op's params uniform, its dispatch counts and its outputs' `cur_dims`.
- `propagate_resize` runs hooks, in registration (topological) order, for every dirty
  trigger, as a fixpoint bounded by the number of hooks + 1 passes. SymInts are values like
  tensors: a `sym_size` hook fires when its source tensor changes, so nothing reads a stale
  intermediate (upstream's Phase-1 SymInt hooks do, docs/design.md §8.2).
- A hook that sees inconsistent inputs may be looking at a co-input that a deeper producer
  has not updated yet (docs/design.md §8.1). Its error is therefore held, not raised: it is
  dropped if the hook later succeeds and raised only if it is still pending once the
  fixpoint converges. Any error restores the graph to its state before the step. A hook
  that raises an exception of another kind (a bug in the op's code: a `StopIteration`) is
  raised at once as the `OpError` that names its op, as is one an op's builder raises at
  load.
- Kernels are bound through one path, the project's and a manifest's alike
  (`webgpu_backend.binding`): an op records a dispatch position per kernel it runs
  (`add_kernel`: the slot or slots it may take, its tensors by role, the values fixed for
  the graph) and its hook hands each the slot's values by name (`Dispatch.set`); the
  kernel's reflected declarations say which binding takes which role and how its params
  uniform is packed, and the count is the op's `workgroups` (a manifest's expression for a
  replaced slot, one dispatch per entry of a split).
- Params uniforms are written only after propagation succeeds, with the inputs and all
  dispatches in one submit. The physical grid of every dispatch (a count above the
  per-dimension limit folded into 2-D) is computed before that, so a count no grid can hold
  is refused with the graph restored, like any other input.
  A SymInt outside int32 (what kernels read) is refused (`InputError`, key "int_range")
  after every op's own checks and the grids.
- Buffers come from the runtime's pool (`webgpu_backend.pool`): every tensor, scratch
  buffer and params uniform is a range of a pooled GPUBuffer, bound as (buffer, offset,
  size), and bind groups are cached by the ranges they bind. What a fresh build guarantees
  holds on reused memory: a graph's blocks are written whole when it is built (zeros, as
  WebGPU gives a new buffer, with its constants, state initial data and a poisoned guard
  after every slot); every execute reads the guards back with the rest and reports damaged
  ones (`StepResult.guard_writes`), then re-poisons them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from graph_format import (
    DTYPES,
    SLOTS,
    DispatchRecord,
    FeatureUnavailable,
    Graph,
    GraphBuildError,
    InputError,
    KernelBuildError,
    KernelValuesError,
    OpError,
    OpNode,
    ParityError,
    PropagationError,
    ResizeError,
    StepResult,
    SymIntValue,
    TensorValue,
    dtype_slot,
)
from graph_format.kernels import (
    Count,
    KernelInterfaceError,
    Value,
    scratch_sizes,
)
from webgpu_backend.binding import BACKEND, KernelCatalog
from webgpu_backend.device import PipelineCache, WebGPUDevice
from webgpu_backend.nodes import (
    Dispatch,
    KernelRun,
    ParamsBuffer,
    Scheduled,
    ScratchBuffer,
    SlotKernel,
    fold_grid,
)
from webgpu_backend.pool import Arena, BufferPool, Slot
from webgpu_backend.recording import Recorder
from webgpu_backend.reflection import WgslReflectionError
from webgpu_backend.tensor import Dims, WebGPUTensor

__all__ = ["Dispatch", "Scheduled", "ScratchBuffer", "WebGPUGraph", "fold_grid"]


@dataclass
class _Hook:
    op: str
    order: int
    triggers: frozenset[str]
    fn: Callable[[], None]
    op_type: str = ""


@dataclass
class _InputCheck:
    op: str
    tensor: str
    fn: Callable[[np.ndarray], None]


@dataclass
class _Snapshot:
    cur_dims: dict[str, Dims]
    symints: dict[str, int]
    counts: list[tuple[str, int, tuple[Count, ...]]]
    # Each dispatch's values per slot, as its op last handed them (what `Dispatch.values`
    # reports): a refused step hands new ones before it is refused.
    values: list[dict[str, dict[str, Value]]]
    params: list[tuple[bytes, bool]]
    dirty: set[str]


# What builds one op of a graph (`webgpu_backend.ops` registers one per op type).
OpBuilder = Callable[["WebGPUGraph", OpNode], None]


class WebGPUGraph:
    """A graph built on a WebGPU device. Implements `graph_format.LoadedGraph`.

    Op builders (webgpu_backend/ops) use `arg_*`, `int_or_symint`, `int_list`, `output`,
    `create_scratch`, `add_kernel` (then `Dispatch.set` in their hooks), `add_resize_hook`,
    `add_input_check`, `set_cur_dims` and `set_symint`; the harness uses `execute`.
    The runtime hands the graph its op table (`builders`: `webgpu_backend.ops.OP_BUILDERS`),
    so this module does not import the op modules that import it.

    `fold_grid` (`webgpu_backend.nodes.fold_grid`: the physical grid of a 1-D count) is a
    documented hook (docs/design.md §2.2): a test replaces it on the class to plant a grid
    bug that every op shows.
    """

    fold_grid = staticmethod(fold_grid)

    def __init__(
        self,
        dev: WebGPUDevice,
        graph: Graph,
        catalog: KernelCatalog | None = None,
        max_workgroups_per_dim: int | None = None,
        *,
        pool: BufferPool,
        builders: Mapping[str, OpBuilder],
        pipelines: PipelineCache | None = None,
    ) -> None:
        self.dev = dev
        # The runtime's (a graph built without one owns its own)
        self.pipelines = pipelines if pipelines is not None else PipelineCache(dev)
        self.pool = pool
        self.arena = Arena(pool)
        self.graph = graph
        self.catalog = catalog or KernelCatalog()  # where each slot's kernel comes from
        self.max_workgroups_per_dim = max_workgroups_per_dim  # None: the device's limit
        self.tensors: dict[str, WebGPUTensor] = {}
        self.symints: dict[str, int] = {}
        self.dispatches: list[Dispatch] = []
        self._params: list[ParamsBuffer] = []
        self._scratch: list[ScratchBuffer] = []
        # The manifest's scratch sizes by op node, and its shared roles by (node, role)
        self._scratch_sizes: dict[str, dict[str, int]] = {}
        self._shared: dict[tuple[str, str], ScratchBuffer] = {}
        self._hooks: list[_Hook] = []
        self._input_checks: list[_InputCheck] = []
        self._pending: dict[int, ParityError] = {}  # hook order -> error held until convergence
        self._closed = False

        self.backend = dev.backend  # the runtime's name, which its errors carry
        if "float16" in graph.float_dtypes() and dev.f16_unavailable:
            raise FeatureUnavailable(self.backend, "f16", dev.f16_unavailable)
        for value in graph.values.values():
            if isinstance(value, TensorValue):
                self.tensors[value.name] = self._create_tensor(value)
            elif isinstance(value, SymIntValue):
                self.symints[value.name] = 0  # serialized SymInts start at 0, as upstream
        try:
            for node in graph.ops:
                try:
                    builders[node.op](self, node)
                except ParityError:
                    raise
                except Exception as err:  # the op's own code failed: name it
                    raise OpError(self.backend, node.name, node.op, "load", err) from err
            self.recorder = self._place()
        except BaseException:
            self.close()
            raise
        # Every hook runs once at the first execute: all values start dirty.
        self._dirty: set[str] = set(self.tensors) | set(self.symints)

    # ------------------------------------------------------------------ construction

    def _create_tensor(self, value: TensorValue) -> WebGPUTensor:
        return WebGPUTensor(
            name=value.name,
            dtype=value.dtype,
            elem_size=DTYPES[value.dtype].itemsize,
            dims=value.dims,
            cur_dims=value.dims,
            slot=self.arena.storage(value.name, value.nbytes),
            is_constant=value.constant is not None,
            is_state=value.state,
        )

    def _place(self) -> Recorder:
        """Place every buffer (all known once every op is built) and write each storage
        block's initial contents; each run makes its bind group at its first dispatch."""
        runs = [run for d in self.dispatches for k in d.kernels.values() for run in k.runs]
        self.arena.place([(run.written, run.read) for run in runs])
        initial: dict[Slot, np.ndarray] = {}
        for tensor in self.tensors.values():
            value = self.graph.values[tensor.name]
            assert isinstance(value, TensorValue)
            data = self.graph.initial_data(value)
            if data is not None:
                initial[tensor.slot] = np.ascontiguousarray(data, DTYPES[value.dtype])
        for run in runs:
            run._pool = self.pool
        # Every storage slot with the name guard damage is reported under.
        guarded = [
            *((t.name, t.slot) for t in self.tensors.values()),
            *((s.name, s.slot) for s in self._scratch),
        ]
        recorder = Recorder(self.dev.gpu, self.pool, self.arena, guarded, self._params)
        recorder.write_initial(initial)
        return recorder

    # ------------------------------------------------------------------ builder API

    def fail(self, node: OpNode, message: str, tensor: str | None = None) -> GraphBuildError:
        """A build error for `node` (returned, for `raise graph.fail(...)`)."""
        return GraphBuildError(node.name, message, tensor=tensor)

    def arg_tensor(self, node: OpNode, slot: str) -> WebGPUTensor:
        """The tensor passed as argument `slot`."""
        return self.tensors[node.arg(slot)]

    def optional_tensor(self, node: OpNode, slot: str) -> WebGPUTensor | None:
        """The tensor passed as optional argument `slot`, or None."""
        name = node.optional_arg(slot)
        return self.tensors[name] if name is not None else None

    def arg_scalar(self, node: OpNode, slot: str) -> int | float:
        """The literal int or float passed as argument `slot`."""
        return self.graph.scalar(node.arg(slot))

    def int_or_symint(self, node: OpNode, slot: str) -> Callable[[], int]:
        """A reader of the current value of an int-or-SymInt argument."""
        return self._int_reader(node.arg(slot))

    def int_list(self, node: OpNode, slot: str) -> Callable[[], tuple[int, ...]]:
        """A reader of the current values of a size-list argument (ints and SymInts)."""
        readers = [self._int_reader(name) for name in node.size_list(slot)]
        return lambda: tuple(read() for read in readers)

    def _int_reader(self, name: str) -> Callable[[], int]:
        if name in self.symints:
            return lambda: self.symints[name]
        value = int(self.graph.scalar(name))
        return lambda: value

    def output(self, node: OpNode, slot: str) -> WebGPUTensor:
        """The tensor written as output `slot`."""
        return self.tensors[node.outputs[slot]]

    def _create_params(self, nbytes: int) -> ParamsBuffer:
        """A params uniform of `nbytes` bytes (rounded up to 16, as uniform layout wants)."""
        slot = self.arena.uniform(f"params.{len(self._params)}", nbytes)
        params = ParamsBuffer(slot, bytes(slot.size))
        self._params.append(params)
        return params

    def create_scratch(
        self,
        node: OpNode,
        label: str,
        nbytes: int,
        static: Mapping[str, Value] | None = None,
    ) -> ScratchBuffer:
        """A private storage buffer of `nbytes` for `node`, bound by role in `add_kernel`.

        Args:
            static: the op's values fixed for the graph, given for a scratch role of the
                op's slots: a manifest that sizes the role (`scratch.<role>`) sizes it then.

        Raises:
            KernelBuildError: the manifest's size of it fails on these values.
        """
        if static is not None:
            nbytes = self._manifest_scratch(node, static).get(label, nbytes)
        name = f"{node.name}.{label}"
        scratch = ScratchBuffer(name, self.arena.storage(name, nbytes))
        self._scratch.append(scratch)
        return scratch

    def _manifest_scratch(self, node: OpNode, static: Mapping[str, Value]) -> dict[str, int]:
        """The bytes of each scratch role the manifest sizes for `node`'s op (once a node)."""
        sizes = self._scratch_sizes.get(node.name)
        if sizes is None:
            manifest = self.catalog.manifest
            entry = manifest.scratch_entry(BACKEND, node.op) if manifest else None
            sizes = {}
            if entry is not None:
                fixed = {**static, "max_workgroups_per_dim": self.workgroups_per_dim}
                try:
                    sizes = scratch_sizes(entry, fixed)
                except KernelInterfaceError as err:  # the manifest's doing: no compiler ran
                    raise KernelValuesError(
                        self.backend, entry.slot, err.source, str(err), op=node.name
                    ) from None
            self._scratch_sizes[node.name] = sizes
        return sizes

    def dtype_slot(self, node: OpNode, slot: str, dtype: str) -> str:
        """The slot of `node`'s kernel variant `slot` for tensors of `dtype`: `slot` for
        float32, `<slot>_f16` for float16 (graph_format's `dtype_slot`), which the op's schema
        must declare. Its project kernel is the file named after it (`wgsl/rms_norm_f16.wgsl`).

        Raises:
            GraphBuildError: the op has no kernel variant of `slot` for `dtype`.
        """
        chosen = dtype_slot(slot, dtype)
        if chosen not in SLOTS or SLOTS[chosen].op != node.op:
            raise self.fail(
                node,
                f"{node.op} has no {dtype} kernel for slot {slot!r} (no slot {chosen!r} in "
                f"graph_format/ops/{node.op}.toml)",
            )
        return chosen

    def add_kernel(
        self,
        node: OpNode,
        kernels: Mapping[str, str],
        *,
        tensors: Mapping[str, WebGPUTensor | ScratchBuffer],
        static: Mapping[str, Value],
    ) -> Dispatch:
        """Record a dispatch position of `node`, initially skipped (count 0).

        Each slot's kernel is the runtime's manifest entry for it, else the project's
        (`catalog`); it is reflected and bound by role, its uniforms packed by member name
        from the values its op's hook hands `Dispatch.set` (webgpu_backend/binding.py).

        Args:
            kernels: slot -> the project kernel's WGSL file stem, for each slot this position
                may run (selected by `Dispatch.set`; the first runs until then).
            tensors: role -> the tensor or scratch buffer taking it, for every role of the
                slots (graph_format/ops/<op>.toml).
            static: the slots' values that are fixed for the graph (an override reads only
                these; an adapter is built with them; `requires` over them is checked here).

        Raises:
            KernelBuildError: a kernel that does not reflect, compile or fit its slot (the
                message names the file, the field or binding, what the kernel declares and
                what the op offers).
            KernelRequirementError: a replaced kernel's `requires` that the graph breaks.
            KernelManifestError: a manifest's file cannot be read, or its adapter is not
                allowed or does not load.
            GraphBuildError: a workgroup above the device's invocation limit.
        """
        fixed = {**static, "max_workgroups_per_dim": self.workgroups_per_dim}
        built: dict[str, SlotKernel] = {}
        for slot, stem in kernels.items():
            try:
                built[slot] = self._build_slot(node, slot, stem, tensors, fixed)
            except KernelInterfaceError as err:
                raise KernelBuildError(
                    self.backend, slot, err.source, str(err), op=node.name
                ) from None
            except KernelBuildError as err:
                raise err.for_op(node.name) from None
        dispatch = Dispatch(node.name, built)
        self.dispatches.append(dispatch)
        return dispatch

    def _build_slot(
        self,
        node: OpNode,
        slot: str,
        stem: str,
        tensors: Mapping[str, WebGPUTensor | ScratchBuffer],
        static: dict[str, Value],
    ) -> SlotKernel:
        """The kernel of `slot` in `node`: its adapter and scratch, its `requires` over the
        values fixed at load, a run per dispatch of its entry."""
        entry = self.catalog.entry(slot, stem)
        source = self.catalog.source(entry, stem)
        kernel = SlotKernel(
            node.name, slot, entry, [], MappingProxyType(static), self.backend, dict(static)
        )
        scratch: dict[str, ScratchBuffer] = {}
        adapter_class = self.catalog.adapter(entry)
        if adapter_class is not None:
            for role, nbytes in kernel.load_adapter(adapter_class, tensors).items():
                scratch[role] = self.create_scratch(node, role, nbytes)
        for role in entry.shared_roles:  # the manifest's new roles: one buffer per op node
            shared = self._shared.get((node.name, role))
            if shared is None:
                nbytes = self._manifest_scratch(node, static)[role]
                shared = self._shared[(node.name, role)] = self.create_scratch(node, role, nbytes)
            scratch[role] = shared
        kernel.check_requires()
        for index in range(len(entry.dispatches)):
            kernel.runs.append(self._build_run(node, kernel, index, source, tensors, scratch))
        kernel.enable_fast_path()
        return kernel

    def _build_run(
        self,
        node: OpNode,
        kernel: SlotKernel,
        index: int,
        source: str,
        tensors: Mapping[str, WebGPUTensor | ScratchBuffer],
        scratch: Mapping[str, ScratchBuffer],
    ) -> KernelRun:
        """Dispatch `index` of `kernel`'s entry: its plan, pipeline and workgroup size (within
        the device's limit), its buffers bound by role."""
        entry, slot = kernel.entry, kernel.slot
        try:
            plan = self.catalog.plan(
                entry, index, source, tuple(sorted(kernel.provides)), tuple(scratch)
            )
        except WgslReflectionError:
            # The implementation's compiler is the authority on WGSL: its whole
            # message, when it refuses too.
            self.dev.gpu.compile(slot, source, entry.source)
            raise
        constants = plan.constants(kernel.static, node.op)
        size = plan.workgroup_size(constants)
        if math.prod(size) > self.dev.max_invocations_per_workgroup:
            raise self.fail(
                node,
                f"{slot}: {entry.source} asks for {math.prod(size)} invocations per "
                f"workgroup {list(size)}, the device allows "
                f"{self.dev.max_invocations_per_workgroup}",
            )
        pipeline = self.pipelines.pipeline(
            slot, source, plan.digest, entry.source, plan.layout, constants, entry.entry
        )
        run = KernelRun(plan, pipeline, size, [], [], [], [])
        run.bind(node.op, tensors, scratch, self._create_params)
        return run

    def add_resize_hook(
        self, node: OpNode, triggers: Iterable[str], fn: Callable[[], None]
    ) -> None:
        """Run `fn` whenever one of `triggers` (tensor or SymInt names) changes."""
        self._hooks.append(
            _Hook(node.name, len(self._hooks), frozenset(triggers), fn, op_type=node.op)
        )

    def add_input_check(
        self, node: OpNode, tensor: WebGPUTensor, fn: Callable[[np.ndarray], None]
    ) -> None:
        """Run `fn(host data)` on graph input `tensor` at every execute, before anything changes.

        For checks only the host can make cheaply (token ids against a vocabulary): `fn`
        raises `InputError` and the step is refused with the graph untouched. Checks run
        after every input's own dtype and shape checks, in registration (graph) order.
        """
        if tensor.name not in self.graph.inputs:
            raise self.fail(node, f"{tensor.name!r} is not a graph input", tensor=tensor.name)
        self._input_checks.append(_InputCheck(node.name, tensor.name, fn))

    def set_cur_dims(self, tensor: WebGPUTensor, dims: Sequence[int]) -> None:
        """Set a tensor's live dims; marks it dirty only if they change.

        Raises:
            ResizeError: rank change, a dim < 1, or a dim above the max.
        """
        dims = tuple(int(d) for d in dims)
        tensor.check_dims(dims)
        if dims != tensor.cur_dims:
            tensor.cur_dims = dims
            self._dirty.add(tensor.name)

    def resize_input(self, name: str, dims: Sequence[int]) -> None:
        """Set a graph input's live dims (propagated at the next `propagate_resize`).

        Raises:
            InputError: `name` is not a tensor input of the graph.
            ResizeError: rank change, a dim < 1, or a dim above the max.
        """
        if name not in self.graph.inputs or name not in self.tensors:
            raise InputError(
                name, "unknown", f"webgpu: {name!r} is not a tensor input of this graph"
            )
        self.set_cur_dims(self.tensors[name], dims)

    def set_symint(self, name: str, value: int) -> None:
        """Set a SymInt; marks it dirty only if it changes."""
        if self.symints[name] != value:
            self.symints[name] = value
            self._dirty.add(name)

    # ------------------------------------------------------------------ resize engine

    def propagate_resize(self) -> None:
        """Run the resize hooks of dirty values to a fixpoint (see the module docstring).

        Raises:
            ResizeError, InputError: an op rejects the converged live shapes.
            PropagationError: the hooks kept changing shapes for more than len(hooks)+1 passes.
            OpError: a hook raised an exception of another kind (it names the hook's op).
        """
        max_passes = len(self._hooks) + 1
        passes = 0
        ran: list[str] = []  # ops whose hooks ran in the last pass
        while self._dirty:
            if passes == max_passes:
                raise PropagationError(
                    f"webgpu: resize hooks did not converge in {max_passes} passes; "
                    f"still dirty: {sorted(self._dirty)}; hooks of the last pass: {ran}",
                    ops=list(dict.fromkeys(ran)),
                    values=sorted(self._dirty),
                )
            processing, self._dirty = self._dirty, set()
            ran = []
            for hook in self._hooks:
                if hook.triggers.isdisjoint(processing):
                    continue
                ran.append(hook.op)
                try:
                    hook.fn()
                except (InputError, ResizeError) as err:
                    self._pending[hook.order] = err
                except ParityError:
                    raise
                except Exception as err:  # the hook's own code failed: name its op
                    raise OpError(self.backend, hook.op, hook.op_type, "resize", err) from err
                else:
                    self._pending.pop(hook.order, None)
            passes += 1
        if self._pending:
            first = min(self._pending)
            raise self._pending[first]

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(
            cur_dims={n: t.cur_dims for n, t in self.tensors.items()},
            symints=dict(self.symints),
            counts=[(d.kernel, d.count, d.counts) for d in self.dispatches],
            values=[{s: dict(k.values) for s, k in d.kernels.items()} for d in self.dispatches],
            params=[(p.data, p.dirty) for p in self._params],
            dirty=set(self._dirty),
        )

    def _restore(self, snap: _Snapshot) -> None:
        for name, dims in snap.cur_dims.items():
            self.tensors[name].cur_dims = dims
        self.symints.update(snap.symints)
        for dispatch, (kernel, count, counts) in zip(self.dispatches, snap.counts, strict=True):
            dispatch.kernel, dispatch.count, dispatch.counts = kernel, count, counts
            dispatch._selected = dispatch.kernels[kernel]
        for dispatch, values in zip(self.dispatches, snap.values, strict=True):
            for slot, kept in values.items():
                dispatch.kernels[slot].values = kept
        for params, (data, dirty) in zip(self._params, snap.params, strict=True):
            params.data, params.dirty = data, dirty
        self._pending.clear()
        # Back to what was pending before the step (everything, before the first execute).
        self._dirty = set(snap.dirty)

    # ------------------------------------------------------------------ LoadedGraph

    def cur_dims(self) -> dict[str, Dims]:
        """Live dims of every tensor value."""
        return {name: t.cur_dims for name, t in self.tensors.items()}

    @property
    def workgroups_per_dim(self) -> int:
        """Workgroups per grid dimension a dispatch may have: the device's, or lower."""
        device = self.dev.max_workgroups_per_dim
        return min(device, self.max_workgroups_per_dim or device)

    def schedule(self) -> list[Scheduled]:
        """Every dispatch of the live state, in order: what runs (kernel run and physical
        grid) or is skipped, with its record.

        A 1-D count above the per-dimension limit is folded into 2-D where the kernel
        recovers its index (the project's kernels; a manifest's with `fold = true`);
        an explicit [x, y, z] count runs as given.

        Raises:
            InputError: a count no grid within the limit can hold, or one past the limit of
                a kernel that does not fold (reason "grid_limit", the op as subject).
        """
        limit = self.workgroups_per_dim
        out: list[Scheduled] = []
        for d in self.dispatches:
            kernel = d.kernels[d.kernel]
            if kernel.entry.builtin:
                counts: Sequence[Count] = (d.count,)
            else:
                counts = d.counts if d.count else (0,) * len(kernel.runs)
            for run, count in zip(kernel.runs, counts, strict=True):
                logical = (count, 1, 1) if isinstance(count, int) else count
                if 0 in logical:
                    record = DispatchRecord(
                        d.op, d.kernel, run.workgroup_size, (0, 0, 0), (0, 0, 0), False
                    )
                    out.append(Scheduled(record, None))
                    continue
                if isinstance(count, int) and kernel.entry.fold:
                    try:
                        grid = self.fold_grid(count, limit)
                    except ValueError as err:
                        raise InputError(
                            d.op, "grid_limit", f"webgpu: op {d.op!r}: {err}"
                        ) from None
                elif max(logical) > limit:
                    raise InputError(
                        d.op,
                        "grid_limit",
                        f"webgpu: op {d.op!r}: the kernel of slot {d.kernel} "
                        f"({kernel.entry.source}) asks for {list(logical)} workgroups, past the "
                        f"limit of {limit} per dimension, and does not fold its grid",
                    )
                else:
                    grid = logical
                record = DispatchRecord(d.op, d.kernel, run.workgroup_size, logical, grid, True)
                out.append(Scheduled(record, run))
        return out

    def _check_inputs(
        self, inputs: Mapping[str, np.ndarray | int]
    ) -> tuple[list[tuple[WebGPUTensor, np.ndarray]], dict[str, int]]:
        """Validate every input before anything changes; return (tensor, data), SymInts."""
        expected = self.graph.inputs
        for name in expected:
            if name not in inputs:
                raise InputError(name, "missing", f"webgpu: graph input {name!r} is missing")
        for name in inputs:
            if name not in expected:
                raise InputError(
                    name, "unknown", f"webgpu: {name!r} is not a graph input; inputs: {expected}"
                )
        tensors: list[tuple[WebGPUTensor, np.ndarray]] = []
        symints: dict[str, int] = {}
        for name in expected:
            value = inputs[name]
            if name in self.symints:
                if isinstance(value, bool) or not isinstance(value, int | np.integer):
                    raise InputError(
                        name,
                        "dtype",
                        f"webgpu: SymInt input {name!r} must be an int, got {type(value).__name__}",
                    )
                symints[name] = int(value)
                continue
            tensor = self.tensors[name]
            data = _host_array(name, tensor.dtype, value)
            tensor.check_dims(tuple(data.shape))
            tensors.append((tensor, data))
        host = {tensor.name: data for tensor, data in tensors}
        for check in self._input_checks:
            check.fn(host[check.tensor])
        return tensors, symints

    def _check_symint_range(self) -> None:
        """Refuse a SymInt outside int32 (what kernels read), after every op's own checks."""
        for name, value in self.symints.items():
            if not -(1 << 31) <= value < 1 << 31:
                raise InputError(
                    name,
                    "int_range",
                    f"webgpu: SymInt {name!r} = {value} does not fit the int32 kernels read",
                )

    def execute(
        self,
        inputs: Mapping[str, np.ndarray | int],
        *,
        read: Sequence[str] = (),
        read_raw: Sequence[str] = (),
        fill: Mapping[str, tuple[int, int]] | None = None,
    ) -> StepResult:
        """Resize to the inputs, run every dispatch in one submit and read back.

        See `graph_format.LoadedGraph.execute`.
        """
        if self._closed:
            raise RuntimeError("webgpu: execute on a closed graph")
        tensor_inputs, symint_inputs = self._check_inputs(inputs)
        snap = self._snapshot()
        try:
            for tensor, data in tensor_inputs:
                self.resize_input(tensor.name, data.shape)
            for name, value in symint_inputs.items():
                self.set_symint(name, value)
            self.propagate_resize()
            scheduled = self.schedule()
            self._check_symint_range()
        except ParityError as err:
            err.live = {**self.cur_dims(), **self.symints}
            self._restore(snap)
            raise

        tensors = self.tensors
        self.recorder.stage(
            tensor_inputs, [(tensors[name], *spec) for name, spec in (fill or {}).items()]
        )
        wanted = [("output", tensors[n]) for n in self.graph.outputs]
        wanted += [("tensor", tensors[n]) for n in read] + [("raw", tensors[n]) for n in read_raw]
        blob, reads = self.recorder.run(scheduled, wanted)

        result = StepResult(
            outputs={},
            cur_dims=self.cur_dims(),
            symints=dict(self.symints),
            dispatches=[item.record for item in scheduled],
            guard_writes=self.recorder.check_guards(blob, reads.guards),
        )
        for kind, tensor in reads.wanted:
            offset = reads.at[tensor.name]
            if kind == "raw":
                raw = blob[offset : offset + tensor.alloc_nbytes]
                result.raw[tensor.name] = np.frombuffer(raw, np.uint8).copy()
                continue
            raw = blob[offset : offset + tensor.cur_nbytes]
            array = np.frombuffer(raw, DTYPES[tensor.dtype]).reshape(tensor.cur_dims).copy()
            (result.outputs if kind == "output" else result.tensors)[tensor.name] = array
        return result

    def close(self) -> None:
        """Hand this graph's buffers back to the pool (pipelines stay cached on the device)."""
        if self._closed:
            return
        self._closed = True
        self.arena.release()


def _host_array(name: str, dtype: str, value: object) -> np.ndarray:
    """Host data for a tensor input as a C-contiguous array of the tensor's dtype.

    int32 tensors accept int64 host data (token ids), narrowed after a range check, as
    ExecuTorch does; every other dtype must match exactly.
    """
    if not isinstance(value, np.ndarray):
        raise InputError(
            name,
            "dtype",
            f"webgpu: tensor input {name!r} must be a numpy array, got {type(value).__name__}",
        )
    want = DTYPES[dtype]
    if value.dtype == want:
        return np.ascontiguousarray(value)
    if want == np.int32 and value.dtype == np.int64:
        info = np.iinfo(np.int32)
        if value.size and (value.min() < info.min or value.max() > info.max):
            raise InputError(
                name, "int_range", f"webgpu: int64 input {name!r} has values outside int32"
            )
        return value.astype(np.int32)
    raise InputError(
        name, "dtype", f"webgpu: tensor input {name!r} must be {dtype}, got {value.dtype}"
    )
