"""Cost of the float64 reference vs execute: `python -m benchmarks.reference_cost`.

Measured, never asserted. For each family (decoder, linear_q4gsw, sdpa and random by
default) the same deterministic set of generated cases runs through the lockstep runner on
both backends, as `parity run` runs them, while timing wrappers add up per step:
- `reference`: `ReferenceEvaluator.step`, the pure float64 reference of the graph with its
  error budgets propagated end to end (reference, local budget and the random-sign probes
  of every op);
- `per-op`: `oracles.check_ops` on both backends, each op's reference and budget on that
  backend's own inputs, and the comparison;
- `execute`: both backends' `LoadedGraph.execute` calls (encode, submit, wait, read back).
Each is given as wall time and as the CPU time of the calling thread (numpy runs there; the
thread time is less disturbed by other processes on a shared machine). The first
`--warmup` cases of each family run untimed, so pipeline creation and pool growth stay out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from benchmarks.graph_builds import generate
from graph_format import Runtime
from harness.check import oracles
from harness.check.backends import open_runtimes
from harness.check.lockstep import LockstepRunner
from harness.check.reference import ReferenceEvaluator


@dataclass
class Clock:
    """Wall and thread-CPU seconds spent in one wrapped callable, and its calls."""

    wall: float = 0.0
    cpu: float = 0.0
    calls: int = 0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, timed into this clock."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            start, start_cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - start
                self.cpu += time.thread_time() - start_cpu
                self.calls += 1

        return timed


@dataclass
class Clocks:
    """The three clocks of a family."""

    reference: Clock = field(default_factory=Clock)
    per_op: Clock = field(default_factory=Clock)
    execute: Clock = field(default_factory=Clock)


@contextmanager
def timing(runtimes: list[Runtime], clocks: Clocks) -> Iterator[None]:
    """Time the evaluator's step, the per-op check and every loaded graph's execute."""
    step = ReferenceEvaluator.step
    check_ops = oracles.check_ops
    loads = {rt.name: rt.load for rt in runtimes}

    def load_timed(load: Callable[..., Any]) -> Callable[..., Any]:
        def load_and_wrap(*args: Any, **kwargs: Any) -> Any:
            loaded = load(*args, **kwargs)
            loaded.execute = clocks.execute.wrap(loaded.execute)
            return loaded

        return load_and_wrap

    ReferenceEvaluator.step = clocks.reference.wrap(step)  # type: ignore[method-assign]
    oracles.check_ops = clocks.per_op.wrap(check_ops)
    for rt in runtimes:
        rt.load = load_timed(loads[rt.name])  # type: ignore[method-assign]
    try:
        yield
    finally:
        ReferenceEvaluator.step = step  # type: ignore[method-assign]
        oracles.check_ops = check_ops
        for rt in runtimes:
            rt.load = loads[rt.name]  # type: ignore[method-assign]


def ms(seconds: float, steps: int) -> float:
    """Milliseconds per step."""
    return 1e3 * seconds / max(steps, 1)


def main(argv: list[str] | None = None) -> int:
    """Print a Markdown table per family (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="decoder,linear_q4gsw,sdpa,random")
    parser.add_argument("--cases", type=int, default=20, help="timed cases per family (20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed cases first (3)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    runtimes = open_runtimes()
    runner = LockstepRunner(runtimes)
    print(f"Adapter: {runtimes[0].info()['adapter']}\n")
    print(
        "| family | cases | steps | reference ms/step: wall / CPU "
        "| per-op check ms/step (both backends): wall / CPU "
        "| execute ms/step (both backends): wall / CPU | reference / execute (wall) |"
    )
    print("|---|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    for family in args.families.split(","):
        cases = generate(family, args.cases + args.warmup, args.seed)
        warm, timed = cases[: args.warmup], cases[args.warmup :]
        for case in warm:
            runner.run(case)
        clocks = Clocks()
        with timing(runtimes, clocks):
            for case in timed:
                runner.run(case)
        steps = clocks.reference.calls  # steps the reference judged (accepted by the contract)
        ref, per_op, execute = clocks.reference, clocks.per_op, clocks.execute
        row = {
            "family": family,
            "cases": len(timed),
            "steps": steps,
            "reference_ms": ms(ref.wall, steps),
            "reference_cpu_ms": ms(ref.cpu, steps),
            "per_op_ms": ms(per_op.wall, steps),
            "per_op_cpu_ms": ms(per_op.cpu, steps),
            "execute_ms": ms(execute.wall, steps),
            "execute_cpu_ms": ms(execute.cpu, steps),
            "reference_over_execute": ref.wall / execute.wall if execute.wall else None,
        }
        rows.append(row)
        ratio = row["reference_over_execute"]
        print(
            f"| {family} | {len(timed)} | {steps} "
            f"| {row['reference_ms']:.2f} / {row['reference_cpu_ms']:.2f} "
            f"| {row['per_op_ms']:.2f} / {row['per_op_cpu_ms']:.2f} "
            f"| {row['execute_ms']:.2f} / {row['execute_cpu_ms']:.2f} "
            f"| {'-' if ratio is None else f'{ratio:.2f}'} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
