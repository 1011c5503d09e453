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
  fixpoint converges. Any error restores the graph to its state before the step.
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

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import wgpu
from wgpu.classes import GPUBindGroup, GPUBuffer, GPUValidationError

from graph_format import (
    DTYPES,
    DeviceError,
    DispatchRecord,
    Graph,
    GraphBuildError,
    InputError,
    KernelBuildError,
    OpNode,
    ParityError,
    PropagationError,
    ResizeError,
    StepResult,
    SymIntValue,
    TensorValue,
)
from webgpu_backend.device import BindingKind, Pipeline, WebGPUDevice
from webgpu_backend.pool import (
    GUARD_WORD,
    STORAGE,
    UNIFORM,
    Arena,
    Block,
    BufferPool,
    Slot,
    align_up,
)
from webgpu_backend.tensor import Dims, WebGPUTensor, storage_size


@dataclass
class ParamsBuffer:
    """An op's params uniform. `update` marks it for upload only when the bytes change."""

    slot: Slot
    data: bytes
    dirty: bool = True

    def update(self, data: bytes) -> None:
        """Stage new contents; written to the GPU at the next execute."""
        if data != self.data:
            self.data = data
            self.dirty = True


@dataclass
class ScratchBuffer:
    """A private buffer of one op (attention scores, split-K partials): not a graph value."""

    name: str
    slot: Slot

    @property
    def alloc_nbytes(self) -> int:
        """Bytes allocated (not counting the guard after them)."""
        return self.slot.size


@dataclass
class Dispatch:
    """One dispatch slot of an op. `count` is the logical 1-D workgroup count; 0 skips it.

    A slot may hold several kernel variants built against the same bindings (for example a
    flat and a broadcasting elementwise kernel); `select` switches between them at resize
    time without rebuilding anything.
    """

    op: str
    kernel: str
    workgroup_size: int
    pipelines: dict[str, Pipeline]
    slots: list[Slot]  # bound in order: written, read, params
    written: int  # how many of `slots` the kernels write
    count: int = 0
    _bind_group: GPUBindGroup | None = None

    @property
    def bind_group(self) -> GPUBindGroup:
        """The bind group (made once the graph has placed its buffers)."""
        if self._bind_group is None:
            raise RuntimeError(f"webgpu: {self.op}: the graph is still being built")
        return self._bind_group

    def select(self, kernel: str) -> None:
        """Make `kernel` (one of the variants built for this slot) the one that runs."""
        if kernel not in self.pipelines:
            raise KeyError(f"{self.op}: no variant {kernel!r}; built: {sorted(self.pipelines)}")
        self.kernel = kernel


@dataclass
class _Hook:
    op: str
    order: int
    triggers: frozenset[str]
    fn: Callable[[], None]


@dataclass
class _InputCheck:
    op: str
    tensor: str
    fn: Callable[[np.ndarray], None]


@dataclass
class _Snapshot:
    cur_dims: dict[str, Dims]
    symints: dict[str, int]
    counts: list[tuple[str, int]]
    params: list[tuple[bytes, bool]]
    dirty: set[str]


