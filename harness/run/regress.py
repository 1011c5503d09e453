"""`parity replay BUNDLE` and `parity regress BUNDLE`: rerun a repro bundle without
Hypothesis, and keep one as a permanent regression test (tests/regressions/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from harness.check.backends import open_runtime
from harness.run import console
from harness.run.bundle import Bundle, ReplayOutcome, load_bundle, replay
from harness.run.console import UsageError
from harness.run.records import (
    plain,
    write_json,
)


def replay_command(args: argparse.Namespace) -> int:
    """Replay `args.bundle` and say how its verdict compares; returns the exit status."""
    bundle = load_bundle(args.bundle)
    started = time.monotonic()
    outcome = replay(
        bundle, shaders=args.shaders, allow_adapters=args.allow_adapters, history=args.history
    )
    if args.json:
        console.out(
            json.dumps(
                plain(
                    {
                        "status": outcome.status,
                        "expected": outcome.expected,
                        "found": sorted(outcome.found),
                        "divergences": outcome.divergences,
                        "shaders": args.shaders,
                        "shader_mismatch": outcome.shader_mismatch,
                        "python_mismatch": outcome.python_mismatch,
                        "max_workgroups_per_dim": bundle.max_workgroups_per_dim,
                        "history_loops": outcome.history_loops,
                    }
                ),
                indent=1,
            )
        )
    _device_notes(bundle)
    _replay_notes(bundle, outcome)
    _verdict_lines(outcome, args.shaders, f"{time.monotonic() - started:.1f} s")
    return outcome.exit_status


def _device_notes(bundle: Bundle) -> None:
    """A note per backend whose adapter or driver is not the one the bundle recorded."""
    recorded = bundle.doc.run.adapters
    now = {b: open_runtime(b).info() for b in bundle.backends}
    for b in bundle.backends:
        was = recorded.get(b, {})
        if was and (was.get("adapter"), was.get("driver")) != (
            now[b].get("adapter"),
            now[b].get("driver"),
        ):
            console.err(
                f"parity replay: note: recorded on {b} {was.get('adapter')} "
                f"({was.get('driver')}), replaying on {now[b].get('adapter')} "
                f"({now[b].get('driver')})"
            )


def _replay_notes(bundle: Bundle, outcome: ReplayOutcome) -> None:
    """How the replay differs from the run that found the bundle: its workgroup limit, the
    history it ran (or not), shaders and Python code that changed since."""
    if bundle.max_workgroups_per_dim is not None:
        console.err(
            f"parity replay: under a limit of {bundle.max_workgroups_per_dim} workgroups per "
            "grid dimension, as recorded in the bundle"
        )
    if outcome.history_loops:
        console.err(
            f"parity replay: history-dependent: ran the {outcome.history_loops} loop(s) of "
            "history the bundle keeps (what ran before the case in the worker) on fresh "
            "runtimes first; --no-history runs the case alone"
        )
    elif bundle.doc.history:
        console.err(
            "parity replay: note: the case alone, without the history the bundle keeps "
            "(--no-history); its bug showed only after that history"
        )
    if outcome.shader_mismatch:
        console.err(
            "parity replay: the working tree's shaders differ from the bundle's: "
            + ", ".join(outcome.shader_mismatch)
        )
    if outcome.python_mismatch:
        changed = outcome.python_mismatch
        console.err(
            f"parity replay: warning: the Python code differs from the code the bundle was "
            f"found with (commit {bundle.doc.run.git}) in {len(changed)} "
            f"file(s): {', '.join(changed[:8])}{', ...' if len(changed) > 8 else ''}; the "
            "verdict below may come from that change, not from the shaders"
        )
    elif outcome.python_mismatch is None:
        console.err("parity replay: note: the bundle records no source hashes (an older harness)")


def _verdict_lines(outcome: ReplayOutcome, shaders: str, took: str) -> None:
    """The replay's verdict against the bundle's bug, with what it diverges with."""
    sig = str(outcome.expected)
    if outcome.status == "fixed":
        console.err(f"parity replay: fixed: no divergence (was: {sig}) [{shaders} shaders, {took}]")
    elif outcome.status == "still_failing":
        console.err(f"parity replay: still failing: same bug {sig} [{shaders} shaders, {took}]")
        for d in outcome.divergences[:10]:
            console.err(f"  step {d.step}: {d.kind} ({d.blame}) {d.message}")
    else:
        now_sig = "; ".join(str(s) for s in sorted(outcome.found))
        console.err(
            f"parity replay: diverges differently: was {sig}, now {now_sig} "
            f"[{shaders} shaders, {took}]"
        )
        for d in outcome.divergences[:10]:  # what it diverges with now, not only its key
            console.err(f"  step {d.step}: {d.kind} ({d.blame}) {d.message}")


def regress_command(args: argparse.Namespace) -> int:
    """Copy `args.bundle` into `args.dest` as a regression test and replay it once.

    The copy is made and replayed in a staging folder beside the destination and renamed
    into place only when both succeed: a refused or failed regress leaves nothing behind.
    """
    bundle = load_bundle(args.bundle)
    bundle.manifest(args.allow_adapters)  # an adapter not allowed: refused before any copy
    dest_root = Path(args.dest)
    name = args.name or bundle.doc.id or bundle.path.name
    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"--name must be a plain folder name, got {name!r}")
    dest = dest_root / name
    if dest.exists() and not args.force:
        raise UsageError(f"{dest}: exists; pass --force to replace it")
    dest_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=dest_root))
    try:
        copy = staging / name
        shutil.copytree(bundle.path, copy, ignore=shutil.ignore_patterns("arrays.npz"))
        write_json(
            copy / "regression.json",
            {
                "expect": args.expect,
                "bug": bundle.bug,
                "source": str(bundle.path),
                "created": time.strftime("%Y-%m-%d"),
            },
        )
        outcome = replay(load_bundle(copy), shaders="worktree", allow_adapters=args.allow_adapters)
        if dest.exists():
            shutil.rmtree(dest)
        copy.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    passes = (outcome.status == "fixed") == (args.expect == "fixed")
    console.err(
        f"parity regress: {dest} (expect {args.expect}); with the working tree's shaders it is "
        f"{outcome.status.replace('_', ' ')}, so tests/test_regressions.py "
        f"{'passes' if passes else 'FAILS until that changes'}"
    )
    return 0
