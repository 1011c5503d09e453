"""Recording and submitting one step of a Vulkan graph: the command buffer is recorded anew
for every execute (the uploads `vulkan_ref.staging` planned, canary fills, every dispatch
followed by a memory barrier, the read-back copies), then one submit and one fence wait
(docs/design.md §4.2).

Commands go straight to the loader's entry points with arguments made once (the `vulkan`
package's wrappers convert every argument on every call: ~20 µs a command on an H200 host,
~13 commands a dispatch step).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import vulkan as vk

from graph_format import DeviceError, DispatchRecord
from vulkan_ref.cdata import CData
from vulkan_ref.instance import FENCE_TIMEOUT_NS, VulkanContext
from vulkan_ref.nodes import WG, Stateful
from vulkan_ref.pool import Arena, MemoryPool
from vulkan_ref.staging import Reads, Writes
from vulkan_ref.tensor import VTensor

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


class CommandRecorder:
    """Records and submits a graph's steps on the runtime's command buffer and fence.

    Attributes:
        device_lost: a fence wait failed: a submit may still be running over the graph's
            memory.
    """

    def __init__(self, ctx: VulkanContext, pool: MemoryPool, arena: Arena) -> None:
        self.ctx = ctx
        self.pool = pool
        self.arena = arena
        self.device_lost = False

    @functools.cached_property
    def _submit_info(self) -> CData:
        return vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[self.pool.command_buffer])

    def submit(self) -> None:
        """Submit the recorded command buffer and wait for it.

        Raises:
            DeviceError: the fence wait failed (the device may be lost).
        """
        vk.vkQueueSubmit(self.ctx.queue, 1, self._submit_info, self.pool.fence)
        try:
            vk.vkWaitForFences(self.ctx.device, 1, [self.pool.fence], vk.VK_TRUE, FENCE_TIMEOUT_NS)
        except vk.VkError as err:
            self.device_lost = True
            raise DeviceError("vulkan", [f"fence wait failed: {type(err).__name__}"]) from None
        finally:
            vk.vkResetFences(self.ctx.device, 1, [self.pool.fence])

    def record(
        self,
        staging: CData,
        writes: Writes,
        reads: Reads,
        fill: Mapping[str, tuple[int, int]],
        tensors: Mapping[str, VTensor],
        nodes: Sequence[Stateful],
        grids: Sequence[Sequence[WG | None]],
    ) -> list[DispatchRecord]:
        """Record a step: `writes`, the canary `fill` of `tensors` named, each dispatch of
        `nodes` on its `grids`, then `reads`. Returns a record per dispatch, run or skipped."""
        cb = self.pool.command_buffer
        vk.vkBeginCommandBuffer(cb, _ONE_TIME)
        try:
            self._record_uploads(cb, staging, writes, fill, tensors)
            records = self._record_dispatches(cb, nodes, grids)
            _lib.vkCmdPipelineBarrier(cb, *_ALL_TO_TRANSFER)
            block = self.arena.block
            assert block is not None
            regions = copy_regions(reads.copies)
            _lib.vkCmdCopyBuffer(cb, block.buffer, staging, len(reads.copies), regions)
            _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_HOST)
            return records
        finally:
            # Ended even when recording failed: the runtime's next execute begins it again.
            vk.vkEndCommandBuffer(cb)

    def _record_uploads(
        self,
        cb: CData,
        staging: CData,
        writes: Writes,
        fill: Mapping[str, tuple[int, int]],
        tensors: Mapping[str, VTensor],
    ) -> None:
        block = self.arena.block
        assert block is not None
        memory = block.buffer
        if writes.zero:
            # Reused memory starts as a fresh allocation does: zeros, then initial data.
            _lib.vkCmdFillBuffer(cb, memory, 0, (writes.zero + 3) // 4 * 4, 0)
            _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_TRANSFER)
        if writes.copies:
            regions = copy_regions(writes.copies)
            _lib.vkCmdCopyBuffer(cb, staging, memory, len(writes.copies), regions)
            if writes.zero and fill:
                # The first submit's copies carry zeros between nearby pieces, slack
                # included: the slack poison goes after them.
                _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_TRANSFER)
        for name, (offset, word) in fill.items():
            slot = tensors[name].buffer
            if offset < slot.size:
                _lib.vkCmdFillBuffer(cb, memory, slot.offset + offset, slot.size - offset, word)
        _lib.vkCmdPipelineBarrier(cb, *_TRANSFER_TO_COMPUTE)

    @staticmethod
    def _record_dispatches(
        cb: CData, nodes: Sequence[Stateful], grids: Sequence[Sequence[WG | None]]
    ) -> list[DispatchRecord]:
        records: list[DispatchRecord] = []
        bind_point = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        for node, node_grids in zip(nodes, grids, strict=True):
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
        return records


def copy_regions(regions: Sequence[tuple[int, int, int]]) -> CData:
    """A VkBufferCopy array of (src offset, dst offset, size), built raw (fast)."""
    array = vk.ffi.new("VkBufferCopy[]", len(regions))
    for i, (src, dst, size) in enumerate(regions):
        region = array[i]
        region.srcOffset, region.dstOffset, region.size = src, dst, size
    return array
