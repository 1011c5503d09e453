"""Opt-in GPU timing for the WebGPU runtime: one compute pass per dispatch, timestamps around it.

Not part of a parity run. Needs a device with the `timestamp-query` feature
(`webgpu_backend.device.get_timing_device`). WebGPU resolves pass timestamps in nanoseconds;
wgpu-native passes the Vulkan driver's ticks through, so the numbers are nanoseconds where
the driver's `timestampPeriod` is 1.0 (NVIDIA and lavapipe; `benchmarks/` prints the period).

Two levels:
- `time_rounds` times arbitrary passes (a benchmark's own kernels), each in its own compute
  pass, or (`back_to_back=True`) each round's passes recorded back to back in one compute
  pass with timestamps only at its start and end;
- `time_graph` times the dispatches a loaded `WebGPUGraph` runs for given inputs, rotating
  over several identical graphs with their own weights so that repeated calls read their
  weights from memory rather than from a warm cache; `graph_encoders` gives its recorded
  dispatches to callers that build their own rounds (`benchmarks.timing`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import wgpu
from wgpu.classes import GPUComputePassEncoder, GPUDevice

from webgpu_backend.device import WebGPUDevice
from webgpu_backend.gpu.wgpu_native import WgpuImplementation
from webgpu_backend.graph import Scheduled, WebGPUGraph

# Encodes one dispatch (pipeline, bind group, dispatch_workgroups) into a compute pass.
PassEncoder = Callable[[GPUComputePassEncoder], None]
# wgpu-native's cap on the queries of one query set.
MAX_QUERIES = 4096


@dataclass(frozen=True)
class KernelTiming:
    """GPU times of one dispatch slot over the timed repetitions."""

    op: str
    kernel: str
    times_ns: tuple[float, ...]

    @property
    def median_ns(self) -> float:
        """The median time, in nanoseconds."""
        return float(statistics.median(self.times_ns))


def wgpu_device(dev: WebGPUDevice) -> GPUDevice:
    """wgpu-py's device under `dev`: GPU timing needs timestamp queries, which only the
    in-process wgpu implementation offers here (`get_timing_device`).

    Raises:
        ValueError: `dev` runs on another implementation.
    """
    if not isinstance(dev.gpu, WgpuImplementation):
        raise ValueError(
            f"GPU timing runs on the wgpu implementation (get_timing_device()), "
            f"not on {dev.gpu.name}"
        )
    return dev.gpu.device


def time_rounds(
    dev: WebGPUDevice,
    rounds: Sequence[Sequence[PassEncoder]],
    *,
    timed_from: int = 0,
    back_to_back: bool = False,
) -> list[list[float]]:
    """Run every round's passes in order in one submit; time the passes of later rounds.

    Each pass runs in its own compute pass (so passes never overlap); rounds before
    `timed_from` are warm-up and carry no timestamps. With `back_to_back`, each round is
    instead one compute pass holding all its dispatches, timed as a whole: wgpu inserts a
    barrier between two dispatches of a pass only where one writes what the other uses, so
    dispatches over independent buffers may overlap, as in a stream of independent work.

    Returns:
        per timed round, the GPU time of each of its passes in nanoseconds, or with
        `back_to_back` a one-element list: the GPU time of the whole round.
    """
    # A group is what one compute pass holds and one timestamp pair brackets: one pass each,
    # or a whole round back to back.
    groups = [[list(r)] if back_to_back else [[p] for p in r] for r in rounds]
    queries = 2 * sum(len(g) for g in groups[timed_from:])
    if queries > MAX_QUERIES:
        raise ValueError(f"{queries} timestamps asked for; one query set holds {MAX_QUERIES}")
    device = wgpu_device(dev)
    query_set = device.create_query_set(type=wgpu.QueryType.timestamp, count=max(queries, 2))
    resolve = device.create_buffer(
        size=8 * max(queries, 2),
        usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC,
    )
    readback = device.create_buffer(
        size=resolve.size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
    )
    try:
        encoder = device.create_command_encoder()
        index = 0
        for r, round_groups in enumerate(groups):
            for group in round_groups:
                writes = None
                if r >= timed_from:
                    writes = {
                        "query_set": query_set,
                        "beginning_of_pass_write_index": index,
                        "end_of_pass_write_index": index + 1,
                    }
                    index += 2
                cpass = encoder.begin_compute_pass(timestamp_writes=writes)
                for encode in group:
                    encode(cpass)
                cpass.end()
        if queries:
            encoder.resolve_query_set(query_set, 0, queries, resolve, 0)
            encoder.copy_buffer_to_buffer(resolve, 0, readback, 0, 8 * queries)
        device.queue.submit([encoder.finish()])
        readback.map_sync(wgpu.MapMode.READ)
        stamps = np.frombuffer(readback.read_mapped(), np.uint64)[:queries].astype(np.int64)
        readback.unmap()
    finally:
        for obj in (readback, resolve, query_set):
            obj.destroy()
    spans = (stamps[1::2] - stamps[0::2]).astype(float).tolist()
    out, start = [], 0
    for round_groups in groups[timed_from:]:
        out.append(spans[start : start + len(round_groups)])
        start += len(round_groups)
    return out


def dispatch_encoder(scheduled: Scheduled) -> PassEncoder:
    """A pass encoder that replays one dispatch as the graph last resized it."""
    run = scheduled.run
    if run is None:
        raise ValueError(f"{scheduled.record.kernel} of {scheduled.record.op} is skipped")
    pipeline, bind_group = run.pipeline.pipeline.handle, run.bind_group.handle
    grid = scheduled.record.physical_grid

    def encode(cpass: GPUComputePassEncoder) -> None:
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, bind_group)
        cpass.dispatch_workgroups(*grid)

    return encode


def graph_encoders(
    graphs: Sequence[WebGPUGraph], inputs: Mapping[str, np.ndarray | int]
) -> list[list[tuple[str, str, PassEncoder]]]:
    """Execute each graph once with `inputs`; per graph, (op, kernel slot, encoder) of every
    dispatch that runs at these sizes, in graph order."""
    if not graphs:
        raise ValueError("timing needs at least one loaded graph, got none")
    per_graph = []
    for graph in graphs:
        graph.execute(inputs)
        running = [s for s in graph.schedule() if s.run is not None]
        per_graph.append([(s.record.op, s.record.kernel, dispatch_encoder(s)) for s in running])
    return per_graph


def time_graph(
    graphs: Sequence[WebGPUGraph],
    inputs: Mapping[str, np.ndarray | int],
    *,
    repeats: int = 20,
    warmup: int = 3,
) -> list[KernelTiming]:
    """GPU time of every dispatch that runs for `inputs`, median-ready.

    Each graph is first executed once with `inputs` (resize, params, uploads); then round r
    replays the running dispatches of `graphs[r % len(graphs)]`, `warmup` untimed rounds
    followed by `repeats` timed ones, all in one submit.

    Args:
        graphs: one graph, or several identical graphs (same ops, own constants) loaded on
            the same timing device.
    """
    per_graph = graph_encoders(graphs, inputs)
    slots = [(op, kernel) for op, kernel, _ in per_graph[0]]
    rounds = [[enc for _, _, enc in per_graph[r % len(graphs)]] for r in range(warmup + repeats)]
    times = time_rounds(graphs[0].dev, rounds, timed_from=warmup)
    return [
        KernelTiming(op, kernel, tuple(t[i] for t in times)) for i, (op, kernel) in enumerate(slots)
    ]
