"""Opt-in GPU timing for the Vulkan runtime: a timestamp query pool around each dispatch.

Not part of a parity run. Each timed dispatch is recorded as
`barrier; vkCmdWriteTimestamp(BOTTOM_OF_PIPE); dispatch; vkCmdWriteTimestamp(BOTTOM_OF_PIPE)`:
a bottom-of-pipe timestamp is written once every earlier command has finished, so the span
covers exactly the dispatch (after the one before it has drained). Ticks are converted with
the device's `timestampPeriod` and masked to the queue's `timestampValidBits`.

With `back_to_back=True`, `time_rounds` instead records each round as
`barrier; timestamp; dispatch; dispatch; ...; timestamp`: no barrier between the round's
dispatches, so dispatches over independent buffers may overlap, and one span per round.

Two levels, as in `webgpu_backend.profiling`:
- `time_rounds` times arbitrary recorded dispatches (a benchmark's own kernels);
- `time_graph` times the dispatches a loaded `ComputeGraph` runs for given inputs, rotating
  over several identical graphs with their own weights; `graph_recorders` gives its
  recorded dispatches to callers that build their own rounds (`benchmarks.timing`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import vulkan as vk

from graph_format import BackendUnavailable
from vulkan_ref.cdata import CData
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.instance import VulkanContext
from vulkan_ref.resize import fold

# Records one dispatch (bind pipeline and descriptors, push constants, vkCmdDispatch).
Recorder = Callable[[CData], None]  # called with the command buffer


@dataclass(frozen=True)
class KernelTiming:
    """GPU times of one dispatch node over the timed repetitions."""

    op: str
    kernel: str
    times_ns: tuple[float, ...]

    @property
    def median_ns(self) -> float:
        """The median time, in nanoseconds."""
        return float(statistics.median(self.times_ns))


def timestamp_period_ns(ctx: VulkanContext) -> float:
    """Nanoseconds per timestamp tick."""
    return float(ctx.properties.limits.timestampPeriod)


def _valid_mask(ctx: VulkanContext) -> int:
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(ctx.physical_device)
    bits = int(families[ctx.queue_family].timestampValidBits)
    if bits == 0:
        raise BackendUnavailable("vulkan: the compute queue does not support timestamps")
    return (1 << bits) - 1 if bits < 64 else (1 << 64) - 1


def _barrier(cb: CData) -> None:
    barrier = vk.VkMemoryBarrier(
        srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
        dstAccessMask=vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
    )
    vk.vkCmdPipelineBarrier(
        cb,
        vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT,
        vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
        0,
        1,
        [barrier],
        0,
        None,
        0,
        None,
    )


def _submit_and_wait(ctx: VulkanContext, record: Recorder) -> None:
    """Record a one-time command buffer with `record`, submit it and wait for it."""
    info = vk.VkCommandBufferAllocateInfo(
        commandPool=ctx.command_pool,
        level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        commandBufferCount=1,
    )
    cb = vk.vkAllocateCommandBuffers(ctx.device, info)[0]
    fence = vk.vkCreateFence(ctx.device, vk.VkFenceCreateInfo(), None)
    try:
        vk.vkBeginCommandBuffer(
            cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        )
        record(cb)
        vk.vkEndCommandBuffer(cb)
        submit = vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[cb])
        vk.vkQueueSubmit(ctx.queue, 1, [submit], fence)
        # Timed runs may be long (a benchmark on a CPU driver): wait without a bound.
        vk.vkWaitForFences(ctx.device, 1, [fence], vk.VK_TRUE, 0xFFFFFFFFFFFFFFFF)
    finally:
        vk.vkDestroyFence(ctx.device, fence, None)
        vk.vkFreeCommandBuffers(ctx.device, ctx.command_pool, 1, [cb])


def time_rounds(
    ctx: VulkanContext,
    rounds: Sequence[Sequence[Recorder]],
    *,
    timed_from: int = 0,
    back_to_back: bool = False,
) -> list[list[float]]:
    """Record every round's dispatches in order into one command buffer and submit it once.

    Rounds before `timed_from` are warm-up and carry no timestamps. With `back_to_back`,
    a round's dispatches follow each other without barriers (one barrier before the round)
    and one timestamp pair brackets the whole round.

    Returns:
        per timed round, the GPU time of each of its dispatches in nanoseconds, or with
        `back_to_back` a one-element list: the GPU time of the whole round.
    """
    mask = _valid_mask(ctx)
    # A group follows one barrier and is bracketed by one timestamp pair: one dispatch each,
    # or a whole round back to back.
    groups = [[list(r)] if back_to_back else [[rec] for rec in r] for r in rounds]
    queries = 2 * sum(len(g) for g in groups[timed_from:])
    pool = vk.vkCreateQueryPool(
        ctx.device,
        vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=max(queries, 2)),
        None,
    )
    try:

        def record(cb: CData) -> None:
            vk.vkCmdResetQueryPool(cb, pool, 0, max(queries, 2))
            stage = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
            index = 0
            for r, round_groups in enumerate(groups):
                for group in round_groups:
                    _barrier(cb)
                    if r >= timed_from:
                        vk.vkCmdWriteTimestamp(cb, stage, pool, index)
                    for rec in group:
                        rec(cb)
                    if r >= timed_from:
                        vk.vkCmdWriteTimestamp(cb, stage, pool, index + 1)
                        index += 2

        _submit_and_wait(ctx, record)
        data = vk.ffi.new("uint64_t[]", max(queries, 2))
        if queries:
            vk.vkGetQueryPoolResults(
                ctx.device,
                pool,
                0,
                queries,
                8 * queries,
                data,
                8,
                vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT,
            )
        stamps = [int(data[i]) & mask for i in range(queries)]
    finally:
        vk.vkDestroyQueryPool(ctx.device, pool, None)
    period = timestamp_period_ns(ctx)
    spans = [((stamps[i + 1] - stamps[i]) & mask) * period for i in range(0, queries, 2)]
    out, start = [], 0
    for round_groups in groups[timed_from:]:
        out.append(spans[start : start + len(round_groups)])
        start += len(round_groups)
    return out


def part_recorder(graph: ComputeGraph, node: DispatchNode, index: int) -> Recorder:
    """A recorder that replays dispatch `index` of `node`'s kernel as the graph last resized
    it."""
    state = node.state
    assert state.kernel is not None
    part = state.kernel.parts[index]
    pipeline = part.pipeline
    grid = fold(state.counts[index], graph.ctx.max_workgroup_count)
    push = state.push[index]
    size = part.push.size if part.push is not None else 0

    def record(cb: CData) -> None:
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
        vk.vkCmdBindDescriptorSets(
            cb,
            vk.VK_PIPELINE_BIND_POINT_COMPUTE,
            pipeline.layout,
            0,
            1,
            [part.descriptor_set],
            0,
            None,
        )
        if push is not None:
            vk.vkCmdPushConstants(
                cb, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, size, push
            )
        vk.vkCmdDispatch(cb, *grid)

    return record


def graph_recorders(
    graphs: Sequence[ComputeGraph], inputs: Mapping[str, np.ndarray | int]
) -> list[list[tuple[str, str, Recorder]]]:
    """Execute each graph once with `inputs`; per graph, (op, slot, recorder) of every
    dispatch that runs at these sizes, in graph order."""
    if not graphs:
        raise ValueError("timing needs at least one loaded graph, got none")
    per_graph = []
    for graph in graphs:
        graph.execute(inputs)
        running = []
        for node in graph.nodes:
            if not isinstance(node, DispatchNode):
                continue
            for index, count in enumerate(node.state.counts):
                if count != (0, 0, 0):
                    running.append((node.op, node.slot, part_recorder(graph, node, index)))
        per_graph.append(running)
    return per_graph


def time_graph(
    graphs: Sequence[ComputeGraph],
    inputs: Mapping[str, np.ndarray | int],
    *,
    repeats: int = 20,
    warmup: int = 3,
) -> list[KernelTiming]:
    """GPU time of every dispatch node that runs for `inputs`, median-ready.

    Each graph is first executed once with `inputs` (resize, metadata, uploads); then round
    r replays the running dispatch nodes of `graphs[r % len(graphs)]`, `warmup` untimed
    rounds followed by `repeats` timed ones, all in one submit.
    """
    per_graph = graph_recorders(graphs, inputs)
    slots = [(op, kernel) for op, kernel, _ in per_graph[0]]
    rounds = [[rec for _, _, rec in per_graph[r % len(graphs)]] for r in range(warmup + repeats)]
    times = time_rounds(graphs[0].ctx, rounds, timed_from=warmup)
    return [
        KernelTiming(op, kernel, tuple(t[i] for t in times)) for i, (op, kernel) in enumerate(slots)
    ]
