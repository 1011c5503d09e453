"""The op-facing nodes of a WebGPU graph: an op's dispatch positions (`Dispatch`), the
kernel of each slot it may run (`SlotKernel`) with one `KernelRun` per dispatch of its
entry, its params uniforms and scratch buffers; and the fold of a 1-D workgroup count into
a 2-D grid. `webgpu_backend.graph` builds them; op modules drive them through
`Dispatch.set` in their resize hooks.
"""

from __future__ import annotations

import math
import struct
import traceback
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from graph_format import (
    SLOTS,
    DispatchRecord,
    Grid,
    InputError,
    KernelBuildError,
    KernelValuesError,
)
from graph_format.kernels import (
    Count,
    Expression,
    ExpressionError,
    KernelAdapter,
    KernelEntry,
    KernelInterfaceError,
    KernelRequirementError,
    Value,
    adapter_provides,
)
from webgpu_backend.binding import KernelPlan, Packer
from webgpu_backend.device import Pipeline
from webgpu_backend.gpu import GpuBindGroup
from webgpu_backend.pool import BufferPool, Slot
from webgpu_backend.tensor import WebGPUTensor


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


@dataclass(eq=False)
class KernelRun:
    """One dispatch of a slot's kernel: its pipeline, workgroup size, bindings (by binding
    index) and params uniforms, each packed by its `Packer`."""

    plan: KernelPlan
    pipeline: Pipeline
    workgroup_size: Grid
    bindings: list[tuple[int, Slot]]
    written: list[Slot]
    read: list[Slot]
    params: list[tuple[ParamsBuffer, Packer]]
    _bind_group: GpuBindGroup | None = None
    _pool: BufferPool | None = None  # set once the graph has placed its buffers

    @property
    def bind_group(self) -> GpuBindGroup:
        """The bind group, made (or found in the pool's cache) at the run's first dispatch:
        a graph holds kernels for every variant of a slot, and a case dispatches only some
        of them."""
        if self._bind_group is None:
            if self._pool is None:
                raise RuntimeError(
                    f"webgpu: {self.plan.entry.slot}: the graph is still being built"
                )
            self._bind_group = self._pool.bind_group(self.pipeline.layout, self.bindings)
        return self._bind_group

    def bind(
        self,
        op: str,
        tensors: Mapping[str, WebGPUTensor | ScratchBuffer],
        scratch: Mapping[str, ScratchBuffer],
        make_params: Callable[[int], ParamsBuffer],
    ) -> None:
        """Bind each binding of the plan: a uniform to a params buffer of its own (of
        `make_params(bytes)`), a storage binding to the tensor or scratch buffer of its role.

        Raises:
            KernelInterfaceError: a binding takes a role that op `op` does not bind here.
        """
        plan = self.plan
        for binding in plan.bindings:
            if binding.kind == "uniform":
                packer = plan.packers[binding.index]
                params = make_params(packer.size)
                self.params.append((params, packer))
                self.bindings.append((binding.index, params.slot))
                continue
            buffer = tensors.get(binding.target) or scratch.get(binding.target)
            if buffer is None:
                raise plan.fail(
                    f"binding {binding.index} {binding.name!r} takes role "
                    f"{binding.target!r}, which op {op} does not bind here (it binds: "
                    f"{', '.join([*tensors, *scratch])})"
                )
            self.bindings.append((binding.index, buffer.slot))
            (self.written if binding.kind == "storage_rw" else self.read).append(buffer.slot)


# (slot, names fixed at load, names handed per step) an op module was seen to offer right.
# Kept for the process: a check of the op modules' code against the shipped slot table, the
# same for every runtime (no runtime's state; docs/design.md §2.2).
_VALUES_CHECKED: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()


