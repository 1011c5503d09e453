"""Which kernel pairs round alike, measured: `python -m benchmarks.exact_pairs` (measured,
never asserted).

Runs `parity run --profile pr` over every family (seed 0, `--webgpu wgpu,dawn,chrome` by
default; other options of `parity run` after `--`) and reads, from every case of its
cases.jsonl, `bits`: per op type, kernels dispatched and pair of backends, the largest
distance in ULPs between the two backends' outputs of that op over the steps where its
inputs were bit-identical on both (`harness.check.oracles.compare_bits`). It prints one
line per op type and kernels (the kernel names carry the dtype: `_f16`) with that largest
distance per pair and the number of cases compared; `--from DIR` reads an earlier run's
folder instead of running one. The declarations (`KernelSpec.exact`,
`KernelSpec.webgpu_ulps`) and docs/oracles.md "Exact equality" come from it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def measure(run_dir: Path) -> tuple[dict[str, dict[str, int]], dict[str, int], list[str]]:
    """Per `op_type|kernels`, the largest ULP distance per pair of backends; the number of
    cases each `op_type|kernels` was compared in; the pairs seen, in first-seen order."""
    worst: dict[str, dict[str, int]] = {}
    cases: dict[str, int] = {}
    pairs: list[str] = []
    with (run_dir / "cases.jsonl").open() as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("record") != "case":
                continue
            seen: set[str] = set()
            for key, (ulps, _allowed) in record.get("bits", {}).items():
                op, kernels, pair = key.split("|")
                name = f"{op}|{kernels}"
                row = worst.setdefault(name, {})
                row[pair] = max(row.get(pair, 0), int(ulps))
                seen.add(name)
                if pair not in pairs:
                    pairs.append(pair)
            for name in seen:
                cases[name] = cases.get(name, 0) + 1
    return worst, cases, pairs


def main(argv: list[str] | None = None) -> int:
    """Run (or read) a pr run and print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exact_pairs")
    parser.add_argument("--webgpu", default="wgpu,dawn,chrome")
    parser.add_argument("--from", dest="source", type=Path, help="an earlier run's folder")
    parser.add_argument("rest", nargs="*", help="options for parity run, after --")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.source
        if run_dir is None:
            run_dir = Path(scratch) / "run"
            command = [sys.executable, "-m", "harness.cli", "run", "--profile", "pr"]
            command += ["--webgpu", args.webgpu, "--no-database", "--out", str(run_dir)]
            subprocess.run([*command, *args.rest], check=False)
        worst, cases, pairs = measure(run_dir)
    print(f"{'op|kernels':56} {'cases':>5}  " + "  ".join(f"{p:>22}" for p in pairs))
    for name in sorted(worst):
        row = worst[name]
        cells = "  ".join(f"{row.get(p, '-'):>22}" for p in pairs)
        print(f"{name:56} {cases[name]:>5}  {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
