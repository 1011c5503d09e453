"""The Vulkan compute graph: ordered nodes with resize functions, self-gating dispatch nodes.

The graph is the op-facing room (the builder API op modules call) and the step's driver; its
other rooms (docs/design.md §12): `vulkan_ref.nodes` (a dispatch node's kernels and their
evaluation at a resize), `vulkan_ref.build` (a slot's kernel built and bound at load),
`vulkan_ref.resize` (input checks, snapshots, grids), `vulkan_ref.staging` (uploads and
read-back) and `vulkan_ref.recording` (the command buffer, submit and fence).

Resize model (docs/design.md §4.2, as ExecuTorch's `ComputeGraph`):
- `virtual_resize` changes a tensor's live sizes in place and records it in `updated`.
- `propagate_resize` walks every node once, in graph (topological) order. A node whose
  arguments include an updated value runs its `resize_fn`, which resizes its outputs (so
  later nodes see final sizes: no fixpoint, nothing stale).
- A dispatch node then re-picks its slot from live sizes and evaluates the slot's kernel on
  the values its op offers: each dispatch's logical count (0: skipped, how routes switch),
  push constants and params bytes. Every slot's kernel is bound when the graph is loaded, the
  project's or one a manifest names, by its own reflected declarations (`vulkan_ref.binding`,
  docs/bring-your-own-kernels.md), so a kernel that does not compile or fit is refused at
  load (`KernelBuildError`), whatever sizes the steps take.
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
- Any error while resizing restores every size, SymInt and node state to those before the
  step (an exception that no runtime raises on purpose, from an op's resize function or
  kernel evaluation, is raised as the `OpError` that names the op, as is one an op's
  builder raises at load); SymInt and params UBOs are written only once the step's resize
  succeeded, and a SymInt the int32 UBO cannot hold is refused (`InputError`, key
  "int_range") after every op's own checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import vulkan as vk

import vulkan_ref.spirv
from graph_format import (
    DTYPES,
    SLOTS,
    FeatureUnavailable,
    Graph,
    GraphBuildError,
    KernelBuildError,
    OpError,
    OpNode,
    ParityError,
    StepResult,
    SymIntValue,
    TensorValue,
    dtype_slot,
)
from graph_format.kernels import (
    KernelAdapter,
    KernelEntry,
    KernelInterfaceError,
    KernelManifest,
    Value,
    scratch_sizes,
)
from vulkan_ref import resize
from vulkan_ref.binding import ResolvedKernel, kernel_failure, project_entry, resolve_kernel
from vulkan_ref.build import KernelBuild, bind_parts, build_kernel, make_adapter
from vulkan_ref.instance import VulkanContext
from vulkan_ref.memory import Buffer
from vulkan_ref.nodes import (
    MAX_WORKGROUPS_VALUE,
    NO_STATE,
    NO_VALUES,
    WG,
    NodeState,
    Sizes,
    SlotKernel,
    SymInt,
    check_static,
    evaluate,
    vocabulary,
)
from vulkan_ref.pipeline import PipelineCache
from vulkan_ref.pool import Arena, DescriptorKey, MemoryPool
from vulkan_ref.recording import CommandRecorder
from vulkan_ref.staging import Staging, StagingPlan
from vulkan_ref.tensor import VTensor


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
    """One dispatch position of an op: a slot picked from live sizes, its kernel bound by
    role and name (`vulkan_ref.binding`), its values and counts evaluated at each resize.

    The op module gives what the op knows; the graph binds each slot's kernel at load (the
    manifest's, else the project's) and evaluates it at each resize.

    Attributes:
        slots: every slot the node may pick -> the project's GLSL stem for it
            (`glsl/<stem>.comp`); every one is built at load.
        pick_slot: the slot for the live sizes (None: the only one).
        tensors: every tensor a kernel of the node may bind, by role: the slots' roles and
            the op's tensors (for `<tensor>.meta`), scratch buffers included.
        static: values fixed at load, of any of the slots (each slot takes its own names).
        values: the live values of a slot: with `static`, exactly the slot's vocabulary
            (graph_format/ops/<op>.toml), `workgroups` among them (0: the op skips the slot).
        uniforms: value name -> a UBO the op keeps that holds it as one 32-bit int (a
            SymInt's): a params block holding only that value binds it instead of a packed
            copy.
        kernels: set by the graph at load, by slot.
        state: set by the graph at each resize.
    """

    slots: Mapping[str, str] = field(default_factory=dict)
    pick_slot: Callable[[ComputeGraph], str] | None = None
    tensors: Mapping[str, VTensor] = field(default_factory=dict)
    static: Mapping[str, Value] = field(default_factory=dict)
    values: Callable[[ComputeGraph, str], Mapping[str, Value]] = lambda g, slot: {}
    uniforms: Mapping[str, Buffer] = field(default_factory=dict)
    kernels: dict[str, SlotKernel] = field(default_factory=dict)
    state: NodeState = NO_STATE

    def trigger_resize(self, graph: ComputeGraph) -> bool:
        """Resize outputs if needed, then re-pick the slot and evaluate its kernel."""
        if graph.updated.isdisjoint(self.args):
            return False
        if self.resize_fn is not None:
            self.resize_fn(graph)
        self.state = self._evaluate(graph)
        return True

    @property
    def slot(self) -> str:
        """The slot the last resize picked ("" before the first)."""
        return self.state.kernel.slot if self.state.kernel is not None else ""

    def _evaluate(self, graph: ComputeGraph) -> NodeState:
        if self.pick_slot is None:  # one slot
            kernel = next(iter(self.kernels.values()))
            slot = kernel.slot
        else:
            slot = self.pick_slot(graph)
            found = self.kernels.get(slot)
            if found is None:
                raise ValueError(f"{self.op}: picked slot {slot!r}, not one of {list(self.slots)}")
            kernel = found
        return evaluate(self.op, kernel, self.values(graph, slot), graph.pipelines.push_data)


# What adds one op of a graph to it (`vulkan_ref.ops` registers one per op type).
OpImpl = Callable[["ComputeGraph", OpNode], None]


class ComputeGraph:
    """A graph built on the Vulkan device. Implements `graph_format.LoadedGraph`.

    Op builders (vulkan_ref/ops) use `tensor_arg`, `output`, `scalar_arg`, `symint_arg`,
    `int_ubo`, `extract_int_or_symint_list`, `create_scratch`, `add_node`,
    `add_dispatch_node`, `add_input_check`, `virtual_resize` and `set_symint`; the harness
    uses `execute`. The runtime hands the graph its op table (`impls`:
    `vulkan_ref.ops.OP_IMPLS`), so this module does not import the op modules that import it.
    """

    def __init__(
        self,
        ctx: VulkanContext,
        graph: Graph,
        glsl_dir: str | None = None,
        max_workgroups_per_dim: int | None = None,
        *,
        pool: MemoryPool,
        manifest: KernelManifest | None = None,
        allow_adapters: bool = False,
        impls: Mapping[str, OpImpl],
        pipelines: PipelineCache | None = None,
    ) -> None:
        self.ctx = ctx
        self.pool = pool
        self.arena = Arena(pool)
        # Read once per graph: each read of the properties struct through the vulkan package
        # costs ~35 µs, and every dispatch node checks its workgroup size.
        self._device_limits = (ctx.max_invocations, ctx.max_workgroup_count)
        self.graph = graph
        self.glsl_dir = glsl_dir  # another folder laid out like glsl/; None: the repo's
        self.manifest = manifest  # kernels replacing slots; unlisted slots: the project's
        self.allow_adapters = allow_adapters
        # A limit below the device's, on every axis (None: the device's own).
        self.max_workgroups_per_dim = max_workgroups_per_dim
        # The runtime's (a graph built without one owns its own)
        self.pipelines = pipelines if pipelines is not None else PipelineCache(ctx)
        self._dispatch_nodes: list[DispatchNode] = []
        self._params_nodes: list[DispatchNode] = []  # nodes with params packed per resize
        self._entries: dict[tuple[str, str], KernelEntry] = {}  # by (slot, project stem)
        # (entry, scratch roles, adapter values) -> resolved kernel, once per graph
        self._resolved: dict[tuple[int, tuple[str, ...], tuple[str, ...]], ResolvedKernel] = {}
        self.tensors: dict[str, VTensor] = {}
        self.symints: dict[str, SymInt] = {}
        self.nodes: list[ExecuteNode] = []
        self._scratch: list[VTensor] = []
        # The manifest's scratch sizes by op node, and its shared roles by (node, role)
        self._scratch_sizes: dict[str, dict[str, int]] = {}
        self._shared: dict[tuple[str, str], VTensor] = {}
        self._input_checks: list[resize.InputCheck] = []
        self._descriptor_keys: list[DescriptorKey] = []
        self._closed = False
        self._op_types = {n.name: n.op for n in graph.ops}  # names an OpError's op
        self._recorder = CommandRecorder(ctx, pool, self.arena)
        if "float16" in graph.float_dtypes() and ctx.f16_unavailable:
            raise FeatureUnavailable("vulkan", "f16", ctx.f16_unavailable)
        try:
            for value in graph.values.values():
                if isinstance(value, TensorValue):
                    self.tensors[value.name] = self._create_tensor(value)
                elif isinstance(value, SymIntValue):
                    self.symints[value.name] = SymInt(self.arena, value.name)
            for node in graph.ops:
                try:
                    impls[node.op](self, node)
                except ParityError:
                    raise
                except Exception as err:  # the op's own code failed: name it
                    raise OpError("vulkan", node.name, node.op, "load", err) from err
            self.arena.place()
            self._allocate_descriptor_sets()
        except BaseException:
            self.close()
            raise
        # Every storage tensor, scratch included, with its slot, in placement order.
        storage = [*self.tensors.values(), *self._scratch]
        self._staging = Staging(graph, self.tensors, storage, self.arena)
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
        """A descriptor set per dispatch of every kernel a node may pick, from the runtime's
        cache (see pool.py; parts that bind the same ranges share one)."""
        parts = [
            part
            for node in self._dispatch_nodes
            for kernel in node.kernels.values()
            for part in kernel.parts
        ]
        requests = [
            (part.descriptors, self.pipelines.set_layout(part.descriptors), part.ranges)
            for part in parts
        ]
        acquired = self.pool.descriptors.acquire(requests)
        for part, (key, handle) in zip(parts, acquired, strict=True):
            part.descriptor_set = handle
            part.descriptor_sets = vk.ffi.new("VkDescriptorSet[1]", [handle])
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
        self._input_checks.append(resize.InputCheck(node.name, tensor.name, fn))

    def create_scratch(
        self,
        node: OpNode,
        label: str,
        dtype: str,
        max_sizes: Sequence[int],
        static: Mapping[str, Value] | None = None,
    ) -> VTensor:
        """A private tensor of `node` (attention scores, partials): not a graph value.

        Its live sizes are the op's business (`VTensor.virtual_resize`); it never appears in
        `cur_dims`.

        Args:
            static: the op's values fixed for the graph, given for a scratch role of the
                op's slots: a manifest that sizes the role (`scratch.<role>`) makes it a
                buffer of that many bytes instead.

        Raises:
            KernelBuildError: the manifest's size of it fails on these values.
        """
        if static is not None:
            nbytes = self._manifest_scratch(node.name, node.op, static).get(label)
            if nbytes is not None:
                return self.create_scratch_bytes(node.name, label, nbytes)
        tensor = VTensor(
            self.arena, f"{node.name}.{label}", dtype, DTYPES[dtype].itemsize, tuple(max_sizes)
        )
        self._scratch.append(tensor)
        return tensor

    def create_scratch_bytes(self, owner: str, label: str, nbytes: int) -> VTensor:
        """A private buffer of `nbytes` (an adapter's scratch): a tensor of bytes."""
        tensor = VTensor(self.arena, f"{owner}.{label}", "uint8", 1, (nbytes,))
        self._scratch.append(tensor)
        return tensor

    def _manifest_scratch(self, name: str, op: str, static: Mapping[str, Value]) -> dict[str, int]:
        """The bytes of each scratch role the manifest sizes for op node `name` (of type
        `op`), once a node."""
        sizes = self._scratch_sizes.get(name)
        if sizes is None:
            entry = self.manifest.scratch_entry("vulkan", op) if self.manifest else None
            sizes = {}
            if entry is not None:
                fixed = {**static, MAX_WORKGROUPS_VALUE: self.workgroup_limits[0]}
                try:
                    sizes = scratch_sizes(entry, fixed)
                except KernelInterfaceError as err:  # the manifest's doing: no compiler ran
                    raise kernel_failure(entry, str(err), name, values=True) from None
            self._scratch_sizes[name] = sizes
        return sizes

    def sizes_of(self, tensor: VTensor) -> Sizes:
        """Live sizes of a tensor."""
        return tensor.sizes

    def add_node(self, node: ExecuteNode) -> ExecuteNode:
        """Append a node (nodes run in the order they are added)."""
        self.nodes.append(node)
        return node

    def dtype_slot(self, node: OpNode, slot: str, dtype: str) -> str:
        """The slot of `node`'s kernel variant `slot` for tensors of `dtype`: `slot` for
        float32, `<slot>_f16` for float16 (graph_format's `dtype_slot`), which the op's schema
        must declare. Its project kernel is the file named after it (`glsl/rms_norm_f16.comp`).

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

    def add_dispatch_node(self, node: DispatchNode) -> DispatchNode:
        """Append a dispatch node after binding the kernel of every slot it may pick: the
        manifest's entry for the slot, else the project's kernel (`vulkan_ref.binding`).

        Raises:
            GraphBuildError: a kernel's workgroup size is above the device's, or the graph
                breaks a kernel's `requires` over values fixed at load.
            KernelBuildError: a kernel does not compile, reflect or validate, or does not fit
                its entry (naming the node's op).
        """
        check_static(node.op, tuple(node.slots), frozenset(node.static))
        for slot, stem in node.slots.items():
            try:
                node.kernels[slot] = self._bind(node, slot, stem)
            except KernelBuildError as err:
                raise err.for_op(node.op) from None
        self.nodes.append(node)
        self._dispatch_nodes.append(node)
        if any(part.params for k in node.kernels.values() for part in k.parts):
            self._params_nodes.append(node)
        return node

    def kernel_entry(self, slot: str, stem: str) -> KernelEntry:
        """The entry of `slot`'s kernel: the manifest's, else the project's `<stem>.comp`."""
        found = self._entries.get((slot, stem))
        if found is None:
            manifest = self.manifest
            found = manifest.entry("vulkan", slot) if manifest is not None else None
            if found is None:
                folder = self.glsl_dir or str(vulkan_ref.spirv.GLSL_DIR)
                found = project_entry(self.pipelines, slot, folder, stem)
            self._entries[(slot, stem)] = found
        return found

    def _bind(self, node: DispatchNode, slot: str, stem: str) -> SlotKernel:
        """Bind one slot's kernel for `node`: its build (`_build`), then the node's buffers."""
        entry = self.kernel_entry(slot, stem)
        names = vocabulary(slot)
        static: dict[str, Value] = {k: v for k, v in node.static.items() if k in names}
        static[MAX_WORKGROUPS_VALUE] = self.workgroup_limits[0]
        adapter = None
        tensors: Mapping[str, VTensor] = node.tensors
        scratch: tuple[str, ...] = ()
        provides: tuple[str, ...] = ()
        if entry.adapter is not None:
            adapter, provides, extra = self._adapter(node, entry, static)
            tensors = {**node.tensors, **extra}
            scratch = tuple(extra)
        if entry.shared_roles:  # the manifest's new roles: one buffer per op node
            shared = self._shared_roles(node, entry)
            tensors = {**tensors, **shared}
            scratch = (*scratch, *shared)
        build = self._build(node.op, entry, static, scratch, provides)
        return SlotKernel(
            slot,
            entry,
            build.local_size,
            static,
            bind_parts(build, node.op, tensors, node.uniforms, self.arena),
            build.live_requires,
            adapter,
            frozenset(provides) if provides else NO_VALUES,
            states={} if build.simple and adapter is None else None,
        )

    def _shared_roles(self, node: DispatchNode, entry: KernelEntry) -> dict[str, VTensor]:
        """The buffers of the manifest's new roles of `entry`: one per op node and role."""
        shared: dict[str, VTensor] = {}
        for role in entry.shared_roles:
            found = self._shared.get((node.op, role))
            if found is None:
                op_type = self._op_types[node.op]
                nbytes = self._manifest_scratch(node.op, op_type, node.static)[role]
                found = self.create_scratch_bytes(node.op, role, nbytes)
                self._shared[(node.op, role)] = found
            shared[role] = found
        return shared

    def _build(
        self,
        op: str,
        entry: KernelEntry,
        static: dict[str, Value],
        scratch: tuple[str, ...],
        provides: tuple[str, ...],
    ) -> KernelBuild:
        """What a slot's kernel is for these values fixed at load, whatever node binds it
        (`vulkan_ref.build.build_kernel`); a kernel's file is resolved, and checked for
        changes, once per graph."""
        resolve_key = (id(entry), scratch, provides)
        resolved = self._resolved.get(resolve_key)
        if resolved is None:
            resolved = resolve_kernel(self.pipelines, entry, scratch, provides)
            self._resolved[resolve_key] = resolved
        return build_kernel(self.pipelines, self._device_limits[0], op, entry, resolved, static)

    def _adapter(
        self, node: DispatchNode, entry: KernelEntry, static: Mapping[str, Value]
    ) -> tuple[KernelAdapter, tuple[str, ...], dict[str, VTensor]]:
        """The entry's adapter for this node, the values it adds, its scratch buffers by role
        (`vulkan_ref.build.make_adapter`)."""
        if not self.allow_adapters:  # VulkanRuntime refuses such a manifest before this
            raise RuntimeError(f"vulkan: adapter {entry.adapter} given without allow_adapters")
        return make_adapter(node.op, entry, static, node.tensors, self.create_scratch_bytes)

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
        """One pass over all nodes in order (docs/design.md §4.2).

        Raises:
            ResizeError, InputError: an op refuses the live sizes.
            OpError: a node's resize function or kernel evaluation raised an exception of
                another kind (a bug in its op's code), naming that op.
        """
        for node in self.nodes:
            try:
                node.trigger_resize(self)
            except ParityError:
                raise
            except Exception as err:  # the op's own code failed: name it
                op_type = self._op_types.get(node.op, "?")
                raise OpError("vulkan", node.op, op_type, "resize", err) from err

    def _resize(
        self, tensor_inputs: list[tuple[VTensor, np.ndarray]], symint_inputs: Mapping[str, int]
    ) -> list[list[WG | None]]:
        """Resize every node to the step's inputs and check what the resize chose; returns
        each dispatch's physical grid. Any refusal restores the graph to before the step.

        Raises:
            ParityError: an op, a grid or a SymInt refuses the step (with `live` set to the
                sizes and SymInts it saw).
        """
        dispatch_nodes = self._dispatch_nodes
        snap = resize.Snapshot.take(self.tensors, self.symints, dispatch_nodes, self.updated)
        try:
            for tensor, array in tensor_inputs:
                self.virtual_resize(tensor, array.shape)
            for name, value in symint_inputs.items():
                self.set_symint(name, value)
            self.propagate_resize()
            grids = resize.grids(dispatch_nodes, self.workgroup_limits)
            resize.check_symint_range(self.symints)
        except ParityError as err:
            err.live = {**self.cur_dims(), **{n: s.value for n, s in self.symints.items()}}
            self.updated = snap.restore(self.tensors, self.symints, dispatch_nodes)
            raise
        for symint in self.symints.values():
            symint.flush()
        resize.write_params(self._params_nodes)
        self.updated.clear()
        return grids

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
        tensor_inputs, symint_inputs = resize.check_inputs(
            inputs, self.graph.inputs, self.tensors, self.symints, self._input_checks
        )
        grids = self._resize(tensor_inputs, symint_inputs)

        staging_plan = StagingPlan()
        writes = self._staging.plan_writes(staging_plan, tensor_inputs)
        reads = self._staging.plan_reads(staging_plan, read, read_raw)
        staging = self.pool.staging(staging_plan.size)
        assert staging.view is not None
        for offset, data in writes.host:
            staging.view[offset : offset + len(data)] = data

        self.ctx.drain_messages()
        records = self._recorder.record(
            staging.buffer, writes, reads, fill or {}, self.tensors, self._dispatch_nodes, grids
        )
        self._recorder.submit()
        self._staging.submitted()

        view = staging.view
        result = StepResult(
            outputs={},
            cur_dims=self.cur_dims(),
            symints={n: s.value for n, s in self.symints.items()},
            dispatches=records,
            validation_messages=self.ctx.drain_messages(),
            guard_writes=self._staging.check_guards(view, reads.guards),
        )
        self._staging.read_back(view, reads, result)
        return result

    def close(self) -> None:
        """Hand this graph's memory and descriptor sets back to the pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._recorder.device_lost:  # a submit may still be running over this graph's memory
            with contextlib.suppress(vk.VkError):
                vk.vkDeviceWaitIdle(self.ctx.device)
        self.pool.descriptors.release(self._descriptor_keys)
        self.arena.release()
