"""GPU time of a loaded graph's running dispatches, after a clock warm-up in the same submit.

The same measurement as `webgpu_backend.profiling.time_graph` and
`vulkan_ref.profiling.time_graph` (each graph executed once with the inputs, then rounds that
replay the running dispatches of `graphs[r % len(graphs)]`, `warmup` untimed rounds and
`repeats` timed ones, all in one submit), with `burn_passes` rounds of the burn kernel
(`benchmarks.ceiling`) first, so that the timed dispatches run at full clocks rather than at
the idle clocks the GPU drops to while the host loads graphs.

With `batch` > 0 (back-to-back mode), each round instead holds the running dispatches of
`batch` consecutive graphs (`graphs[(r * batch + i) % len(graphs)]`), recorded back to back
(WebGPU: one compute pass, timestamps at its start and end; Vulkan: no barrier between them,
one timestamp pair around the round), and the time of a call is the round's GPU time divided
by `batch`: the rate of a stream of independent calls, without the fixed cost (launch, drain,
barrier, timestamps) that a single timed dispatch carries. The graphs must not share written
buffers (own weight copies, own outputs), or wgpu puts barriers between them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.ceiling import VulkanBurn, WebGPUBurn
from webgpu_backend.profiling import KernelTiming


def _batched(per_graph: Sequence[Sequence[Any]], batch: int, count: int) -> list[list[Any]]:
    """`count` rounds of `batch` consecutive graph calls each, rotating over the graphs."""
    n = len(per_graph)
    return [
        [e for i in range(batch) for _, _, e in per_graph[(r * batch + i) % n]]
        for r in range(count)
    ]


def _per_call(
    slots: Sequence[tuple[str, str]], times: Sequence[Sequence[float]], batch: int
) -> KernelTiming:
    """One timing per graph call: each back-to-back round's GPU time over `batch`."""
    op = "+".join(dict.fromkeys(op for op, _ in slots))
    kernel = "+".join(kernel for _, kernel in slots)
    return KernelTiming(op, kernel, tuple(t[0] / batch for t in times))


def webgpu_time_graph(
    graphs: Sequence[Any],
    inputs: Mapping[str, np.ndarray | int],
    *,
    repeats: int,
    warmup: int,
    burn: WebGPUBurn | None = None,
    burn_passes: int = 0,
    batch: int = 0,
) -> list[KernelTiming]:
    """GPU times of every running dispatch of WebGPU graphs (see the module docstring).

    With `batch` > 0, one KernelTiming per call of the graph (its dispatches joined by '+').
    """
    from webgpu_backend import profiling

    dev = graphs[0].dev
    per_graph = []
    for graph in graphs:
        graph.execute(inputs)
        running = [d for d in graph.dispatches if d.count > 0]
        per_graph.append([(d.op, d.kernel, profiling.dispatch_encoder(dev, d)) for d in running])
    slots = [(op, kernel) for op, kernel, _ in per_graph[0]]
    rounds = burn.rounds(burn_passes) if burn is not None and burn_passes else []
    if batch > 0:
        rounds += _batched(per_graph, batch, warmup + repeats)
        times = profiling.time_rounds(
            dev, rounds, timed_from=len(rounds) - repeats, back_to_back=True
        )
        return [_per_call(slots, times, batch)]
    rounds += [[e for _, _, e in per_graph[r % len(graphs)]] for r in range(warmup + repeats)]
    times = profiling.time_rounds(dev, rounds, timed_from=len(rounds) - repeats)
    return [
        KernelTiming(op, kernel, tuple(t[i] for t in times)) for i, (op, kernel) in enumerate(slots)
    ]


def vulkan_time_graph(
    graphs: Sequence[Any],
    inputs: Mapping[str, np.ndarray | int],
    *,
    repeats: int,
    warmup: int,
    burn: VulkanBurn | None = None,
    burn_passes: int = 0,
    batch: int = 0,
) -> list[KernelTiming]:
    """GPU times of every running dispatch node of Vulkan graphs (see the module docstring).

    With `batch` > 0, one KernelTiming per call of the graph (its dispatches joined by '+').
    """
    from vulkan_ref import profiling
    from vulkan_ref.graph import DispatchNode

    per_graph = []
    for graph in graphs:
        graph.execute(inputs)
        running = [
            n for n in graph.nodes if isinstance(n, DispatchNode) and n.logical_count != (0, 0, 0)
        ]
        per_graph.append([(n.op, n.kernel, profiling.node_recorder(graph, n)) for n in running])
    slots = [(op, kernel) for op, kernel, _ in per_graph[0]]
    rounds = burn.rounds(burn_passes) if burn is not None and burn_passes else []
    if batch > 0:
        rounds += _batched(per_graph, batch, warmup + repeats)
        times = profiling.time_rounds(
            graphs[0].ctx, rounds, timed_from=len(rounds) - repeats, back_to_back=True
        )
        return [_per_call(slots, times, batch)]
    rounds += [[e for _, _, e in per_graph[r % len(graphs)]] for r in range(warmup + repeats)]
    times = profiling.time_rounds(graphs[0].ctx, rounds, timed_from=len(rounds) - repeats)
    return [
        KernelTiming(op, kernel, tuple(t[i] for t in times)) for i, (op, kernel) in enumerate(slots)
    ]
