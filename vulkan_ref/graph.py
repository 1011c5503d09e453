"""The Vulkan compute graph: ordered nodes with resize functions, self-gating dispatch nodes.

Resize model (docs/design.md §4.2, as ExecuTorch's `ComputeGraph`):
- `virtual_resize` changes a tensor's live sizes in place and records it in `updated`.
- `propagate_resize` walks every node once, in graph (topological) order. A node whose
  arguments include an updated value runs its `resize_fn`, which resizes its outputs (so
  later nodes see final sizes: no fixpoint, nothing stale).
- A dispatch node then re-picks its shader, global and local workgroup sizes from live sizes.
  A global size with a zero component means the dispatch is skipped (how routes switch).
  Every shader a node may pick is built when the graph is loaded, so a kernel that does not
  compile is refused at load (`KernelBuildError`), whatever sizes the steps take.
- The physical grid of every dispatch (a count above the per-dimension limit folded into
  rows) is computed with the resize, so a count no grid can hold is refused like any input.
- The command buffer is recorded anew for every execute, with a memory barrier after each
  dispatch; the whole step is one submit and one fence wait.
- Memory comes from the runtime's pool (`vulkan_ref.pool`): every tensor, scratch buffer
  and UBO of a graph is a range of a pooled block, descriptor sets are recycled by the
  ranges they bind, and the command buffer and fence are the runtime's. What a fresh
  build guarantees holds on reused memory: the first submit of a graph zeroes its storage,
  uploads its constants and state initial data and poisons the guard after every
  allocation (one fill and one copy at the head of that submit, no submit of its own);
  every execute reads the guards back with the rest and reports damaged ones
  (`StepResult.guard_writes`), then re-poisons them at the next submit.
- Any error while resizing restores every size and SymInt to the state before the step;
  SymInt UBOs are written only once the step's resize succeeded, and a SymInt the int32 UBO
  cannot hold is refused (`InputError`, key "int_range") after every op's own checks.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import vulkan as vk

import vulkan_ref.spirv
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
    StepResult,
    SymIntValue,
    TensorValue,
)
from vulkan_ref.cdata import CData
from vulkan_ref.instance import FENCE_TIMEOUT_NS, VulkanContext
from vulkan_ref.memory import Buffer
from vulkan_ref.pipeline import ComputePipeline, PipelineCache, ShaderKey
from vulkan_ref.pool import GUARD_WORD, Arena, DescriptorKey, MemoryPool, StorageSlot
from vulkan_ref.tensor import VTensor

Sizes = tuple[int, ...]
WG = tuple[int, int, int]

_PIPELINE_CACHES: dict[int, PipelineCache] = {}


def pipeline_cache(ctx: VulkanContext) -> PipelineCache:
    """The pipeline cache shared by every graph of a context."""
    return _PIPELINE_CACHES.setdefault(id(ctx), PipelineCache(ctx))


INT32_RANGE = range(-(1 << 31), 1 << 31)


class SymInt:
    """A SymInt value with an int UBO that shaders may bind (as upstream's ParamsBuffer).

    `set` changes the value only; `flush` writes it to the UBO. The graph flushes after a
    step's resize succeeded, so a rejected step (an op's check, or a value the int32 UBO
    cannot hold) leaves the UBO as it was.
    """

    def __init__(self, arena: Arena, name: str) -> None:
        self.name = name
        self.value = 0  # serialized SymInts start at 0
        self._written = 0
        self.ubo = arena.uniform(16)
        self.ubo.write(0, bytes(16))

    def set(self, value: int) -> bool:
        """Set the value (not yet its UBO); returns whether it changed."""
        if value == self.value:
            return False
        self.value = value
        return True

    def flush(self) -> None:
        """Write the value to the UBO if it changed since the last flush (it must fit int32)."""
        if self.value != self._written:
            self.ubo.write(0, int(self.value).to_bytes(4, "little", signed=True))
            self._written = self.value


@dataclass
class ExecuteNode:
    """A node of the graph: `resize_fn` runs when any value in `args` was updated."""

    op: str
    args: tuple[str, ...]
    resize_fn: Callable[[ComputeGraph], None] | None = None

    def trigger_resize(self, graph: ComputeGraph) -> bool:
        """Run the resize function if an argument changed; returns whether it did."""
        if graph.updated.isdisjoint(self.args):
            return False
        if self.resize_fn is not None:
            self.resize_fn(graph)
        return True


@dataclass
class DispatchNode(ExecuteNode):
    """A compute dispatch whose shader, global and local sizes are picked from live sizes.

    Attributes:
        pick_shader: kernel variant for the current live sizes.
        shaders: every variant the node may pick -> its GLSL file stem (glsl/<stem>.comp);
            all of them are built at load.
        pick_global: global size in invocations; any zero component skips the dispatch.
        local_size: workgroup size in invocations.
        bindings: tensors (storage buffers, outputs first) then UBOs, in binding order.
        push_constants: bytes to push for the current live values, if the kernel has any.
        spec_constants: specialization constants from id 3 on.
    """

    pick_shader: Callable[[ComputeGraph], str] = lambda g: ""
    shaders: Mapping[str, str] = field(default_factory=dict)
    pick_global: Callable[[ComputeGraph], WG] = lambda g: (0, 0, 0)
    local_size: WG = (64, 1, 1)
    bindings: Sequence[VTensor | Buffer] = ()
    push_constants: Callable[[ComputeGraph], bytes] | None = None
    push_constant_size: int = 0
    spec_constants: tuple[int | float, ...] = ()
    kernel: str = ""
    global_size: WG = (0, 0, 0)
    pipeline: ComputePipeline | None = None
    descriptor_set: CData = None

    def trigger_resize(self, graph: ComputeGraph) -> bool:
        """Resize outputs if needed, then re-pick shader and global size."""
        if not super().trigger_resize(graph):
            return False
        kernel = self.pick_shader(graph)
        if kernel != self.kernel or self.pipeline is None:
            self.kernel = kernel
            self.pipeline = graph.pipeline_for(self)
        self.global_size = self.pick_global(graph)
        return True

    @property
    def logical_count(self) -> WG:
        """Workgroups per axis: div_up(global, local), or zeros when skipped."""
        if 0 in self.global_size:
            return (0, 0, 0)
        (gx, gy, gz), (lx, ly, lz) = self.global_size, self.local_size
        return (-(-gx // lx), -(-gy // ly), -(-gz // lz))


@dataclass
class _InputCheck:
    op: str
    tensor: str
    fn: Callable[[np.ndarray], None]


@dataclass
class _Snapshot:
    sizes: dict[str, Sizes]
    symints: dict[str, int]
    nodes: list[tuple[str, WG, ComputePipeline | None]] = field(default_factory=list)
    updated: set[str] = field(default_factory=set)


def descriptor_kinds(bindings: Sequence[VTensor | Buffer]) -> tuple[str, ...]:
    """Descriptor types of a binding list: tensors are storage buffers, Buffers are UBOs."""
    return tuple("storage" if isinstance(b, VTensor) else "uniform" for b in bindings)


class ComputeGraph:
    """A graph built on the Vulkan device. Implements `graph_format.LoadedGraph`.

    Op builders (vulkan_ref/ops) use `tensor_arg`, `output`, `scalar_arg`, `symint_arg`,
    `int_ubo`, `extract_int_or_symint_list`, `create_scratch`, `add_node`,
    `add_dispatch_node`, `add_input_check`, `virtual_resize` and `set_symint`; the harness
    uses `execute`.
    """

    def __init__(
        self,
        ctx: VulkanContext,
        graph: Graph,
        glsl_dir: str | None = None,
        max_workgroups_per_dim: int | None = None,
        *,
        pool: MemoryPool,
    ) -> None:
        from vulkan_ref.ops import OP_IMPLS  # the registry imports this module

        self.ctx = ctx
        self.pool = pool
        self.arena = Arena(pool)
        # Read once per graph: each read of the properties struct through the vulkan package
        # costs ~35 µs, and every dispatch node checks its workgroup size.
        self._device_limits = (ctx.max_invocations, ctx.max_workgroup_count)
        self.graph = graph
        self.glsl_dir = glsl_dir  # another folder laid out like glsl/; None: the repo's
        # A limit below the device's, on every axis (None: the device's own).
        self.max_workgroups_per_dim = max_workgroups_per_dim
        self.pipelines = pipeline_cache(ctx)
        self.tensors: dict[str, VTensor] = {}
        self.symints: dict[str, SymInt] = {}
        self.nodes: list[ExecuteNode] = []
        self._scratch: list[VTensor] = []
        self._input_checks: list[_InputCheck] = []
        self._descriptor_keys: list[DescriptorKey] = []
        self._closed = False
        self._device_lost = False
        try:
            for value in graph.values.values():
                if isinstance(value, TensorValue):
                    self.tensors[value.name] = self._create_tensor(value)
                elif isinstance(value, SymIntValue):
                    self.symints[value.name] = SymInt(self.arena, value.name)
            for node in graph.ops:
                OP_IMPLS[node.op](self, node)
            self.arena.place()
            self._allocate_descriptor_sets()
        except BaseException:
            self.close()
            raise
        # Every storage tensor, scratch included, with its slot, in placement order.
        self._storage: list[VTensor] = [*self.tensors.values(), *self._scratch]
        # Zeroing, initial data and guards go at the head of the first submit; guards found
        # damaged go at the head of the next one.
        self._needs_init = True
        self._repoison: list[StorageSlot] = []
        # Everything counts as updated before the first execute, so every node sizes itself.
        self.updated: set[str] = set(self.tensors) | set(self.symints)

    # ------------------------------------------------------------------ construction

    def _create_tensor(self, value: TensorValue) -> VTensor:
        return VTensor(
            self.arena,
            value.name,
            value.dtype,
            DTYPES[value.dtype].itemsize,
            value.dims,
            is_constant=value.constant is not None,
            is_state=value.state,
        )

    def _allocate_descriptor_sets(self) -> None:
        """A descriptor set per dispatch node, from the runtime's cache (see pool.py)."""
        dispatches = [n for n in self.nodes if isinstance(n, DispatchNode)]
        requests = []
        for node in dispatches:
            kinds = descriptor_kinds(node.bindings)
            ranges = [b.buffer if isinstance(b, VTensor) else b for b in node.bindings]
            requests.append((kinds, self.pipelines.set_layout(kinds), ranges))
        acquired = self.pool.descriptors.acquire(requests)
        for node, (key, handle) in zip(dispatches, acquired, strict=True):
            node.descriptor_set = handle
            self._descriptor_keys.append(key)

    # ------------------------------------------------------------------ builder API

    def fail(self, node: OpNode, message: str, tensor: str | None = None) -> GraphBuildError:
        """A build error for `node` (returned, for `raise graph.fail(...)`)."""
        return GraphBuildError(node.name, message, tensor=tensor)

    def tensor_arg(self, node: OpNode, slot: str) -> VTensor:
        """The tensor passed as argument `slot`."""
        return self.tensors[node.arg(slot)]

    def optional_tensor_arg(self, node: OpNode, slot: str) -> VTensor | None:
        """The tensor passed as optional argument `slot`, or None."""
        name = node.optional_arg(slot)
        return self.tensors[name] if name is not None else None

    def scalar_arg(self, node: OpNode, slot: str) -> int | float:
        """The literal int or float passed as argument `slot`."""
        return self.graph.scalar(node.arg(slot))

    def symint_arg(self, node: OpNode, slot: str) -> SymInt | int:
        """The SymInt passed as `slot`, or the literal int when an Int was passed."""
        name = node.arg(slot)
        return self.symints.get(name) or int(self.graph.scalar(name))

    def int_ubo(self, node: OpNode, slot: str) -> Buffer:
        """A UBO holding an int-or-SymInt argument as one int (std140), for shaders to bind.

        The SymInt's own UBO, which `set_symint` rewrites; for an int literal, a UBO written
        once at load.
        """
        value = self.symint_arg(node, slot)
        if isinstance(value, SymInt):
            return value.ubo
        ubo = self.arena.uniform(16)
        ubo.write(0, int(value).to_bytes(4, "little", signed=True).ljust(16, b"\0"))
        return ubo

    def extract_int_or_symint_list(self, node: OpNode, slot: str) -> tuple[int, ...]:
        """The current values of a size-list argument: int literals and live SymInts."""
        return tuple(
            self.symints[n].value if n in self.symints else int(self.graph.scalar(n))
            for n in node.size_list(slot)
        )

    def output(self, node: OpNode, slot: str) -> VTensor:
        """The tensor written as output `slot`."""
        return self.tensors[node.outputs[slot]]

    def add_input_check(
        self, node: OpNode, tensor: VTensor, fn: Callable[[np.ndarray], None]
    ) -> None:
        """Run `fn(host data)` on graph input `tensor` at every execute, before any resize.

        For checks only the host can make cheaply (token ids against a vocabulary): `fn`
        raises `InputError` and the step is refused with the graph untouched. Checks run
        after every input's own dtype and size checks, in graph order.
        """
        if tensor.name not in self.graph.inputs:
            raise self.fail(node, f"{tensor.name!r} is not a graph input", tensor=tensor.name)
        self._input_checks.append(_InputCheck(node.name, tensor.name, fn))

    def create_scratch(
        self, node: OpNode, label: str, dtype: str, max_sizes: Sequence[int]
    ) -> VTensor:
        """A private tensor of `node` (attention scores, partials): not a graph value.

        Its live sizes are the op's business (`VTensor.virtual_resize`); it never appears in
        `cur_dims`.
        """
        tensor = VTensor(
            self.arena, f"{node.name}.{label}", dtype, DTYPES[dtype].itemsize, tuple(max_sizes)
        )
        self._scratch.append(tensor)
        return tensor

    def sizes_of(self, tensor: VTensor) -> Sizes:
        """Live sizes of a tensor."""
        return tensor.sizes

    def add_node(self, node: ExecuteNode) -> ExecuteNode:
        """Append a node (nodes run in the order they are added)."""
        self.nodes.append(node)
        return node

    def add_dispatch_node(self, node: DispatchNode) -> DispatchNode:
        """Append a dispatch node after checking its workgroup size against the device and
        building the pipeline of every kernel variant it may pick.

        Raises:
            GraphBuildError: the workgroup size is above the device's.
            KernelBuildError: a variant's shader does not compile (naming the node's op).
        """
        max_invocations = self._device_limits[0]
        if math.prod(node.local_size) > max_invocations:
            raise GraphBuildError(
                node.op,
                f"local size {node.local_size} exceeds the device's "
                f"{max_invocations} invocations per workgroup",
            )
        if not node.shaders:
            raise ValueError(f"{node.op}: a dispatch node must list its kernel variants")
        for variant in node.shaders:
            try:
                self._pipeline(node, variant)
            except KernelBuildError as err:
                raise err.for_op(node.op) from None
        self.nodes.append(node)
        return node

    def pipeline_for(self, node: DispatchNode) -> ComputePipeline:
        """The pipeline of a node's current kernel."""
        if node.kernel not in node.shaders:
            raise ValueError(
                f"{node.op}: picked kernel {node.kernel!r}, not one of its variants "
                f"{sorted(node.shaders)}"
            )
        return self._pipeline(node, node.kernel)

    def _pipeline(self, node: DispatchNode, variant: str) -> ComputePipeline:
        stem = node.shaders[variant]
        pipeline = self.pipelines.get(
            ShaderKey(
                kernel=stem,
                defines=(),
                descriptors=descriptor_kinds(node.bindings),
                push_constant_size=node.push_constant_size,
                local_size=node.local_size,
                spec_constants=node.spec_constants,
                glsl_dir=self.glsl_dir,
            )
        )
        if pipeline.messages:  # the validation layer refused the shader or its pipeline
            shader = Path(self.glsl_dir) if self.glsl_dir else vulkan_ref.spirv.GLSL_DIR
            raise KernelBuildError(
                "vulkan",
                stem,
                str(shader / f"{stem}.comp"),
                "\n".join(pipeline.messages),
                op=node.op,
            )
        return pipeline

    def virtual_resize(self, tensor: VTensor, sizes: Sequence[int]) -> None:
        """Set a tensor's live sizes; records it as updated only when they change."""
        if tensor.virtual_resize(tuple(int(s) for s in sizes)):
            self.updated.add(tensor.name)

    def set_symint(self, name: str, value: int) -> None:
        """Set a SymInt; records it as updated only when it changes."""
        if self.symints[name].set(value):
            self.updated.add(name)

    # ------------------------------------------------------------------ resize

    def propagate_resize(self) -> None:
        """One pass over all nodes in order (docs/design.md §4.2)."""
        for node in self.nodes:
            node.trigger_resize(self)

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(
            sizes={n: t.sizes for n, t in self.tensors.items()},
            symints={n: s.value for n, s in self.symints.items()},
            nodes=[
                (n.kernel, n.global_size, n.pipeline)
                for n in self.nodes
                if isinstance(n, DispatchNode)
            ],
            updated=set(self.updated),
        )

    def _restore(self, snap: _Snapshot) -> None:
        for name, sizes in snap.sizes.items():
            self.tensors[name].virtual_resize(sizes)
        for name, value in snap.symints.items():
            self.symints[name].set(value)
        dispatches = [n for n in self.nodes if isinstance(n, DispatchNode)]
        for node, (kernel, global_size, pipeline) in zip(dispatches, snap.nodes, strict=True):
            node.kernel, node.global_size, node.pipeline = kernel, global_size, pipeline
        # Back to what was pending before the step (everything, before the first execute).
        self.updated = set(snap.updated)

    def _check_symint_range(self) -> None:
        """Refuse a SymInt the int32 UBO cannot hold, once every op's own checks passed."""
        for name, symint in self.symints.items():
            if symint.value not in INT32_RANGE:
                raise InputError(
                    name,
                    "int_range",
                    f"vulkan: SymInt {name!r} = {symint.value} does not fit the int32 that "
                    "kernels read",
                )

    # ------------------------------------------------------------------ LoadedGraph

    def cur_dims(self) -> dict[str, Sizes]:
        """Live sizes of every tensor value."""
        return {name: t.sizes for name, t in self.tensors.items()}

    @property
    def workgroup_limits(self) -> WG:
        """Workgroups per axis a dispatch may have: the device's, or the lowered limit."""
        device = self._device_limits[1]
        if self.max_workgroups_per_dim is None:
            return device
        limit = self.max_workgroups_per_dim
        return (min(device[0], limit), min(device[1], limit), min(device[2], limit))

    def _grids(self) -> list[WG | None]:
        """The physical grid of every dispatch node (None: skipped) for the live sizes.

        Raises:
            InputError: a count no grid within the limits can hold (reason "grid_limit",
                the op as subject).
        """
        limits = self.workgroup_limits
        grids: list[WG | None] = []
        for node in self.nodes:
            if not isinstance(node, DispatchNode):
                continue
            count = node.logical_count
            if count == (0, 0, 0):
                grids.append(None)
                continue
            try:
                grids.append(_fold(count, limits))
            except ValueError as err:
                raise InputError(node.op, "grid_limit", f"vulkan: {node.op}: {err}") from None
        return grids

    def allocation_nbytes(self, name: str) -> int:
        """Bytes allocated for tensor `name`."""
        return self.tensors[name].buffer.size

    def _check_inputs(
        self, inputs: Mapping[str, np.ndarray | int]
    ) -> tuple[list[tuple[VTensor, np.ndarray]], dict[str, int]]:
        for name in self.graph.inputs:
            if name not in inputs:
                raise InputError(name, "missing", f"vulkan: missing graph input {name!r}")
        extra = [n for n in inputs if n not in self.graph.inputs]
        if extra:
            raise InputError(
                extra[0],
                "unknown",
                f"vulkan: {extra[0]!r} is not an input of this graph ({list(self.graph.inputs)})",
            )
        tensors: list[tuple[VTensor, np.ndarray]] = []
        symints: dict[str, int] = {}
        for name in self.graph.inputs:
            value = inputs[name]
            if name in self.symints:
                if not isinstance(value, int | np.integer) or isinstance(value, bool):
                    raise InputError(
                        name, "dtype", f"vulkan: SymInt {name!r} needs an int, not {value!r}"
                    )
                symints[name] = int(value)
                continue
            tensor = self.tensors[name]
            array = self._convert(tensor, value)
            tensor.validate(tuple(array.shape))
            tensors.append((tensor, array))
        host = {tensor.name: array for tensor, array in tensors}
        for check in self._input_checks:
            check.fn(host[check.tensor])
        return tensors, symints

    @staticmethod
    def _convert(tensor: VTensor, value: object) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            raise InputError(tensor.name, "dtype", f"vulkan: {tensor.name!r} needs a numpy array")
        want = DTYPES[tensor.dtype]
        if value.dtype == want:
            return np.ascontiguousarray(value)
        if want == np.int32 and value.dtype == np.int64:
            # Narrow int64 token ids to the int32 buffer, refusing values that would wrap.
            narrowed = value.astype(np.int32)
            if not np.array_equal(narrowed, value):
                raise InputError(
                    tensor.name, "int_range", f"vulkan: {tensor.name!r} does not fit int32"
                )
            return narrowed
        raise InputError(
            tensor.name,
            "dtype",
            f"vulkan: {tensor.name!r} is {tensor.dtype}; host data of {value.dtype} given",
        )

    def execute(
        self,
        inputs: Mapping[str, np.ndarray | int],
        *,
        read: Sequence[str] = (),
        read_raw: Sequence[str] = (),
        fill: Mapping[str, tuple[int, int]] | None = None,
    ) -> StepResult:
        """Resize to the inputs, record and submit one command buffer, read back.

        See `graph_format.LoadedGraph.execute`.
        """
        if self._closed:
            raise RuntimeError("vulkan: execute on a closed graph")
        tensor_inputs, symint_inputs = self._check_inputs(inputs)
        snap = self._snapshot()
        try:
            for tensor, array in tensor_inputs:
                self.virtual_resize(tensor, array.shape)
            for name, value in symint_inputs.items():
                self.set_symint(name, value)
            self.propagate_resize()
            grids = self._grids()
            self._check_symint_range()
        except ParityError as err:
            err.live = {**self.cur_dims(), **{n: s.value for n, s in self.symints.items()}}
            self._restore(snap)
            raise
        for symint in self.symints.values():
            symint.flush()
        self.updated.clear()

        staging_plan = _StagingPlan()
        writes = self._plan_writes(staging_plan, tensor_inputs)
        reads = self._plan_reads(staging_plan, read, read_raw)
        staging = self.pool.staging(staging_plan.size)
        assert staging.view is not None
        for offset, data in writes.host:
            staging.view[offset : offset + len(data)] = data

        self.ctx.drain_messages()
        records = self._record(staging.buffer, writes, reads, fill or {}, grids)
        vk.vkQueueSubmit(self.ctx.queue, 1, self._submit_info, self.pool.fence)
        try:
            vk.vkWaitForFences(self.ctx.device, 1, [self.pool.fence], vk.VK_TRUE, FENCE_TIMEOUT_NS)
        except vk.VkError as err:
            self._device_lost = True
            raise DeviceError("vulkan", [f"fence wait failed: {type(err).__name__}"]) from None
        finally:
            vk.vkResetFences(self.ctx.device, 1, [self.pool.fence])
        self._needs_init = False
        self._repoison = []

        view = staging.view
        result = StepResult(
            outputs={},
            cur_dims=self.cur_dims(),
            symints={n: s.value for n, s in self.symints.items()},
            dispatches=records,
            validation_messages=self.ctx.drain_messages(),
            guard_writes=self._check_guards(view, reads.guards),
        )
        for kind, tensor in reads.wanted:
            offset = reads.at[tensor.name]
            if kind == "raw":
                result.raw[tensor.name] = view[offset : offset + tensor.buffer.size].copy()
                continue
            raw = view[offset : offset + tensor.nbytes]
            array = raw.view(DTYPES[tensor.dtype]).reshape(tensor.sizes).copy()
            (result.outputs if kind == "output" else result.tensors)[tensor.name] = array
        return result

    @functools.cached_property
    def _submit_info(self) -> CData:
        return vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[self.pool.command_buffer])

    @functools.cached_property
    def _guard_pattern(self) -> bytes:
        longest = max((t.buffer.guard for t in self._storage), default=0)
        return np.full(longest // 4, GUARD_WORD, np.uint32).tobytes()

    def _plan_writes(
        self, plan: _StagingPlan, tensor_inputs: list[tuple[VTensor, np.ndarray]]
    ) -> _Writes:
        """Staging regions and copies of this step's uploads, plus (first submit) the
        initial data and guards of every slot, or (later) the guards found damaged."""
        writes = _Writes()
        poison = [t.buffer for t in self._storage] if self._needs_init else self._repoison
        if poison:
            pattern = plan.take(len(self._guard_pattern))
            writes.host.append((pattern, np.frombuffer(self._guard_pattern, np.uint8)))
            writes.copies += [(pattern, slot.guard_offset, slot.guard) for slot in poison]
        if self._needs_init:
            assert self.arena.block is not None
            writes.zero = self.arena.used
            for name, tensor in self.tensors.items():
                value = self.graph.values[name]
                assert isinstance(value, TensorValue)
                data = self.graph.initial_data(value)
                if data is not None:
                    self._stage(
                        plan, writes, tensor, np.ascontiguousarray(data, DTYPES[value.dtype])
                    )
        for tensor, array in tensor_inputs:
            self._stage(plan, writes, tensor, array)
        return writes

    @staticmethod
    def _stage(plan: _StagingPlan, writes: _Writes, tensor: VTensor, array: np.ndarray) -> None:
        raw = array.reshape(-1).view(np.uint8)
        if raw.size:
            offset = plan.take(raw.size)
            writes.host.append((offset, raw))
            writes.copies.append((offset, tensor.buffer.offset, raw.size))

    def _plan_reads(
        self, plan: _StagingPlan, read: Sequence[str], read_raw: Sequence[str]
    ) -> _Reads:
        """One copy region per slot: its guard, and the live bytes or the whole allocation
        where asked for (a slot asked for both, or whose slack is short, is copied whole)."""
        reads = _Reads()
        live: dict[str, int] = {}
        wanted = [("output", n) for n in self.graph.outputs]
        wanted += [("tensor", n) for n in read] + [("raw", n) for n in read_raw]
        for kind, name in wanted:
            tensor = self.tensors[name]
            reads.wanted.append((kind, tensor))
            need = tensor.buffer.size if kind == "raw" else (tensor.nbytes + 3) // 4 * 4
            live[name] = max(live.get(name, 0), need)
        for tensor in self._storage:
            slot = tensor.buffer
            need = live.get(tensor.name, 0) if self.tensors.get(tensor.name) is tensor else 0
            if need and slot.size - need <= _WHOLE_COPY_SLACK:
                offset = plan.take(slot.binding_size)
                reads.copies.append((slot.offset, offset, slot.binding_size))
                reads.at[tensor.name] = offset
                reads.guards.append((tensor, offset + slot.size))
                continue
            if need:
                offset = plan.take(need)
                reads.copies.append((slot.offset, offset, need))
                reads.at[tensor.name] = offset
            offset = plan.take(slot.guard)
            reads.copies.append((slot.guard_offset, offset, slot.guard))
            reads.guards.append((tensor, offset))
        return reads

    def _check_guards(
        self, view: np.ndarray, guards: Sequence[tuple[VTensor, int]]
    ) -> dict[str, int]:
        """Damaged words per guard read back; damaged guards are re-poisoned next submit."""
        pattern = self._guard_pattern
        damaged: dict[str, int] = {}
        for tensor, offset in guards:
            slot = tensor.buffer
            got = view[offset : offset + slot.guard]
            if got.tobytes() == pattern[: slot.guard]:
                continue
            damaged[tensor.name] = int(np.count_nonzero(got.view(np.uint32) != GUARD_WORD))
            self._repoison.append(slot)
        return damaged

    def _record(
        self,
        staging: CData,
        writes: _Writes,
        reads: _Reads,
        fill: Mapping[str, tuple[int, int]],
        grids: Sequence[WG | None],
    ) -> list[DispatchRecord]:
        cb = self.pool.command_buffer
        vk.vkBeginCommandBuffer(cb, _ONE_TIME)
        try:
            return self._record_commands(cb, staging, writes, reads, fill, grids)
        finally:
            # Ended even when recording failed: the runtime's next execute begins it again.
            vk.vkEndCommandBuffer(cb)

    def _record_commands(
        self,
        cb: CData,
        staging: CData,
        writes: _Writes,
        reads: _Reads,
        fill: Mapping[str, tuple[int, int]],
        grids: Sequence[WG | None],
    ) -> list[DispatchRecord]:
        block = self.arena.block
        assert block is not None
        if writes.zero:
            # Reused memory starts as a fresh allocation does: zeros, then initial data.
            vk.vkCmdFillBuffer(cb, block.buffer, 0, (writes.zero + 3) // 4 * 4, 0)
            self._barrier(
                cb,
                vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
                vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
                vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            )
        for name, (offset, word) in fill.items():
            slot = self.tensors[name].buffer
            if offset < slot.size:
                vk.vkCmdFillBuffer(cb, block.buffer, slot.offset + offset, slot.size - offset, word)
        if writes.copies:
            regions = _copy_regions(writes.copies)
            vk.vkCmdCopyBuffer(cb, staging, block.buffer, len(writes.copies), regions)
        self._barrier(
            cb,
            vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
        )
        records: list[DispatchRecord] = []
        dispatches = [node for node in self.nodes if isinstance(node, DispatchNode)]
        for node, grid in zip(dispatches, grids, strict=True):
            count = node.logical_count
            if grid is None:
                records.append(
                    DispatchRecord(node.op, node.kernel, node.local_size, count, count, False)
                )
                continue
            assert node.pipeline is not None
            vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, node.pipeline.handle)
            vk.vkCmdBindDescriptorSets(
                cb,
                vk.VK_PIPELINE_BIND_POINT_COMPUTE,
                node.pipeline.layout,
                0,
                1,
                [node.descriptor_set],
                0,
                None,
            )
            if node.push_constants is not None:
                data = node.push_constants(self)
                vk.vkCmdPushConstants(
                    cb,
                    node.pipeline.layout,
                    vk.VK_SHADER_STAGE_COMPUTE_BIT,
                    0,
                    len(data),
                    vk.ffi.new("char[]", data),
                )
            vk.vkCmdDispatch(cb, *grid)
            self._barrier(
                cb,
                vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                vk.VK_ACCESS_SHADER_WRITE_BIT,
                vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
            )
            records.append(DispatchRecord(node.op, node.kernel, node.local_size, count, grid, True))
        self._barrier(
            cb,
            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
            vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
            vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            vk.VK_ACCESS_TRANSFER_READ_BIT,
        )
        regions = _copy_regions(reads.copies)
        vk.vkCmdCopyBuffer(cb, block.buffer, staging, len(reads.copies), regions)
        self._barrier(
            cb,
            vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
            vk.VK_PIPELINE_STAGE_HOST_BIT,
            vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            vk.VK_ACCESS_HOST_READ_BIT,
        )
        return records

    @staticmethod
    def _barrier(cb: CData, src_stage: int, dst_stage: int, src: int, dst: int) -> None:
        barrier = _BARRIERS.get((src, dst))
        if barrier is None:  # built once: the package's struct constructors are slow
            barrier = _BARRIERS[(src, dst)] = vk.VkMemoryBarrier(
                srcAccessMask=src, dstAccessMask=dst
            )
        vk.vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, barrier, 0, None, 0, None)

    def close(self) -> None:
        """Hand this graph's memory and descriptor sets back to the pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._device_lost:  # a submit may still be running over this graph's memory
            with contextlib.suppress(vk.VkError):
                vk.vkDeviceWaitIdle(self.ctx.device)
        self.pool.descriptors.release(self._descriptor_keys)
        self.arena.release()


# A slot whose live bytes leave at most this much slack is read back whole with its guard
# (one copy region instead of two).
_WHOLE_COPY_SLACK = 4096
_BARRIERS: dict[tuple[int, int], CData] = {}
_ONE_TIME = vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)


@dataclass
class _StagingPlan:
    """Offsets in the runtime's staging block for one submit (16-byte aligned regions)."""

    size: int = 0

    def take(self, nbytes: int) -> int:
        offset = self.size
        self.size += (nbytes + 15) // 16 * 16
        return offset


