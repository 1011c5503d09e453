"""Resident memory of one chunk-running process over many cases:
`python -m benchmarks.memory_growth` (measured, never asserted).

Runs a family's chunks (nightly profile, no example database) in this process with one
`ChunkRunner`, as a `parity run` worker does, and after every chunk prints the cases run so
far, VmRSS (/proc/self/status) and the entry counts of the per-process caches that key on
values varying per case: the WebGPU pool's bind groups and pipelines, the Vulkan pool's
descriptor sets, its pipelines and its `PipelineCache.kernels` (compiled, resolved and built
kernels). `--backends webgpu` or `vulkan` checks the cases on that runtime alone (both are
opened), which tells which runtime owns a growth. The growth per 1000 cases is fitted over
the chunks after the first (the first pays for one-time set-up).

Example: `python -m benchmarks.memory_growth --family decoder --cases 300 --backends vulkan`.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.check.lockstep import LockstepRunner
from harness.check.verdict import CaseChecker
from harness.families import FAMILIES
from harness.run.chunks import ChunkRunner, RunConfig, Stop, _Engine
from harness.run.plan import make_plan
from harness.run.records import CaseRecord, ChunkRecord


def resident_mib() -> float:
    """This process's VmRSS in MiB (0 where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _CountingSink:
    """Counts the cases; drops everything else (errors are printed)."""

    def __init__(self) -> None:
        self.cases = 0

    def case(self, record: CaseRecord) -> None:
        self.cases += 1

    def chunk(self, record: ChunkRecord, tally: object) -> None:
        pass

    def error(self, text: str) -> None:
        print(f"chunk error: {text.splitlines()[0] if text else ''}", file=sys.stderr)

    def output_error(self, error: Exception) -> None:
        print(f"output error: {error}", file=sys.stderr)

    def log(self, line: str) -> None:
        pass


def cache_counts(runtimes: list[Any]) -> dict[str, int]:
    """Entries of each runtime's per-process caches (attributes read defensively: a
    benchmark, not an API)."""
    counts: dict[str, int] = {}
    for runtime in runtimes:
        pool = getattr(runtime, "pool", None)
        if runtime.name == "webgpu":
            counts["webgpu.bind_groups"] = len(getattr(pool, "_bind_groups", ()))
            counts["webgpu.pipelines"] = len(getattr(runtime, "pipelines", ()))
        else:
            held = getattr(pool, "_held", None)
            descriptors = getattr(held, "descriptors", None)
            counts["vulkan.descriptor_sets"] = len(getattr(descriptors, "_entries", ()))
            cache = getattr(runtime, "pipelines", None)
            counts["vulkan.pipelines"] = len(cache) if cache is not None else 0
            counts["vulkan.kernels"] = len(getattr(cache, "kernels", ()))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_growth")
    parser.add_argument("--family", default="decoder", choices=sorted(FAMILIES))
    parser.add_argument("--cases", type=int, default=500, help="example budget (default 500)")
    parser.add_argument("--chunk", type=int, default=50, help="examples per chunk (sample)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backends", choices=("both", "webgpu", "vulkan"), default="both")
    parser.add_argument("--json", type=Path, help="also write the samples here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="memory-growth-") as out:
        config = RunConfig(
            families=[args.family],
            profile="nightly",
            seed=args.seed,
            max_examples=args.cases,
            chunk_examples=args.chunk,
            out=Path(out),
        )
        runner = ChunkRunner(config, Stop(None))
        runner.open([None])
        engine = runner.engines[None]
        every = list(engine.runtimes)
        if args.backends != "both":
            chosen = [rt for rt in every if rt.name == args.backends]
            lockstep = LockstepRunner(chosen)
            runner.engines[None] = _Engine(chosen, lockstep, CaseChecker(lockstep, repeats=0))
        sink = _CountingSink()
        samples: list[dict[str, Any]] = []
        plan = make_plan([args.family], args.seed, args.cases, args.chunk)
        for chunk in plan:
            runner.run_chunk(chunk, sink)
            gc.collect()
            sample = {"cases": sink.cases, "rss_mib": round(resident_mib(), 1)}
            sample.update(cache_counts(every))
            samples.append(sample)
            print(json.dumps(sample), flush=True)
    if len(samples) >= 3:
        first, last = samples[0], samples[-1]
        cases = last["cases"] - first["cases"]
        growth = (last["rss_mib"] - first["rss_mib"]) / cases * 1000 if cases else 0.0
        print(
            f"{args.family}, backends {args.backends}: {growth:.0f} MiB per 1000 cases "
            f"(from {first['cases']} to {last['cases']} cases)"
        )
    if args.json:
        args.json.write_text(json.dumps(samples, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
