"""Host time of a WebGPU execute: `python -m benchmarks.step_host_time` (measured, never asserted).

Each of a deterministic set of generated cases (`--families decoder`, `--cases 20` after
`--warmup 3` untimed ones, `--seed 7`) is built once and run through all its steps
`--repeat` times. Per execute it takes the wall time, the part spent waiting for the GPU
(mapping the read-back buffer, which waits for the submit), and the part spent in the resize
engine (`propagate_resize`: the ops' hooks, their values, params packing). The host time is
the execute's wall time less the wait. Medians over every step, in µs.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from typing import Any

from benchmarks.graph_builds import generate
from graph_format import ParityError
from webgpu_backend import WebGPURuntime
from webgpu_backend.graph import WebGPUGraph


def measure(cases: list[Any], repeat: int) -> dict[str, list[float]]:
    """Per execute: wall, GPU wait and resize-engine seconds."""
    runtime = WebGPURuntime()
    times: dict[str, list[float]] = {"wall": [], "wait": [], "resize": []}
    original_map = WebGPUGraph._map
    original_propagate = WebGPUGraph.propagate_resize
    spent = {"wait": 0.0, "resize": 0.0}

    def timed_map(readback: Any, nbytes: int) -> bytes:
        start = time.perf_counter()
        try:
            return original_map(readback, nbytes)
        finally:
            spent["wait"] += time.perf_counter() - start

    def timed_propagate(self: WebGPUGraph) -> None:
        start = time.perf_counter()
        try:
            original_propagate(self)
        finally:
            spent["resize"] += time.perf_counter() - start

    WebGPUGraph._map = staticmethod(timed_map)  # type: ignore[method-assign,assignment]
    WebGPUGraph.propagate_resize = timed_propagate  # type: ignore[method-assign]
    try:
        for case in cases:
            graph = runtime.load(case.graph)
            try:
                for _ in range(repeat):
                    for step in case.steps:
                        spent["wait"] = spent["resize"] = 0.0
                        start = time.perf_counter()
                        # a refused step is timed all the same
                        with contextlib.suppress(ParityError):
                            graph.execute(step)
                        times["wall"].append(time.perf_counter() - start)
                        times["wait"].append(spent["wait"])
                        times["resize"].append(spent["resize"])
            finally:
                graph.close()
    finally:
        WebGPUGraph._map = original_map  # type: ignore[method-assign]
        WebGPUGraph.propagate_resize = original_propagate  # type: ignore[method-assign]
    return times


def main(argv: list[str] | None = None) -> int:
    """Print the medians (µs) per family."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="decoder")
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="passes over each case's steps")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print("| family | executes | wall µs | GPU wait µs | host µs (wall - wait) | resize µs |")
    print("|---|---|---|---|---|---|")
    for family in args.families.split(","):
        cases = generate(family, args.cases + args.warmup, args.seed)
        measure(cases[: args.warmup], 1)
        times = measure(cases[args.warmup :], args.repeat)
        host = [w - g for w, g in zip(times["wall"], times["wait"], strict=True)]

        def us(values: list[float]) -> str:
            return f"{1e6 * statistics.median(values):.0f}"

        print(
            f"| {family} | {len(host)} | {us(times['wall'])} | {us(times['wait'])} "
            f"| {us(host)} | {us(times['resize'])} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
