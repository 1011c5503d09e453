"""The `parity` command: run generated cases on both backends, report, replay and merge.

    parity run      [--families F,..|--ops OP,..] [--profile quick|pr|nightly] [--seed N]
                    [--max-examples N] [--time-budget S] [--shard I/N] [--out DIR] ...
    parity report   RUN_DIR              re-render summary, JUnit XML and HTML from records
    parity merge    --out OUT SHARD_DIR...  merge shards of one plan into one report
    parity replay   BUNDLE               rerun a repro bundle without Hypothesis
    parity regress  BUNDLE               keep a bundle as a permanent regression test
    parity list                          families, ops, kernel variants, adapters
    parity check-kernels DIR             validate a kernel manifest against its shaders
    parity import   MODEL.pte --out DIR  an ExecuTorch model's Vulkan delegate as a graph

Exit statuses: `harness.run.exitcodes` (the table in `parity --help`). Every failure goes
through `main`: bad input is one line `parity CMD: <file>[:line]: <what is wrong>` (status
2), and so is an output the disk would not take (`parity CMD: cannot write <file>: No space
left on device`, also status 2), anything unexpected prints its traceback (status 3).
Output to a closed pipe (`parity list | head`) is dropped quietly and the command finishes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from graph_format import BackendUnavailable
from graph_format.kernels import KernelManifestError
from harness.check.backends import SHADER_LANGUAGES, lockstep_backends
from harness.families import FAMILIES, family_for_op
from harness.importer import ImportRefused, import_pte, write_import
from harness.run import console
from harness.run.bundle import (
    REPO_ROOT,
    BundleError,
)
from harness.run.console import UsageError
from harness.run.exitcodes import LABELS, ExitStatus, exit_table
from harness.run.exitrule import REQUIRED_COVERAGE_HELP, summary_lines
from harness.run.expectations import (
    DEFAULT_FILE,
    Expectations,
    ExpectationsError,
    load_expectations,
)
from harness.run.findings import totals_text
from harness.run.kernels import check_exclusive, check_kernels_command, load_kernels
from harness.run.listing import list_command
from harness.run.merge import merge_command
from harness.run.plan import Shard
from harness.run.profiles import DEFAULT_DATABASE_DIR, PROFILES
from harness.run.records import (
    CASES_FILE,
    OutputError,
    RecordError,
    Summary,
)
from harness.run.records.files import writing
from harness.run.regress import regress_command, replay_command
from harness.run.report import load_run, render_report
from harness.run.runlock import LockUnavailable, RunFolderLock, command_line
from harness.run.session import (
    RunConfig,
    RunFolderError,
    RunSession,
    RunSetupError,
    available_jobs,
    workers_text,
)

REGRESSIONS_DIR = REPO_ROOT / "tests" / "regressions"


# Errors that mean bad input or set-up: one line, exit status 2 (each names its file). A
# disk that will not take an output (full, read-only) is set-up too: `OutputError`.
INPUT_ERRORS = (
    OutputError,
    RecordError,
    BundleError,
    ExpectationsError,
    RunFolderError,
    RunSetupError,
    LockUnavailable,
    BackendUnavailable,
    KernelManifestError,
    ImportRefused,
)


# Where `parity run --help` wraps its description and the epilog on required coverage.
HELP_WIDTH = 88


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
        description=textwrap.fill(
            "Search each case family with Hypothesis, in deterministic chunks, checking "
            "every step on both backends. Writes cases.jsonl as it goes, then summary.json, "
            "junit.xml, index.html and a repro bundle per finding.",
            HELP_WIDTH,
        ),
        epilog=textwrap.fill(REQUIRED_COVERAGE_HELP, HELP_WIDTH)
        + "\n\nexit status:\n"
        + exit_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "--shrink-budget",
        type=_non_negative_float,
        default=None,
        metavar="SECONDS",
        help="seconds each process may spend shrinking over the run (default: the profile's: "
        "quick 60, pr 120, nightly 1800); findings are shrunk first found first and each "
        "reported as it is bundled; once the budget is spent the rest are bundled as found, "
        "marked 'unshrunk: shrink budget spent'",
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
        "--webgpu",
        default=None,
        metavar="IMPL,...",
        help="the WebGPU implementations to check, each its own backend in lockstep with "
        "Vulkan: wgpu (wgpu-native/Naga, in process), dawn (Dawn/Tint in node: what "
        "ExecuTorch ships natively), chrome (headless Chromium) (default: wgpu, which runs "
        "wherever the Vulkan runtime does; the nightly workflow runs all three; "
        "`parity list` shows which this machine offers)",
    )
    run.add_argument(
        "--kernels",
        default=None,
        metavar="DIR",
        help="run the kernels of this folder's kernels.toml in place of the project's, on "
        "the backend(s) its sections name, with its Python adapters "
        "(docs/bring-your-own-kernels.md); not with --wgsl-dir/--glsl-dir for the same "
        "backend",
    )
    run.add_argument(
        "--repeats",
        type=_non_negative_int,
        default=3,
        metavar="N",
        help="re-runs per backend of every divergent case, to classify it as deterministic "
        "or not (default: 3; 0 turns it off, the cold re-run too)",
    )
    run.add_argument(
        "--no-cold-rerun",
        dest="cold_rerun",
        action="store_false",
        help="do not also re-run each finding in a fresh process (by default one that passes "
        "there is classed history-dependent, and its bundle keeps the worker's history that "
        "brings it back, shrunk: docs/oracles.md)",
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
        "--jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="processes that run chunks: 1 runs them in this process; N > 1 starts N "
        "worker processes, each with its own runtimes (default: the CPUs this process may "
        "use)",
    )
    run.add_argument(
        "--worker-cases",
        type=_positive_int,
        default=300,
        metavar="N",
        help="with N > 1 workers, replace a worker by a fresh process once it has run N "
        "cases (between chunks), which bounds driver memory that grows per case "
        "(default: 300)",
    )
    run.add_argument(
        "--adapters",
        default=None,
        metavar="I,J,...",
        help="adapters the workers open, dealt round robin, by index among the machine's "
        "Vulkan adapters ranked GPUs first (with --jobs 1: the first one) (default: worker k "
        "opens GPU k modulo the machine's GPUs; the default adapter where there is none)",
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
        description="Rerun a bundle's case on both backends and look for its bug key (op "
        "type|class|blamed backend|numeric band). Exits 0 when fixed, 1 when it still (or "
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
    rep.add_argument(
        "--no-history",
        dest="history",
        action="store_false",
        help="for a history-dependent bundle, run its case alone, without first running the "
        "history it keeps (what ran before the case in the worker that found it)",
    )
    rep.add_argument(
        "--allow-adapters",
        action="store_true",
        help="run the Python adapter classes of the bundle's kernel manifest (code from the "
        "bundle; refused without this flag)",
    )

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
        help="what the test asserts: no divergence (fixed, default), or the same bug key "
        "still diverging (failing: a known bug, strict)",
    )
    reg.add_argument(
        "--dest",
        default=str(REGRESSIONS_DIR),
        help=f"regressions folder (default: {REGRESSIONS_DIR.relative_to(REPO_ROOT)} in the repo)",
    )
    reg.add_argument("--force", action="store_true", help="replace an existing regression")
    reg.add_argument(
        "--allow-adapters",
        action="store_true",
        help="run the Python adapter classes of the bundle's kernel manifest when replaying it "
        "once here (code from the bundle; refused without this flag, before anything is "
        "copied); tests/test_regressions.py runs a kept bundle's adapters",
    )

    lst = sub.add_parser(
        "list",
        help="list case families, ops and kernel variants, profiles, and adapters",
        description="Show what a run can cover and what this machine can run it on.",
    )
    lst.add_argument("--json", action="store_true", help="print as JSON on stdout")

    chk = sub.add_parser(
        "check-kernels",
        help="validate a kernel manifest against its shaders without running cases",
        description="Load every kernel a kernels.toml names on its backend, for a generated "
        "graph that runs its slot: reflect it, bind every binding, member, override and "
        "specialization constant, compile it. Exits 0 when all build, 2 otherwise (one line "
        "per kernel naming the file, the slot and what is wrong).",
    )
    chk.add_argument(
        "kernels_dir", metavar="DIR", help="a kernel folder holding kernels.toml (or the file)"
    )
    imp = sub.add_parser(
        "import",
        help="convert an ExecuTorch .pte (one Vulkan delegate) into a graph folder",
        description="Read an ExecuTorch program whose one VulkanBackend delegate holds the "
        "whole method and write it as a graph folder (graph.json, graph.npz) and model.json "
        "(docs/executorch-models.md). Refuses, in one line and writing nothing, what it "
        "cannot convert exactly (exit 2).",
    )
    imp.add_argument("model", metavar="MODEL.pte", help="the ExecuTorch program file")
    imp.add_argument("--out", required=True, metavar="DIR", help="the graph folder to write")
    imp.add_argument(
        "--force", action="store_true", help="replace an earlier import's files in DIR"
    )
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


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value}")
    return value


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
        "merge": merge_command,
        "replay": replay_command,
        "regress": regress_command,
        "list": list_command,
        "check-kernels": check_kernels_command,
        "import": _import,
    }
    where = f"parity {args.command}"
    try:
        return int(handlers[args.command](args))
    except UsageError as err:
        console.err(subparsers[args.command].format_usage().rstrip())
        console.err(f"{where}: {err}")
        return ExitStatus.BAD_INPUT
    except INPUT_ERRORS as err:
        console.err(f"{where}: {err}")
        return ExitStatus.BAD_INPUT
    except KeyboardInterrupt:
        console.err(f"{where}: interrupted")
        return ExitStatus.INTERRUPTED
    except Exception:
        console.err(traceback.format_exc().rstrip())
        console.err(
            f"{where}: internal error (a bug in the harness; the traceback above says where)"
        )
        return ExitStatus.INTERNAL_ERROR


# ---------------------------------------------------------------------------- output


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


def _backends(text: str | None) -> tuple[str, ...]:
    """The backends of `--webgpu IMPL,...` (default: `DEFAULT_WEBGPU`)."""
    if text is None:
        return lockstep_backends()
    try:
        return lockstep_backends([part.strip() for part in text.split(",") if part.strip()])
    except ValueError as err:
        raise UsageError(f"--webgpu {text}: {err}") from None


def _adapters(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        chosen = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(
            f"--adapters must be adapter indices separated by commas, e.g. 0,1; got {text!r}"
        ) from None
    if not chosen or min(chosen) < 0:
        raise UsageError(f"--adapters needs indices >= 0; got {text!r}")
    return chosen


def _expectations(args: argparse.Namespace) -> Expectations:
    """The known divergences a run matches: none (`--no-expectations`), the file given, or
    the project's default file when it exists."""
    if args.no_expectations:
        return Expectations()
    if args.expectations is not None:
        return load_expectations(args.expectations)
    if DEFAULT_FILE.exists():
        return load_expectations(DEFAULT_FILE)
    return Expectations()