@dataclass(eq=False)
class SlotKernel:
    """The kernel implementing one slot in one op node, with one run per dispatch of its
    entry (several for a manifest's split)."""

    op: str
    slot: str
    entry: KernelEntry
    runs: list[KernelRun]
    static: Mapping[str, Value]
    backend: str  # the runtime's name, which its findings carry
    # the slot's complete values: those fixed at load, updated with each step's
    values: dict[str, Value] = field(default_factory=dict)
    adapter: KernelAdapter | None = None
    provides: frozenset[str] = frozenset()
    live_requires: tuple[Expression, ...] = ()
    checked: bool = False
    # (params, its struct's pack, the getter of its members' values) of every uniform, when
    # every member is a scalar value by name and nothing else runs at resize (the project's
    # kernels): a resize is then look-ups and packs, nothing more
    fast: list[tuple[ParamsBuffer, Callable[..., bytes], Callable[[Any], Any]]] | None = None

    def enable_fast_path(self) -> None:
        """Set `fast` when this kernel qualifies."""
        if self.adapter is not None or self.live_requires or not self.entry.builtin:
            return
        pairs = [pair for run in self.runs for pair in run.params]
        if all(packer.simple is not None for _, packer in pairs):
            self.fast = [
                (params, packer.struct.pack, packer.simple)
                for params, packer in pairs
                if packer.simple is not None
            ]

    def load_adapter(
        self, adapter_class: type[KernelAdapter], roles: Collection[str]
    ) -> dict[str, int]:
        """Make the entry's adapter for the values fixed at load; returns the scratch it asks
        for (role -> bytes): each a new name (not one of `roles`, the op's, nor the
        manifest's shared roles) of a positive size.

        Raises:
            KernelBuildError: the adapter's code fails, or it asks for bad scratch.
        """
        entry = self.entry
        self.provides = frozenset(adapter_provides(adapter_class))
        try:
            self.adapter = adapter_class(self.static)
            sizes = dict(self.adapter.scratch())
        except Exception as err:  # the user's code: any failure is a finding
            text = "".join(traceback.format_exception(err)).strip()
            raise self.fail(f"adapter {entry.adapter} failed at load:\n{text}") from None
        for role, nbytes in sizes.items():
            if (
                not isinstance(role, str)
                or not role.isidentifier()
                or role in roles
                or role in entry.shared_roles
            ):
                names = ", ".join([*SLOTS[self.slot].tensors, *entry.shared_roles])
                raise self.fail(
                    f"adapter {entry.adapter}: scratch role {role!r} must be a new name "
                    f"(the slot's roles: {names})"
                )
            if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
                raise self.fail(
                    f"adapter {entry.adapter}: scratch {role!r} of {nbytes!r} bytes; "
                    "expected a positive integer"
                )
        return sizes

    def check_requires(self) -> None:
        """Check the entry's `requires` over the values fixed at load; keep those that read
        a step's values (`live_requires`, checked by `Dispatch.set`).

        Raises:
            KernelRequirementError: a condition over the values fixed at load fails.
        """
        live: list[Expression] = []
        for condition in self.entry.requires:
            if not condition.names <= self.static.keys():
                live.append(condition)
            elif not condition.evaluate(self.static):
                raise KernelRequirementError(self.op, self.slot, condition.text, self.entry.source)
        self.live_requires = tuple(live)

    def fail(self, message: str, *, values: bool = False) -> KernelBuildError:
        """A finding against this kernel, for its op (`values`: a manifest kernel's
        expressions failed on a step's values, no compiler involved)."""
        kind = KernelValuesError if values and not self.entry.builtin else KernelBuildError
        return kind(
            self.backend,
            self.slot,
            str(self.entry.source),
            f"{self.slot}: {message}",
            op=self.op,
        )

    def check_values(self, step: Mapping[str, Value]) -> None:
        """The first values an op hands this slot: with those fixed at load, exactly the
        slot's vocabulary (and the per-dimension limit), none of them fixed at load. (Once
        per process for each slot and set of names: it checks the op module's code.)"""
        key = (self.slot, tuple(self.static), tuple(step))
        if key in _VALUES_CHECKED:
            self.checked = True
            return
        fixed = set(self.static) & set(step)
        if fixed:
            raise RuntimeError(
                f"webgpu: op {self.op!r}: slot {self.slot}: {sorted(fixed)} were fixed at load; "
                "a step hands only the values that vary"
            )
        offered = (set(self.static) | set(step)) - {"max_workgroups_per_dim"}
        declared = set(SLOTS[self.slot].values)
        if offered != declared:
            raise RuntimeError(
                f"webgpu: op {self.op!r} hands slot {self.slot} the values {sorted(offered)}; "
                f"its schema declares {sorted(declared)} (missing: "
                f"{sorted(declared - offered)}, extra: {sorted(offered - declared)})"
            )
        if not isinstance(step.get("workgroups"), int):
            raise RuntimeError(
                f"webgpu: op {self.op!r}: slot {self.slot}: workgroups "
                f"{step.get('workgroups')!r} is not a count handed each step"
            )
        _VALUES_CHECKED.add(key)
        self.checked = True

    def derive(self, values: dict[str, Value]) -> dict[str, Value]:
        """The op's values with the adapter's derived ones added."""
        assert self.adapter is not None
        try:
            derived = dict(self.adapter.values(MappingProxyType(values)))
        except Exception as err:  # the user's code: any failure is a finding
            text = "".join(traceback.format_exception(err)).strip()
            raise self.fail(f"adapter {self.entry.adapter}: values() failed:\n{text}") from None
        if derived.keys() != self.provides:
            raise self.fail(
                f"adapter {self.entry.adapter}: values() returned {sorted(derived)}; its "
                f"provides declares {sorted(self.provides)}"
            )
        return {**values, **derived}


