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

import functools
import hashlib
import math
import struct
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import wgpu
from wgpu.classes import GPUBindGroup, GPUBuffer, GPUValidationError

from graph_format import (
    DTYPES,
    SLOTS,
    DeviceError,
    DispatchRecord,
    FeatureUnavailable,
    Graph,
    GraphBuildError,
    Grid,
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
    Expression,
    ExpressionError,
    KernelAdapter,
    KernelEntry,
    KernelInterfaceError,
    KernelRequirementError,
    Value,
    adapter_provides,
)
from webgpu_backend.binding import KernelCatalog, KernelPlan, Packer
from webgpu_backend.device import Pipeline, WebGPUDevice
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
from webgpu_backend.reflection import WgslReflectionError
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
    _bind_group: GPUBindGroup | None = None
    _pool: BufferPool | None = None  # set once the graph has placed its buffers

    @property
    def bind_group(self) -> GPUBindGroup:
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


# (slot, names fixed at load, names handed per step) an op module was seen to offer right
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

    def fail(self, message: str, *, values: bool = False) -> KernelBuildError:
        """A finding against this kernel, for its op (`values`: a manifest kernel's
        expressions failed on a step's values, no compiler involved)."""
        kind = KernelValuesError if values and not self.entry.builtin else KernelBuildError
        return kind(
            "webgpu", self.slot, str(self.entry.source), f"{self.slot}: {message}", op=self.op
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
        kernel = self._selected
        if slot is not None and slot != self.kernel:
            if slot not in self.kernels:
                raise KeyError(f"{self.op}: no slot {slot!r}; built: {sorted(self.kernels)}")
            self.kernel = slot
            kernel = self._selected = self.kernels[slot]
        if not kernel.checked:
            kernel.check_values(step)
        self.count = count = step["workgroups"]  # type: ignore[assignment]  # int: checked
        if not count:
            return  # nothing of a skipped slot is read: its values stay as they last ran
        values = kernel.values
        values.update(step)
        fast = kernel.fast
        if fast is not None:  # members by name, no adapter, no requires, the op's count
            try:
                for params, pack, get in fast:
                    data = pack(*get(values))
                    if data != params.data:
                        params.data = data
                        params.dirty = True
                return
            except (KeyError, struct.error):
                pass  # the general path below names the member at fault
        if kernel.adapter is not None:
            values = kernel.derive(values)
        try:
            for condition in kernel.live_requires:
                if not condition.evaluate(values):
                    raise InputError(
                        self.op,
                        "kernel_requires",
                        f"webgpu: op {self.op!r}: the kernel of slot {kernel.slot} "
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


class Scheduled(NamedTuple):
    """One dispatch of a step: its record, and the kernel run to dispatch (None: skipped)."""

    record: DispatchRecord
    run: KernelRun | None


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
    `create_scratch`, `add_kernel` (then `Dispatch.set` in their hooks), `add_resize_hook`,
    `add_input_check`, `set_cur_dims` and `set_symint`; the harness uses `execute`.
    """

    def __init__(
        self,
        dev: WebGPUDevice,
        graph: Graph,
        catalog: KernelCatalog | None = None,
        max_workgroups_per_dim: int | None = None,
        *,
        pool: BufferPool,
    ) -> None:
        from webgpu_backend.ops import OP_BUILDERS  # the registry imports this module

        self.dev = dev
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
        self._hooks: list[_Hook] = []
        self._input_checks: list[_InputCheck] = []
        self._pending: dict[int, ParityError] = {}  # hook order -> error held until convergence
        self._closed = False

        if "float16" in graph.float_dtypes() and dev.f16_unavailable:
            raise FeatureUnavailable("webgpu", "f16", dev.f16_unavailable)
        for value in graph.values.values():
            if isinstance(value, TensorValue):
                self.tensors[value.name] = self._create_tensor(value)
            elif isinstance(value, SymIntValue):
                self.symints[value.name] = 0  # serialized SymInts start at 0, as upstream
        try:
            for node in graph.ops:
                try:
                    OP_BUILDERS[node.op](self, node)
                except ParityError:
                    raise
                except Exception as err:  # the op's own code failed: name it
                    raise OpError("webgpu", node.name, node.op, "load", err) from err
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
        for run in runs:
            run._pool = self.pool
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

    def _create_params(self, nbytes: int) -> ParamsBuffer:
        """A params uniform of `nbytes` bytes (rounded up to 16, as uniform layout wants)."""
        slot = self.arena.uniform(f"params.{len(self._params)}", nbytes)
        params = ParamsBuffer(slot, bytes(slot.size))
        self._params.append(params)
        return params

    def create_scratch(self, node: OpNode, label: str, nbytes: int) -> ScratchBuffer:
        """A private storage buffer of `nbytes` for `node`, bound by role in `add_kernel`."""
        name = f"{node.name}.{label}"
        scratch = ScratchBuffer(name, self.arena.storage(name, nbytes))
        self._scratch.append(scratch)
        return scratch

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
                raise KernelBuildError("webgpu", slot, err.source, str(err), op=node.name) from None
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
        entry = self.catalog.entry(slot, stem)
        source = self.catalog.source(entry, stem)
        kernel = SlotKernel(node.name, slot, entry, [], MappingProxyType(static), dict(static))
        scratch: dict[str, ScratchBuffer] = {}
        adapter_class = self.catalog.adapter(entry)
        if adapter_class is not None:
            kernel.provides = frozenset(adapter_provides(adapter_class))
            try:
                kernel.adapter = adapter_class(kernel.static)
                sizes = dict(kernel.adapter.scratch())
            except Exception as err:  # the user's code: any failure is a finding
                text = "".join(traceback.format_exception(err)).strip()
                raise kernel.fail(f"adapter {entry.adapter} failed at load:\n{text}") from None
            for role, nbytes in sizes.items():
                if not isinstance(role, str) or not role.isidentifier() or role in tensors:
                    raise kernel.fail(
                        f"adapter {entry.adapter}: scratch role {role!r} must be a new name "
                        f"(the slot's roles: {', '.join(SLOTS[slot].tensors)})"
                    )
                if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
                    raise kernel.fail(
                        f"adapter {entry.adapter}: scratch {role!r} of {nbytes!r} bytes; "
                        "expected a positive integer"
                    )
                scratch[role] = self.create_scratch(node, role, nbytes)
        live: list[Expression] = []
        for condition in entry.requires:
            if not condition.names <= static.keys():
                live.append(condition)
            elif not condition.evaluate(static):
                raise KernelRequirementError(node.name, slot, condition.text, entry.source)
        kernel.live_requires = tuple(live)
        for index in range(len(entry.dispatches)):
            try:
                plan = self.catalog.plan(
                    entry, index, source, tuple(sorted(kernel.provides)), tuple(scratch)
                )
            except WgslReflectionError:
                # naga is the authority on WGSL: its whole message, when it refuses too.
                digest = hashlib.sha256(source.encode()).hexdigest()
                self.dev.shader_module(slot, source, digest, entry.source)
                raise
            constants = plan.constants(static, node.op)
            size = plan.workgroup_size(constants)
            if math.prod(size) > self.dev.max_invocations_per_workgroup:
                raise self.fail(
                    node,
                    f"{slot}: {entry.source} asks for {math.prod(size)} invocations per "
                    f"workgroup {list(size)}, the device allows "
                    f"{self.dev.max_invocations_per_workgroup}",
                )
            pipeline = self.dev.pipeline(
                slot, source, plan.digest, entry.source, plan.layout, constants, entry.entry
            )
            run = KernelRun(plan, pipeline, size, [], [], [], [])
            for binding in plan.bindings:
                if binding.kind == "uniform":
                    packer = plan.packers[binding.index]
                    params = self._create_params(packer.size)
                    run.params.append((params, packer))
                    run.bindings.append((binding.index, params.slot))
                    continue
                buffer = tensors.get(binding.target) or scratch.get(binding.target)
                if buffer is None:
                    raise plan.fail(
                        f"binding {binding.index} {binding.name!r} takes role "
                        f"{binding.target!r}, which op {node.op} does not bind here (it binds: "
                        f"{', '.join([*tensors, *scratch])})"
                    )
                run.bindings.append((binding.index, buffer.slot))
                (run.written if binding.kind == "storage_rw" else run.read).append(buffer.slot)
            kernel.runs.append(run)
        kernel.enable_fast_path()
        return kernel

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
                    raise OpError("webgpu", hook.op, hook.op_type, "resize", err) from err
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
                        grid = fold_grid(count, limit)
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
            scheduled = self.schedule()
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
            # A pass keeps its pipeline and bind group from one dispatch to the next (a bind
            # group stays bound across a change of pipeline), so each is set only when it
            # differs from the one in place: consecutive dispatches of one kernel (a
            # decoder's q, k and v projections) skip a call through wgpu each.
            pipeline: object = None
            bind_group: object = None
            for item in scheduled:
                records.append(item.record)
                run = item.run
                if run is not None:
                    if run.pipeline.pipeline is not pipeline:
                        pipeline = run.pipeline.pipeline
                        cpass.set_pipeline(pipeline)
                    if run.bind_group is not bind_group:
                        bind_group = run.bind_group
                        cpass.set_bind_group(0, bind_group)
                    cpass.dispatch_workgroups(*item.record.physical_grid)
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
