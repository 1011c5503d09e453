"""Throughput of `parity run`: `python -m benchmarks.throughput` (measured, never asserted).

Runs the same search (same seed, families, profile and time budget or example budget, no
example database, no expectations) twice in one process, with `--jobs 1` and with `--jobs
N` (N: the CPUs this process may use, or `--jobs`), each into its own run folder, and
prints side by side (and writes as JSON with `--json`):

- steps/s and cases/s of the whole run (search time: start-up, i.e. opening the runtimes or
  starting the workers, is shown apart), and per family its cases, steps, the time its
  chunks ran (summed over processes) and its steps per second of that time;
- the host time per step, split by harness.check.timing into generation (Hypothesis drawing
  and shrinking), build (load and close of both graphs), execute (both backends'
  `LoadedGraph.execute`: encode, submit, wait, read back), reference (the whole-graph
  float64 reference and its propagated error bounds), oracles (every other check, the
  per-op checks on each backend's own inputs included), records (records made and handed
  over) and other (bundles, what is left); summed over all processes, so per step it is the
  host time one process spends on a step;
- the ratio of the harness's host time to the raw execute time (per step: everything but
  execute, over execute);
- the GPU's busy share and SM clock (`nvidia-smi` sampled every 200 ms while the search
  runs, when there is one; a CPU adapter such as lavapipe has none);
- each process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.check import timing
from harness.families import FAMILIES
from harness.run.chunks import RunConfig
from harness.run.cli import ensure_runtime_dir
from harness.run.profiles import PROFILES
from harness.run.records import RunMeta, read_records
from harness.run.session import RunSession, available_jobs
from harness.run.summary import summarize
from harness.run.workers import peak_rss_mb


class GpuSampler:
    """`nvidia-smi` utilization and SM clock, sampled while `with` is active (no-op without
    nvidia-smi)."""

    def __init__(self, every_ms: int = 200) -> None:
        self.every_ms = every_ms
        self.samples: list[tuple[int, float, float]] = []  # (gpu, busy %, SM MHz)
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        if shutil.which("nvidia-smi") is None:
            return self
        self._proc = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=index,utilization.gpu,clocks.sm",
                "--format=csv,noheader,nounits",
                f"-lms={self.every_ms}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                gpu, busy, clock = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append((int(gpu), busy, clock))

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
        if self._thread is not None:
            self._thread.join(5)

    def summary(self) -> dict[str, Any] | None:
        """Per GPU: mean busy %, mean and max SM clock; None without samples."""
        if not self.samples:
            return None
        out: dict[str, Any] = {}
        for gpu in sorted({g for g, _, _ in self.samples}):
            mine = [(b, c) for g, b, c in self.samples if g == gpu]
            out[str(gpu)] = {
                "busy_percent": round(sum(b for b, _ in mine) / len(mine), 1),
                "sm_clock_mhz_mean": round(sum(c for _, c in mine) / len(mine)),
                "sm_clock_mhz_max": max(c for _, c in mine),
                "samples": len(mine),
            }
        return out


@dataclass
class Measured:
    """One configuration's figures (the JSON's `runs[]`)."""

    jobs: int
    status: str = ""
    startup_s: float = 0.0
    search_s: float = 0.0
    cases: int = 0
    steps: int = 0
    process_s: float = 0.0  # the chunks' time summed over processes
    families: dict[str, dict[str, float]] = field(default_factory=dict)
    host_ms_per_step: dict[str, float] = field(default_factory=dict)
    harness_to_execute: float | None = None
    gpu: dict[str, Any] | None = None
    peak_rss_mb: dict[str, float | None] = field(default_factory=dict)
    adapters: dict[str, str] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.search_s if self.search_s else 0.0

    @property
    def cases_per_s(self) -> float:
        return self.cases / self.search_s if self.search_s else 0.0

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["steps_per_s"] = round(self.steps_per_s, 2)
        data["cases_per_s"] = round(self.cases_per_s, 2)
        return data


def measure(args: argparse.Namespace, jobs: int, out: Path) -> Measured:
    """Run the search once with `jobs` processes; its figures."""
    profile = PROFILES[args.profile]
    config = RunConfig(
        families=args.families.split(","),
        profile=args.profile,
        seed=args.seed,
        max_examples=args.max_examples or profile.max_examples,
        chunk_examples=args.chunk_examples or profile.chunk_examples,
        out=out,
        time_budget_s=args.time_budget,
        progress_every_s=args.progress_every,
        command=f"benchmarks.throughput --jobs {jobs}",
        jobs=jobs,
        timings=True,
        worker_cases=args.worker_cases,
    )
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else None
    session = RunSession(config, log=log or (lambda line: None))
    measured = Measured(jobs)
    began = time.monotonic()
    try:
        session.start()
        measured.startup_s = round(time.monotonic() - began, 2)
        with GpuSampler() as gpu:
            measured.status = session.run()
        measured.gpu = gpu.summary()
    finally:
        session.close()
        timing.disable()
    meta = session.meta
    records = list(read_records(out / "cases.jsonl"))
    summary = summarize([meta], [records])
    measured.search_s = float(meta.duration_s or 0.0)
    measured.cases = summary.totals.cases
    measured.steps = summary.totals.steps
    for family, stats in summary.per_family.items():
        seconds = float(stats.duration_s or 0.0)
        measured.families[family] = {
            "cases": stats.cases,
            "steps": stats.steps,
            "time_s": round(seconds, 2),
            "steps_per_process_s": round(stats.steps / seconds, 2) if seconds else 0.0,
        }
    measured.process_s = round(sum(f["time_s"] for f in measured.families.values()), 2)
    figures = session.timings
    steps = max(1, measured.steps)
    split = {s: 1e3 * figures.get(s, 0.0) / steps for s in timing.SECTIONS}
    split["other"] = max(0.0, 1e3 * measured.process_s / steps - sum(split.values()))
    measured.host_ms_per_step = {k: round(v, 3) for k, v in split.items()}
    execute = split["execute"]
    if execute:
        measured.harness_to_execute = round((sum(split.values()) - execute) / execute, 2)
    measured.adapters = {b: str(a.get("adapter", "?")) for b, a in meta.adapters.items()}
    measured.peak_rss_mb = _peak_memory(meta, jobs)
    return measured


def _peak_memory(meta: RunMeta, jobs: int) -> dict[str, float | None]:
    if jobs == 1:
        return {"this process": peak_rss_mb()}
    return {f"worker {w.index}": w.peak_rss_mb for w in meta.workers}


def machine() -> dict[str, Any]:
    """Where the figures were taken."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cpus_usable": available_jobs(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }


