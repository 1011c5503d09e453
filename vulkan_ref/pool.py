"""Pooled device memory for the Vulkan runtime: blocks per runtime, one bump arena per graph.

Why this allocator. A parity run builds and closes two small graphs per case, thousands of
times per process; one `vkAllocateMemory` per tensor made building cost more than running
(on an H100, `vkFreeMemory` alone took 3.9 s for 6587 calls in a 22 s profile). Here:

- A `MemoryPool` per runtime owns a few large `VkDeviceMemory` blocks, each with one
  `VkBuffer` over the whole block: device-local blocks for tensors and scratch,
  host-visible coherent blocks for uniform buffers, and one shared staging block.
- Each graph takes whole blocks from the pool for its `Arena` and bump-allocates inside
  them; closing the graph hands the blocks back. A bump arena needs no free-list
  bookkeeping, cannot fragment (nothing is freed inside a block while its graph lives), and
  keeps a graph's storage contiguous, so clearing it on reuse is one command. A graph places
  its storage once every op is built, so it knows its total and takes a single block.
- Free blocks are reused by size: the smallest free block that fits. A new block is the
  next power of two at or above the need (at least `device_block_bytes`), so a stream of
  graphs of similar sizes settles on a handful of blocks. Free blocks beyond
  `retain_bytes` per memory kind are freed (largest first), so the pool grows only as far
  as the graphs alive at once need plus that margin, and everything goes back to the
  driver when the pool is closed or dropped with its runtime.

Alignment. Storage offsets are multiples of `minStorageBufferOffsetAlignment` (and of 16);
uniform offsets of `minUniformBufferOffsetAlignment` and `nonCoherentAtomSize` (host blocks
are HOST_COHERENT, so no flush is needed; the atom alignment only keeps sub-allocations from
sharing an atom). `bufferImageGranularity` does not apply: each block holds one buffer and
no image.

Guards. Every storage sub-allocation is followed by a guard of at least `GUARD_MIN_BYTES`
(up to the next aligned offset), poisoned with `GUARD_WORD` when the graph's first submit
runs and checked after every execute. The descriptor range of a tensor covers its
allocation *and* its guard: native Vulkan without robust buffer access does not bounds-check
an access past the range (on NVIDIA a write lands in whatever follows in the buffer), but
lavapipe does and drops it, so a range that ended at the allocation would hide the write on
lavapipe. With the guard inside the range, a write up to the guard's size past the
allocation lands in the guard on every driver; a write beyond it is dropped (lavapipe) or
lands in the next sub-allocation (NVIDIA). No shader reads its range's length.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import vulkan as vk

from vulkan_ref.cdata import CData
from vulkan_ref.instance import VulkanContext
from vulkan_ref.memory import Buffer

# A quiet NaN whose top 12 bits (0x7FD) differ from the harness's slack poison (0x7FE) and
# from every canonical NaN, so a guard word read back as data is recognizable.
GUARD_WORD = 0x7FD0_6A4D
GUARD_MIN_BYTES = 256

_DEVICE_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)
_HOST_USAGE = (
    vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)
_HOST_FLAGS = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT

DescriptorKind = str  # "storage" | "uniform", as vulkan_ref.pipeline
# (binding number, kind) of every descriptor of a set, as vulkan_ref.pipeline
DescriptorLayout = tuple[tuple[int, DescriptorKind], ...]
_DESCRIPTOR_TYPES = {
    "storage": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
    "uniform": vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
}


class BoundRange(Protocol):
    """What a descriptor binds: a `StorageSlot` (allocation and guard) or a UBO `Buffer`."""

    @property
    def handle(self) -> CData: ...

    @property
    def offset(self) -> int: ...

    @property
    def binding_size(self) -> int: ...


# (descriptor layout, (buffer handle as an int, offset, range) of every binding)
DescriptorKey = tuple[DescriptorLayout, tuple[tuple[int, int, int], ...]]


def align_up(value: int, alignment: int) -> int:
    """`value` rounded up to a multiple of `alignment`."""
    return -(-value // alignment) * alignment


@dataclass(eq=False)
class MemoryBlock:
    """One `VkDeviceMemory` with one `VkBuffer` bound over all of it.

    Attributes:
        serial: unique within its pool, never reused.
        host: host-visible and coherent (mapped for its lifetime), else device-local.
        view: the mapping as a writable uint8 array (host blocks only).
    """

    serial: int
    host: bool
    size: int
    memory: CData
    buffer: CData
    view: np.ndarray | None = None


@dataclass(eq=False)
class StorageSlot:
    """A tensor's (or scratch buffer's) place in its graph's device block.

    `size` bytes of data, then `guard` bytes of guard; the descriptor range covers both
    (`binding_size`). Placed once every op of the graph is built (`Arena.place`).
    """

    name: str
    size: int
    guard: int = 0
    block: MemoryBlock | None = None
    offset: int = 0

    @property
    def handle(self) -> CData:
        """The VkBuffer holding this slot."""
        if self.block is None:
            raise RuntimeError(f"vulkan: {self.name!r} is not placed yet")
        return self.block.buffer

    @property
    def binding_size(self) -> int:
        """Bytes a descriptor binds: the allocation and its guard."""
        return self.size + self.guard

    @property
    def guard_offset(self) -> int:
        """Offset of the guard in the block."""
        return self.offset + self.size


class DescriptorCache:
    """Descriptor sets of one device, recycled across graphs.

    A set is cached by (descriptor layout, the (block, offset, range) of every binding): a
    graph that binds the same ranges as an earlier one (the same case rebuilt while
    shrinking or repeating) reuses its sets without a call. Sets in use by a live graph are
    counted and never evicted; beyond `capacity` entries the least recently used idle set
    is rewritten for the next miss of the same layout instead of allocating a new one. Sets
    come from descriptor pools created as needed and kept until `close`.

    `key` (`descriptor_key`) is a documented hook (docs/design.md §2.2): a test replaces it
    on the class to plant a cache keyed too loosely.
    """

    def __init__(self, ctx: VulkanContext, capacity: int = 2048) -> None:
        self.ctx = ctx
        self.capacity = capacity
        self._entries: OrderedDict[DescriptorKey, _CachedSet] = OrderedDict()
        self._spare: dict[DescriptorLayout, list[CData]] = {}
        self._pools: list[_DescriptorPool] = []
        self.sets_allocated = 0
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(kinds: DescriptorLayout, ranges: Sequence[BoundRange]) -> DescriptorKey:
        """The cache key of a set (`descriptor_key`)."""
        return descriptor_key(kinds, ranges)

    def acquire(
        self, requests: Sequence[tuple[DescriptorLayout, CData, Sequence[BoundRange]]]
    ) -> list[tuple[DescriptorKey, CData]]:
        """(key, set) per (descriptor layout, set layout, bound ranges) request, in order (a
        range per descriptor of the layout); every miss is written in one
        `vkUpdateDescriptorSets`. Requests with the same key share a set."""
        out: list[tuple[DescriptorKey, CData]] = []
        misses: dict[DescriptorKey, tuple[DescriptorLayout, CData, Sequence[BoundRange]]]
        misses = {}
        for kinds, layout, ranges in requests:
            key = self.key(kinds, ranges)
            out.append((key, None))
            entry = self._entries.get(key)
            if entry is not None:
                self.hits += 1
                entry.refs += 1
                self._entries.move_to_end(key)
            elif key not in misses:
                self.misses += 1
                misses[key] = (kinds, layout, ranges)
        if misses:
            handles = self._take([(kinds, layout) for kinds, layout, _ in misses.values()])
            self._write(
                [
                    (handle, kinds, ranges)
                    for handle, (kinds, _, ranges) in zip(handles, misses.values(), strict=True)
                ]
            )
            for handle, (key, (kinds, _, _)) in zip(handles, misses.items(), strict=True):
                self._entries[key] = _CachedSet(handle, kinds)
        for i, (key, _) in enumerate(out):
            entry = self._entries[key]
            if key in misses:
                entry.refs += 1  # hits counted theirs above
            out[i] = (key, entry.handle)
        return out

    def release(self, keys: Sequence[DescriptorKey]) -> None:
        """A graph no longer uses these sets; idle ones beyond `capacity` become spare."""
        for key in keys:
            entry = self._entries.get(key)
            if entry is not None:
                entry.refs -= 1
        excess = len(self._entries) - self.capacity
        if excess <= 0:
            return
        idle: list[DescriptorKey] = []
        for key, entry in self._entries.items():  # least recently used first
            if entry.refs <= 0:
                idle.append(key)
                if len(idle) == excess:
                    break
        for key in idle:
            self._retire(key)

    def forget_block(self, block: MemoryBlock) -> None:
        """Retire the idle sets that bind a block about to be freed (a later block may get
        the same handle)."""
        address = _address(block.buffer)
        for key in [
            k
            for k, e in self._entries.items()
            if e.refs <= 0 and any(address == b[0] for b in k[1])
        ]:
            self._retire(key)

    def _retire(self, key: DescriptorKey) -> None:
        entry = self._entries.pop(key)
        self._spare.setdefault(entry.kinds, []).append(entry.handle)

    def _take(self, wanted: list[tuple[DescriptorLayout, CData]]) -> list[CData]:
        """A set per (descriptor layout, set layout): a spare one, else newly allocated (one
        call per pool)."""
        handles: list[CData] = [None] * len(wanted)
        fresh: list[int] = []
        for i, (kinds, _) in enumerate(wanted):
            spare = self._spare.get(kinds)
            if spare:
                handles[i] = spare.pop()
            else:
                fresh.append(i)
        while fresh:
            pool = self._pool_for([wanted[i][0] for i in fresh])
            batch = [i for i in fresh if pool.fits(wanted[i][0], commit=True)]
            layouts = [wanted[i][1] for i in batch]
            sets = vk.vkAllocateDescriptorSets(
                self.ctx.device,
                vk.VkDescriptorSetAllocateInfo(
                    descriptorPool=pool.handle,
                    descriptorSetCount=len(layouts),
                    pSetLayouts=layouts,
                ),
            )
            for j, i in enumerate(batch):
                handles[i] = sets[j]
            self.sets_allocated += len(batch)
            taken = set(batch)
            fresh = [i for i in fresh if i not in taken]
        return handles

    def _pool_for(self, kinds: list[DescriptorLayout]) -> _DescriptorPool:
        """A descriptor pool with room for at least the first of these sets."""
        if self._pools and self._pools[-1].fits(kinds[0]):
            return self._pools[-1]
        sets = max(256, len(kinds))
        per_kind = {k: sum(_count(ks, k) for ks in kinds) for k in _DESCRIPTOR_TYPES}
        counts = {k: max(8 * sets, n) for k, n in per_kind.items()}
        sizes = [
            vk.VkDescriptorPoolSize(type=_DESCRIPTOR_TYPES[k], descriptorCount=n)
            for k, n in counts.items()
        ]
        handle = vk.vkCreateDescriptorPool(
            self.ctx.device,
            vk.VkDescriptorPoolCreateInfo(maxSets=sets, poolSizeCount=len(sizes), pPoolSizes=sizes),
            None,
        )
        pool = _DescriptorPool(handle, sets, counts)
        self._pools.append(pool)
        return pool

    def _write(self, sets: list[tuple[CData, DescriptorLayout, Sequence[BoundRange]]]) -> None:
        """One vkUpdateDescriptorSets for every binding of these sets (structs built raw:
        the vulkan package's keyword constructors cost ~30 µs each)."""
        total = sum(len(kinds) for _, kinds, _ in sets)
        infos = vk.ffi.new("VkDescriptorBufferInfo[]", total)
        writes = vk.ffi.new("VkWriteDescriptorSet[]", total)
        j = 0
        for handle, kinds, ranges in sets:
            for (binding, kind), bound in zip(kinds, ranges, strict=True):
                info = infos[j]
                info.buffer = bound.handle
                info.offset = bound.offset
                info.range = bound.binding_size
                write = writes[j]
                write.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                write.dstSet = handle
                write.dstBinding = binding
                write.descriptorCount = 1
                write.descriptorType = _DESCRIPTOR_TYPES[kind]
                write.pBufferInfo = infos + j
                j += 1
        vk.vkUpdateDescriptorSets(self.ctx.device, total, writes, 0, None)

    def close(self) -> None:
        """Destroy every descriptor pool (and so every set)."""
        for pool in self._pools:
            vk.vkDestroyDescriptorPool(self.ctx.device, pool.handle, None)
        self._pools.clear()
        self._entries.clear()
        self._spare.clear()


@dataclass
class _CachedSet:
    handle: CData
    kinds: DescriptorLayout
    refs: int = 0


def _count(layout: DescriptorLayout, kind: DescriptorKind) -> int:
    """Descriptors of `kind` in `layout`."""
    return sum(1 for _, k in layout if k == kind)


@dataclass
class _DescriptorPool:
    handle: CData
    sets_left: int
    left: dict[DescriptorKind, int] = field(default_factory=dict)

    def fits(self, kinds: DescriptorLayout, commit: bool = False) -> bool:
        need = {k: _count(kinds, k) for k in _DESCRIPTOR_TYPES}
        ok = self.sets_left >= 1 and all(self.left[k] >= n for k, n in need.items())
        if ok and commit:
            self.sets_left -= 1
            for k, n in need.items():
                self.left[k] -= n
        return ok


class MemoryPool:
    """The memory blocks, staging block, descriptor sets and submit objects of one runtime.

    Counters for tests and benchmarks: `allocations` and `frees` count `vkAllocateMemory`
    and `vkFreeMemory` calls over the pool's life; `stats()` gives those and what is held.
    Released by `close()` or when the pool is garbage collected (graphs keep their pool
    alive, so that happens once the runtime and every graph built from it are dropped).
    """

    def __init__(
        self,
        ctx: VulkanContext,
        *,
        device_block_bytes: int = 1 << 20,
        host_block_bytes: int = 64 << 10,
        retain_bytes: int = 64 << 20,
    ) -> None:
        self.ctx = ctx
        limits = ctx.properties.limits
        self.storage_alignment = max(16, int(limits.minStorageBufferOffsetAlignment))
        self.uniform_alignment = max(
            16, int(limits.minUniformBufferOffsetAlignment), int(limits.nonCoherentAtomSize)
        )
        self.device_block_bytes = device_block_bytes
        self.host_block_bytes = host_block_bytes
        self.retain_bytes = retain_bytes
        self.allocations = 0
        self.frees = 0
        self._serial = 0
        info = vk.VkCommandBufferAllocateInfo(
            commandPool=ctx.command_pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            commandBufferCount=1,
        )
        # Executes are synchronous (record, submit, wait), so one command buffer and one
        # fence serve every graph of the runtime.
        self._held = _Held(
            ctx,
            DescriptorCache(ctx),
            vk.vkAllocateCommandBuffers(ctx.device, info)[0],
            vk.vkCreateFence(ctx.device, vk.VkFenceCreateInfo(), None),
        )
        self._finalizer = weakref.finalize(self, self._held.release)
        self._finalizer.atexit = False  # the process's exit frees everything anyway

    @property
    def descriptors(self) -> DescriptorCache:
        """The runtime's descriptor sets."""
        return self._held.descriptors

    @property
    def command_buffer(self) -> CData:
        """The command buffer every execute records into."""
        return self._held.command_buffer

    @property
    def fence(self) -> CData:
        """The fence every execute waits on."""
        return self._held.fence

    # ------------------------------------------------------------------ blocks

    def acquire(self, host: bool, nbytes: int) -> MemoryBlock:
        """A block of at least `nbytes`: the smallest free one that fits, else a new one."""
        if not self._finalizer.alive:
            raise RuntimeError("vulkan: the memory pool was closed")
        free = self._held.free[host]
        fitting = [b for b in free if b.size >= nbytes]
        if fitting:
            block = min(fitting, key=lambda b: b.size)
            free.remove(block)
        else:
            floor = self.host_block_bytes if host else self.device_block_bytes
            block = self._allocate(host, max(floor, _pow2(nbytes)))
        self._held.in_use[block.serial] = block
        return block

    def release(self, block: MemoryBlock) -> None:
        """Hand a block back; free blocks beyond `retain_bytes` are freed, largest first."""
        if self._held.in_use.pop(block.serial, None) is None:
            return
        if not self._finalizer.alive:
            self._free_block(block)
            return
        free = self._held.free[block.host]
        free.append(block)
        while free and sum(b.size for b in free) > self.retain_bytes:
            largest = max(free, key=lambda b: b.size)
            free.remove(largest)
            self._free_block(largest)

    def staging(self, nbytes: int) -> MemoryBlock:
        """The runtime's host-visible staging block, grown to at least `nbytes`."""
        staging = self._held.staging
        if staging is None or staging.size < nbytes:
            if staging is not None:
                self._free_block(staging)
            staging = self._allocate(True, max(self.host_block_bytes, _pow2(nbytes)))
            self._held.staging = staging
        return staging

    def _allocate(self, host: bool, size: int) -> MemoryBlock:
        device = self.ctx.device
        usage = _HOST_USAGE | _DEVICE_USAGE if host else _DEVICE_USAGE
        handle = vk.vkCreateBuffer(
            device,
            vk.VkBufferCreateInfo(size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE),
            None,
        )
        req = vk.vkGetBufferMemoryRequirements(device, handle)
        flags = _HOST_FLAGS if host else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        memory = vk.vkAllocateMemory(
            device,
            vk.VkMemoryAllocateInfo(
                allocationSize=req.size,
                memoryTypeIndex=self.ctx.memory_type(req.memoryTypeBits, flags),
            ),
            None,
        )
        self.allocations += 1
        vk.vkBindBufferMemory(device, handle, memory, 0)
        view = None
        if host:
            view = np.frombuffer(vk.vkMapMemory(device, memory, 0, size, 0), np.uint8)
        self._serial += 1
        return MemoryBlock(self._serial, host, size, memory, handle, view)

    def _free_block(self, block: MemoryBlock) -> None:
        self._held.descriptors.forget_block(block)
        _destroy_block(self.ctx.device, block)
        self.frees += 1

    def stats(self) -> dict[str, int]:
        """Counters and holdings: allocations, frees, blocks and bytes held (free bytes among
        them), blocks in use, descriptor sets allocated."""
        held = self._held.blocks()
        return {
            "allocations": self.allocations,
            "frees": self.frees,
            "blocks": len(held),
            "bytes": sum(b.size for b in held),
            "free_bytes": sum(b.size for b in [*self._held.free[False], *self._held.free[True]]),
            "blocks_in_use": len(self._held.in_use),
            "descriptor_sets": self._held.descriptors.sets_allocated,
        }

    def close(self) -> None:
        """Free every block, descriptor pool, the command buffer and the fence (idempotent).

        Close the runtime's graphs first: a graph of a closed pool cannot execute.
        """
        self._finalizer()


def descriptor_key(kinds: DescriptorLayout, ranges: Sequence[BoundRange]) -> DescriptorKey:
    """The cache key of a set: its layout and the (buffer, offset, range) of every binding
    (all three: two sets that differ in any of them bind different memory)."""
    return (kinds, tuple((_address(r.handle), r.offset, r.binding_size) for r in ranges))


def _address(handle: CData) -> int:
    """A Vulkan handle as an int (cache keys)."""
    return int(vk.ffi.cast("uintptr_t", handle))


def _pow2(nbytes: int) -> int:
    """The smallest power of two >= nbytes (1 for 0)."""
    return 1 << max(0, nbytes - 1).bit_length()


@dataclass
class _Held:
    """Everything a pool gives back to the driver, apart from the pool (for its finalizer)."""

    ctx: VulkanContext
    descriptors: DescriptorCache
    command_buffer: CData
    fence: CData
    free: dict[bool, list[MemoryBlock]] = field(default_factory=lambda: {False: [], True: []})
    in_use: dict[int, MemoryBlock] = field(default_factory=dict)
    staging: MemoryBlock | None = None

    def blocks(self) -> list[MemoryBlock]:
        staging = [self.staging] if self.staging is not None else []
        return [*self.free[False], *self.free[True], *self.in_use.values(), *staging]

    def release(self) -> None:
        device = self.ctx.device
        vk.vkDeviceWaitIdle(device)
        for block in self.blocks():
            _destroy_block(device, block)
        self.free = {False: [], True: []}
        self.in_use.clear()
        self.staging = None
        self.descriptors.close()
        vk.vkDestroyFence(device, self.fence, None)
        vk.vkFreeCommandBuffers(device, self.ctx.command_pool, 1, [self.command_buffer])


def _destroy_block(device: CData, block: MemoryBlock) -> None:
    if block.host:
        block.view = None
        vk.vkUnmapMemory(device, block.memory)
    vk.vkDestroyBuffer(device, block.buffer, None)
    vk.vkFreeMemory(device, block.memory, None)


class Arena:
    """One graph's memory: its storage slots in one device block, its UBOs in host blocks.

    Storage is placed in one go (`place`) once every op is built, so the graph knows its
    total and takes a single block; UBOs are bump-allocated at once (ops write them while
    they build). `release` hands every block back.
    """

    def __init__(self, pool: MemoryPool) -> None:
        self.pool = pool
        self.slots: list[StorageSlot] = []
        self.block: MemoryBlock | None = None
        self.used = 0  # bytes of the device block the slots take, guards included
        self._host: list[MemoryBlock] = []
        self._host_used = 0

    def storage(self, name: str, nbytes: int) -> StorageSlot:
        """A slot of `nbytes` (rounded up to 4, at least 4) and its guard, placed later."""
        size = max(4, (nbytes + 3) // 4 * 4)
        guard = align_up(size + GUARD_MIN_BYTES, self.pool.storage_alignment) - size
        slot = StorageSlot(name, size, guard)
        self.slots.append(slot)
        return slot

    def place(self) -> None:
        """Take one device block for every slot and give each its offset."""
        self.used = sum(slot.binding_size for slot in self.slots)
        self.block = self.pool.acquire(False, max(self.used, 4))
        offset = 0
        for slot in self.slots:
            slot.block, slot.offset = self.block, offset
            offset += slot.binding_size

    def uniform(self, nbytes: int) -> Buffer:
        """A host-visible range of `nbytes` for a UBO (aligned for uniform binding)."""
        size = align_up(max(nbytes, 4), 4)
        offset = align_up(self._host_used, self.pool.uniform_alignment)
        if not self._host or offset + size > self._host[-1].size:
            self._host.append(self.pool.acquire(True, size))
            offset = 0
        block = self._host[-1]
        self._host_used = offset + size
        return Buffer(
            self.pool.ctx, block.buffer, block.memory, size, block.view, offset, owned=False
        )

    def release(self) -> None:
        """Hand every block back to the pool (idempotent)."""
        if self.block is not None:
            self.pool.release(self.block)
            self.block = None
        for block in self._host:
            self.pool.release(block)
        self._host.clear()
