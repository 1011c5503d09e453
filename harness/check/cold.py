"""Cold re-runs: a finding's case run again in a fresh process, alone and after its history.

The warm re-runs of `harness.check.repeatability.classify` reuse the process that found the
case, with every pool and cache as the search left them, so a bug that needs what ran before
(a recycled block, a cached descriptor set or bind group) repeats there every time, and
looks deterministic. `cold_check` starts a fresh interpreter (`python -m
harness.check.cold`) that opens fresh runtimes and runs the case alone:

- it shows the finding's bug: the finding is `deterministic`;
- it does not: the finding is `history-dependent`. The same process then runs the worker's
  recorded history (`harness.check.history`) before the case, on fresh runtimes each time,
  and, when that brings the bug back, shrinks the history (delta debugging, within
  `max_trials` trials and `budget_s` seconds) to a short list of loops that still does.
  A second fresh process confirms that list (else the whole history) from a cold start;
  that is what the bundle keeps and `parity replay` runs.

One cold check per finding (never per case): a process start and a runtime open (seconds)
per finding, and a history replay only for the findings that need one.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graph_format import Runtime
from graph_format.kernels import load_manifest
from harness.check.backends import BACKENDS, open_runtimes
from harness.check.divergence import BugKey
from harness.check.history import Loop, load_loops, run_loops, save_loops
from harness.check.lockstep import LockstepRunner
from harness.gen.case import Case

REPO_ROOT = Path(__file__).resolve().parents[2]
# Wall-clock limit of one cold process (a hung driver must not hang the run).
PROCESS_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class RuntimeSpec:
    """How to open runtimes like the ones a case was found on, in another process.

    Attributes:
        shader_dirs: backend -> shader folder (absent: the repo's own).
        limit: the lowered workgroups-per-dimension limit (None: the device's).
        manifest: the kernel manifest file (`parity run --kernels`), if any.
        allow_adapters: let the manifest's Python adapters run.
        backends: the runtimes to open, by name (the run's).
    """

    shader_dirs: Mapping[str, str] = field(default_factory=dict)
    limit: int | None = None
    manifest: str | None = None
    allow_adapters: bool = False
    backends: tuple[str, ...] = BACKENDS

    def open(self) -> list[Runtime]:
        """Fresh runtimes of the run's backends."""
        manifest = load_manifest(Path(self.manifest)) if self.manifest else None
        return open_runtimes(
            self.backends, self.shader_dirs, self.limit, manifest, self.allow_adapters
        )

    def to_json(self) -> dict[str, Any]:
        """Plain data for the cold process."""
        return {
            "shader_dirs": dict(self.shader_dirs),
            "limit": self.limit,
            "manifest": self.manifest,
            "allow_adapters": self.allow_adapters,
            "backends": list(self.backends),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuntimeSpec:
        """The spec `to_json` wrote."""
        return cls(
            {str(k): str(v) for k, v in dict(data.get("shader_dirs") or {}).items()},
            data.get("limit"),
            data.get("manifest"),
            bool(data.get("allow_adapters")),
            tuple(data.get("backends") or BACKENDS),
        )


@dataclass
class ColdVerdict:
    """What the cold re-runs of one finding showed.

    Attributes:
        kind: "deterministic" (its bug shows in a fresh process) or "history-dependent"
            (only after what ran before it); "error" when the cold process failed.
        alone: the bug keys the case showed alone in a fresh process.
        with_history: the bug keys it showed after its history (None: not tried).
        loops: the history that brings its bug back from a cold start (empty when none is
            needed, or none was found).
        recorded: loops of history the worker held for it; `dropped`: older ones it had
            let go (never replayed).
        reproduced: its bug came back in a fresh process after `loops`.
        trials: fresh runtimes the shrinking of the history opened.
        seconds: the whole cold check, process starts included; `phases`: the first cold
            process's seconds running the case `alone` (with opening the runtimes), the
            `whole_history` and then the case, and shrinking the history (`shrink`).
        error: why the cold process failed.
    """

    kind: str
    alone: list[str] = field(default_factory=list)
    with_history: list[str] | None = None
    loops: list[Loop] = field(default_factory=list)
    recorded: int = 0
    dropped: int = 0
    reproduced: bool = False
    trials: int = 0
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain data for the repeatability record."""
        out: dict[str, Any] = {
            "alone": self.alone,
            "with_history": self.with_history,
            "history_loops": len(self.loops),
            "recorded_loops": self.recorded,
            "dropped_loops": self.dropped,
            "reproduced": self.reproduced,
            "trials": self.trials,
            "seconds": round(self.seconds, 2),
            "phases": {k: round(v, 2) for k, v in self.phases.items()},
        }
        if self.error is not None:
            out["error"] = self.error
        return out


def case_bugs(runtimes: Sequence[Runtime], case: Case) -> list[str]:
    """The bug keys of every divergence the case shows on `runtimes` (lockstep run)."""
    result = LockstepRunner(runtimes).run(case)
    return sorted({str(d.bug_key()) for d in result.divergences})


def cold_check(
    case: Case,
    bug: BugKey,
    history: Sequence[Loop],
    spec: RuntimeSpec,
    *,
    dropped: int = 0,
    max_trials: int = 12,
    budget_s: float = 120.0,
    scratch: Path | None = None,
) -> ColdVerdict:
    """Run `case` in a fresh process, alone and, when needed, after `history` (shrunk).

    Args:
        bug: the finding's bug key.
        history: the loops the worker ran before the case, oldest first.
        spec: how to open runtimes like the worker's.
        dropped: older loops the worker no longer held.
        max_trials, budget_s: the bounds of the history's shrinking.
        scratch: a folder for the cold process's files (default: a temporary one).
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="parity-cold-", dir=scratch) as tmp:
        folder = Path(tmp)
        case.save(folder / "case")
        save_loops(folder / "history", history, dropped=dropped)
        job = {
            "spec": spec.to_json(),
            "bug": str(bug),
            "max_trials": max_trials,
            "budget_s": budget_s,
        }
        found = _cold_process(folder, {**job, "mode": "check"})
        verdict = ColdVerdict("error", recorded=len(history), dropped=dropped)
        if "error" in found:
            verdict.error = str(found["error"])
        else:
            verdict.alone = list(found["alone"])
            verdict.trials = int(found.get("trials", 0))
            verdict.phases = {str(k): float(v) for k, v in found.get("phases", {}).items()}
            if str(bug) in verdict.alone:
                verdict.kind = "deterministic"
                verdict.reproduced = True
            else:
                verdict.kind = "history-dependent"
                verdict.with_history = found.get("with_history")
                chosen = found.get("loops")
                if chosen is not None:
                    verdict.loops, verdict.reproduced = _confirm(
                        folder, job, history, [int(i) for i in chosen], str(bug)
                    )
    verdict.seconds = time.monotonic() - started
    return verdict


def _confirm(
    folder: Path, job: dict[str, Any], history: Sequence[Loop], chosen: list[int], bug: str
) -> tuple[list[Loop], bool]:
    """The shrunk history if a fresh process confirms it, else the whole one if that is
    confirmed; (loops, confirmed)."""
    tries = [chosen] if len(chosen) == len(history) else [chosen, list(range(len(history)))]
    for indices in tries:
        found = _cold_process(folder, {**job, "mode": "verify", "loops": indices})
        if bug in found.get("with_history", []):
            return [history[i] for i in indices], True
    return [], False


def _cold_process(folder: Path, job: dict[str, Any]) -> dict[str, Any]:
    """Run one cold process on `folder` with `job`; what it reported, or {"error": why}."""
    (folder / "job.json").write_text(json.dumps(job))
    result = folder / "result.json"
    result.unlink(missing_ok=True)
    env = dict(os.environ)
    # The child imports this very harness, wherever the parent found it.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO_ROOT)) if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "harness.check.cold", str(folder), str(os.getpid())],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the cold process ran over {PROCESS_TIMEOUT_S:.0f} s"}
    if proc.returncode != 0 or not result.exists():
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return {"error": f"the cold process exited with status {proc.returncode}: {tail[0]}"}
    data: dict[str, Any] = json.loads(result.read_text())
    return data


# ---------------------------------------------------------------------------- the child


def ddmin(
    items: list[int], fails: Callable[[list[int]], bool], max_trials: int
) -> tuple[list[int], int]:
    """A smallest-found sublist of `items` (which fails) that still `fails`, by delta
    debugging (subsets, then complements, at growing granularity), within `max_trials`
    calls of `fails`; (the sublist, calls made)."""
    trials = 0
    n = 2
    while len(items) >= 2 and trials < max_trials:
        size = -(-len(items) // n)
        parts = [items[i : i + size] for i in range(0, len(items), size)]
        reduced = False
        complements = [_without(parts, i) for i in range(len(parts))] if len(parts) > 2 else []
        candidates = parts + complements
        for j, candidate in enumerate(candidates):
            if trials >= max_trials:
                break
            trials += 1
            if fails(candidate):
                items = candidate
                n = 2 if j < len(parts) else max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    return items, trials


def _without(parts: list[list[int]], i: int) -> list[int]:
    return [x for j, part in enumerate(parts) if j != i for x in part]


def _die_with(parent: int) -> None:
    """Have the kernel end this process when the one that started it dies (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _child(folder: Path) -> dict[str, Any]:
    job = json.loads((folder / "job.json").read_text())
    spec = RuntimeSpec.from_json(job["spec"])
    case = Case.load(folder / "case")
    loops = load_loops(folder / "history")
    bug = str(job["bug"])

    def after(indices: Sequence[int]) -> list[str]:
        gc.collect()  # the previous trial's runtimes and graphs go first
        runtimes = spec.open()  # fresh pools and descriptor/bind-group caches of their own
        run_loops({rt.name: rt for rt in runtimes}, [loops[i] for i in indices])
        return case_bugs(runtimes, case)

    if job["mode"] == "verify":
        return {"with_history": after(job["loops"])}
    started = time.monotonic()
    alone = case_bugs(spec.open(), case)
    out: dict[str, Any] = {"alone": alone, "phases": {"alone": time.monotonic() - started}}
    if bug in alone or not loops:
        return out
    everything = list(range(len(loops)))
    started = time.monotonic()
    full = after(everything)
    out["phases"]["whole_history"] = time.monotonic() - started
    out["with_history"] = full
    out["trials"] = 1
    if bug not in full:
        return out
    started = time.monotonic()
    deadline = started + float(job["budget_s"])

    def fails(indices: list[int]) -> bool:
        return time.monotonic() < deadline and bug in after(indices)

    chosen, trials = ddmin(everything, fails, int(job["max_trials"]))
    out["phases"]["shrink"] = time.monotonic() - started
    out["loops"] = chosen
    out["trials"] = 1 + trials
    return out


def main(argv: Sequence[str]) -> int:
    """`python -m harness.check.cold FOLDER PARENT_PID`: the cold process (see the module
    docstring); writes FOLDER/result.json."""
    folder, parent = Path(argv[0]), int(argv[1])
    _die_with(parent)
    result = _child(folder)
    tmp = folder / "result.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.rename(folder / "result.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["ColdVerdict", "RuntimeSpec", "case_bugs", "cold_check", "ddmin"]
