"""The Vulkan compute graph: ordered nodes with resize functions, self-gating dispatch nodes.

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
import functools
import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import vulkan as vk

import vulkan_ref.spirv
from graph_format import (
    DTYPES,
    SLOTS,
    DeviceError,
    DispatchRecord,
    FeatureUnavailable,
    Graph,
    GraphBuildError,
    InputError,
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
    BUILTIN_NAMES,
    PARAMS_TARGET,
    WORKGROUPS_VALUE,
    Expression,
    ExpressionError,
    KernelAdapter,
    KernelEntry,
    KernelInterfaceError,
    KernelManifest,
    KernelRequirementError,
    Value,
    adapter_provides,
    load_adapter,
    scratch_sizes,
)
from vulkan_ref.binding import (
    BlockLayout,
    PackError,
    ResolvedBinding,
    ResolvedKernel,
    kernel_failure,
    project_entry,
    resolve_kernel,
    spec_value,
)
from vulkan_ref.cdata import CData
from vulkan_ref.instance import FENCE_TIMEOUT_NS, VulkanContext
from vulkan_ref.memory import Buffer
from vulkan_ref.pipeline import (
    ComputePipeline,
    DescriptorLayout,
    PipelineCache,
    ShaderKey,
    SpecValue,
)
from vulkan_ref.pool import GUARD_WORD, Arena, BoundRange, DescriptorKey, MemoryPool, StorageSlot
from vulkan_ref.tensor import VTensor

Sizes = tuple[int, ...]
WG = tuple[int, int, int]
Values = Mapping[str, Value]
# The per-dimension workgroup limit the graph honours: a value of every slot.
MAX_WORKGROUPS_VALUE = BUILTIN_NAMES[0]

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
class ParamsUBO:
    """A params uniform of one dispatch, packed from values at each resize and written when
    the step's resize succeeded (`written`: what it holds)."""

    buffer: Buffer
    layout: BlockLayout
    written: bytes = b""


@dataclass(slots=True)
class BoundPart:
    """One dispatch of a slot's kernel in one op node (a split slot has several): its
    pipeline, the ranges its descriptors bind and what fills its push constants and params.

    Attributes:
        push_data: the push constants packed once at load, when they read only values fixed
            at load; else packed at each resize.
    """

    index: int
    pipeline: ComputePipeline
    descriptors: DescriptorLayout
    ranges: tuple[BoundRange, ...]
    count: Expression | tuple[Expression, Expression, Expression]
    push: BlockLayout | None = None
    push_data: bytes | None = None
    params: tuple[ParamsUBO, ...] = ()
    descriptor_set: CData = None
    # The set as the one-element array vkCmdBindDescriptorSets takes, made once.
    descriptor_sets: CData = None


@dataclass(frozen=True)
class PartPlan:
    """One dispatch of a kernel built for some values fixed at load, before any node's
    buffers: its pipeline, what each descriptor binds, the bytes packed once."""

    index: int
    pipeline: ComputePipeline
    descriptors: DescriptorLayout
    bindings: tuple[ResolvedBinding, ...]
    tensors: tuple[str | None, ...]  # per binding: the tensor it binds (`tensor`), if any
    count: Expression | tuple[Expression, Expression, Expression]
    push: BlockLayout | None
    push_data: bytes | None
    params_data: Mapping[int, bytes]  # binding -> a params block fixed at load


@dataclass(frozen=True)
class KernelBuild:
    """A kernel built for some values fixed at load (`ComputeGraph._build`)."""

    local_size: WG
    parts: tuple[PartPlan, ...]
    live_requires: tuple[Expression, ...]
    simple: bool  # one dispatch of the op's count, nothing else packed per resize


