"""The `parity` command: run generated cases on both backends, report, replay and merge.

    parity run      [--families F,..|--ops OP,..] [--profile quick|pr|nightly] [--seed N]
                    [--max-examples N] [--time-budget S] [--shard I/N] [--out DIR] ...
    parity report   RUN_DIR              re-render summary, JUnit XML and HTML from records
    parity merge    --out OUT SHARD_DIR...  merge shards of one plan into one report
    parity replay   BUNDLE               rerun a repro bundle without Hypothesis
    parity regress  BUNDLE               keep a bundle as a permanent regression test
    parity list                          families, ops, kernel variants, adapters

Exit statuses: `harness.run.exitcodes` (the table in `parity --help`). Every failure goes
through `main`: bad input is one line `parity CMD: <file>[:line]: <what is wrong>` (status
2), anything unexpected prints its traceback (status 3). Output to a closed pipe (`parity
list | head`) is dropped quietly and the command finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graph_format import BackendUnavailable
from harness.check.backends import BACKENDS, SHADER_LANGUAGES, open_runtime
from harness.families import FAMILIES, family_for_op
from harness.run.bundle import (
    REPO_ROOT,
    REPO_SHADER_DIRS,
    BundleError,
    existing_bundle,
    load_bundle,
    replay,
)
from harness.run.exitcodes import ExitStatus, exit_table
from harness.run.expectations import (
    DEFAULT_FILE,
    Expectations,
    ExpectationsError,
    load_expectations,
)
from harness.run.findings import totals_text
from harness.run.plan import Shard
from harness.run.profiles import DEFAULT_DATABASE_DIR, PROFILES
from harness.run.records import (
    CASES_FILE,
    RUN_FILE,
    RecordError,
    RecordWriter,
    read_records,
    write_json,
)
from harness.run.report import MERGE_FORMAT, load_run, merged_meta, render_report
from harness.run.runlock import LOCK_FILES, LockUnavailable, RunFolderLock, command_line
from harness.run.session import RunConfig, RunFolderError, RunSession, RunSetupError

REGRESSIONS_DIR = REPO_ROOT / "tests" / "regressions"


class UsageError(Exception):
    """Bad arguments: reported after the command's usage line, exit status 2."""


