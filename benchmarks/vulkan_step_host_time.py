"""Host time per step: `python -m benchmarks.vulkan_step_host_time` (measured, never asserted).

Loads the same deterministic set of generated cases (`--families decoder` by default) on the
Vulkan runtime and runs every step of each, as a parity run does. Per accepted step it takes
the wall time of `execute` minus the time spent waiting for the GPU (the fence wait, timed
by wrapping `vkWaitForFences`): what the runtime itself costs on the host per step (checking
inputs, resizing every node, evaluating the kernels' values and dispatch counts, packing
uniforms and push constants, recording the command buffer, reading back). `--rounds` runs
the whole set that many times and reports the best round's median, to damp the noise of a
shared machine; the first `--warmup` cases are run once untimed (pipeline creation and pool
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


def run_steps(runtime: Runtime, cases: list[Case], clock: FenceClock) -> list[float]:
    """Host seconds of every accepted step of `cases` (refused steps are left out)."""
    host: list[float] = []
    for case in cases:
        graph = runtime.load(case.graph)
        try:
            for step in case.steps:
                clock.waited = 0.0
                start = time.perf_counter()
                try:
                    graph.execute(step)
                except ParityError:
                    continue
                host.append(time.perf_counter() - start - clock.waited)
        finally:
            graph.close()
    return host


def main(argv: list[str] | None = None) -> int:
    """Print the per-step host time of each family."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="decoder")
    parser.add_argument("--cases", type=int, default=20, help="cases per family (20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed cases first (3)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of the whole set (3)")
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
            rounds = [run_steps(runtime, timed, clock) for _ in range(args.rounds)]
        medians = sorted(1e3 * statistics.median(r) for r in rounds)
        means = [1e3 * statistics.fmean(r) for r in rounds]
        print(
            f"{family}: {len(rounds[0])} steps of {len(timed)} cases; host ms per step: "
            f"median {medians[0]:.3f} (rounds: {', '.join(f'{m:.3f}' for m in medians)}), "
            f"mean {min(means):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