@dataclass(slots=True)
class SlotKernel:
    """The kernel bound to one slot of one op node, resolved and built at load.

    Attributes:
        entry: the manifest's entry for the slot, or the project kernel's implicit one.
        static: the slot's values fixed at load (the op's, plus `max_workgroups_per_dim`).
        live_requires: the entry's `requires` that read values of the live sizes, checked
            at each resize (those over values fixed at load were checked at load).
        adapter: the entry's adapter object, if any.
        provides: the values its adapter adds (its class's `provides`).
        checked: whether the op's values were checked against the slot's vocabulary.
        states: for a kernel whose only work at a resize is the op's own count (one dispatch
            of `workgroups`, push constants and params fixed at load, no adapter, no live
            `requires`: every project kernel), the state of each count seen, made once;
            None for any other kernel.
    """

    slot: str
    entry: KernelEntry
    local_size: WG
    static: dict[str, Value]
    parts: tuple[BoundPart, ...]
    live_requires: tuple[Expression, ...] = ()
    adapter: KernelAdapter | None = None
    provides: frozenset[str] = frozenset()
    checked: bool = False
    states: dict[int, NodeState] | None = None

    def state_for(self, workgroups: Value) -> NodeState:
        """The state of a simple kernel (`states`) for the op's count."""
        assert self.states is not None
        state = self.states.get(workgroups)  # type: ignore[arg-type]  # a miss is checked
        if state is None:
            if isinstance(workgroups, bool) or not isinstance(workgroups, int) or workgroups < 0:
                raise ValueError(f"{self.slot}: the op's workgroups is {workgroups!r}")
            if len(self.states) > 1024:  # counts seen by one node: bounded by its sizes
                self.states.clear()
            (part,) = self.parts
            if workgroups == 0:
                state = NodeState(self, (_SKIPPED,), (None,))
            else:
                # Made once per count: the state is kept in `states`.
                data = part.push_data
                push = vk.ffi.new("char[]", data) if data is not None else None
                state = NodeState(self, ((workgroups, 1, 1),), (push,))
            self.states[workgroups] = state
        return state


class NodeState(NamedTuple):
    """What a dispatch node's last resize chose: the slot's kernel, and per dispatch of it
    the logical count ((0, 0, 0): skipped) and push constants (None: none, or skipped);
    the params bytes to write. (A named tuple: one is made per node and resize.)"""

    kernel: SlotKernel | None = None
    counts: tuple[WG, ...] = ()
    push: tuple[CData | None, ...] = ()
    params: tuple[tuple[ParamsUBO, bytes], ...] = ()


_SKIPPED: WG = (0, 0, 0)
_NO_STATE = NodeState()  # before the first resize (immutable: shared)


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
    state: NodeState = _NO_STATE

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
        live = self.values(graph, slot)
        if not kernel.checked:
            _check_vocabulary(self.op, kernel, live)
        states = kernel.states
        if states is not None:  # only the op's count changes
            count = live[WORKGROUPS_VALUE]
            state = states.get(count)  # type: ignore[arg-type]  # a miss is checked
            return state if state is not None else kernel.state_for(count)
        if live[WORKGROUPS_VALUE] == 0:  # the op skips the slot: every dispatch of its kernel
            skipped = len(kernel.parts)
            return NodeState(kernel, (_SKIPPED,) * skipped, (None,) * skipped)
        values = {**kernel.static, **live}
        entry = kernel.entry
        if kernel.adapter is not None:
            values.update(_adapter_values(self.op, kernel, values))
        try:
            for condition in kernel.live_requires:
                if not condition.evaluate(values):
                    shown = ", ".join(f"{n} = {values[n]}" for n in sorted(condition.names))
                    raise InputError(
                        self.op,
                        "kernel_requires",
                        f"vulkan: {self.op}: the kernel of slot {slot} ({entry.source}) "
                        f"requires {condition.text} ({shown})",
                    )
            counts: list[WG] = []
            pushes: list[CData | None] = []
            params = []
            for part in kernel.parts:
                count = _count(part.count, values)
                counts.append(count)
                if count == _SKIPPED:
                    pushes.append(None)
                    continue
                push = part.push
                pushes.append(
                    None
                    if push is None
                    else graph.pipelines.push_data(part.push_data or push.pack(values))
                )
                params += [(ubo, ubo.layout.pack(values)) for ubo in part.params]
        except (ExpressionError, PackError) as err:
            raise kernel_failure(entry, entry.failure_text(err), self.op, values=True) from None
        return NodeState(kernel, tuple(counts), tuple(pushes), tuple(params))


# Cached for the process (two pure functions of the shipped slot table `SLOTS`, constant
# after import): no runtime's state.
@functools.cache
def _vocabulary(slot: str) -> frozenset[str]:
    """The names of a slot's values."""
    return frozenset(SLOTS[slot].values)