# Errors that mean bad input or set-up: one line, exit status 2 (each names its file).
INPUT_ERRORS = (
    RecordError,
    BundleError,
    ExpectationsError,
    RunFolderError,
    RunSetupError,
    LockUnavailable,
    BackendUnavailable,
)


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command's parser and each subcommand's (for their own usage lines)."""
    parser = argparse.ArgumentParser(
        prog="parity",
        description="Vulkan-parity differential testing of the WebGPU backend: generated "
        "dynamic-shape cases run in lockstep on WebGPU and Vulkan.",
        epilog="exit status:\n" + exit_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="generate cases, run them on both backends, write records, bundles and a report",
        description="Search each case family with Hypothesis, in deterministic chunks, "
        "checking every step on both backends. Writes cases.jsonl as it goes, then "
        "summary.json, junit.xml, index.html and a repro bundle per finding.",
    )
    run.add_argument(
        "--families",
        default=None,
        help=f"comma-separated case families (default: all: {','.join(FAMILIES)})",
    )
    run.add_argument(
        "--ops",
        default=None,
        help="comma-separated op types (any `parity list` shows); runs the op's own case "
        "family, or the most focused family that exercises it (view_copy: view) (default: "
        "none; combined with --families when both are given)",
    )
    run.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="quick",
        help="search budget and settings: quick (default), pr or nightly (nightly keeps an "
        "example database and steers toward high error/budget utilization)",
    )
    run.add_argument("--seed", type=int, default=0, help="run seed (default: 0)")
    run.add_argument(
        "--max-examples",
        type=_positive_int,
        default=None,
        help="examples per family (default: the profile's: "
        + ", ".join(f"{p.name} {p.max_examples}" for p in PROFILES.values())
        + ")",
    )
    run.add_argument(
        "--chunk-examples",
        type=_positive_int,
        default=None,
        help="examples per chunk, the unit of sharding (default: the profile's: "
        + ", ".join(f"{p.name} {p.chunk_examples}" for p in PROFILES.values())
        + ")",
    )
    run.add_argument(
        "--time-budget",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="stop generating after this many seconds; a chunk that found a failure may "
        "finish shrinking within a grace period (default: no limit)",
    )
    run.add_argument(
        "--shard",
        default="1/1",
        metavar="I/N",
        help="run only shard I of N (1-based) of the plan's chunks (default: 1/1)",
    )
    run.add_argument(
        "--out",
        default="reports/latest",
        help="output folder (default: reports/latest); an earlier run there is replaced (and "
        "named on stderr); a folder holding anything else is refused",
    )
    db = run.add_mutually_exclusive_group()
    db.add_argument(
        "--database",
        default=None,
        metavar="DIR",
        help="Hypothesis example database folder, kept between runs (default: "
        f"{DEFAULT_DATABASE_DIR} for profiles that keep one, i.e. "
        + ", ".join(p.name for p in PROFILES.values() if p.keep_database)
        + "; none otherwise)",
    )
    db.add_argument(
        "--no-database",
        action="store_true",
        help="use no example database (needed for sharded and unsharded runs to agree)",
    )
    exp = run.add_mutually_exclusive_group()
    exp.add_argument(
        "--expectations",
        default=None,
        metavar="FILE",
        help=f"known-divergences file (default: {DEFAULT_FILE.name} at the repo root if it exists)",
    )
    exp.add_argument(
        "--no-expectations", action="store_true", help="treat every divergence as unexpected"
    )
    run.add_argument(
        "--wgsl-dir",
        default=None,
        metavar="DIR",
        help="build WebGPU kernels from this folder of <kernel>.wgsl files (default: the "
        "repo's wgsl/)",
    )
    run.add_argument(
        "--glsl-dir",
        default=None,
        metavar="DIR",
        help="build Vulkan kernels from this folder laid out like glsl/ (default: the repo's "
        "glsl/)",
    )
    run.add_argument(
        "--repeats",
        type=_non_negative_int,
        default=3,
        metavar="N",
        help="re-runs per backend of every divergent case, to classify it as deterministic "
        "or not (default: 3; 0 turns it off)",
    )
    run.add_argument(
        "--max-workgroups-per-dim",
        type=_positive_int,
        default=None,
        metavar="N",
        help="run every chunk as if the devices allowed only N workgroups per grid "
        "dimension: counts above N fold into 2-D grids, counts above N*N are refused alike "
        "(default: the devices' own limit, but "
        + "; ".join(
            f"{p.name} runs one chunk in {p.fold_every} of each family under {p.fold_limit}"
            for p in PROFILES.values()
            if p.fold_limit
        )
        + ")",
    )
    run.add_argument(
        "--progress-every",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines on stderr (default: 10)",
    )

    report = sub.add_parser(
        "report",
        help="re-render summary.json, junit.xml and the HTML report from a run's records",
        description="Rebuild the report of a run folder from run.json and cases.jsonl "
        "(works on a killed run too). Exits 1 when the records hold an unexpected divergence.",
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="a folder written by parity run")

    merge = sub.add_parser(
        "merge",
        help="merge the shards of one run plan into one report",
        description="Combine shard folders of the same plan (same seed, families, profile "
        "and budgets) into --out OUT: records, bundles, summary and HTML. Exits 1 when any "
        "shard found an unexpected divergence.",
    )
    merge.add_argument(
        "--out",
        metavar="OUT",
        default=None,
        help="folder for the merged report (required): new, empty, or an earlier merge's "
        "output (replaced); anything else only with --force",
    )
    merge.add_argument("shards", metavar="SHARD_DIR", nargs="+", help="shard run folders")
    merge.add_argument(
        "--allow-missing",
        action="store_true",
        help="merge even if some shards of the plan are absent (default: refuse)",
    )
    merge.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty OUT that is not an earlier merge (its report files are "
        "replaced; never a shard folder)",
    )

    rep = sub.add_parser(
        "replay",
        help="rerun a repro bundle without Hypothesis: still failing or fixed?",
        description="Rerun a bundle's case on both backends and compare divergence "
        "signatures (class, op, blamed backend). Exits 0 when fixed, 1 when it still (or "
        "differently) diverges.",
    )
    rep.add_argument("bundle", metavar="BUNDLE", help="a bundle folder (bundles/<id>)")
    rep.add_argument(
        "--shaders",
        choices=("bundle", "worktree"),
        default="bundle",
        help="shaders to build the kernels from: the bundle's own copies (default), or the "
        "working tree's wgsl/ and glsl/ (to check a fix)",
    )
    rep.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout")

    reg = sub.add_parser(
        "regress",
        help="copy a bundle under tests/regressions/ as a permanent regression test",
        description="Copy a bundle into tests/regressions/<name>/, where "
        "tests/test_regressions.py replays every bundle with the working tree's shaders.",
    )
    reg.add_argument("bundle", metavar="BUNDLE", help="a bundle folder (bundles/<id>)")
    reg.add_argument(
        "--name", default=None, help="folder name under tests/regressions/ (default: bundle id)"
    )
    reg.add_argument(
        "--expect",
        choices=("fixed", "failing"),
        default="fixed",
        help="what the test asserts: no divergence (fixed, default), or the same signature "
        "still diverging (failing: a known bug, strict)",
    )
    reg.add_argument(
        "--dest",
        default=str(REGRESSIONS_DIR),
        help=f"regressions folder (default: {REGRESSIONS_DIR.relative_to(REPO_ROOT)} in the repo)",
    )
    reg.add_argument("--force", action="store_true", help="replace an existing regression")

    lst = sub.add_parser(
        "list",
        help="list case families, ops and kernel variants, profiles, and adapters",
        description="Show what a run can cover and what this machine can run it on.",
    )
    lst.add_argument("--json", action="store_true", help="print as JSON on stdout")
    return parser, dict(sub.choices)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


COMMANDS = ("run", "report", "merge", "replay", "regress", "list")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `parity` command; returns the exit status (`harness.run.exitcodes`)."""
    ensure_runtime_dir()
    parser, subparsers = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the command's own parser, with its own usage line
        subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    handlers = {
        "run": _run,
        "report": _report,
        "merge": _merge,
        "replay": _replay,
        "regress": _regress,
        "list": _list,
    }
    where = f"parity {args.command}"
    try:
        return int(handlers[args.command](args))
    except UsageError as err:
        _err(subparsers[args.command].format_usage().rstrip())
        _err(f"{where}: {err}")
        return ExitStatus.BAD_INPUT
    except INPUT_ERRORS as err:
        _err(f"{where}: {err}")
        return ExitStatus.BAD_INPUT
    except KeyboardInterrupt:
        _err(f"{where}: interrupted")
        return ExitStatus.INTERRUPTED
    except Exception:
        _err(traceback.format_exc().rstrip())
        _err(f"{where}: internal error (a bug in the harness; the traceback above says where)")
        return ExitStatus.INTERNAL_ERROR