def _print_tallies(summary: Summary) -> None:
    """Each family's cases, steps and time, and why findings are unshrunk, on stderr."""
    for family, stats in summary.per_family.items():
        console.err(
            f"parity: family {family}: {stats.cases} cases, {stats.steps} steps, "
            f"{stats.duration_s or 0.0:.1f} s"
        )
    unshrunk = Counter(f.unshrunk for f in summary.findings if f.unshrunk)
    for why, count in sorted(unshrunk.items()):
        console.err(f"parity: {count} of {len(summary.findings)} findings unshrunk: {why}")


def _run_config(args: argparse.Namespace) -> RunConfig:
    """`parity run`'s configuration from its arguments (and the profile's defaults).

    Raises:
        UsageError, KernelManifestError, ExpectationsError: bad arguments (exit 2).
    """
    families = _families(args)
    profile = PROFILES[args.profile]
    try:
        shard = Shard.parse(args.shard)
    except ValueError as err:
        raise UsageError(str(err)) from None
    expectations = _expectations(args)
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
    manifest = load_kernels(args.kernels) if args.kernels is not None else None
    check_exclusive(manifest, shader_dirs)
    return RunConfig(
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
        kernels=manifest.path if manifest is not None else None,
        expectations=expectations,
        progress_every_s=args.progress_every,
        repeats=args.repeats,
        cold_rerun=args.cold_rerun,
        command=command_line(),
        max_workgroups_per_dim=args.max_workgroups_per_dim,
        jobs=args.jobs or available_jobs(),
        adapters=_adapters(args.adapters),
        worker_cases=args.worker_cases,
        shrink_budget_s=args.shrink_budget,
        backends=_backends(args.webgpu),
    )