@functools.cache
def _check_static(op: str, slots: tuple[str, ...], static: frozenset[str]) -> None:
    """A node lists slots, and each value it fixes at load is one of theirs (the op
    module's bug otherwise; checked once per kind of node)."""
    if not slots:
        raise ValueError(f"{op}: a dispatch node must list its slots")
    unknown = sorted(static - set().union(*(_vocabulary(slot) for slot in slots)))
    if unknown:
        raise ValueError(f"{op}: static values {unknown} are in none of its slots")


_NO_VALUES: frozenset[str] = frozenset()


def _count(count: Expression | tuple[Expression, Expression, Expression], values: Values) -> WG:
    """A dispatch's logical workgroup count: a 1-D count as (n, 1, 1), zero as skipped."""
    if isinstance(count, tuple):
        grid = tuple(c.evaluate_int(values) for c in count)
        for c, n in zip(count, grid, strict=True):
            if n < 0:
                raise ExpressionError(c.text, f"gave a negative workgroup count {n}")
        return _SKIPPED if 0 in grid else (grid[0], grid[1], grid[2])
    n = count.evaluate_int(values)
    if n < 0:
        raise ExpressionError(count.text, f"gave a negative workgroup count {n}")
    return (n, 1, 1) if n else _SKIPPED


def _check_vocabulary(op: str, kernel: SlotKernel, live: Mapping[str, Value]) -> None:
    """The op's values for a slot are exactly the slot's vocabulary (checked once per slot
    and node: an op module that offers other names is this project's bug)."""
    declared = set(SLOTS[kernel.slot].values)
    static = set(kernel.static) - {MAX_WORKGROUPS_VALUE}
    offered = static | set(live)
    both = static & set(live)
    if offered != declared or both:
        raise RuntimeError(
            f"vulkan: {op}: slot {kernel.slot}: the op offers {sorted(offered)}, its schema "
            f"declares {sorted(declared)} (missing: {sorted(declared - offered)}, extra: "
            f"{sorted(offered - declared)}, both fixed and live: {sorted(both)})"
        )
    kernel.checked = True


def _adapter_values(op: str, kernel: SlotKernel, values: Mapping[str, Value]) -> dict[str, Value]:
    """The values `kernel`'s adapter derives (none of the op's names)."""
    assert kernel.adapter is not None
    entry = kernel.entry
    derived = _call_adapter(op, entry, "values", kernel.adapter.values, MappingProxyType(values))
    if not isinstance(derived, Mapping):
        raise _adapter_failure(op, entry, f"values() returned {derived!r}, not a mapping")
    if derived.keys() != kernel.provides:
        raise _adapter_failure(
            op,
            entry,
            f"values() returned {sorted(derived)}; its provides declares {sorted(kernel.provides)}",
        )
    for name, value in derived.items():
        numbers = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
            raise _adapter_failure(op, entry, f"values() gave {name} = {value!r}, not a number")
    return dict(derived)


def _adapter_failure(op: str | None, entry: KernelEntry, message: str) -> KernelBuildError:
    """A build error of `entry`'s kernel caused by its adapter (the file named is the
    adapter's)."""
    assert entry.adapter is not None
    text = f"{entry.slot}: adapter {entry.adapter}: {message}"
    return KernelBuildError("vulkan", entry.slot, str(entry.adapter.file), text, op=op)


def _call_adapter(
    op: str | None, entry: KernelEntry, what: str, fn: Callable[..., Any], *args: Any
) -> Any:
    """Call the user's adapter code; whatever it raises is a build error naming it."""
    try:
        return fn(*args)
    except Exception as err:  # the user's code: anything it raises is its finding
        # The user's frames: the first is this call.
        frames = err.__traceback__.tb_next if err.__traceback__ is not None else None
        text = "".join(traceback.format_exception(type(err), err, frames)).rstrip()
        message = f"{what} raised {type(err).__name__}: {err}\n{text}"
        raise _adapter_failure(op, entry, message) from None


def _evaluate_static(entry: KernelEntry, expr: Expression, static: Values, what: str) -> Value:
    """An expression over the values fixed at load (a build error if it fails)."""
    try:
        value = expr.evaluate(static)
    except ExpressionError as err:
        raise kernel_failure(entry, f"{what}: {err}") from None
    assert not isinstance(value, bool)  # not a condition
    return value


