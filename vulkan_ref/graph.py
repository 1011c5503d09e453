"""The Vulkan compute graph: ordered nodes with resize functions, self-gating dispatch nodes.

Resize model (reference §2, ExecuTorch's `ComputeGraph`):
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
- Any error while resizing restores every size and SymInt to the state before the step;
  SymInt UBOs are written only once the step's resize succeeded, and a SymInt the int32 UBO
  cannot hold is refused (`InputError`, key "int_range") after every op's own checks.
"""

from __future__ import annotations

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
from vulkan_ref.memory import STAGING_USAGE, UNIFORM_USAGE, Buffer
from vulkan_ref.pipeline import ComputePipeline, PipelineCache, ShaderKey
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

    def __init__(self, ctx: VulkanContext, name: str) -> None:
        self.name = name
        self.value = 0  # serialized SymInts start at 0
        self._written = 0
        self.ubo = Buffer.create(ctx, 16, UNIFORM_USAGE, True)
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
    ) -> None:
        from vulkan_ref.ops import OP_IMPLS  # the registry imports this module

        self.ctx = ctx
        self.graph = graph
        self.glsl_dir = glsl_dir  # another folder laid out like glsl/; None: the repo's
        # A limit below the device's, on every axis (None: the device's own).
        self.max_workgroups_per_dim = max_workgroups_per_dim
        self.pipelines = pipeline_cache(ctx)
        self.tensors: dict[str, VTensor] = {}
        self.symints: dict[str, SymInt] = {}
        self.nodes: list[ExecuteNode] = []
        self._scratch: list[VTensor] = []
        self._constant_ubos: list[Buffer] = []
        self._input_checks: list[_InputCheck] = []
        self._staging: Buffer | None = None
        self._closed = False
        for value in graph.values.values():
            if isinstance(value, TensorValue):
                self.tensors[value.name] = self._create_tensor(value)
            elif isinstance(value, SymIntValue):
                self.symints[value.name] = SymInt(ctx, value.name)
        for node in graph.ops:
            OP_IMPLS[node.op](self, node)
        self._allocate_descriptor_sets()
        # Everything counts as updated before the first execute, so every node sizes itself.
        self.updated: set[str] = set(self.tensors) | set(self.symints)
        cb_info = vk.VkCommandBufferAllocateInfo(
            commandPool=ctx.command_pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            commandBufferCount=1,
        )
        self._cmd = vk.vkAllocateCommandBuffers(ctx.device, cb_info)[0]
        self._fence = vk.vkCreateFence(ctx.device, vk.VkFenceCreateInfo(), None)

    # ------------------------------------------------------------------ construction

    def _create_tensor(self, value: TensorValue) -> VTensor:
        dtype = DTYPES[value.dtype]
        tensor = VTensor(
            self.ctx,
            value.name,
            value.dtype,
            dtype.itemsize,
            value.dims,
            is_constant=value.constant is not None,
            is_state=value.state,
        )
        data = self.graph.initial_data(value)
        if data is not None:
            self._upload_now(tensor, np.ascontiguousarray(data, dtype).tobytes())
        return tensor

    def _upload_now(self, tensor: VTensor, raw: bytes) -> None:
        """Copy bytes into a device-local tensor through a temporary staging buffer."""
        staging = Buffer.create(self.ctx, len(raw), STAGING_USAGE, True)
        try:
            staging.write(0, raw)
            self._one_shot(
                lambda cb: vk.vkCmdCopyBuffer(
                    cb,
                    staging.handle,
                    tensor.buffer.handle,
                    1,
                    [vk.VkBufferCopy(srcOffset=0, dstOffset=0, size=staging.size)],
                )
            )
        finally:
            staging.destroy()

    def _one_shot(self, record: Callable[[CData], None]) -> None:
        info = vk.VkCommandBufferAllocateInfo(
            commandPool=self.ctx.command_pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            commandBufferCount=1,
        )
        cb = vk.vkAllocateCommandBuffers(self.ctx.device, info)[0]
        vk.vkBeginCommandBuffer(
            cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        )
        record(cb)
        vk.vkEndCommandBuffer(cb)
        fence = vk.vkCreateFence(self.ctx.device, vk.VkFenceCreateInfo(), None)
        try:
            vk.vkQueueSubmit(
                self.ctx.queue,
                1,
                [vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[cb])],
                fence,
            )
            vk.vkWaitForFences(self.ctx.device, 1, [fence], vk.VK_TRUE, FENCE_TIMEOUT_NS)
        finally:
            vk.vkDestroyFence(self.ctx.device, fence, None)
            vk.vkFreeCommandBuffers(self.ctx.device, self.ctx.command_pool, 1, [cb])

    def _allocate_descriptor_sets(self) -> None:
        dispatches = [n for n in self.nodes if isinstance(n, DispatchNode)]
        counts = {"storage": 0, "uniform": 0}
        for node in dispatches:
            for kind in descriptor_kinds(node.bindings):
                counts[kind] += 1
        sizes = [
            vk.VkDescriptorPoolSize(type=t, descriptorCount=max(1, counts[k]))
            for k, t in (
                ("storage", vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER),
                ("uniform", vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER),
            )
        ]
        self._pool = vk.vkCreateDescriptorPool(
            self.ctx.device,
            vk.VkDescriptorPoolCreateInfo(
                maxSets=max(1, len(dispatches)), poolSizeCount=len(sizes), pPoolSizes=sizes
            ),
            None,
        )
        for node in dispatches:
            layout = self.pipelines.set_layout(descriptor_kinds(node.bindings))
            node.descriptor_set = vk.vkAllocateDescriptorSets(
                self.ctx.device,
                vk.VkDescriptorSetAllocateInfo(
                    descriptorPool=self._pool, descriptorSetCount=1, pSetLayouts=[layout]
                ),
            )[0]
            buffers = [b.buffer if isinstance(b, VTensor) else b for b in node.bindings]
            infos = [
                vk.VkDescriptorBufferInfo(buffer=buf.handle, offset=0, range=buf.size)
                for buf in buffers
            ]
            writes = [
                vk.VkWriteDescriptorSet(
                    dstSet=node.descriptor_set,
                    dstBinding=i,
                    descriptorCount=1,
                    descriptorType=(
                        vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                        if kind == "storage"
                        else vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER
                    ),
                    pBufferInfo=[info],
                )
                for i, (kind, info) in enumerate(
                    zip(descriptor_kinds(node.bindings), infos, strict=True)
                )
            ]
            vk.vkUpdateDescriptorSets(self.ctx.device, len(writes), writes, 0, None)

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
        ubo = Buffer.create(self.ctx, 16, UNIFORM_USAGE, True)
        ubo.write(0, int(value).to_bytes(4, "little", signed=True).ljust(16, b"\0"))
        self._constant_ubos.append(ubo)
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
            self.ctx, f"{node.name}.{label}", dtype, DTYPES[dtype].itemsize, tuple(max_sizes)
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
        if math.prod(node.local_size) > self.ctx.max_invocations:
            raise GraphBuildError(
                node.op,
                f"local size {node.local_size} exceeds the device's "
                f"{self.ctx.max_invocations} invocations per workgroup",
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
        """One pass over all nodes in order (reference §2.2)."""
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
        device = self.ctx.max_workgroup_count
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

        # Staging layout: uploads first, then every read-back region.
        uploads = [(t, a.tobytes()) for t, a in tensor_inputs]
        wanted = [("output", n) for n in self.graph.outputs]
        wanted += [("tensor", n) for n in read] + [("raw", n) for n in read_raw]
        offset = 0
        upload_regions = []
        for tensor, raw in uploads:
            upload_regions.append((tensor, raw, offset))
            offset += (len(raw) + 15) // 16 * 16
        read_regions = []
        for kind, name in wanted:
            tensor = self.tensors[name]
            nbytes = tensor.buffer.size if kind == "raw" else (tensor.nbytes + 3) // 4 * 4
            read_regions.append((kind, tensor, nbytes, offset))
            offset += (nbytes + 15) // 16 * 16
        staging = self._staging_buffer(offset)
        for _tensor, raw, off in upload_regions:
            staging.write(off, raw)

        self.ctx.drain_messages()
        records = self._record(staging, upload_regions, read_regions, fill or {}, grids)
        vk.vkQueueSubmit(
            self.ctx.queue,
            1,
            [vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[self._cmd])],
            self._fence,
        )
        try:
            vk.vkWaitForFences(self.ctx.device, 1, [self._fence], vk.VK_TRUE, FENCE_TIMEOUT_NS)
        except vk.VkError as err:
            raise DeviceError("vulkan", [f"fence wait failed: {type(err).__name__}"]) from None
        finally:
            vk.vkResetFences(self.ctx.device, 1, [self._fence])

        result = StepResult(
            outputs={},
            cur_dims=self.cur_dims(),
            symints={n: s.value for n, s in self.symints.items()},
            dispatches=records,
            validation_messages=self.ctx.drain_messages(),
        )
        for kind, tensor, nbytes, off in read_regions:
            raw = staging.read(off, nbytes)
            if kind == "raw":
                result.raw[tensor.name] = np.frombuffer(raw, np.uint8).copy()
                continue
            array = np.frombuffer(raw[: tensor.nbytes], DTYPES[tensor.dtype]).reshape(tensor.sizes)
            (result.outputs if kind == "output" else result.tensors)[tensor.name] = array.copy()
        return result

    def _staging_buffer(self, nbytes: int) -> Buffer:
        if self._staging is None or self._staging.size < nbytes:
            if self._staging is not None:
                self._staging.destroy()
            self._staging = Buffer.create(self.ctx, max(nbytes, 256), STAGING_USAGE, True)
        return self._staging

    def _record(
        self,
        staging: Buffer,
        upload_regions: list[tuple[VTensor, bytes, int]],
        read_regions: list[tuple[str, VTensor, int, int]],
        fill: Mapping[str, tuple[int, int]],
        grids: Sequence[WG | None],
    ) -> list[DispatchRecord]:
        cb = self._cmd
        vk.vkBeginCommandBuffer(
            cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        )
        for name, (offset, word) in fill.items():
            tensor = self.tensors[name]
            if offset < tensor.buffer.size:
                vk.vkCmdFillBuffer(
                    cb, tensor.buffer.handle, offset, tensor.buffer.size - offset, word
                )
        for tensor, raw, off in upload_regions:
            if raw:
                vk.vkCmdCopyBuffer(
                    cb,
                    staging.handle,
                    tensor.buffer.handle,
                    1,
                    [vk.VkBufferCopy(srcOffset=off, dstOffset=0, size=len(raw))],
                )
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
        for _kind, tensor, nbytes, off in read_regions:
            vk.vkCmdCopyBuffer(
                cb,
                tensor.buffer.handle,
                staging.handle,
                1,
                [vk.VkBufferCopy(srcOffset=0, dstOffset=off, size=nbytes)],
            )
        self._barrier(
            cb,
            vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
            vk.VK_PIPELINE_STAGE_HOST_BIT,
            vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            vk.VK_ACCESS_HOST_READ_BIT,
        )
        vk.vkEndCommandBuffer(cb)
        return records

    @staticmethod
    def _barrier(cb: CData, src_stage: int, dst_stage: int, src: int, dst: int) -> None:
        barrier = vk.VkMemoryBarrier(srcAccessMask=src, dstAccessMask=dst)
        vk.vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, [barrier], 0, None, 0, None)

    def close(self) -> None:
        """Free this graph's device objects (idempotent)."""
        if self._closed:
            return
        self._closed = True
        device = self.ctx.device
        vk.vkDeviceWaitIdle(device)
        vk.vkDestroyFence(device, self._fence, None)
        vk.vkFreeCommandBuffers(device, self.ctx.command_pool, 1, [self._cmd])
        vk.vkDestroyDescriptorPool(device, self._pool, None)
        for tensor in [*self.tensors.values(), *self._scratch]:
            tensor.destroy()
        for symint in self.symints.values():
            symint.ubo.destroy()
        for ubo in self._constant_ubos:
            ubo.destroy()
        if self._staging is not None:
            self._staging.destroy()


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
