"""Time to the first report of a bug every op shows: `python -m benchmarks.first_finding`
(measured, never asserted).

Plants a fault in a shared mechanism (tests/plants.py `webgpu_grid_one_short`: WebGPU's grid
computation drops the last workgroup of every dispatch that asks for more than one, so
every op with a kernel diverges) and runs, in this process, what a reviewer's CI runs:

    parity run --profile pr --families dag,random --jobs 1

It timestamps every line the command prints on stderr and reports: the time from the
command's start to the first shrunk finding on the console (a `parity: finding` line), to
the first line of any finding, the whole run's time, the findings shrunk and left unshrunk,
the exit status, and this process's peak resident memory (VmHWM). `--cold` points the
SPIR-V and reflection caches at empty folders first (as a CI runner without cached caches
starts). Other options are passed on to `parity run` after `--`:

    python -m benchmarks.first_finding --cold -- --seed 3
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from harness.run.workers import peak_rss_mb


class _Timestamped(io.TextIOBase):
    """A stream that keeps each line it is given with the seconds since `start`, and passes
    it on."""

    def __init__(self, inner: Any, start: float) -> None:
        self.inner = inner
        self.start = start
        self.lines: list[tuple[float, str]] = []
        self._partial = ""

    def write(self, text: str) -> int:
        self.inner.write(text)
        self._partial += text
        *done, self._partial = self._partial.split("\n")
        now = time.monotonic() - self.start
        self.lines.extend((now, line) for line in done)
        return len(text)

    def flush(self) -> None:
        self.inner.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the planted pr run once and print its figures (JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="dag,random")
    parser.add_argument("--profile", default="pr")
    parser.add_argument("--jobs", default="1")
    parser.add_argument("--cold", action="store_true", help="start with empty shader caches")
    parser.add_argument("--no-plant", action="store_true", help="the clean tree, for comparison")
    parser.add_argument("--out", help="the run folder (default: a temporary one)")
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("rest", nargs="*", help="more `parity run` options (after --)")
    args = parser.parse_args(argv)

    from harness.run.cli import main as parity
    from tests.plants import webgpu_grid_one_short

    with tempfile.TemporaryDirectory(prefix="first-finding-") as tmp:
        if args.cold:
            os.environ["VULKAN_PARITY_CACHE"] = str(Path(tmp) / "spirv")
            os.environ["VULKAN_PARITY_REFLECT_CACHE"] = str(Path(tmp) / "reflect")
        out = Path(args.out) if args.out else Path(tmp) / "run"
        command = [
            "run",
            *("--profile", args.profile, "--families", args.families, "--jobs", args.jobs),
            *("--no-database", "--out", str(out), *args.rest),
        ]
        start = time.monotonic()
        stream = _Timestamped(sys.stderr, start)
        sys.stderr = stream
        try:
            with nullcontext() if args.no_plant else webgpu_grid_one_short():
                status = parity(command)
        finally:
            sys.stderr = stream.inner
        total = time.monotonic() - start
        summary = json.loads((out / "summary.json").read_text())
    reported = [(t, line) for t, line in stream.lines if line.startswith("parity: finding")]
    shrunk_at = next((t for t, line in reported if ": shrunk to" in line), None)
    any_at = next(
        (t for t, line in stream.lines if line.startswith("parity: finding") or _findings_in(line)),
        None,
    )
    findings = summary.get("findings", [])
    figures = {
        "command": "parity " + " ".join(command),
        "plant": None if args.no_plant else "webgpu_grid_one_short",
        "cold": args.cold,
        "exit_status": status,
        "first_shrunk_finding_s": _round(shrunk_at),
        "first_finding_line_s": _round(any_at),
        "total_s": round(total, 1),
        "findings": len(findings),
        "unshrunk": sum(1 for f in findings if not f.get("shrunk", True)),
        "peak_rss_mib": peak_rss_mb(),
        "steps": summary.get("totals", {}).get("steps"),
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _findings_in(line: str) -> int:
    """The findings a progress line counts (`..., 3 findings | ...`), 0 if none."""
    head, sep, _ = line.partition(" findings")
    if not sep:
        return 0
    words = head.split()
    return int(words[-1]) if words and words[-1].isdigit() else 0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


if __name__ == "__main__":
    sys.exit(main())
