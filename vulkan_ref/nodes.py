"""The parts of a Vulkan dispatch node that do not need the graph: the kernel bound to each
slot it may pick (`SlotKernel`, one `BoundPart` per dispatch of its entry, their params
uniforms), what a resize chose (`NodeState`) and how it is evaluated from the op's live
values (`evaluate`); a SymInt's value and UBO (`SymInt`). `vulkan_ref.graph` builds them at
load and drives them at each resize (docs/design.md §4.2).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

import vulkan as vk

from graph_format import SLOTS, InputError, KernelBuildError
from graph_format.kernels import (
    BUILTIN_NAMES,
    WORKGROUPS_VALUE,
    Expression,
    ExpressionError,
    KernelAdapter,
    KernelEntry,
    Value,
)
from vulkan_ref.binding import BlockLayout, PackError, kernel_failure
from vulkan_ref.cdata import CData
from vulkan_ref.memory import Buffer
from vulkan_ref.pipeline import ComputePipeline, DescriptorLayout
from vulkan_ref.pool import Arena, BoundRange

Sizes = tuple[int, ...]
WG = tuple[int, int, int]
Values = Mapping[str, Value]
# The per-dimension workgroup limit the graph honours: a value of every slot.
MAX_WORKGROUPS_VALUE = BUILTIN_NAMES[0]


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
                state = NodeState(self, (SKIPPED,), (None,))
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


SKIPPED: WG = (0, 0, 0)
NO_STATE = NodeState()  # before the first resize (immutable: shared)


class Stateful(Protocol):
    """A dispatch node as the resize engine and the recorder see it: its op and the state
    its last resize chose."""

    op: str
    state: NodeState


def evaluate(
    op: str,
    kernel: SlotKernel,
    live: Mapping[str, Value],
    push_data: Callable[[bytes], CData],
) -> NodeState:
    """The state of `kernel`, the slot a node of `op` picked, for the op's live values
    (`push_data`: push-constant bytes as the cffi array a command takes, made once per
    content: the runtime's `PipelineCache.push_data`)."""
    if not kernel.checked:
        _check_vocabulary(op, kernel, live)
    states = kernel.states
    if states is not None:  # only the op's count changes
        count = live[WORKGROUPS_VALUE]
        state = states.get(count)  # type: ignore[arg-type]  # a miss is checked
        return state if state is not None else kernel.state_for(count)
    if live[WORKGROUPS_VALUE] == 0:  # the op skips the slot: every dispatch of its kernel
        skipped = len(kernel.parts)
        return NodeState(kernel, (SKIPPED,) * skipped, (None,) * skipped)
    values = {**kernel.static, **live}
    entry = kernel.entry
    if kernel.adapter is not None:
        values.update(_adapter_values(op, kernel, values))
    try:
        return _evaluate_parts(op, kernel, values, push_data)
    except (ExpressionError, PackError) as err:
        raise kernel_failure(entry, entry.failure_text(err), op, values=True) from None


def _evaluate_parts(
    op: str, kernel: SlotKernel, values: Values, push_data: Callable[[bytes], CData]
) -> NodeState:
    """A kernel's live `requires` checked, then its counts, push constants and params."""
    entry = kernel.entry
    for condition in kernel.live_requires:
        if not condition.evaluate(values):
            shown = ", ".join(f"{n} = {values[n]}" for n in sorted(condition.names))
            raise InputError(
                op,
                "kernel_requires",
                f"vulkan: {op}: the kernel of slot {kernel.slot} ({entry.source}) "
                f"requires {condition.text} ({shown})",
            )
    counts: list[WG] = []
    pushes: list[CData | None] = []
    params = []
    for part in kernel.parts:
        count = _count(part.count, values)
        counts.append(count)
        if count == SKIPPED:
            pushes.append(None)
            continue
        push = part.push
        pushes.append(None if push is None else push_data(part.push_data or push.pack(values)))
        params += [(ubo, ubo.layout.pack(values)) for ubo in part.params]
    return NodeState(kernel, tuple(counts), tuple(pushes), tuple(params))


# Cached for the process (two pure functions of the shipped slot table `SLOTS`, constant
# after import): no runtime's state.
@functools.cache
def vocabulary(slot: str) -> frozenset[str]:
    """The names of a slot's values."""
    return frozenset(SLOTS[slot].values)


@functools.cache
def check_static(op: str, slots: tuple[str, ...], static: frozenset[str]) -> None:
    """A node lists slots, and each value it fixes at load is one of theirs (the op
    module's bug otherwise; checked once per kind of node)."""
    if not slots:
        raise ValueError(f"{op}: a dispatch node must list its slots")
    unknown = sorted(static - set().union(*(vocabulary(slot) for slot in slots)))
    if unknown:
        raise ValueError(f"{op}: static values {unknown} are in none of its slots")


NO_VALUES: frozenset[str] = frozenset()


def _count(count: Expression | tuple[Expression, Expression, Expression], values: Values) -> WG:
    """A dispatch's logical workgroup count: a 1-D count as (n, 1, 1), zero as skipped."""
    if isinstance(count, tuple):
        grid = tuple(c.evaluate_int(values) for c in count)
        for c, n in zip(count, grid, strict=True):
            if n < 0:
                raise ExpressionError(c.text, f"gave a negative workgroup count {n}")
        return SKIPPED if 0 in grid else (grid[0], grid[1], grid[2])
    n = count.evaluate_int(values)
    if n < 0:
        raise ExpressionError(count.text, f"gave a negative workgroup count {n}")
    return (n, 1, 1) if n else SKIPPED


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
    derived = call_adapter(op, entry, "values", kernel.adapter.values, MappingProxyType(values))
    if not isinstance(derived, Mapping):
        raise adapter_failure(op, entry, f"values() returned {derived!r}, not a mapping")
    if derived.keys() != kernel.provides:
        raise adapter_failure(
            op,
            entry,
            f"values() returned {sorted(derived)}; its provides declares {sorted(kernel.provides)}",
        )
    for name, value in derived.items():
        numbers = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
            raise adapter_failure(op, entry, f"values() gave {name} = {value!r}, not a number")
    return dict(derived)


def adapter_failure(op: str | None, entry: KernelEntry, message: str) -> KernelBuildError:
    """A build error of `entry`'s kernel caused by its adapter (the file named is the
    adapter's)."""
    assert entry.adapter is not None
    text = f"{entry.slot}: adapter {entry.adapter}: {message}"
    return KernelBuildError("vulkan", entry.slot, str(entry.adapter.file), text, op=op)


def call_adapter(
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
        raise adapter_failure(op, entry, message) from None