class Dispatch:
    """One dispatch position of an op: the kernel of the slot it runs this step, chosen
    among the slots built for it (a flat and a broadcasting kernel), and its count.

    `count` is the op's own logical workgroup count (its `workgroups` value; 0 skips the
    position). A project kernel runs one dispatch of that count; a manifest's kernel runs
    one dispatch per entry of its `dispatch_list`, each of the count its expression gives
    (`counts`), and none when the op skips the slot.
    """

    def __init__(self, op: str, kernels: dict[str, SlotKernel]) -> None:
        self.op = op
        self.kernels = kernels
        self.kernel = next(iter(kernels))  # the slot selected
        self._selected = kernels[self.kernel]
        self.count = 0
        self.counts: tuple[Count, ...] = ()

    @property
    def workgroup_size(self) -> int:
        """Invocations along x of the selected kernel's first dispatch."""
        return self._selected.runs[0].workgroup_size[0]

    @property
    def values(self) -> dict[str, Value]:
        """The selected slot's values as its op last handed them for a step it ran (with
        those fixed at load and `max_workgroups_per_dim`; before an adapter's derived ones)."""
        return dict(self._selected.values)

    def set(self, step: Mapping[str, Value], slot: str | None = None) -> None:
        """This step's values of the slot (`slot`, or the one selected): those of its
        schema's `values` not fixed at load (`add_kernel`'s static), `workgroups` among
        them. Packs the kernel's params and works out its counts (nothing when
        `workgroups` is 0: the op skips the slot).

        Raises:
            InputError: a kernel's `requires` broken by these values ("kernel_requires").
            KernelBuildError: an expression, an adapter or a params member fails on them.
        """
        kernel = self._select(slot)
        if not kernel.checked:
            kernel.check_values(step)
        self.count = count = step["workgroups"]  # type: ignore[assignment]  # int: checked
        if not count:
            return  # nothing of a skipped slot is read: its values stay as they last ran
        values = kernel.values
        values.update(step)
        if kernel.fast is not None and _pack_fast(kernel.fast, values):
            return
        self._pack(kernel, values)

    def _select(self, slot: str | None) -> SlotKernel:
        """The kernel of `slot` (None: the one selected), selected from now on."""
        if slot is not None and slot != self.kernel:
            if slot not in self.kernels:
                raise KeyError(f"{self.op}: no slot {slot!r}; built: {sorted(self.kernels)}")
            self.kernel = slot
            self._selected = self.kernels[slot]
        return self._selected

    def _pack(self, kernel: SlotKernel, values: dict[str, Value]) -> None:
        """The general path: the adapter's values, live `requires`, every params uniform
        packed, a manifest's counts (the member at fault named when one fails)."""
        if kernel.adapter is not None:
            values = kernel.derive(values)
        try:
            for condition in kernel.live_requires:
                if not condition.evaluate(values):
                    raise InputError(
                        self.op,
                        "kernel_requires",
                        f"{kernel.backend}: op {self.op!r}: the kernel of slot {kernel.slot} "
                        f"({kernel.entry.source}) requires {condition.text}",
                    )
            for run in kernel.runs:
                for params, packer in run.params:
                    params.update(packer.pack(values))
            if not kernel.entry.builtin:
                self.counts = tuple(
                    d.workgroups(values) for d in kernel.entry.dispatches[: len(kernel.runs)]
                )
        except (ExpressionError, KernelInterfaceError) as err:
            raise kernel.fail(kernel.entry.failure_text(err), values=True) from None


def _pack_fast(
    fast: list[tuple[ParamsBuffer, Callable[..., bytes], Callable[[Any], Any]]],
    values: Mapping[str, Value],
) -> bool:
    """Pack a kernel's uniforms by member name (no adapter, no requires, the op's count);
    False when a value is missing or misfits (the general path names the member at fault)."""
    try:
        for params, pack, get in fast:
            data = pack(*get(values))
            if data != params.data:
                params.data = data
                params.dirty = True
    except (KeyError, struct.error):
        return False
    return True


class Scheduled(NamedTuple):
    """One dispatch of a step: its record, and the kernel run to dispatch (None: skipped)."""

    record: DispatchRecord
    run: KernelRun | None


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
