"""Pooled buffers for the WebGPU runtime: large GPUBuffers per runtime, one arena per graph.

Why this allocator. A parity run builds and closes two small graphs per case, thousands of
times per process; one `create_buffer` per tensor, params uniform and scratch buffer, and a
bind group per dispatch, made building a graph cost more than running it. Here:

- A `BufferPool` per runtime owns a few large GPUBuffers ("blocks"): storage blocks for
  tensors and scratch, uniform blocks for params, and one shared read-back buffer.
- Each graph takes whole blocks from the pool for its `Arena` and bump-allocates inside
  them; closing the graph hands the blocks back. A bump arena needs no free-list
  bookkeeping and cannot fragment (nothing is freed inside a block while its graph lives),
  and a graph places its buffers once every op is built, so it knows its totals and takes
  one block per kind (per colour, below). Its initial contents (zeros, constants, state
  data, guards) are then one `write_buffer` per block.
- Free blocks are reused by size: the smallest free block that fits. A new block is the
  next power of two at or above the need (at least `block_bytes`), so a stream of graphs
  of similar sizes settles on a handful of blocks. Free blocks beyond `retain_bytes` per
  kind are dropped (largest first), so the pool grows only as far as the graphs alive at
  once need plus that margin; all of it goes when the runtime and its graphs are dropped.
- Bind groups are cached by (layout, the (block, offset, size) of every binding), so a
  graph that binds the same ranges as an earlier one (a case rebuilt while shrinking or
  repeating) reuses them.

Colours. WebGPU validates buffer usage per dispatch for the *whole* GPUBuffer: one buffer
bound both as read-write storage and as read-only storage (or uniform) in one dispatch is a
usage conflict, even at disjoint ranges. So a graph's storage slots are coloured: two slots
that one dispatch writes and reads get different colours, each colour its own block (a
greedy colouring in graph order; chains of ops need two, rarely more). Params live in
uniform blocks, apart from storage.

Alignment and limits. Offsets are multiples of `min-storage-buffer-offset-alignment` and
`min-uniform-buffer-offset-alignment`; a block never exceeds `max-buffer-size` (a colour
that would is split over several blocks), and a binding (allocation + guard) never exceeds
`max-storage-buffer-binding-size` (the guard is shortened instead).

Guards. Every storage slot is followed by a guard of `GUARD_MIN_BYTES`, written with
`GUARD_WORD` when the graph is built and checked after every execute. The binding of a
tensor covers its allocation *and* its guard. wgpu applies robust buffer access to every
binding: naga clamps an index past the binding into it, or leaves the bounds to the
driver's robustBufferAccess2, which drops such a write (seen on lavapipe: a kernel writing
128 floats into a 64-float binding changed nothing past it). With the guard inside the
binding a write just past the allocation lands in the guard on every device, instead of
vanishing or landing on the tensor's own last element.
No kernel reads its binding's length.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from webgpu_backend.gpu import (
    BindEntry,
    BufferUsage,
    GpuBindGroup,
    GpuBuffer,
    GpuLayout,
    Implementation,
)

# A quiet NaN whose top 12 bits (0x7FD) differ from the harness's slack poison (0x7FE) and
# from every canonical NaN; the Vulkan runtime uses another, so copies are told apart.
GUARD_WORD = 0x7FD0_6A57
GUARD_MIN_BYTES = 256

STORAGE = "storage"
UNIFORM = "uniform"
_USAGES = {STORAGE: BufferUsage.STORAGE, UNIFORM: BufferUsage.UNIFORM}


def align_up(value: int, alignment: int) -> int:
    """`value` rounded up to a multiple of `alignment`."""
    return -(-value // alignment) * alignment


@dataclass(eq=False)
class Block:
    """One large GPUBuffer of the pool. `serial` is unique within the pool, never reused."""

    kind: str
    buffer: GpuBuffer
    size: int
    serial: int


@dataclass(eq=False)
class Slot:
    """A sub-allocation of a graph: `size` bytes of data, then `guard` bytes of guard.

    A binding covers both (`binding_size`). Placed once every op of the graph is built
    (`Arena.place`).
    """

    name: str
    size: int
    guard: int = 0
    block: Block | None = None
    offset: int = 0

    @property
    def buffer(self) -> GpuBuffer:
        """The buffer holding this slot."""
        if self.block is None:
            raise RuntimeError(f"webgpu: {self.name!r} is not placed yet")
        return self.block.buffer

    @property
    def block_serial(self) -> int:
        """The serial of the block holding this slot (0 before it is placed)."""
        return self.block.serial if self.block is not None else 0

    @property
    def binding_size(self) -> int:
        """Bytes a binding covers: the allocation and its guard."""
        return self.size + self.guard

    @property
    def guard_offset(self) -> int:
        """Offset of the guard in the block."""
        return self.offset + self.size


class BufferPool:
    """The blocks, read-back buffer and bind groups of one runtime.

    Counters for tests and benchmarks: `allocations` counts `create_buffer` calls and
    `drops` the blocks given up over the pool's life; `stats()` gives those and what is held.
    """

    def __init__(
        self,
        gpu: Implementation,
        *,
        block_bytes: int = 1 << 20,
        retain_bytes: int = 64 << 20,
        bind_group_capacity: int = 4096,
    ) -> None:
        self.gpu = gpu
        limits = gpu.limits
        self.alignment = {
            STORAGE: max(16, int(limits["min-storage-buffer-offset-alignment"])),
            UNIFORM: max(16, int(limits["min-uniform-buffer-offset-alignment"])),
        }
        self.max_block_bytes = int(limits["max-buffer-size"]) // 4 * 4
        self.max_binding_bytes = int(limits["max-storage-buffer-binding-size"]) // 4 * 4
        self.block_bytes = block_bytes
        self.retain_bytes = retain_bytes
        self.bind_group_capacity = bind_group_capacity
        self.allocations = 0
        self.drops = 0
        self.bind_group_hits = 0
        self.bind_group_misses = 0
        self._serial = 0
        self._free: dict[str, list[Block]] = {STORAGE: [], UNIFORM: []}
        self._in_use: dict[int, Block] = {}
        self._readback: GpuBuffer | None = None
        self._bind_groups: OrderedDict[_BindGroupKey, GpuBindGroup] = OrderedDict()
        self._closed = False
        # A block given up is destroyed at once (a remote implementation's host holds it
        # otherwise); executes are synchronous, so no pending submit uses a free block.

    def acquire(self, kind: str, nbytes: int) -> Block:
        """A block of at least `nbytes`: the smallest free one that fits, else a new one."""
        if self._closed:
            raise RuntimeError("webgpu: the buffer pool was closed")
        free = self._free[kind]
        fitting = [b for b in free if b.size >= nbytes]
        if fitting:
            block = min(fitting, key=lambda b: b.size)
            free.remove(block)
        else:
            size = min(max(self.block_bytes, _pow2(nbytes)), max(self.max_block_bytes, nbytes))
            self._serial += 1
            buffer = self._create(f"pool.{kind}.{self._serial}", size, _USAGES[kind])
            block = Block(kind, buffer, size, self._serial)
        self._in_use[block.serial] = block
        return block

    def release(self, block: Block) -> None:
        """Hand a block back; free blocks beyond `retain_bytes` are dropped, largest first."""
        if self._in_use.pop(block.serial, None) is None or self._closed:
            return
        free = self._free[block.kind]
        free.append(block)
        while free and sum(b.size for b in free) > self.retain_bytes:
            largest = max(free, key=lambda b: b.size)
            free.remove(largest)
            self._drop(largest)

    def readback(self, nbytes: int) -> GpuBuffer:
        """The runtime's MAP_READ buffer, grown to at least `nbytes` (executes are
        synchronous, so one serves every graph)."""
        if self._readback is None or self._readback.size < nbytes:
            if self._readback is not None:
                self.gpu.destroy_buffer(self._readback)
            size = max(64 << 10, _pow2(nbytes))
            self._readback = self._create("pool.readback", size, BufferUsage.READBACK)
        return self._readback

    def bind_group(self, layout: GpuLayout, bindings: Sequence[tuple[int, Slot]]) -> GpuBindGroup:
        """A bind group of `layout` binding each (binding index, slot) to the slot's range
        (allocation + guard), cached."""
        key = (
            id(layout),
            tuple((i, s.block_serial, s.offset, s.binding_size) for i, s in bindings),
        )
        cached = self._bind_groups.get(key)
        if cached is not None:
            self.bind_group_hits += 1
            self._bind_groups.move_to_end(key)
            return cached
        self.bind_group_misses += 1
        group = self.gpu.create_bind_group(
            layout, [BindEntry(i, s.buffer, s.offset, s.binding_size) for i, s in bindings]
        )
        self._bind_groups[key] = group
        if len(self._bind_groups) > self.bind_group_capacity:
            self._bind_groups.popitem(last=False)
        return group

    def _create(self, label: str, size: int, usage: BufferUsage) -> GpuBuffer:
        self.allocations += 1
        return self.gpu.create_buffer(label, size, usage)

    def _drop(self, block: Block) -> None:
        """Destroy a free block (and forget the bind groups over it)."""
        for key in [k for k in self._bind_groups if any(b[1] == block.serial for b in k[1])]:
            del self._bind_groups[key]
        self.gpu.destroy_buffer(block.buffer)
        self.drops += 1

    def stats(self) -> dict[str, int]:
        """Counters and holdings: allocations, drops, blocks and bytes held (free bytes among
        them), blocks in use, bind groups cached."""
        held = [*self._free[STORAGE], *self._free[UNIFORM], *self._in_use.values()]
        return {
            "allocations": self.allocations,
            "drops": self.drops,
            "blocks": len(held),
            "bytes": sum(b.size for b in held),
            "free_bytes": sum(b.size for b in [*self._free[STORAGE], *self._free[UNIFORM]]),
            "blocks_in_use": len(self._in_use),
            "bind_groups": len(self._bind_groups),
        }

    def close(self) -> None:
        """Give up every free block, the read-back buffer and the bind groups (idempotent);
        blocks of graphs still open go when those graphs close."""
        self._closed = True
        for kind in (STORAGE, UNIFORM):
            for block in self._free[kind]:
                self._drop(block)
            self._free[kind] = []
        if self._readback is not None:
            self.gpu.destroy_buffer(self._readback)
        self._readback = None
        self._bind_groups.clear()


# (id of the layout, (binding index, block serial, offset, size) of every binding)
_BindGroupKey = tuple[int, tuple[tuple[int, int, int, int], ...]]


def _pow2(nbytes: int) -> int:
    """The smallest power of two >= nbytes (1 for 0)."""
    return 1 << max(0, nbytes - 1).bit_length()


@dataclass
class _Placed:
    """One block of an arena and the slots in it."""

    block: Block
    used: int
    slots: list[Slot] = field(default_factory=list)


class Arena:
    """One graph's buffers: storage slots coloured into storage blocks, params in a uniform
    block. Slots are handed out at once and placed in one go (`place`) once every op is
    built; `release` hands the blocks back."""

    def __init__(self, pool: BufferPool) -> None:
        self.pool = pool
        self.storage_slots: list[Slot] = []
        self.uniform_slots: list[Slot] = []
        self.blocks: list[_Placed] = []

    def storage(self, name: str, nbytes: int) -> Slot:
        """A storage slot of `nbytes` (rounded up to 4, at least 4) with its guard."""
        size = max(4, (nbytes + 3) // 4 * 4)
        guard = max(0, min(GUARD_MIN_BYTES, self.pool.max_binding_bytes - size))
        slot = Slot(name, size, guard)
        self.storage_slots.append(slot)
        return slot

    def uniform(self, name: str, nbytes: int) -> Slot:
        """A uniform slot of `nbytes` (rounded up to 16, as uniform layout wants)."""
        slot = Slot(name, max(16, (nbytes + 15) // 16 * 16))
        self.uniform_slots.append(slot)
        return slot

    def place(self, dispatches: Sequence[tuple[Sequence[Slot], Sequence[Slot]]]) -> None:
        """Give every slot its block and offset.

        Args:
            dispatches: (slots written, slots read) of every dispatch, for the colouring.
        """
        colours = colour(self.storage_slots, dispatches)
        groups: dict[int, list[Slot]] = {}
        for slot in self.storage_slots:
            groups.setdefault(colours[slot], []).append(slot)
        for _, slots in sorted(groups.items()):
            self._place(STORAGE, slots)
        if self.uniform_slots:
            self._place(UNIFORM, self.uniform_slots)

    def _place(self, kind: str, slots: list[Slot]) -> None:
        """Slots in order into as few blocks as `max-buffer-size` allows."""
        alignment = self.pool.alignment[kind]
        chunks: list[list[Slot]] = [[]]
        total = 0
        for slot in slots:
            need = align_up(slot.binding_size, alignment)
            if chunks[-1] and total + need > self.pool.max_block_bytes:
                chunks.append([])
                total = 0
            chunks[-1].append(slot)
            total += need
        for chunk in chunks:
            used = 0
            for slot in chunk:
                slot.offset = used
                used = align_up(used + slot.binding_size, alignment)
            block = self.pool.acquire(kind, max(used, 4))
            for slot in chunk:
                slot.block = block
            self.blocks.append(_Placed(block, used, chunk))

    def release(self) -> None:
        """Hand every block back to the pool (idempotent)."""
        for placed in self.blocks:
            self.pool.release(placed.block)
        self.blocks.clear()


def colour(
    slots: Sequence[Slot], dispatches: Sequence[tuple[Sequence[Slot], Sequence[Slot]]]
) -> dict[Slot, int]:
    """A colour per slot such that no dispatch writes one slot and reads another of the same
    colour (greedy, in slot order: the smallest colour no conflicting slot has yet). Slots
    of a dispatch that are not in `slots` (its params uniform) are ignored."""
    conflicts: dict[Slot, set[Slot]] = {slot: set() for slot in slots}
    for written, read in dispatches:
        for w in written:
            for r in read:
                if w is not r and w in conflicts and r in conflicts:
                    conflicts[w].add(r)
                    conflicts[r].add(w)
    colours: dict[Slot, int] = {}
    for slot in slots:
        taken = {colours[n] for n in conflicts[slot] if n in colours}
        colours[slot] = next(c for c in range(len(taken) + 1) if c not in taken)
    return colours
