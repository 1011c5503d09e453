"""Vulkan buffers: a range of a pooled block (`vulkan_ref.pool`) or one with its own memory.

Graphs take every buffer from their runtime's pool (`Arena.uniform`); `Buffer.create` gives
a buffer its own allocation, for benchmarks that want nothing shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import vulkan as vk

from vulkan_ref.cdata import CData
from vulkan_ref.instance import VulkanContext

STORAGE_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)
HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT


@dataclass
class Buffer:
    """`size` bytes at `offset` of a VkBuffer; host-visible ones stay mapped.

    Attributes:
        mapped: the whole mapping of `memory` as a writable uint8 array (host-visible only).
        owned: the buffer and memory are this object's own (`create`), freed by `destroy`;
            otherwise they belong to a pool block, which outlives the range.
    """

    ctx: VulkanContext
    handle: CData
    memory: CData
    size: int
    mapped: np.ndarray | None = None
    offset: int = 0
    owned: bool = True

    @classmethod
    def create(cls, ctx: VulkanContext, size: int, usage: int, host_visible: bool) -> Buffer:
        """Allocate `size` bytes (rounded up to 4) with `usage`, in memory of its own."""
        size = max(4, (size + 3) // 4 * 4)
        info = vk.VkBufferCreateInfo(
            size=size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE
        )
        handle = vk.vkCreateBuffer(ctx.device, info, None)
        req = vk.vkGetBufferMemoryRequirements(ctx.device, handle)
        flags = HOST_VISIBLE if host_visible else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        alloc = vk.VkMemoryAllocateInfo(
            allocationSize=req.size, memoryTypeIndex=ctx.memory_type(req.memoryTypeBits, flags)
        )
        memory = vk.vkAllocateMemory(ctx.device, alloc, None)
        vk.vkBindBufferMemory(ctx.device, handle, memory, 0)
        mapped = None
        if host_visible:
            mapped = np.frombuffer(vk.vkMapMemory(ctx.device, memory, 0, size, 0), np.uint8)
        return cls(ctx, handle, memory, size, mapped)

    @property
    def binding_size(self) -> int:
        """Bytes a descriptor binds."""
        return self.size

    def write(self, offset: int, data: bytes | memoryview) -> None:
        """Copy host bytes into a mapped buffer, `offset` bytes into its range."""
        assert self.mapped is not None, "write to a buffer that is not host-visible"
        start = self.offset + offset
        self.mapped[start : start + len(data)] = np.frombuffer(data, np.uint8)

    def read(self, offset: int, size: int) -> bytes:
        """Copy bytes out of a mapped buffer, `offset` bytes into its range."""
        assert self.mapped is not None, "read from a buffer that is not host-visible"
        start = self.offset + offset
        return self.mapped[start : start + size].tobytes()

    def destroy(self) -> None:
        """Free the buffer and its memory if they are its own (idempotent)."""
        if self.handle is None or not self.owned:
            return
        if self.mapped is not None:
            self.mapped = None
            vk.vkUnmapMemory(self.ctx.device, self.memory)
        vk.vkDestroyBuffer(self.ctx.device, self.handle, None)
        vk.vkFreeMemory(self.ctx.device, self.memory, None)
        self.handle = None