def _holds(entry: KernelEntry, condition: Expression, values: Values, op: str) -> bool:
    """Whether a `requires` condition holds (a build error if it cannot be evaluated)."""
    try:
        return bool(condition.evaluate(values))
    except ExpressionError as err:
        raise kernel_failure(entry, f"requires {condition.text!r}: {err}", op) from None


def _pack_static(entry: KernelEntry, layout: BlockLayout, static: Values) -> bytes:
    """A block that reads only values fixed at load, packed once."""
    try:
        return layout.pack(static)
    except PackError as err:
        raise kernel_failure(entry, str(err)) from None


@dataclass
class _InputCheck:
    op: str
    tensor: str
    fn: Callable[[np.ndarray], None]


@dataclass
class _Snapshot:
    sizes: dict[str, Sizes]
    symints: dict[str, int]
    nodes: list[NodeState] = field(default_factory=list)
    updated: set[str] = field(default_factory=set)


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
        self._input_checks: list[_InputCheck] = []
        self._descriptor_keys: list[DescriptorKey] = []
        self._closed = False
        self._op_types = {n.name: n.op for n in graph.ops}  # names an OpError's op
        self._device_lost = False
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
        self._input_checks.append(_InputCheck(node.name, tensor.name, fn))

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
        _check_static(node.op, tuple(node.slots), frozenset(node.static))
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
        vocabulary = _vocabulary(slot)
        static: dict[str, Value] = {k: v for k, v in node.static.items() if k in vocabulary}
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
            shared: dict[str, VTensor] = {}
            for role in entry.shared_roles:
                found = self._shared.get((node.op, role))
                if found is None:
                    op_type = self._op_types[node.op]
                    nbytes = self._manifest_scratch(node.op, op_type, node.static)[role]
                    found = self.create_scratch_bytes(node.op, role, nbytes)
                    self._shared[(node.op, role)] = found
                shared[role] = found
            tensors = {**tensors, **shared}
            scratch = (*scratch, *shared)
        build = self._build(node.op, entry, static, scratch, provides)

        parts = []
        for plan in build.parts:
            ranges: list[BoundRange] = []
            params: list[ParamsUBO] = []
            for b, tensor in zip(plan.bindings, plan.tensors, strict=True):
                if tensor is not None:
                    found = tensors.get(tensor)
                    if found is None:  # the op module's bug: it hands every role of its slots
                        raise ValueError(f"{node.op}: no tensor {tensor!r} ({sorted(tensors)})")
                    ranges.append(found.buffer if b.kind == "storage" else found.meta)
                elif b.single_value is not None and b.single_value in node.uniforms:
                    ranges.append(node.uniforms[b.single_value])
                else:
                    assert b.params is not None
                    ubo = ParamsUBO(self.arena.uniform(b.params.size), b.params)
                    ranges.append(ubo.buffer)
                    packed = plan.params_data.get(b.binding)
                    if packed is not None:  # fixed at load: packed once
                        ubo.written = packed
                        ubo.buffer.write(0, packed)
                    else:
                        params.append(ubo)
            parts.append(
                BoundPart(
                    plan.index,
                    plan.pipeline,
                    plan.descriptors,
                    tuple(ranges),
                    plan.count,
                    plan.push,
                    plan.push_data,
                    tuple(params),
                )
            )
        return SlotKernel(
            slot,
            entry,
            build.local_size,
            static,
            tuple(parts),
            build.live_requires,
            adapter,
            frozenset(provides) if provides else _NO_VALUES,
            states={} if build.simple and adapter is None else None,
        )

    def _build(
        self,
        op: str,
        entry: KernelEntry,
        static: dict[str, Value],
        scratch: tuple[str, ...],
        provides: tuple[str, ...],
    ) -> KernelBuild:
        """What a slot's kernel is for these values fixed at load, whatever node binds it:
        resolved declarations, `requires` over fixed values checked, specialization
        constants and local size, a pipeline and the fixed bytes per dispatch. Made once per
        entry, content and values (cached with the pipelines); a kernel's file is checked
        for changes once per graph."""
        resolve_key = (id(entry), scratch, provides)
        resolved = self._resolved.get(resolve_key)
        if resolved is None:
            resolved = resolve_kernel(self.pipelines, entry, scratch, provides)
            self._resolved[resolve_key] = resolved
        for condition in entry.requires:  # a refusal is this graph's: never cached
            if condition.names <= static.keys() and not _holds(entry, condition, static, op):
                raise KernelRequirementError(op, entry.slot, condition.text, entry.source)
        key = ("build", id(resolved), tuple(sorted(static.items())))
        cached = self.pipelines.kernels.get(key)
        if isinstance(cached, tuple) and cached[0] is resolved:
            build: KernelBuild = cached[1]
            return build

        spec: list[SpecValue] = []
        for spec_id, (fmt, expr) in sorted(resolved.spec.items()):
            live = sorted(expr.names - static.keys())
            if live:
                raise kernel_failure(
                    entry,
                    f"specialization constant {spec_id} = {expr.text!r} reads {', '.join(live)}, "
                    "which change with the live sizes; a specialization constant is fixed when "
                    f"the pipeline is built, at load (values fixed at load: "
                    f"{', '.join(sorted(static))})",
                )
            value = _evaluate_static(entry, expr, static, f"specialization constant {spec_id}")
            spec.append((spec_id, fmt, spec_value(entry, spec_id, fmt, value)))
        chosen = {spec_id: value for spec_id, _, value in spec}
        ids, defaults = resolved.local_size_ids, resolved.local_size_defaults
        local = tuple(
            int(chosen[i]) if i is not None and i in chosen else default
            for i, default in zip(ids, defaults, strict=True)
        )
        local_size: WG = (local[0], local[1], local[2])
        max_invocations = self._device_limits[0]
        if min(local_size) < 1 or math.prod(local_size) > max_invocations:
            raise GraphBuildError(
                op,
                f"vulkan: the kernel of slot {entry.slot} ({entry.source}) has local size "
                f"{local_size}; the device allows 1 to {max_invocations} invocations per "
                "workgroup",
            )

        plans = []
        for index, dispatch in enumerate(resolved.dispatches):
            params_data = {
                b.binding: _pack_static(entry, b.params, static)
                for b in dispatch.bindings
                if b.params is not None and b.params.names <= static.keys()
            }
            push = dispatch.push
            push_data = None
            if push is not None and push.names <= static.keys():
                push_data = _pack_static(entry, push, static)
            descriptors = tuple((b.binding, b.kind) for b in dispatch.bindings)
            shader = ShaderKey(
                resolved.kernel.sha256,
                entry.entry,
                descriptors,
                push.size if push is not None else 0,
                tuple(spec),
            )
            pipeline = self.pipelines.get(shader, resolved.kernel.code)
            if pipeline.messages:  # the validation layer refused the shader or its pipeline
                raise kernel_failure(entry, "\n".join(pipeline.messages))
            plans.append(
                PartPlan(
                    index,
                    pipeline,
                    descriptors,
                    dispatch.bindings,
                    tuple(b.tensor for b in dispatch.bindings),
                    dispatch.count,
                    push,
                    push_data,
                    params_data,
                )
            )
        live_requires = tuple(c for c in entry.requires if not c.names <= static.keys())
        (only, *more) = plans
        simple = (  # the op's count is all that changes at a resize
            not more
            and isinstance(only.count, Expression)
            and only.count.text == WORKGROUPS_VALUE
            and len(only.params_data) == sum(b.params is not None for b in only.bindings)
            and (only.push is None or only.push_data is not None)
            and not live_requires
        )
        build = KernelBuild(local_size, tuple(plans), live_requires, simple)
        self.pipelines.kernels[key] = (resolved, build)  # held: its id stays its own
        return build

    def _adapter(
        self, node: DispatchNode, entry: KernelEntry, static: Mapping[str, Value]
    ) -> tuple[KernelAdapter, tuple[str, ...], dict[str, VTensor]]:
        """The entry's adapter for this node, the values it adds, its scratch buffers by role.

        Raises:
            KernelManifestError: the adapter's module does not import, lacks the class, or
                its `provides` names a value the slot offers.
            KernelBuildError: the adapter's own code fails, or asks for bad scratch.
        """
        assert entry.adapter is not None
        if not self.allow_adapters:  # VulkanRuntime refuses such a manifest before this
            raise RuntimeError(f"vulkan: adapter {entry.adapter} given without allow_adapters")
        cls = load_adapter(entry.adapter, entry.interface)
        adapter = _call_adapter(node.op, entry, "__init__", cls, MappingProxyType(dict(static)))
        sizes = _call_adapter(node.op, entry, "scratch", adapter.scratch)
        if not isinstance(sizes, Mapping):
            raise _adapter_failure(node.op, entry, f"scratch() returned {sizes!r}, not a mapping")
        taken = {*node.tensors, *SLOTS[entry.slot].tensors, *entry.shared_roles, PARAMS_TARGET}
        scratch: dict[str, VTensor] = {}
        for role, nbytes in sizes.items():
            if not isinstance(role, str) or not role.isidentifier() or role in taken:
                raise _adapter_failure(
                    node.op,
                    entry,
                    f"scratch() names {role!r}; a scratch role is a new name (taken: "
                    f"{', '.join(sorted(taken))})",
                )
            if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
                raise _adapter_failure(
                    node.op, entry, f"scratch() gives {role} {nbytes!r} bytes; expected an int >= 1"
                )
            scratch[role] = self.create_scratch_bytes(node.op, f"{entry.slot}.{role}", nbytes)
        return adapter, adapter_provides(cls), scratch

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

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(
            sizes={n: t.sizes for n, t in self.tensors.items()},
            symints={n: s.value for n, s in self.symints.items()},
            nodes=[n.state for n in self._dispatch_nodes],
            updated=set(self.updated),
        )

    def _restore(self, snap: _Snapshot) -> None:
        for name, sizes in snap.sizes.items():
            self.tensors[name].virtual_resize(sizes)
        for name, value in snap.symints.items():
            self.symints[name].set(value)
        for node, state in zip(self._dispatch_nodes, snap.nodes, strict=True):
            node.state = state
        # Back to what was pending before the step (everything, before the first execute).
        self.updated = set(snap.updated)

    def _write_params(self) -> None:
        """Write the params uniforms this step's resize packed (once it succeeded)."""
        for node in self._params_nodes:
            for ubo, data in node.state.params:
                if data != ubo.written:
                    ubo.buffer.write(0, data)
                    ubo.written = data

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

    def _grids(self) -> list[list[WG | None]]:
        """Per dispatch node, the physical grid of each dispatch of its kernel (None:
        skipped) for the live sizes.

        Raises:
            InputError: a count no grid within the limits can hold, or (a kernel that does
                not fold) one past the per-dimension limit (reason "grid_limit", the op as
                subject).
        """
        limits = self.workgroup_limits
        lx, ly, lz = limits
        grids: list[list[WG | None]] = []
        for node in self._dispatch_nodes:
            kernel = node.state.kernel
            assert kernel is not None  # every node resized before the first execute
            node_grids: list[WG | None] = []
            for count in node.state.counts:
                if count == _SKIPPED:
                    node_grids.append(None)
                    continue
                x, y, z = count
                if x <= lx and y <= ly and z <= lz:
                    node_grids.append(count)
                    continue
                if not kernel.entry.fold or (y, z) != (1, 1):
                    raise InputError(
                        node.op,
                        "grid_limit",
                        f"vulkan: {node.op}: {count} workgroups of slot {kernel.slot} exceed "
                        f"the limits {limits}, and its kernel ({kernel.entry.source}) does not "
                        "fold a 1-D count (fold = false)",
                    )
                try:
                    node_grids.append(_fold(count, limits))
                except ValueError as err:
                    raise InputError(node.op, "grid_limit", f"vulkan: {node.op}: {err}") from None
            grids.append(node_grids)
        return grids

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
        self._write_params()
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
    def _storage_by_offset(self) -> list[VTensor]:
        return sorted(self._storage, key=lambda t: t.buffer.offset)

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
        pieces: list[tuple[int, np.ndarray]] = []  # (block offset, bytes)
        poison = [t.buffer for t in self._storage] if self._needs_init else self._repoison
        if poison:
            pattern = np.frombuffer(self._guard_pattern, np.uint8)
            pieces += [(slot.guard_offset, pattern[: slot.guard]) for slot in poison]
        if self._needs_init:
            assert self.arena.block is not None
            writes.zero = self.arena.used
            for name, tensor in self.tensors.items():
                value = self.graph.values[name]
                assert isinstance(value, TensorValue)
                data = self.graph.initial_data(value)
                if data is not None:
                    array = np.ascontiguousarray(data, DTYPES[value.dtype])
                    pieces.append((tensor.buffer.offset, array.reshape(-1).view(np.uint8)))
        for tensor, array in tensor_inputs:
            pieces.append((tensor.buffer.offset, array.reshape(-1).view(np.uint8)))
        pieces = [(offset, raw) for offset, raw in pieces if raw.size]
        # The first submit writes onto zeros, so the bytes between nearby pieces may be
        # copied as zeros too: far fewer copy regions (the validation layer's checks of a
        # copy grow faster than its region count). Later, only touching pieces merge.
        gap = _MERGE_GAP if self._needs_init else 0
        runs, at = _coalesce([(offset, raw.size) for offset, raw in pieces], gap)
        for start, end in runs:
            where = plan.take(end - start)
            writes.copies.append((where, start, end - start))
            if gap:
                writes.host.append((where, np.zeros(end - start, np.uint8)))
        for (_, raw), (run, within) in zip(pieces, at, strict=True):
            writes.host.append((writes.copies[run][0] + within, raw))
        return writes

    def _plan_reads(
        self, plan: _StagingPlan, read: Sequence[str], read_raw: Sequence[str]
    ) -> _Reads:
        """Copies of every slot's guard, and of the live bytes or the whole allocation
        where asked for, with nearby ranges merged into one copy region."""
        reads = _Reads()
        live: dict[str, int] = {}
        wanted = [("output", n) for n in self.graph.outputs]
        wanted += [("tensor", n) for n in read] + [("raw", n) for n in read_raw]
        for kind, name in wanted:
            tensor = self.tensors[name]
            reads.wanted.append((kind, tensor))
            need = tensor.buffer.size if kind == "raw" else (tensor.nbytes + 3) // 4 * 4
            live[name] = max(live.get(name, 0), need)
        # One pass in block order (slots do not overlap): a range at most _MERGE_GAP after
        # the open run's end joins it, else it starts the next run.
        runs: list[tuple[int, int]] = []  # closed runs, (block start, end)
        start = end = -(1 << 62)
        placed: list[tuple[VTensor, int, int, bool]] = []  # (tensor, run, offset in it, guard)
        for tensor in self._storage_by_offset:
            slot = tensor.buffer
            need = live.get(tensor.name, 0) if self.tensors.get(tensor.name) is tensor else 0
            if need:
                offset = slot.offset
                if offset - end > _MERGE_GAP:
                    if placed:
                        runs.append((start, end))
                    start = offset
                end = offset + need
                placed.append((tensor, len(runs), offset - start, False))
            offset = slot.guard_offset
            if offset - end > _MERGE_GAP:
                if placed:
                    runs.append((start, end))
                start = offset
            end = offset + slot.guard
            placed.append((tensor, len(runs), offset - start, True))
        runs.append((start, end))
        for start, end in runs:
            reads.copies.append((start, plan.take(end - start), end - start))
        for tensor, run_index, within, guard in placed:
            offset = reads.copies[run_index][1] + within
            if guard:
                reads.guards.append((tensor, offset))
            else:
                reads.at[tensor.name] = offset
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
        grids: Sequence[Sequence[WG | None]],
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
        grids: Sequence[Sequence[WG | None]],
    ) -> list[DispatchRecord]:
        # Commands go straight to the loader's entry points with arguments made once (the
        # `vulkan` package's wrappers convert every argument on every call: ~20 µs a
        # command on an H200 host, ~13 commands a dispatch step).
        block = self.arena.block
        assert block is not None
        memory = block.buffer
        if writes.zero:
            # Reused memory starts as a fresh allocation does: zeros, then initial data.
            _lib.vkCmdFillBuffer(cb, memory, 0, (writes.zero + 3) // 4 * 4, 0)
            _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_TRANSFER)
        if writes.copies:
            regions = _copy_regions(writes.copies)
            _lib.vkCmdCopyBuffer(cb, staging, memory, len(writes.copies), regions)
            if writes.zero and fill:
                # The first submit's copies carry zeros between nearby pieces, slack
                # included: the slack poison goes after them.
                _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_TRANSFER)
        for name, (offset, word) in fill.items():
            slot = self.tensors[name].buffer
            if offset < slot.size:
                _lib.vkCmdFillBuffer(cb, memory, slot.offset + offset, slot.size - offset, word)
        _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_COMPUTE)
        records: list[DispatchRecord] = []
        bind_point = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        for node, node_grids in zip(self._dispatch_nodes, grids, strict=True):
            state = node.state
            kernel = state.kernel
            assert kernel is not None
            local = kernel.local_size
            for part, count, grid, push in zip(
                kernel.parts, state.counts, node_grids, state.push, strict=True
            ):
                if grid is None:
                    records.append(DispatchRecord(node.op, kernel.slot, local, count, count, False))
                    continue
                layout = part.pipeline.layout
                _lib.vkCmdBindPipeline(cb, bind_point, part.pipeline.handle)
                _lib.vkCmdBindDescriptorSets(
                    cb, bind_point, layout, 0, 1, part.descriptor_sets, 0, _NULL
                )
                if push is not None:
                    assert part.push is not None
                    size = part.push.size
                    _lib.vkCmdPushConstants(cb, layout, _COMPUTE_STAGE, 0, size, push)
                _lib.vkCmdDispatch(cb, *grid)
                _lib.vkCmdPipelineBarrier(cb, *_COMPUTE_TO_COMPUTE)
                records.append(DispatchRecord(node.op, kernel.slot, local, count, grid, True))
        _lib.vkCmdPipelineBarrier(cb, *_ALL_TO_TRANSFER)
        regions = _copy_regions(reads.copies)
        _lib.vkCmdCopyBuffer(cb, memory, staging, len(reads.copies), regions)
        _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_HOST)
        return records

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


