"""The `parity` command: run generated cases on both backends and report divergences.

    parity run [--families rms_norm,add,...] [--profile quick|pr|nightly] [--seed N]
               [--max-examples N] [--out DIR]

Exit status: 0 when no divergence was found, 1 when one was, 2 for a usage or set-up error
(for example no Vulkan driver: the message names the package to install).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import given, seed

from graph_format import BackendUnavailable
from harness.backends import BACKENDS, open_runtimes
from harness.case import Case
from harness.lockstep import CaseResult, LockstepRunner
from harness.profiles import PROFILES, hypothesis_settings
from harness.report import write_html
from harness.strategies import FAMILIES
from harness.verdict import DivergenceFound, assert_parity


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parity", description="Vulkan-parity differential testing of the WebGPU backend."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate cases, run them on both backends, write a report")
    run.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated case families (default: all: {','.join(FAMILIES)})",
    )
    run.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="quick",
        help="search budget: quick (default), pr or nightly",
    )
    run.add_argument("--seed", type=int, default=0, help="generation seed (default: 0)")
    run.add_argument(
        "--max-examples", type=int, default=None, help="cases per family (default: the profile's)"
    )
    run.add_argument(
        "--out", default="reports/latest", help="output folder (default: reports/latest)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `parity` command; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    return 2  # pragma: no cover - argparse requires a command


def _run(args: argparse.Namespace) -> int:
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        print(f"parity: unknown families {unknown}; known: {sorted(FAMILIES)}", file=sys.stderr)
        return 2
    try:
        runtimes = open_runtimes(BACKENDS)
    except BackendUnavailable as err:
        print(f"parity: {err}", file=sys.stderr)
        return 2
    runner = LockstepRunner(runtimes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    records_path = out / "cases.jsonl"
    totals: dict[str, dict[str, Any]] = {}
    failures: list[dict[str, Any]] = []
    with records_path.open("w") as records:
        for family in families:
            stats = {"cases": 0, "steps": 0, "divergent_cases": 0, "divergences": {}}
            totals[family] = stats
            last_failure: list[tuple[Case, CaseResult]] = []
            check = _CaseCheck(runner, family, stats, records, last_failure)
            test = seed(args.seed)(
                hypothesis_settings(args.profile, max_examples=args.max_examples)(
                    given(case=FAMILIES[family]())(check.as_test())
                )
            )
            print(f"parity: {family}: running", file=sys.stderr, flush=True)
            try:
                test()
            except DivergenceFound:
                pass  # recorded by the check; Hypothesis has shrunk it to `last_failure`
            except ExceptionGroup as group:
                # Several distinct divergences (report_multiple_bugs): all are recorded.
                _, rest = group.split(DivergenceFound)
                if rest is not None:
                    raise rest from None
            if last_failure:
                case, result = last_failure[0]
                stats["divergent_cases"] += 1
                for d in result.divergences:
                    stats["divergences"][str(d.kind)] = stats["divergences"].get(str(d.kind), 0) + 1
                failures.append(_record(family, case, result))
            print(
                f"parity: {family}: {stats['cases']} cases, {stats['steps']} steps, "
                f"{'divergent' if last_failure else 'no divergence'}",
                file=sys.stderr,
                flush=True,
            )
    summary = {
        "profile": args.profile,
        "seed": args.seed,
        "families": totals,
        "adapters": runner.adapters,
        "duration_s": round(time.time() - started, 2),
        "divergent": bool(failures),
        "failures": failures,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    write_html(summary, out / "index.html")
    print(f"parity: report: {out / 'index.html'}", file=sys.stderr)
    return 1 if failures else 0


class _CaseCheck:
    """The Hypothesis test body of one family: run, record, fail on divergence."""

    def __init__(
        self,
        runner: LockstepRunner,
        family: str,
        stats: dict[str, Any],
        records: Any,
        last_failure: list[tuple[Case, CaseResult]],
    ) -> None:
        self.runner = runner
        self.family = family
        self.stats = stats
        self.records = records
        self.last_failure = last_failure

    def as_test(self) -> Any:
        """A plain function for `@given` (which needs a named function)."""

        def run_case(case: Case) -> None:
            self(case)

        run_case.__name__ = f"parity_{self.family}"
        return run_case

    def __call__(self, case: Case) -> None:
        result = self.runner.run(case)
        self.stats["cases"] += 1
        self.stats["steps"] += len(case.steps)
        self.records.write(json.dumps(_record(self.family, case, result), default=str) + "\n")
        self.records.flush()
        if result.divergences:
            self.last_failure[:] = [(case, result)]
        assert_parity(result)


def _record(family: str, case: Case, result: CaseResult) -> dict[str, Any]:
    return {
        "family": family,
        "name": case.name,
        "meta": case.meta,
        "steps": case.step_shapes(),
        "ok": result.ok,
        "max_utilization": result.max_utilization,
        "divergences": [d.to_json() for d in result.divergences],
        "duration_s": round(result.duration_s, 4),
    }


if __name__ == "__main__":
    sys.exit(main())