def table(runs: list[Measured]) -> str:
    """The figures of every run, side by side, as Markdown."""
    head = "| | " + " | ".join(f"--jobs {r.jobs}" for r in runs) + " |"
    rule = "|---|" + "---|" * len(runs)
    rows = [head, rule]

    def row(name: str, cells: list[str]) -> None:
        rows.append(f"| {name} | " + " | ".join(cells) + " |")

    row("status", [r.status for r in runs])
    row("start-up (s)", [f"{r.startup_s:.1f}" for r in runs])
    row("search (s)", [f"{r.search_s:.1f}" for r in runs])
    row("steps / cases", [f"{r.steps} / {r.cases}" for r in runs])
    row("**steps/s**", [f"**{r.steps_per_s:.1f}**" for r in runs])
    row("cases/s", [f"{r.cases_per_s:.2f}" for r in runs])
    for family in runs[0].families:
        row(
            f"{family}: cases, steps, time (s), steps/s of its time",
            [
                (
                    f"{f['cases']:.0f}, {f['steps']:.0f}, {f['time_s']:.1f}, "
                    f"{f['steps_per_process_s']:.1f}"
                )
                if (f := r.families.get(family))
                else "-"
                for r in runs
            ],
        )
    for section in (*timing.SECTIONS, "other"):
        row(f"host ms/step: {section}", [f"{r.host_ms_per_step[section]:.2f}" for r in runs])
    row(
        "host ms/step: total",
        [f"{sum(r.host_ms_per_step.values()):.2f}" for r in runs],
    )
    row(
        "harness / execute",
        [f"{r.harness_to_execute:.1f}" if r.harness_to_execute else "-" for r in runs],
    )
    row(
        "GPU busy % (SM MHz mean/max)",
        [
            "; ".join(
                f"{g}: {v['busy_percent']} ({v['sm_clock_mhz_mean']}/{v['sm_clock_mhz_max']:.0f})"
                for g, v in r.gpu.items()
            )
            if r.gpu
            else "n/a (no nvidia-smi)"
            for r in runs
        ],
    )
    row(
        "peak memory (MiB)",
        [", ".join(f"{k}: {v}" for k, v in r.peak_rss_mb.items()) for r in runs],
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Measure `--jobs 1` and `--jobs N`; print the table (and write JSON with --json)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--families", default="linear_q4gsw,decoder,random")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="nightly")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--time-budget", type=float, default=60.0, help="seconds per run (60; 0: none)"
    )
    parser.add_argument("--max-examples", type=int, default=None, help="per family")
    parser.add_argument(
        "--worker-cases",
        type=int,
        default=300,
        help="cases after which a worker is replaced (parity run --worker-cases; 300)",
    )
    parser.add_argument("--chunk-examples", type=int, default=None)
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="N of the second run (default: the CPUs this process may use)",
    )
    parser.add_argument("--only", choices=("1", "N"), default=None, help="run only one side")
    parser.add_argument("--out", default=None, help="keep the run folders under this folder")
    parser.add_argument("--json", default=None, help="write the figures as JSON here")
    parser.add_argument("--markdown", default=None, help="write the table here too")
    parser.add_argument("--progress-every", type=float, default=30.0)
    parser.add_argument("--verbose", action="store_true", help="the runs' progress on stderr")
    args = parser.parse_args(argv)
    ensure_runtime_dir()  # no XDG_RUNTIME_DIR lines from the drivers, as with `parity`
    if args.time_budget == 0:
        args.time_budget = None
    unknown = [f for f in args.families.split(",") if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; expected some of {sorted(FAMILIES)}")
    n = args.jobs or available_jobs()
    sides = {"1": [1], "N": [n]}.get(args.only or "", [1, n] if n > 1 else [1])
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="throughput-"))
    where = machine()
    print(
        f"throughput: profile {args.profile}, families {args.families}, seed {args.seed}, "
        + (f"time budget {args.time_budget:.0f} s" if args.time_budget else "no time budget")
        + f"; {where['cpu']}, {where['cpus_usable']} CPUs, load {where['load_average_at_start']}",
        flush=True,
    )
    runs = []
    for jobs in sides:
        print(f"throughput: --jobs {jobs} ...", flush=True)
        runs.append(measure(args, jobs, root / f"jobs-{jobs}"))
    text = table(runs)
    adapters = "; ".join(sorted({f"{b}: {a}" for r in runs for b, a in r.adapters.items()}))
    print(f"\nAdapters: {adapters}\n\n{text}")
    if args.markdown:
        Path(args.markdown).write_text(f"Adapters: {adapters}\n\n{text}\n")
    if args.json:
        doc = {
            "machine": where,
            "config": {
                k: getattr(args, k)
                for k in ("families", "profile", "seed", "time_budget", "max_examples")
            },
            "runs": [r.to_json() for r in runs],
        }
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