# Ranges of the block at most this far apart are copied as one region (with the bytes
# between): the validation layer's cost per vkCmdCopyBuffer grew faster than its region
# count (lavapipe: 60 regions 0.28 ms, 150 regions 1.8 ms), while copying a few KiB more
# costs the GPU next to nothing.
_MERGE_GAP = 16 << 10
_lib = vk.lib
_NULL = vk.ffi.NULL
_COMPUTE_STAGE = vk.VK_SHADER_STAGE_COMPUTE_BIT


def _barrier(src_stage: int, dst_stage: int, src: int, dst: int) -> tuple[object, ...]:
    """The arguments after the command buffer of a vkCmdPipelineBarrier with one memory
    barrier (the struct made once)."""
    barrier = vk.ffi.new(
        "VkMemoryBarrier*",
        {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": src, "dstAccessMask": dst},
    )
    return (src_stage, dst_stage, 0, 1, barrier, 0, _NULL, 0, _NULL)


_TRANSFER_TO_TRANSFER = _barrier(
    vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
    vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
    vk.VK_ACCESS_TRANSFER_WRITE_BIT,
    vk.VK_ACCESS_TRANSFER_WRITE_BIT,
)
_TRANSFER_TO_COMPUTE = _barrier(
    vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
    vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
    vk.VK_ACCESS_TRANSFER_WRITE_BIT,
    vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
)
_COMPUTE_TO_COMPUTE = _barrier(
    vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
    vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
    vk.VK_ACCESS_SHADER_WRITE_BIT,
    vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
)
_ALL_TO_TRANSFER = _barrier(
    vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
    vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
    vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
    vk.VK_ACCESS_TRANSFER_READ_BIT,
)
_TRANSFER_TO_HOST = _barrier(
    vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
    vk.VK_PIPELINE_STAGE_HOST_BIT,
    vk.VK_ACCESS_TRANSFER_WRITE_BIT,
    vk.VK_ACCESS_HOST_READ_BIT,
)
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


def _coalesce(
    pieces: Sequence[tuple[int, int]], gap: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Merge (offset, size) ranges that do not overlap into runs of ranges at most `gap`
    bytes apart.

    Returns:
        The runs as (start, end), in offset order, and per piece (its run, its offset in it).
    """
    order = sorted(range(len(pieces)), key=lambda i: pieces[i][0])
    runs: list[tuple[int, int]] = []
    at: list[tuple[int, int]] = [(0, 0)] * len(pieces)
    for i in order:
        offset, size = pieces[i]
        if runs and offset - runs[-1][1] <= gap:
            start, end = runs[-1]
            runs[-1] = (start, max(end, offset + size))
        else:
            runs.append((offset, offset + size))
        at[i] = (len(runs) - 1, offset - runs[-1][0])
    return runs, at


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
