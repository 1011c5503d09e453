"""Host time per step: `python -m benchmarks.vulkan_step_host_time` (measured, never asserted).

Loads the same deterministic set of generated cases (`--families decoder` by default) on the
Vulkan runtime and runs every step of each, as a parity run does. Per accepted step it takes
the wall time of `execute` minus the time spent waiting for the GPU (the fence wait, timed
by wrapping `vkWaitForFences`), and the CPU time of the calling thread (`time.thread_time`,
which a shared machine's other processes disturb less than wall time; lavapipe's own threads
are not in it): what the runtime itself costs on the host per step (checking
inputs, resizing every node, evaluating the kernels' values and dispatch counts, packing
uniforms and push constants, recording the command buffer, reading back). Each case's
steps run once, then `--repeat` times more in the same order, so every timed run of a step
makes the same size changes, and each step counts its fastest; `--rounds` runs the whole set
that many times, reporting each round's median over the steps: both damp the noise of a
shared machine. The first `--warmup` cases run once untimed (pipeline creation and pool
growth stay out of the figures).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import vulkan as vk

from benchmarks.graph_builds import generate
from graph_format import ParityError, Runtime
from harness.check.backends import open_runtime
from harness.gen.case import Case


class FenceClock:
    """Sums the seconds spent in vkWaitForFences while `timing()` is active."""

    def __init__(self) -> None:
        self.waited = 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        original = vk.vkWaitForFences

        def wait(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.waited += time.perf_counter() - start

        vk.vkWaitForFences = wait
        try:
            yield
        finally:
            vk.vkWaitForFences = original


def run_steps(
    runtime: Runtime, cases: list[Case], clock: FenceClock, repeat: int = 1
) -> tuple[list[float], list[float]]:
    """Host wall seconds (less the fence wait) and thread CPU seconds of every accepted step
    of `cases`: each case's steps are run once, then `repeat` times more in the same order
    (the same size changes each time), and each step counts its fastest timed run."""
    host: list[float] = []
    cpu: list[float] = []
    for case in cases:
        graph = runtime.load(case.graph)
        try:
            walls: list[list[float]] = [[] for _ in case.steps]
            cpus: list[list[float]] = [[] for _ in case.steps]
            for run in range(repeat + 1):
                for index, step in enumerate(case.steps):
                    clock.waited = 0.0
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    try:
                        graph.execute(step)
                    except ParityError:
                        continue
                    if run:  # the first pass sizes everything from the max sizes
                        cpus[index].append(time.thread_time() - start_cpu)
                        walls[index].append(time.perf_counter() - start - clock.waited)
            host += [min(w) for w in walls if w]
            cpu += [min(c) for c in cpus if c]
        finally:
            graph.close()
    return host, cpu


def main(argv: list[str] | None = None) -> int:
    """Print the per-step host time of each family."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="decoder")
    parser.add_argument("--cases", type=int, default=20, help="cases per family (20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed cases first (3)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of the whole set (3)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each step (5)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    runtime = open_runtime("vulkan")
    clock = FenceClock()
    print(f"Adapter: {runtime.info()['adapter']}")
    for family in args.families.split(","):
        cases = generate(family, args.cases + args.warmup, args.seed)
        warm, timed = cases[: args.warmup], cases[args.warmup :]
        with clock.timing():
            run_steps(runtime, warm, clock)
            rounds = [run_steps(runtime, timed, clock, args.repeat) for _ in range(args.rounds)]
        walls = sorted(1e3 * statistics.median(host) for host, _ in rounds)
        cpus = sorted(1e3 * statistics.median(cpu) for _, cpu in rounds)
        print(
            f"{family}: {len(rounds[0][0])} steps of {len(timed)} cases; per step, best round's "
            f"median: host wall {walls[0]:.3f} ms (rounds: {', '.join(f'{m:.3f}' for m in walls)}"
            f"), thread CPU {cpus[0]:.3f} ms (rounds: {', '.join(f'{m:.3f}' for m in cpus)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
