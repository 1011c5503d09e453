"""Vulkan buffers with their own memory: device-local for tensors, host-visible for the rest."""

from __future__ import annotations

from dataclasses import dataclass

import vulkan as vk

from vulkan_ref.cdata import CData
from vulkan_ref.instance import VulkanContext

STORAGE_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)
STAGING_USAGE = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
UNIFORM_USAGE = vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT


@dataclass
class Buffer:
    """A VkBuffer bound to its own allocation; host-visible buffers stay mapped."""

    ctx: VulkanContext
    handle: CData
    memory: CData
    size: int
    mapped: CData = None  # cffi buffer over the whole allocation when host-visible

    @classmethod
    def create(cls, ctx: VulkanContext, size: int, usage: int, host_visible: bool) -> Buffer:
        """Allocate `size` bytes (rounded up to 4) with `usage`."""
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
        mapped = vk.vkMapMemory(ctx.device, memory, 0, size, 0) if host_visible else None
        return cls(ctx, handle, memory, size, mapped)

    def write(self, offset: int, data: bytes | memoryview) -> None:
        """Copy host bytes into a mapped buffer."""
        self.mapped[offset : offset + len(data)] = data

    def read(self, offset: int, size: int) -> bytes:
        """Copy bytes out of a mapped buffer."""
        return bytes(self.mapped[offset : offset + size])

    def destroy(self) -> None:
        """Free the buffer and its memory (idempotent)."""
        if self.handle is None:
            return
        if self.mapped is not None:
            vk.vkUnmapMemory(self.ctx.device, self.memory)
            self.mapped = None
        vk.vkDestroyBuffer(self.ctx.device, self.handle, None)
        vk.vkFreeMemory(self.ctx.device, self.memory, None)
        self.handle = None
