"""GPU time of a loaded graph's running dispatches, after a clock warm-up in the same submit.

The same measurement as `webgpu_backend.profiling.time_graph` and
`vulkan_ref.profiling.time_graph` (each graph executed once with the inputs, then rounds that
replay the running dispatches of `graphs[r % len(graphs)]`, `warmup` untimed rounds and
`repeats` timed ones, all in one submit), with `burn_passes` rounds of the burn kernel
(`benchmarks.ceiling`) first, so that the timed dispatches run at full clocks rather than at
the idle clocks the GPU drops to while the host loads graphs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.ceiling import VulkanBurn, WebGPUBurn
from webgpu_backend.profiling import KernelTiming


def webgpu_time_graph(
    graphs: Sequence[Any],
    inputs: Mapping[str, np.ndarray | int],
    *,
    repeats: int,
    warmup: int,
    burn: WebGPUBurn | None = None,
    burn_passes: int = 0,
) -> list[KernelTiming]:
    """GPU times of every running dispatch of WebGPU graphs (see the module docstring)."""
    from webgpu_backend import profiling

    dev = graphs[0].dev
    per_graph = []
    for graph in graphs:
        graph.execute(inputs)
        running = [d for d in graph.dispatches if d.count > 0]
        per_graph.append([(d.op, d.kernel, profiling.dispatch_encoder(dev, d)) for d in running])
    slots = [(op, kernel) for op, kernel, _ in per_graph[0]]
    rounds = burn.rounds(burn_passes) if burn is not None and burn_passes else []
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
) -> list[KernelTiming]:
    """GPU times of every running dispatch node of Vulkan graphs (see the module docstring)."""
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
    rounds += [[e for _, _, e in per_graph[r % len(graphs)]] for r in range(warmup + repeats)]
    times = profiling.time_rounds(graphs[0].ctx, rounds, timed_from=len(rounds) - repeats)
    return [
        KernelTiming(op, kernel, tuple(t[i] for t in times)) for i, (op, kernel) in enumerate(slots)
    ]
