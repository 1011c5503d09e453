"""Shrink quality and time on planted bugs: `python -m benchmarks.shrink_quality`.

For every planted bug of tests/planted_catalog.py (one per failure class), search generated
cases with the bug planted, then shrink: report the bug key kept, the examples run, the
time to find the first failure and to shrink it, and the size of the first failing case
against the minimal one (steps, ops, elements of the inputs at max).
"""

from __future__ import annotations

import argparse
import json
import sys

from harness.check.backends import open_runtimes
from harness.check.lockstep import LockstepRunner
from harness.check.shrinking import find_minimal
from harness.check.verdict import CaseChecker
from tests.planted_catalog import PLANTS, planted


def main(argv: list[str] | None = None) -> int:
    """Run every plant and print a Markdown table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-examples", type=int, default=150, help="search budget per plant (150)"
    )
    parser.add_argument("--seeds", type=int, default=1, help="searches per plant, seeds 0..N-1 (1)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    runner = LockstepRunner(open_runtimes())
    adapter = runner.adapters["webgpu"]["adapter"]
    rows = []
    print(f"Adapter: {adapter}\n")
    print(
        "| planted bug | bug key kept | examples | find s | shrink s "
        "| first case: steps / ops / input elements "
        "| minimal: steps / ops / input elements (dims) |"
    )
    print("|---|---|---|---|---|---|---|")
    for plant in PLANTS:
        for search_seed in range(args.seeds):
            with planted(plant, runner) as searching:
                checker = CaseChecker(searching, repeats=0)
                out = find_minimal(
                    plant.cases(),
                    checker.check,
                    max_examples=args.max_examples,
                    search_seed=search_seed,
                )
            bug = out.bug
            kept = bug is not None and (bug.kind, bug.op_type, bug.blame) == (
                plant.kind,
                plant.op_type,
                plant.blame,
            )
            first, minimal = out.first, out.minimal
            row = {
                "plant": plant.name,
                "seed": search_seed,
                "bug": str(bug) if bug else None,
                "kept": kept,
                "examples": out.examples,
                "find_s": round(out.find_seconds, 2),
                "shrink_s": round(out.shrink_seconds, 2),
                "first": first.__dict__ if first else None,
                "minimal": minimal.__dict__ if minimal else None,
            }
            rows.append(row)
            sig = str(bug) if bug else "not found"
            f = f"{first.steps} / {first.ops} / {first.input_max_numel}" if first else "-"
            m = "-"
            if minimal:
                m = f"{minimal.steps} / {minimal.ops} / {minimal.input_max_numel} "
                m += f"({minimal.input_dims})"
            print(
                f"| {plant.name} | {sig}{'' if kept else ' (DRIFTED)'} | {out.examples} | "
                f"{out.find_seconds:.1f} | {out.shrink_seconds:.1f} | {f} | {m} |",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"adapter": adapter, "rows": rows}, fh, indent=1)
    return 0 if all(r["kept"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