@dataclass
class _Writes:
    """Host data to stage (offset, bytes) and staging -> block copies (src, dst, size)."""

    host: list[tuple[int, np.ndarray]] = field(default_factory=list)
    copies: list[tuple[int, int, int]] = field(default_factory=list)
    zero: int = 0  # bytes of the block to zero first (the first submit of a graph)


@dataclass
class _Reads:
    """Block -> staging copies, where each tensor's bytes land, and each guard's copy."""

    wanted: list[tuple[str, VTensor]] = field(default_factory=list)
    copies: list[tuple[int, int, int]] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)
    guards: list[tuple[VTensor, int]] = field(default_factory=list)


def _copy_regions(regions: Sequence[tuple[int, int, int]]) -> CData:
    """A VkBufferCopy array of (src offset, dst offset, size), built raw (fast)."""
    array = vk.ffi.new("VkBufferCopy[]", len(regions))
    for i, (src, dst, size) in enumerate(regions):
        region = array[i]
        region.srcOffset, region.dstOffset, region.size = src, dst, size
    return array


def _fold(count: WG, limits: WG) -> WG:
    """Physical grid for a logical count: a 1-D count above the x limit wraps into y rows.

    Kernels recover the flat workgroup index as x + y * gl_NumWorkGroups.x and return past
    the logical count.

    Raises:
        ValueError: no grid within the limits holds the count.
    """
    if all(c <= lim for c, lim in zip(count, limits, strict=True)):
        return count
    x, y, z = count
    if y != 1 or z != 1:
        raise ValueError(f"{count} workgroups exceed the limits {limits}")
    rows = -(-x // limits[0])
    if rows > limits[1]:
        raise ValueError(f"{x} workgroups fit no grid of {limits[0]} x {limits[1]}")
    return (limits[0], rows, 1)