# ---------------------------------------------------------------------------- output

# Streams found closed (a reader such as `head` that stopped reading): output is dropped.
_closed_streams: set[str] = set()


def _write(stream_name: str, text: str) -> None:
    """Write a line to stdout or stderr; a closed pipe silences that stream for good."""
    if stream_name in _closed_streams:
        return
    stream = getattr(sys, stream_name)
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        _closed_streams.add(stream_name)
        # Point the descriptor at /dev/null, so that neither the interpreter's final flush
        # nor a native library writes to the dead pipe again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError):
            pass


def _out(text: str) -> None:
    _write("stdout", text)


def _err(message: str) -> None:
    _write("stderr", message)


def ensure_runtime_dir() -> None:
    """Give the process a private XDG_RUNTIME_DIR when it has no usable one.

    Vulkan's window-system code (loaded with every driver) prints `XDG_RUNTIME_DIR is
    invalid or not set` on each start without one; a 0700 folder of our own under the
    temp dir keeps those lines, which look like failures, away.
    """
    current = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(current) and os.path.isdir(current) and os.access(current, os.W_OK):
        return
    path = os.path.join(tempfile.gettempdir(), f"parity-runtime-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return
    info = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or info.st_uid != os.getuid():
        path = tempfile.mkdtemp(prefix="parity-runtime-")  # someone else's: one of our own
    elif info.st_mode & 0o777 != 0o700:
        os.chmod(path, 0o700)
    os.environ["XDG_RUNTIME_DIR"] = path


# ---------------------------------------------------------------------------- run


def _families(args: argparse.Namespace) -> list[str]:
    from harness.ops import MODELS

    chosen: list[str] = []
    if args.families is not None:
        chosen += [f.strip() for f in args.families.split(",") if f.strip()]
        unknown = [f for f in chosen if f not in FAMILIES]
        if unknown:
            raise UsageError(
                f"--families: unknown families {unknown}; expected some of {sorted(FAMILIES)}"
            )
    if args.ops is not None:
        for op in (o.strip() for o in args.ops.split(",") if o.strip()):
            if op not in MODELS:
                raise UsageError(f"--ops: unknown op {op!r}; expected some of {sorted(MODELS)}")
            family = family_for_op(op)
            if family is None:
                raise UsageError(f"--ops: no case family exercises {op!r}")
            if family not in chosen:
                chosen.append(family)
    if args.families is None and args.ops is None:
        chosen = list(FAMILIES)
    if not chosen:
        raise UsageError("nothing to run: --families/--ops selected no family")
    return chosen


def _shader_dir(text: str | None, backend: str) -> Path | None:
    if text is None:
        return None
    path = Path(text).resolve()
    if not path.is_dir():
        lang = SHADER_LANGUAGES[backend]
        raise UsageError(f"--{lang}-dir {text}: no such folder (expected <kernel> shader files)")
    return path


def _run(args: argparse.Namespace) -> int:
    families = _families(args)
    profile = PROFILES[args.profile]
    try:
        shard = Shard.parse(args.shard)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.no_expectations:
        expectations = Expectations()
    elif args.expectations is not None:
        expectations = load_expectations(args.expectations)
    elif DEFAULT_FILE.exists():
        expectations = load_expectations(DEFAULT_FILE)
    else:
        expectations = Expectations()
    database: Path | None = None
    if args.database is not None:
        database = Path(args.database)
    elif profile.keep_database and not args.no_database:
        database = Path(DEFAULT_DATABASE_DIR)
    shader_dirs = {
        b: d
        for b, d in (
            ("webgpu", _shader_dir(args.wgsl_dir, "webgpu")),
            ("vulkan", _shader_dir(args.glsl_dir, "vulkan")),
        )
        if d is not None
    }
    config = RunConfig(
        families=families,
        profile=args.profile,
        seed=args.seed,
        max_examples=args.max_examples or profile.max_examples,
        chunk_examples=args.chunk_examples or profile.chunk_examples,
        out=Path(args.out),
        shard=shard,
        time_budget_s=args.time_budget,
        database=database,
        shader_dirs=shader_dirs,
        expectations=expectations,
        progress_every_s=args.progress_every,
        repeats=args.repeats,
        command=command_line(),
        max_workgroups_per_dim=args.max_workgroups_per_dim,
    )
    session = RunSession(config, log=_err)
    try:
        session.start()
        _err(
            f"parity: {len(session.mine)} of {len(session.plan)} chunks (shard {shard}), "
            f"families {','.join(families)}, profile {args.profile}, seed {args.seed}, "
            f"out {config.out}"
        )
        session.run()
        # The status comes from the run's own tallies; summary.json records it as is.
        render_report(config.out, exit_status=session.exit_status)
        _err(f"parity: report: {config.out / 'index.html'} (exit status {session.exit_status})")
    finally:
        session.close()
    return session.exit_status


# ---------------------------------------------------------------------------- report, merge


def _report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    _require_records(run_dir)
    with RunFolderLock(run_dir, command_line()):
        summary = render_report(run_dir)
    t = summary["totals"]
    _err(f"parity report: {summary['status']}: {totals_text(t)}; {run_dir / 'index.html'}")
    return int(summary["exit_status"])


def _require_records(run_dir: Path) -> None:
    """Refuse a run folder with nothing to report: its pages stay as they are.

    Raises:
        RecordError: no such folder, or a run whose cases.jsonl is missing or holds no
            record although the run planned chunks for itself.
    """
    data = load_run(run_dir)  # names a missing folder or run.json
    cases = run_dir / CASES_FILE
    planned = sum(len(run.get("chunks", [])) for run in data.runs)
    if not cases.exists():
        raise RecordError(f"{cases}: missing: no records to report (the run wrote none)")
    if planned and not any(data.records):
        raise RecordError(
            f"{cases}: holds no record, but the run planned {planned} chunks: nothing to "
            "report (the run stopped before its first case?)"
        )


def _merge(args: argparse.Namespace) -> int:
    if args.out is None:
        raise UsageError(
            "--out OUT is required: `parity merge --out OUT SHARD_DIR...` (the merged folder "
            "is no longer the first positional argument)"
        )
    out = Path(args.out)
    shard_dirs = [Path(d) for d in args.shards]
    if any(d.resolve() == out.resolve() for d in shard_dirs):
        raise UsageError(f"--out {out}: is one of the shards; merge into another folder")
    _check_merge_out(out, args.force)
    locks = [RunFolderLock(d, command_line()) for d in shard_dirs if d.is_dir()]
    try:
        for lock in locks:
            lock.acquire()
        return _merge_into(out, shard_dirs, args.allow_missing)
    finally:
        for lock in locks:
            lock.release()


def _check_merge_out(out: Path, force: bool) -> None:
    """Refuse an OUT that holds anything but an earlier merge, unless forced."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    if not out.is_dir() or all(p.name in LOCK_FILES for p in out.iterdir()):
        return
    try:
        fmt = json.loads((out / RUN_FILE).read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        fmt = None
    if fmt == MERGE_FORMAT or force:
        return
    what = "a run folder" if fmt else "not empty"
    raise UsageError(
        f"--out {out}: {what} and not an earlier merge's output; refusing to write into it "
        "(pick a new folder, or pass --force to replace its report files)"
    )


def _merge_into(out: Path, shard_dirs: list[Path], allow_missing: bool) -> int:
    shards = [load_run(d) for d in shard_dirs]
    runs = []
    for data in shards:
        if data.merged:
            raise UsageError(f"{data.path}: is a merged report; merge shard folders instead")
        runs.append(data.runs[0])
    first = runs[0]
    for data, run in zip(shards, runs, strict=True):
        if run.get("plan_digest") != first.get("plan_digest"):
            raise UsageError(
                f"{data.path}: a shard of another plan (seed {run.get('seed')}, families "
                f"{run.get('families')}, budgets {run.get('budgets')}); expected the plan of "
                f"{shards[0].path} (seed {first.get('seed')}, families {first.get('families')}, "
                f"budgets {first.get('budgets')})"
            )
    from harness.run.summary import device_label

    seen: dict[tuple[str, int], Path] = {}
    count = int(first["shard"]["count"])
    for data, run in zip(shards, runs, strict=True):
        key = (device_label(run.get("adapters", {})), int(run["shard"]["index"]))
        if key in seen:
            raise UsageError(
                f"{data.path}: shard {key[1]}/{count} on {key[0]} is also in {seen[key]}"
            )
        seen[key] = data.path
    for device in sorted({d for d, _ in seen}):
        missing = sorted(set(range(1, count + 1)) - {i for d, i in seen if d == device})
        if missing and not allow_missing:
            raise UsageError(
                f"shards {missing} of {count} on {device} are missing; pass them, or "
                "--allow-missing to merge what is there"
            )
        if missing:
            _err(f"parity merge: warning: shards {missing} of {count} on {device} are missing")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunFolderError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    with RunFolderLock(out, command_line()):
        return _write_merge(out, shards, runs)


def _write_merge(out: Path, shards: list[Any], runs: list[dict[str, Any]]) -> int:
    for name in ("bundles", "failures", "cases"):
        if (out / name).is_dir():
            shutil.rmtree(out / name)
    (out / CASES_FILE).unlink(missing_ok=True)
    writer = RecordWriter(out / CASES_FILE)
    try:
        for source, data in enumerate(shards):
            renames = _copy_bundles(data.path, out, source)
            for record in read_records(data.path / CASES_FILE):
                record["source"] = source
                for f in record.get("findings", []) if record["record"] == "chunk" else []:
                    if f.get("bundle") in renames:
                        f["bundle"] = renames[f["bundle"]]
                if record.get("provisional_bundle") in renames:
                    record["provisional_bundle"] = renames[record["provisional_bundle"]]
                writer.write(record)
    finally:
        writer.close()
    write_json(out / RUN_FILE, merged_meta(runs, [str(d.path) for d in shards]))
    summary = render_report(out)
    t = summary["totals"]
    _err(
        f"parity merge: {len(shards)} shards, {t['cases']} cases, {t['findings']} findings "
        f"({t['unexpected_findings']} unexpected); {out / 'index.html'}"
    )
    return int(summary["exit_status"])


def _copy_bundles(src: Path, out: Path, source: int) -> dict[str, str]:
    """Copy a shard's bundles into the merged folder; returns renamed relative paths."""
    renames: dict[str, str] = {}
    if not (src / "bundles").is_dir():
        return renames
    for bundle in sorted((src / "bundles").iterdir()):
        name = bundle.name
        if name.startswith("."):
            continue  # a bundle still being written when its shard was killed
        if (out / "bundles" / name).exists():
            if _same_device(bundle, out / "bundles" / name):
                continue  # the same finding (bundles are named by case and bug) from a shard
            renames[f"bundles/{name}"] = f"bundles/{name}-s{source}"  # on another device
            name = f"{name}-s{source}"
        shutil.copytree(bundle, out / "bundles" / name)
    return renames


def _same_device(bundle: Path, other: Path) -> bool:
    from harness.run.summary import device_label

    def device(folder: Path) -> str | None:
        doc = existing_bundle(folder)
        return device_label(doc.get("run", {}).get("adapters") or {}) if doc else None

    return device(bundle) == device(other) is not None


# ---------------------------------------------------------------------------- replay, regress


def _replay(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.bundle)
    started = time.monotonic()
    outcome = replay(bundle, shaders=args.shaders)
    if args.json:
        _out(
            json.dumps(
                {
                    "status": outcome.status,
                    "expected": sorted(list(s) for s in outcome.expected),
                    "found": sorted(list(s) for s in outcome.found),
                    "divergences": outcome.divergences,
                    "shaders": args.shaders,
                    "shader_mismatch": outcome.shader_mismatch,
                    "python_mismatch": outcome.python_mismatch,
                    "max_workgroups_per_dim": bundle.max_workgroups_per_dim,
                },
                indent=1,
            )
        )
    recorded = bundle.doc.get("run", {}).get("adapters", {})
    now = {b: open_runtime(b).info() for b in BACKENDS}
    for b in BACKENDS:
        was = recorded.get(b, {})
        if was and (was.get("adapter"), was.get("driver")) != (
            now[b].get("adapter"),
            now[b].get("driver"),
        ):
            _err(
                f"parity replay: note: recorded on {b} {was.get('adapter')} "
                f"({was.get('driver')}), replaying on {now[b].get('adapter')} "
                f"({now[b].get('driver')})"
            )
    if bundle.max_workgroups_per_dim is not None:
        _err(
            f"parity replay: under a limit of {bundle.max_workgroups_per_dim} workgroups per "
            "grid dimension, as recorded in the bundle"
        )
    if outcome.shader_mismatch:
        _err(
            "parity replay: the working tree's shaders differ from the bundle's: "
            + ", ".join(outcome.shader_mismatch)
        )
    if outcome.python_mismatch:
        changed = outcome.python_mismatch
        _err(
            f"parity replay: warning: the Python code differs from the code the bundle was "
            f"found with (commit {bundle.doc.get('run', {}).get('git')}) in {len(changed)} "
            f"file(s): {', '.join(changed[:8])}{', ...' if len(changed) > 8 else ''}; the "
            "verdict below may come from that change, not from the shaders"
        )
    elif outcome.python_mismatch is None:
        _err("parity replay: note: the bundle records no source hashes (an older harness)")
    sig = "; ".join("/".join(s) for s in sorted(outcome.expected))
    took = f"{time.monotonic() - started:.1f} s"
    if outcome.status == "fixed":
        _err(f"parity replay: fixed: no divergence (was: {sig}) [{args.shaders} shaders, {took}]")
    elif outcome.status == "still_failing":
        _err(f"parity replay: still failing: same signature {sig} [{args.shaders} shaders, {took}]")
        for d in outcome.divergences[:10]:
            _err(f"  step {d['step']}: {d['kind']} ({d['blame']}) {d['message']}")
    else:
        now_sig = "; ".join("/".join(s) for s in sorted(outcome.found))
        _err(
            f"parity replay: diverges differently: was {sig}, now {now_sig} "
            f"[{args.shaders} shaders, {took}]"
        )
    return outcome.exit_status


def _regress(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.bundle)
    dest_root = Path(args.dest)
    name = args.name or bundle.doc.get("id") or bundle.path.name
    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"--name must be a plain folder name, got {name!r}")
    dest = dest_root / name
    if dest.exists():
        if not args.force:
            raise UsageError(f"{dest}: exists; pass --force to replace it")
        shutil.rmtree(dest)
    dest_root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(bundle.path, dest, ignore=shutil.ignore_patterns("arrays.npz"))
    write_json(
        dest / "regression.json",
        {
            "expect": args.expect,
            "signatures": sorted(list(s) for s in bundle.signatures),
            "source": str(bundle.path),
            "created": time.strftime("%Y-%m-%d"),
        },
    )
    outcome = replay(load_bundle(dest), shaders="worktree")
    passes = (outcome.status == "fixed") == (args.expect == "fixed")
    _err(
        f"parity regress: {dest} (expect {args.expect}); with the working tree's shaders it is "
        f"{outcome.status.replace('_', ' ')}, so tests/test_regressions.py "
        f"{'passes' if passes else 'FAILS until that changes'}"
    )
    return 0


