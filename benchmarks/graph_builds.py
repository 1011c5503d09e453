"""Cost of building graphs: `python -m benchmarks.graph_builds` (measured, never asserted).

For each family (decoder and linear_q4gsw by default) the same deterministic set of
generated cases is built and closed on each backend, one case after the other as a parity
run does: the time of `load` + `close` per case, of `load` + the case's first `execute` +
`close` (which includes anything a backend defers to its first execute), each as wall time
and as the process's CPU time (which includes lavapipe's threads and is less disturbed by
other processes on a shared machine), and the device allocations per case (Vulkan:
`vkAllocateMemory` calls; WebGPU: `create_buffer` calls), counted by wrapping those entry
points for the duration of the measurement. The
first `--warmup` cases of each family are built once untimed, so pipeline creation (cached
per device) and pool growth stay out of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import vulkan as vk
from hypothesis import HealthCheck, Phase, given, seed, settings

from graph_format import Runtime
from harness.check.backends import open_runtimes
from harness.families import FAMILIES
from harness.gen.case import Case


def generate(family: str, count: int, search_seed: int) -> list[Case]:
    """`count` cases of `family`, the same ones for the same seed (no example database)."""
    cases: list[Case] = []

    @seed(search_seed)
    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(FAMILIES[family]())
    def collect(case: Case) -> None:
        cases.append(case)

    collect()
    return cases[:count]


class AllocationCounter:
    """Counts the device allocations both APIs make while `counting()` is active."""

    def __init__(self) -> None:
        self.calls = {"vulkan": 0, "webgpu": 0}

    @contextmanager
    def counting(self, runtimes: list[Runtime]) -> Iterator[None]:
        """Wrap vkAllocateMemory and each WebGPU device's create_buffer."""
        original_allocate = vk.vkAllocateMemory

        def allocate(*args: Any, **kwargs: Any) -> Any:
            self.calls["vulkan"] += 1
            return original_allocate(*args, **kwargs)

        patched: list[Any] = []
        for rt in runtimes:
            device = getattr(getattr(rt, "device", None), "device", None)
            if device is None:
                continue
            original_create = device.create_buffer

            def create(*args: Any, _original: Any = original_create, **kwargs: Any) -> Any:
                self.calls["webgpu"] += 1
                return _original(*args, **kwargs)

            device.create_buffer = create
            patched.append((device, original_create))
        vk.vkAllocateMemory = allocate
        try:
            yield
        finally:
            vk.vkAllocateMemory = original_allocate
            for device, original_create in patched:
                device.create_buffer = original_create


def measure(
    runtime: Runtime, cases: list[Case], counter: AllocationCounter, execute: bool
) -> tuple[list[float], list[float], list[int]]:
    """Per case: wall and CPU seconds for load (+ first execute) + close, and device
    allocations."""
    wall: list[float] = []
    cpu: list[float] = []
    allocations: list[int] = []
    for case in cases:
        before = counter.calls[runtime.name]
        start, start_cpu = time.perf_counter(), time.process_time()
        graph = runtime.load(case.graph)
        try:
            if execute:
                graph.execute(case.steps[0])
        finally:
            graph.close()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        allocations.append(counter.calls[runtime.name] - before)
    return wall, cpu, allocations


def ms(seconds: list[float]) -> float:
    """The median in milliseconds."""
    return 1e3 * statistics.median(seconds)


def main(argv: list[str] | None = None) -> int:
    """Print a Markdown table per family (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="decoder,linear_q4gsw")
    parser.add_argument("--cases", type=int, default=30, help="cases per family (30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed cases first (5)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    runtimes = open_runtimes()
    counter = AllocationCounter()
    print(f"Adapter: {runtimes[0].info()['adapter']}\n")
    print(
        "| family | backend | cases | load+close ms: wall / CPU (medians) "
        "| load+execute+close ms: wall / CPU (medians) | device allocations per case (mean) |"
    )
    print("|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    for family in args.families.split(","):
        cases = generate(family, args.cases + args.warmup, args.seed)
        warm, timed = cases[: args.warmup], cases[args.warmup :]
        for rt in runtimes:
            with counter.counting(runtimes):
                measure(rt, warm, counter, execute=True)
                build, build_cpu, allocs = measure(rt, timed, counter, execute=False)
                full, full_cpu, _ = measure(rt, timed, counter, execute=True)
            row = {
                "family": family,
                "backend": rt.name,
                "cases": len(timed),
                "build_close_ms": ms(build),
                "build_close_cpu_ms": ms(build_cpu),
                "build_execute_close_ms": ms(full),
                "build_execute_close_cpu_ms": ms(full_cpu),
                "allocations_per_case": statistics.fmean(allocs),
            }
            rows.append(row)
            print(
                f"| {family} | {rt.name} | {len(timed)} "
                f"| {row['build_close_ms']:.1f} / {row['build_close_cpu_ms']:.1f} "
                f"| {row['build_execute_close_ms']:.1f} / {row['build_execute_close_cpu_ms']:.1f} "
                f"| {row['allocations_per_case']:.1f} |",
                flush=True,
            )
    for rt in runtimes:
        pool = getattr(rt, "pool", None)  # runtimes without pooled memory have none
        if pool is not None:
            stats = pool.stats()
            print(
                f"\n{rt.name} pool after the run: {stats['allocations']} device allocations in "
                f"all, {stats['blocks']} blocks, {stats['bytes'] / 2**20:.1f} MiB held",
                end="",
            )
    print()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
