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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.ceiling import VulkanBurn, WebGPUBurn
from webgpu_backend.profiling import KernelTiming


def _time_calls(
    time_rounds: Callable[..., list[list[float]]],
    handle: Any,
    per_graph: Sequence[Sequence[tuple[str, str, Any]]],
    burn: WebGPUBurn | VulkanBurn | None,
    *,
    repeats: int,
    warmup: int,
    burn_passes: int,
    batch: int,
) -> list[KernelTiming]:
    """Time recorded graph calls through one API's `time_rounds` (see the module docstring).

    `per_graph[g]` holds (op, kernel, encoder) per running dispatch of graph g. Each round
    holds max(batch, 1) consecutive graph calls, rotating over the graphs.
    """
    per = max(batch, 1)
    n = len(per_graph)
    rounds = burn.rounds(burn_passes) if burn is not None and burn_passes else []
    rounds += [
        [e for i in range(per) for _, _, e in per_graph[(r * per + i) % n]]
        for r in range(warmup + repeats)
    ]
    times = time_rounds(handle, rounds, timed_from=len(rounds) - repeats, back_to_back=batch > 0)
    slots = [(op, kernel) for op, kernel, _ in per_graph[0]]
    if batch > 0:  # one timing per graph call, its dispatches joined by '+'
        op = "+".join(dict.fromkeys(op for op, _ in slots))
        kernel = "+".join(kernel for _, kernel in slots)
        return [KernelTiming(op, kernel, tuple(t[0] / batch for t in times))]
    return [
        KernelTiming(op, kernel, tuple(t[i] for t in times)) for i, (op, kernel) in enumerate(slots)
    ]


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

    return _time_calls(
        profiling.time_rounds,
        graphs[0].dev,
        profiling.graph_encoders(graphs, inputs),
        burn,
        repeats=repeats,
        warmup=warmup,
        burn_passes=burn_passes,
        batch=batch,
    )


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

    return _time_calls(
        profiling.time_rounds,
        graphs[0].ctx,
        profiling.graph_recorders(graphs, inputs),
        burn,
        repeats=repeats,
        warmup=warmup,
        burn_passes=burn_passes,
        batch=batch,
    )