# ---------------------------------------------------------------------------- list


def _list(args: argparse.Namespace) -> int:
    from harness.ops import MODELS

    ops = {}
    for op, model in sorted(MODELS.items()):
        ops[op] = {
            name: {
                "wgsl": f"wgsl/{spec.wgsl}.wgsl",
                "glsl": f"glsl/{spec.glsl}.comp",
                "missing": [
                    p
                    for p in (
                        REPO_SHADER_DIRS["webgpu"] / f"{spec.wgsl}.wgsl",
                        REPO_SHADER_DIRS["vulkan"] / f"{spec.glsl}.comp",
                    )
                    if not p.exists()
                ],
            }
            for name, spec in model.kernels.items()
        }
    adapters: dict[str, Any] = {}
    for backend in BACKENDS:
        try:
            adapters[backend] = {"available": True, **open_runtime(backend).info()}
        except BackendUnavailable as err:
            adapters[backend] = {"available": False, "reason": str(err)}
    doc = {
        "families": {
            name: {"own_op": name if name in MODELS else None, "ops": sorted(family.exercises)}
            for name, family in FAMILIES.items()
        },
        "ops": {
            op: {k: {**v, "missing": [str(p) for p in v["missing"]]} for k, v in kernels.items()}
            for op, kernels in ops.items()
        },
        "op_families": {op: family_for_op(op) for op in ops},
        "profiles": {
            p.name: {
                "max_examples": p.max_examples,
                "chunk_examples": p.chunk_examples,
                "database": p.keep_database,
                "steer": p.steer,
                "derandomize": p.derandomize,
                "fold_every": p.fold_every,
                "fold_limit": p.fold_limit,
            }
            for p in PROFILES.values()
        },
        "adapters": adapters,
        "validation": os.environ.get("VULKAN_PARITY_VALIDATION", "1"),
    }
    if args.json:
        _out(json.dumps(doc, indent=1, default=str))
        return 0
    _out("Case families (parity run --families):")
    for name in FAMILIES:
        _out(f"  {name}")
    _out("Ops and kernel variants (parity run --ops):")
    for op, kernels in doc["ops"].items():
        _out(f"  {op}  (runs family {doc['op_families'][op]})")
        for name, k in kernels.items():
            missing = f"  MISSING {', '.join(k['missing'])}" if k["missing"] else ""
            _out(f"    {name:<22} {k['wgsl']:<28} {k['glsl']}{missing}")
    _out("Profiles (parity run --profile):")
    for name, p in doc["profiles"].items():
        _out(
            f"  {name:<8} {p['max_examples']} examples/family in chunks of {p['chunk_examples']}"
            + (", example database" if p["database"] else "")
            + (", target() on utilization" if p["steer"] else "")
            + (
                f", one chunk in {p['fold_every']} under {p['fold_limit']} workgroups/dim"
                if p["fold_limit"]
                else ""
            )
        )
    _out("Adapters:")
    for backend, info in adapters.items():
        if info["available"]:
            driver = info.get("driver_info") or info.get("driver")
            _out(
                f"  {backend:<7} {info.get('adapter')} | driver {driver} | {info.get('api')}"
                + (
                    f" | validation {'on' if info.get('validation') else 'off'}"
                    if backend == "vulkan"
                    else ""
                )
            )
        else:
            _out(f"  {backend:<7} UNAVAILABLE: {info['reason']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