def _import(args: argparse.Namespace) -> int:
    model = import_pte(Path(args.model))  # everything is read and converted before a write
    out = Path(args.out)
    with writing(out):
        write_import(model, out, force=args.force)
    graph = model.graph
    console.out(
        f"{args.model}: {len(graph.ops)} ops, inputs {', '.join(graph.inputs)}, outputs "
        f"{', '.join(graph.outputs)} -> {out} (graph.json, model.json)"
    )
    return ExitStatus.CLEAN


def _run(args: argparse.Namespace) -> int:
    config = _run_config(args)
    session = RunSession(config, log=console.err)
    try:
        session.start()
        console.err(
            f"parity: {len(session.mine)} of {len(session.plan)} chunks (shard {config.shard}), "
            f"families {','.join(config.families)}, profile {args.profile}, seed {args.seed}, "
            f"backends {','.join(config.backends)}, out {config.out}, "
            + (
                "in this process"
                if config.jobs == 1
                else f"{config.jobs} workers ({workers_text(session.meta.workers)})"
            )
        )
        session.run()
        # The status comes from the run's own tallies; summary.json records it as is.
        try:
            summary = render_report(config.out, exit_status=session.exit_status)
        except OutputError as err:
            session.output_error(err)
        if session.output_failure is not None:
            # What was written stays as it is; the one error line names the first file.
            raise session.output_failure
        _print_tallies(summary)
        # Last, the verdict's reasons (an empty required cell, what would fill it) and the
        # status in words: a CI log's tail says why the run failed.
        for line in session.verdict.console_lines():
            console.err(f"parity: {line}")
        status = session.exit_status
        console.err(
            f"parity: report: {config.out / 'index.html'} "
            f"(exit status {int(status)}: {LABELS[status]})"
        )
    finally:
        session.close()
    return session.exit_status


# ---------------------------------------------------------------------------- report, merge


def _report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    _require_records(run_dir)
    with RunFolderLock(run_dir, command_line()):
        summary = render_report(run_dir)
    console.err(
        f"parity report: {summary.status}: {totals_text(summary.totals)}; {run_dir / 'index.html'}"
    )
    for line in summary_lines(summary):
        console.err(f"parity report: {line}")
    return summary.exit_status


def _require_records(run_dir: Path) -> None:
    """Refuse a run folder with nothing to report: its pages stay as they are.

    Raises:
        RecordError: no such folder, or a run whose cases.jsonl is missing or holds no
            record although the run planned chunks for itself.
    """
    data = load_run(run_dir)  # names a missing folder or run.json
    cases = run_dir / CASES_FILE
    planned = sum(len(run.chunks) for run in data.runs)
    if not cases.exists():
        raise RecordError(f"{cases}: missing: no records to report (the run wrote none)")
    if planned and not any(data.records):
        raise RecordError(
            f"{cases}: holds no record, but the run planned {planned} chunks: nothing to "
            "report (the run stopped before its first case?)"
        )


if __name__ == "__main__":
    sys.exit(main())