def fold_grid(count: int, max_per_dim: int) -> tuple[int, int, int]:
    """Physical grid for a 1-D workgroup count: (count, 1, 1), or a near-square 2-D fold.

    Kernels recover the flat workgroup index as `wid.x + wid.y * num_workgroups.x` and
    return when it reaches the logical count, so the fold's waste is harmless.

    Raises:
        ValueError: the count exceeds a `max_per_dim`² grid.
    """
    if count <= max_per_dim:
        return (count, 1, 1)
    x = min(math.isqrt(count - 1) + 1, max_per_dim)
    y = -(-count // x)
    if y > max_per_dim:
        raise ValueError(f"{count} workgroups exceed a {max_per_dim}² 2-D grid")
    return (x, y, 1)


class WebGPUGraph:
    """A graph built on a WebGPU device. Implements `graph_format.LoadedGraph`.

    Op builders (webgpu_backend/ops) use `arg_*`, `int_or_symint`, `int_list`, `output`,
    `create_params`, `create_scratch`, `add_dispatch`, `add_resize_hook`, `add_input_check`,
    `set_cur_dims` and `set_symint`; the harness uses `execute`.
    """

    def __init__(
        self,
        dev: WebGPUDevice,
        graph: Graph,
        shader_dir: Path | None = None,
        max_workgroups_per_dim: int | None = None,
        *,
        pool: BufferPool,
    ) -> None:
        from webgpu_backend.ops import OP_BUILDERS  # the registry imports this module

        self.dev = dev
        self.pool = pool
        self.arena = Arena(pool)
        self.graph = graph
        self.shader_dir = shader_dir  # None: the repo's wgsl/
        self.max_workgroups_per_dim = max_workgroups_per_dim  # None: the device's limit
        self.tensors: dict[str, WebGPUTensor] = {}
        self.symints: dict[str, int] = {}
        self.dispatches: list[Dispatch] = []
        self._params: list[ParamsBuffer] = []
        self._scratch: list[ScratchBuffer] = []
        self._hooks: list[_Hook] = []
        self._input_checks: list[_InputCheck] = []
        self._pending: dict[int, ParityError] = {}  # hook order -> error held until convergence
        self._closed = False

        for value in graph.values.values():
            if isinstance(value, TensorValue):
                self.tensors[value.name] = self._create_tensor(value)
            elif isinstance(value, SymIntValue):
                self.symints[value.name] = 0  # serialized SymInts start at 0, as upstream
        try:
            for node in graph.ops:
                OP_BUILDERS[node.op](self, node)
            self._place()
        except BaseException:
            self.close()
            raise
        # Every storage slot with the name guard damage is reported under.
        self._guarded: list[tuple[str, Slot]] = [
            *((t.name, t.slot) for t in self.tensors.values()),
            *((s.name, s.slot) for s in self._scratch),
        ]
        self._repoison: list[Slot] = []
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

    def _place(self) -> None:
        """Place every buffer, write each storage block's initial contents and make the bind
        groups (all known once every op is built)."""
        self.arena.place([(d.slots[: d.written], d.slots[d.written :]) for d in self.dispatches])
        initial: dict[Slot, np.ndarray] = {}
        for tensor in self.tensors.values():
            value = self.graph.values[tensor.name]
            assert isinstance(value, TensorValue)
            data = self.graph.initial_data(value)
            if data is not None:
                initial[tensor.slot] = np.ascontiguousarray(data, DTYPES[value.dtype])
        queue = self.dev.device.queue
        for placed in self.arena.blocks:
            if placed.block.kind != STORAGE:
                continue
            # Reused memory starts as a new WebGPU buffer does (zeros), then initial data and
            # guards: one write per block.
            image = np.zeros(placed.used, np.uint8)
            words = image.view(np.uint32)
            for slot in placed.slots:
                words[slot.guard_offset // 4 : (slot.guard_offset + slot.guard) // 4] = GUARD_WORD
                data = initial.get(slot)
                if data is not None:
                    raw = data.reshape(-1).view(np.uint8)
                    image[slot.offset : slot.offset + raw.size] = raw
            queue.write_buffer(placed.block.buffer, 0, image)
        for d in self.dispatches:
            layout = next(iter(d.pipelines.values())).layout
            d._bind_group = self.pool.bind_group(layout, d.slots)
        # Host images of the uniform blocks, which params writes are batched through.
        self._uniform_images = {
            p.block.serial: np.zeros(p.used, np.uint8)
            for p in self.arena.blocks
            if p.block.kind == UNIFORM
        }

    def _upload(self, tensor: WebGPUTensor, data: np.ndarray) -> None:
        raw = data.tobytes()
        if len(raw) % 4:
            raw += bytes(4 - len(raw) % 4)  # WebGPU copies whole 4-byte words
        self.dev.device.queue.write_buffer(tensor.slot.buffer, tensor.slot.offset, raw)

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

    def create_params(self, nbytes: int) -> ParamsBuffer:
        """A params uniform of `nbytes` bytes (rounded up to 16, as uniform layout wants)."""
        slot = self.arena.uniform(f"params.{len(self._params)}", nbytes)
        params = ParamsBuffer(slot, bytes(slot.size))
        self._params.append(params)
        return params

    def create_scratch(self, node: OpNode, label: str, nbytes: int) -> ScratchBuffer:
        """A private storage buffer of `nbytes` for `node`, usable in `add_dispatch`."""
        name = f"{node.name}.{label}"
        scratch = ScratchBuffer(name, self.arena.storage(name, nbytes))
        self._scratch.append(scratch)
        return scratch

    def add_dispatch(
        self,
        node: OpNode,
        kernels: str | Mapping[str, str],
        *,
        workgroup_size: int,
        writes: Sequence[WebGPUTensor | ScratchBuffer],
        reads: Sequence[WebGPUTensor | ScratchBuffer],
        params: ParamsBuffer | None,
        constants: Mapping[str, int | float] | None = None,
    ) -> Dispatch:
        """Record a dispatch slot, initially skipped (count 0).

        Args:
            kernels: the kernel name (shader `wgsl/<name>.wgsl`), or variant name -> shader
                file stem for a slot with several variants; the first variant is selected.
            workgroup_size: invocations per workgroup; also the override constant `wg_size`.
            writes, reads, params: bindings, in this order (written tensors first, then
                read tensors, then the params uniform).
            constants: further override constants.
        """
        if workgroup_size > self.dev.max_invocations_per_workgroup:
            raise self.fail(
                node,
                f"{workgroup_size} invocations per workgroup requested, the device allows "
                f"{self.dev.max_invocations_per_workgroup}",
            )
        variants = {kernels: kernels} if isinstance(kernels, str) else dict(kernels)
        kinds: list[BindingKind] = []
        kinds += ["storage_rw"] * len(writes)
        kinds += ["storage_ro"] * len(reads)
        slots = [t.slot for t in [*writes, *reads]]
        if params is not None:
            kinds.append("uniform")
            slots.append(params.slot)
        all_constants = {"wg_size": workgroup_size, **(constants or {})}
        try:
            pipelines = {
                variant: self.dev.pipeline(shader, tuple(kinds), all_constants, self.shader_dir)
                for variant, shader in variants.items()
            }
        except KernelBuildError as err:
            raise err.for_op(node.name) from None
        # The bind group is made once the graph has placed its buffers (`_place`).
        dispatch = Dispatch(
            node.name, next(iter(variants)), workgroup_size, pipelines, slots, len(writes)
        )
        self.dispatches.append(dispatch)
        return dispatch

    def add_resize_hook(
        self, node: OpNode, triggers: Iterable[str], fn: Callable[[], None]
    ) -> None:
        """Run `fn` whenever one of `triggers` (tensor or SymInt names) changes."""
        self._hooks.append(_Hook(node.name, len(self._hooks), frozenset(triggers), fn))

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
            counts=[(d.kernel, d.count) for d in self.dispatches],
            params=[(p.data, p.dirty) for p in self._params],
            dirty=set(self._dirty),
        )

    def _restore(self, snap: _Snapshot) -> None:
        for name, dims in snap.cur_dims.items():
            self.tensors[name].cur_dims = dims
        self.symints.update(snap.symints)
        for dispatch, (kernel, count) in zip(self.dispatches, snap.counts, strict=True):
            dispatch.kernel, dispatch.count = kernel, count
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

    def _grids(self) -> list[tuple[int, int, int] | None]:
        """The physical grid of every dispatch (None: skipped) for the live counts.

        Raises:
            InputError: a count no 2-D grid within the limit can hold (reason "grid_limit",
                the op as subject).
        """
        limit = self.workgroups_per_dim
        grids: list[tuple[int, int, int] | None] = []
        for d in self.dispatches:
            if d.count == 0:
                grids.append(None)
                continue
            try:
                grids.append(fold_grid(d.count, limit))
            except ValueError as err:
                raise InputError(d.op, "grid_limit", f"webgpu: op {d.op!r}: {err}") from None
        return grids

    def allocation_nbytes(self, name: str) -> int:
        """Bytes allocated for tensor `name`."""
        return self.tensors[name].alloc_nbytes

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
            grids = self._grids()
            self._check_symint_range()
        except ParityError as err:
            err.live = {**self.cur_dims(), **self.symints}
            self._restore(snap)
            raise

        queue = self.dev.device.queue
        self._flush_params()
        for slot in self._repoison:
            queue.write_buffer(slot.buffer, slot.guard_offset, self._guard_pattern[: slot.guard])
        self._repoison = []
        for name, (offset, word) in (fill or {}).items():
            tensor = self.tensors[name]
            words = (tensor.alloc_nbytes - offset) // 4
            if words > 0:
                queue.write_buffer(
                    tensor.slot.buffer, tensor.slot.offset + offset, np.full(words, word, np.uint32)
                )
        for tensor, data in tensor_inputs:
            self._upload(tensor, data)

        records: list[DispatchRecord] = []
        encoder = self.dev.device.create_command_encoder()
        try:
            cpass = encoder.begin_compute_pass()
            for d, grid in zip(self.dispatches, grids, strict=True):
                wg = (d.workgroup_size, 1, 1)
                if grid is None:
                    records.append(DispatchRecord(d.op, d.kernel, wg, (0, 0, 0), (0, 0, 0), False))
                    continue
                cpass.set_pipeline(d.pipelines[d.kernel].pipeline)
                cpass.set_bind_group(0, d.bind_group)
                cpass.dispatch_workgroups(*grid)
                records.append(DispatchRecord(d.op, d.kernel, wg, (d.count, 1, 1), grid, True))
            cpass.end()
            reads = self._plan_reads(read, read_raw)
            readback = self.pool.readback(reads.size)
            for copy in reads.copies:
                encoder.copy_buffer_to_buffer(
                    copy.block.buffer, copy.src, readback, copy.dst, copy.size
                )
            queue.submit([encoder.finish()])
            blob = self._map(readback, reads.size)
        except GPUValidationError as err:
            raise DeviceError("webgpu", [str(err)]) from None

        result = StepResult(
            outputs={},
            cur_dims=self.cur_dims(),
            symints=dict(self.symints),
            dispatches=records,
            guard_writes=self._check_guards(blob, reads.guards),
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

    def _flush_params(self) -> None:
        """Write every params uniform that changed: one write per uniform block, spanning
        the changed ones (a host image of the block keeps the bytes in between)."""
        spans: dict[int, tuple[Slot, int, int]] = {}
        for params in self._params:
            if not params.dirty:
                continue
            slot = params.slot
            image = self._uniform_images[slot.block_serial]
            image[slot.offset : slot.offset + len(params.data)] = np.frombuffer(
                params.data, np.uint8
            )
            params.dirty = False
            _, lo, hi = spans.get(slot.block_serial, (slot, slot.offset, 0))
            spans[slot.block_serial] = (
                slot,
                min(lo, slot.offset),
                max(hi, slot.offset + slot.size),
            )
        for serial, (slot, lo, hi) in spans.items():
            self.dev.device.queue.write_buffer(slot.buffer, lo, self._uniform_images[serial][lo:hi])

    @functools.cached_property
    def _guard_pattern(self) -> bytes:
        longest = max((slot.guard for _, slot in self._guarded), default=0)
        return np.full(longest // 4, GUARD_WORD, np.uint32).tobytes()

    def _plan_reads(self, read: Sequence[str], read_raw: Sequence[str]) -> _Reads:
        """Copies into the read-back buffer of every guard and of the bytes asked for.

        A slot asked for whole (`read_raw`), or whose live bytes leave a short slack, is
        copied with its guard in one piece; regions close together in a block are merged
        into one copy (the bytes between come along), so a graph whose tensors are all read
        costs about one copy per block.
        """
        reads = _Reads()
        need: dict[Slot, int] = {}
        wanted = [("output", n) for n in self.graph.outputs]
        wanted += [("tensor", n) for n in read] + [("raw", n) for n in read_raw]
        for kind, name in wanted:
            tensor = self.tensors[name]
            reads.wanted.append((kind, tensor))
            nbytes = tensor.alloc_nbytes if kind == "raw" else storage_size(tensor.cur_nbytes)
            need[tensor.slot] = max(need.get(tensor.slot, 0), nbytes)
        for placed in self.arena.blocks:
            if placed.block.kind != STORAGE:
                continue
            current: _Copy | None = None  # the copy being extended
            for slot in placed.slots:
                nbytes = need.get(slot, 0)
                if nbytes and slot.size - nbytes <= _WHOLE_COPY_SLACK:
                    pieces = [(slot.offset, slot.binding_size)]
                else:
                    pieces = [(slot.offset, nbytes)] if nbytes else []
                    pieces += [(slot.guard_offset, slot.guard)] if slot.guard else []
                for src, size in pieces:
                    gap = src - (current.src + current.size) if current else -1
                    if current is not None and 0 <= gap <= _MERGE_GAP:
                        dst = current.dst + current.size + gap
                        current.size += gap + size
                    else:
                        dst = reads.size
                        current = _Copy(placed.block, src, dst, size)
                        reads.copies.append(current)
                    reads.size = max(reads.size, align_up(dst + size, 8))
                    if src == slot.offset:
                        reads.at[slot.name] = dst
                        if slot.guard and size >= slot.binding_size:
                            reads.guards.append((slot, dst + slot.size))
                    elif slot.guard:
                        reads.guards.append((slot, dst))
        return reads

    def _check_guards(self, blob: bytes, guards: Sequence[tuple[Slot, int]]) -> dict[str, int]:
        """Damaged words per guard read back; damaged guards are re-poisoned next execute."""
        pattern = self._guard_pattern
        damaged: dict[str, int] = {}
        for slot, offset in guards:
            got = blob[offset : offset + slot.guard]
            if got == pattern[: slot.guard]:
                continue
            words = np.frombuffer(got, np.uint32)
            damaged[slot.name] = int(np.count_nonzero(words != GUARD_WORD))
            self._repoison.append(slot)
        return damaged

    @staticmethod
    def _map(readback: GPUBuffer, nbytes: int) -> bytes:
        readback.map_sync(wgpu.MapMode.READ, 0, nbytes)
        try:
            return bytes(readback.read_mapped(0, nbytes))
        finally:
            readback.unmap()

    def close(self) -> None:
        """Hand this graph's buffers back to the pool (pipelines stay cached on the device)."""
        if self._closed:
            return
        self._closed = True
        self.arena.release()


# A slot whose live bytes leave at most this much slack is read back whole with its guard;
# read-back regions at most this far apart in a block are merged into one copy.
_WHOLE_COPY_SLACK = 4096
_MERGE_GAP = 4096


@dataclass
class _Copy:
    """One copy from a block into the read-back buffer."""

    block: Block
    src: int
    dst: int
    size: int


@dataclass
class _Reads:
    """The read-back plan of one execute: what was asked for, the copies, where each slot's
    bytes and each guard land, and the bytes in all."""

    wanted: list[tuple[str, WebGPUTensor]] = field(default_factory=list)
    copies: list[_Copy] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)
    guards: list[tuple[Slot, int]] = field(default_factory=list)
    size: int = 0


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
