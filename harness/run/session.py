"""One `parity run`: the chunks of a work plan searched with Hypothesis, recorded as they go.

Lifecycle of a `RunSession`:
1. `start()` opens the runtimes: in this process for `--jobs 1`, else in each of N worker
   processes (harness.run.workers), waiting until every one has opened them
   (BackendUnavailable if a driver is missing); then it locks and prepares the output folder
   (`harness.run.runlock`: one parity process per folder; `close()` releases it) and writes
   `run.json` (seed, profile, plan, adapters, workers, versions).
2. `run()` deals the chunks of this shard's plan, in plan order, to this process or to the
   workers (harness.run.chunks runs each). Every executed case is appended to `cases.jsonl`
   at once, by this process alone; when a chunk ends, each minimal failing case has a repro
   bundle (one per finding: a chunk that shrinks to a finding already bundled reuses it)
   and the chunk a record naming them. Progress lines go to stderr.
3. SIGINT/SIGTERM stop after the current case (a second signal stops at once), in every
   worker alike; the time budget stops dealing chunks and generating cases (a chunk that
   found a failure may finish shrinking, within a grace period). Either way the run is
   finalized: summary, JUnit XML and HTML report. The exit status comes from this
   process's own tallies of the records it wrote, judged by the one exit rule
   (harness.run.exitrule) that also judges the summary and titles the report.

A SIGKILL skips step 3, but `cases.jsonl` already holds every finding (the workers die with
this process), and `parity report` renders it.

An output the disk will not take (full, read-only: `OutputError`, from a record, a bundle or
run.json) stops the run like a signal, in every worker; it is finalized with status
`error`, the first such error among its `errors`, and exit status 2, and the command's one
error line names the file. What was written stays consistent: a record that did not fit is
not there at all (nor counted), a bundle that did not fit is not named by any record. A small
reserve file, written when the run starts and given back when it ends, keeps room for the
final run.json on a disk that filled up, so the report says how the run ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from graph_format import ADAPTER_VARIABLE
from harness.check import timing
from harness.check.backends import BACKENDS, KernelWarmer
from harness.check.coverage import Coverage
from harness.families import FAMILIES
from harness.run.bundle import REPO_SHADER_DIRS, copy_shaders, source_digests
from harness.run.chunks import (
    OUTPUT_ERROR,
    CaseTally,
    ChunkRunner,
    ChunkTally,
    RunConfig,
    RunSetupError,
    Stop,
    chunk_record,
)
from harness.run.exitcodes import ExitStatus
from harness.run.exitrule import CLEAN_TITLE, Verdict, judge
from harness.run.findings import CLEAN, KNOWN, UNEXPECTED, finding_id, totals_text
from harness.run.plan import Chunk, make_plan, plan_digest, shard_of
from harness.run.profiles import PROFILES
from harness.run.records import (
    CASES_FILE,
    RUN_FILE,
    RUN_FORMAT,
    Budgets,
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    MergeMeta,
    OutputError,
    RecordError,
    RecordWriter,
    RunMeta,
    Totals,
    WorkerLine,
    read_run_meta,
    record_line,
    versions,
    write_json,
    writing,
)
from harness.run.runlock import LOCK_FILES, RunFolderLock
from harness.run.workers import WorkerPool

# Room kept for the final run.json while the run writes (see the module docstring).
RESERVE_FILE = ".parity.reserve"
# Files and folders a run writes; only these are cleared when a run folder is reused.
RUN_OUTPUTS = (RUN_FILE, CASES_FILE, "summary.json", "junit.xml", "index.html", RESERVE_FILE)
RUN_OUTPUT_DIRS = ("bundles", "failures", "cases", "assets")


class RunFolderError(ValueError):
    """The output folder cannot be used; the message says why."""


def available_jobs() -> int:
    """The processes this machine offers a run: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def workers_text(lines: Sequence[WorkerLine]) -> str:
    """Which worker runs on which adapter, e.g. `workers 1, 2 on NVIDIA H100 80GB HBM3`."""
    by_adapter: dict[str, list[str]] = {}
    for w in lines:
        label = " + ".join(sorted(set(w.adapters.values()))) or "?"
        by_adapter.setdefault(label, []).append(str(w.index))
    return "; ".join(
        f"worker{'s' if len(ids) > 1 else ''} {', '.join(ids)} on {label}"
        for label, ids in by_adapter.items()
    )


@dataclass
class _Totals:
    """The run's own tallies, counted as summary.json counts them (harness.run.findings)."""

    severity: dict[str, int] = field(default_factory=dict)  # case id -> CLEAN/KNOWN/UNEXPECTED
    steps: int = 0
    findings: set[str] = field(default_factory=set)  # finding ids
    examples_done: int = 0  # planned examples of finished chunks

    def add_case(self, tally: CaseTally) -> None:
        """Count an executed case once, however often Hypothesis runs it."""
        if tally.case_id not in self.severity:
            self.steps += tally.steps
        self.severity[tally.case_id] = max(self.severity.get(tally.case_id, CLEAN), tally.level)

    def counts(self) -> Totals:
        """The totals `totals_text` prints."""
        levels = list(self.severity.values())
        return Totals(
            cases=len(levels),
            steps=self.steps,
            divergent_cases=sum(1 for v in levels if v != CLEAN),
            unexpected_cases=levels.count(UNEXPECTED),
            known_cases=levels.count(KNOWN),
            findings=len(self.findings),
        )


class RunSession:
    """Runs one shard of a work plan into an output folder (see the module docstring).

    It is the `ChunkSink` of its chunks (in this process, or through the workers' pipes):
    it writes every record and counts it.
    """

    def __init__(self, config: RunConfig, log: Callable[[str], None] | None = None) -> None:
        if config.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {config.jobs}")
        self.config = config
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        profile = PROFILES[config.profile]
        self.plan = make_plan(
            config.families,
            config.seed,
            config.max_examples,
            config.chunk_examples,
            max_workgroups_per_dim=config.max_workgroups_per_dim,
            fold_every=profile.fold_every,
            fold_limit=profile.fold_limit,
        )
        self.mine = shard_of(self.plan, config.shard)
        self.totals = _Totals()
        self.stop = Stop(config.time_budget_s)
        self.runner: ChunkRunner | None = None  # --jobs 1
        self.pool: WorkerPool | None = None  # --jobs N
        self.warmer: KernelWarmer | None = None
        self.adapters: dict[str, dict[str, Any]] = {}
        self.writer: RecordWriter | None = None
        self.meta = RunMeta()
        self.lock: RunFolderLock | None = None
        self.coverage = Coverage()
        self.verdict = Verdict(ExitStatus.CLEAN, CLEAN_TITLE)
        self.exit_status = ExitStatus.CLEAN
        self.errors: list[str] = []
        # The first output the disk would not take: the run stops and exits 2 naming it.
        self.output_failure: OutputError | None = None
        self._reserved = False
        # Host-time split (harness.check.timing) of every process, when config.timings.
        self.timings: dict[str, float] = {}
        self._queue: deque[Chunk] = deque()
        self._last_progress = 0.0
        self._chunk_no = 0

    # ------------------------------------------------------------------ set-up

    def start(self) -> None:
        """Open the runtimes, lock and prepare the output folder; write run.json.

        The folder stays locked until `close()`, so call it once the report is written.

        Raises:
            BackendUnavailable: a driver is missing (the message names the package).
            RunSetupError: a chunk's workgroup limit is above a device's.
            RunFolderError: the output folder holds something that is not a parity run, or
                cannot be written.
            RunFolderBusy: another parity process is using the output folder.
            OutputError: run.json, cases.jsonl or the reserve cannot be written (a full or
                read-only disk).
            WorkerSetupError: a worker failed to start for another reason.
        """
        limits = [c.max_workgroups_per_dim for c in self.mine]
        # The kernels of the run's ops compile and reflect in the background, the first
        # chunk's first, into the caches every process of the run reads (a cold start would
        # build each in turn as a graph first needs it).
        ops = (op for c in self.mine for op in sorted(FAMILIES[c.family].exercises))
        self.warmer = KernelWarmer(self.config.shader_dirs, dict.fromkeys(ops))
        if self.config.jobs == 1:
            if self.config.adapters:  # this process runs on the first adapter asked for
                os.environ[ADAPTER_VARIABLE] = str(self.config.adapters[0])
            if self.config.timings:
                timing.enable()
            self.runner = ChunkRunner(self.config, self.stop)
            self.adapters = dict(self.runner.open(limits))
        else:
            self.pool = WorkerPool(self.config, limits)
            self.adapters = dict(self.pool.start())
        try:
            self._prepare()
        except BaseException:
            if self.pool is not None:
                self.pool.close()
            raise

    def _prepare(self) -> None:
        out = self.config.out
        self.lock = RunFolderLock(out, self.config.command)
        replaced = prepare_run_folder(out, self.lock)
        if replaced is not None:
            self.log(f"parity: replacing {replaced}")
        dirs = {b: Path(self.config.shader_dirs.get(b, REPO_SHADER_DIRS[b])) for b in BACKENDS}
        self.meta = RunMeta(
            format=RUN_FORMAT,
            note="written by `parity run`; cases.jsonl holds the results",
            status="running",
            command=self.config.command,
            profile=self.config.profile,
            seed=self.config.seed,
            families=list(self.config.families),
            budgets=Budgets(
                max_examples=self.config.max_examples,
                chunk_examples=self.config.chunk_examples,
                time_budget_s=self.config.time_budget_s,
            ),
            max_workgroups_per_dim=self.config.max_workgroups_per_dim,
            # Absolute, so that the commands the report prints can name them from the run
            # folder (harness.run.commands).
            database=str(self.config.database.resolve()) if self.config.database else None,
            shard=self.config.shard,
            plan=list(self.plan),
            plan_digest=plan_digest(self.plan),
            chunks=[c.id for c in self.mine],
            adapters=dict(self.adapters),
            versions=versions(),
            git=git_commit(),
            # "+dirty" covers tracked files only: hashes of the code itself, for replay.
            sources=source_digests(dirs),
            shader_dirs={b: str(p) for b, p in dirs.items()},
            shader_overrides={b: str(p) for b, p in self.config.shader_dirs.items()},
            kernels=str(self.config.kernels) if self.config.kernels is not None else None,
            expectations=list(self.config.expectations.entries),
            expectations_file=(
                str(Path(self.config.expectations.source).resolve())
                if self.config.expectations.source is not None
                else None
            ),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            jobs=self.config.jobs,
            workers=self.pool.lines if self.pool is not None else [],
        )
        write_json(out / RUN_FILE, self.meta)
        # Twice run.json and some: the final one adds its errors, workers and times.
        self._reserved = True
        with writing(out / RESERVE_FILE):
            (out / RESERVE_FILE).write_bytes(bytes(2 * (out / RUN_FILE).stat().st_size + 16384))
        self.writer = RecordWriter(out / CASES_FILE)
        if self.runner is not None:
            self.runner.meta = self.meta

    # ------------------------------------------------------------------ the run

    def run(self) -> str:
        """Search every chunk of this shard; returns the run's status.

        "complete", "time_budget" (stopped by --time-budget), "interrupted" (a signal) or
        "error" (a chunk failed for a reason other than a divergence).
        """
        assert self.writer is not None, "start() first"
        # The time budget is for the search: device start-up in start() does not count.
        self.stop.started = time.monotonic()
        self._queue = deque(self.mine)
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self._search()
        except KeyboardInterrupt:
            self.stop.reason = self.stop.reason or "interrupted"
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.writer.close()
        if self.pool is not None:
            timing.merge(self.timings, self.pool.timings)
        else:
            timing.merge(self.timings, timing.take())
        status = self._status()
        self.verdict = self._judge(status)
        # A disk that would not take the run's output is exit 2, whatever the records say.
        self.exit_status = (
            ExitStatus.BAD_INPUT if self.output_failure is not None else self.verdict.exit_status
        )
        self.meta.status = status
        self.meta.exit_status = int(self.exit_status)
        self.meta.stop_reason = self.stop.reason
        self.meta.errors = self.errors
        self.meta.duration_s = round(time.monotonic() - self.stop.started, 2)
        self.meta.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if self.pool is not None:
            self.meta.workers = self.pool.lines
        self._release_reserve()
        try:
            write_json(self.config.out / RUN_FILE, self.meta)
        except OutputError as err:
            self.output_error(err)
        self.log(f"parity: {status}: {totals_text(self.totals.counts())}, {self.meta.duration_s} s")
        return status

    def _search(self) -> None:
        """Run the shard's chunks: on the workers, or one by one in this process."""
        if self.pool is None:
            assert self.runner is not None
            while (chunk := self.deal(0)) is not None:
                self.runner.run_chunk(chunk, self)
            return
        self.pool.begin(self.meta, self.stop.started)
        self.pool.run(self)
        for left in self._queue:  # every worker died and none could replace them
            reason = "not run: no worker was left to run it"
            self.errors.append(f"{left.id}: {reason}")
            record = chunk_record(left, self.config.shard, "error", reason=reason)
            self._write_chunk(record)
        self._queue.clear()

    def _status(self) -> str:
        """The run's status once its search ended (see `run`)."""
        if self.output_failure is not None:
            return "error"
        if self.stop.reason is not None:
            return "time_budget" if self.stop.reason == "time_budget" else "interrupted"
        if self.errors:
            return "error"
        return "complete"

    def _judge(self, status: str) -> Verdict:
        """The run's verdict (harness.run.exitrule), from its own tallies: never from the
        files, which only this process writes while it holds the folder's lock."""
        return judge(
            profile=self.config.profile,
            plan=self.plan,
            adapters=self.adapters,
            coverage=self.coverage,
            unexpected_cases=self.totals.counts().unexpected_cases,
            checked=status == "complete" and self.config.shard.count == 1,
            status=status,
        )

    def close(self) -> None:
        """End the workers, if any, and release the output folder's lock (idempotent)."""
        if self.warmer is not None:
            self.warmer.close()
        if self.pool is not None:
            self.pool.close()
        self._release_reserve()
        if self.lock is not None:
            self.lock.release()

    def _release_reserve(self) -> None:
        if self._reserved:  # written (or begun) by this session, under its lock
            with contextlib.suppress(OSError):
                (self.config.out / RESERVE_FILE).unlink(missing_ok=True)
            self._reserved = False

    def output_error(self, error: OutputError) -> None:
        """An output the disk would not take: the run stops (every worker after its
        current case) and ends with status error and exit status 2, naming the first."""
        if self.output_failure is None:
            self.output_failure = error
            self.errors.append(str(error))
        if self.stop.reason in (None, "time_budget"):
            self.stop.reason = OUTPUT_ERROR
            if self.pool is not None:
                self.pool.stop_writing()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.pool is not None:
            # The workers stop (after their current case, or at once on a second signal);
            # this process goes on collecting what they send until they have.
            if self.stop.reason is None or self.stop.reason == "time_budget":
                self.stop.reason = name
                self.log(
                    f"parity: {name}: stopping after the current cases (again to stop at once)"
                )
            self.pool.forward(signum)
            return
        if self.stop.reason is not None and self.stop.reason != "time_budget":
            raise KeyboardInterrupt  # a second signal: stop now
        self.stop.reason = name
        self.log(f"parity: {name}: stopping after the current case (again to stop at once)")

    # ------------------------------------------------------------------ dealing

    def deal(self, worker: int) -> Chunk | None:
        """The next chunk of the plan to run (on `worker`; 0: this process), or None when
        none is left. Once the run stops (a signal, the time budget), every chunk left is
        recorded as skipped instead."""
        while self._queue:
            chunk = self._queue.popleft()
            self._chunk_no += 1
            if self.stop.reason is None and self.stop.out_of_time():
                self.stop.reason = "time_budget"
            if self.stop.reason is not None:
                reason = "time_budget" if self.stop.reason == "time_budget" else self.stop.reason
                self._write_chunk(chunk_record(chunk, self.config.shard, "skipped", reason=reason))
                continue
            limit = chunk.max_workgroups_per_dim
            self.log(
                f"parity: chunk {self._chunk_no}/{len(self.mine)} {chunk.id} "
                f"(seed {chunk.seed}, {chunk.max_examples} examples"
                + (f", {limit} workgroups per grid dimension" if limit else "")
                + (f", worker {worker}" if worker else "")
                + ")"
            )
            return chunk
        return None

    # ------------------------------------------------------------------ the records (ChunkSink)

    def case(self, record: CaseRecord) -> None:
        """A case of this process's chunk: written and counted."""
        self.case_line(record_line(record), CaseTally.of(record))

    def case_line(self, line: str, tally: CaseTally) -> None:
        """A case record's line: written and counted (neither, if the disk would not take it)."""
        if not self._write_line(line):
            return
        self.coverage.merge(tally.coverage)
        self.totals.add_case(tally)
        self.tick()

    def chunk(self, record: ChunkRecord, tally: ChunkTally) -> None:
        """The end of a chunk of this process."""
        self.chunk_line(record_line(record), tally)

    def chunk_line(self, line: str, tally: ChunkTally) -> None:
        """A chunk record's line: written and counted (neither, if the disk would not take it)."""
        if not self._write_line(line):
            return
        for path in tally.replaced:  # named by no record now that this one is written
            shutil.rmtree(self.config.out / path, ignore_errors=True)
        self.totals.examples_done += tally.examples
        self.totals.findings.update(tally.findings)
        self._progress(force=True, current=tally.chunk)

    def lost(self, chunk: Chunk, reason: str, findings: list[ChunkFinding], seconds: float) -> None:
        """A chunk whose worker died: an error record keeping the findings its cases showed."""
        self.errors.append(f"{chunk.id}: {reason}")
        record = chunk_record(
            chunk, self.config.shard, "error", findings=findings, duration=seconds, reason=reason
        )
        if self._write_chunk(record):
            self.totals.findings.update(finding_id(f.case_id, f.bug) for f in findings)

    def error(self, text: str) -> None:
        """A failure that is not a divergence: the run ends with status "error"."""
        self.errors.append(text)

    def tick(self) -> None:
        """A progress line, if one is due."""
        self._progress()

    def _write_chunk(self, record: ChunkRecord) -> bool:
        return self._write_line(record_line(record))

    def _write_line(self, line: str) -> bool:
        """Append a record's line; False when the disk would not take it (the run stops)."""
        assert self.writer is not None
        try:
            self.writer.write_line(line)
        except OutputError as err:
            self.output_error(err)
            return False
        return True

    # ------------------------------------------------------------------ progress

    def _progress(self, force: bool = False, current: str | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < self.config.progress_every_s:
            return
        self._last_progress = now
        elapsed = now - self.stop.started
        self.log(
            f"parity: [{self._chunk_no}/{len(self.mine)} chunks"
            + (f", {current}" if current else "")
            + f"] {totals_text(self.totals.counts())} | "
            f"{elapsed:.0f} s elapsed, {self._time_left(elapsed)}"
        )

    def _time_left(self, elapsed: float) -> str:
        budget = self.config.time_budget_s
        planned = sum(c.max_examples for c in self.mine)
        done = self.totals.examples_done
        estimate = None
        if done and planned > done:
            estimate = elapsed / done * (planned - done)
        if budget is not None:
            left = max(0.0, budget - elapsed)
            if estimate is not None:
                left = min(left, estimate)
            return f"~{left:.0f} s left (time budget {budget:.0f} s)"
        if estimate is None:
            return "time left unknown yet"
        return f"~{estimate:.0f} s left"


def prepare_run_folder(out: Path, lock: RunFolderLock | None = None) -> str | None:
    """Create `out`, or clear a previous run's outputs from it; returns what it replaced.

    Args:
        lock: taken once the folder exists and before anything in it is cleared.

    Raises:
        RunFolderError: `out` is a file, a non-empty folder that is not a run folder, a
            merged report, or cannot be written.
        RunFolderBusy: another parity process holds `lock`.
    """
    _check_run_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if lock is not None:
            lock.acquire()
            _check_run_folder(out)  # again, now that no other parity process can change it
        replaced = _previous_run(out)
        for name in RUN_OUTPUTS:
            (out / name).unlink(missing_ok=True)
        for name in RUN_OUTPUT_DIRS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
    except OSError as err:
        where = err.filename or out
        raise RunFolderError(f"--out {out}: cannot write {where}: {err.strerror or err}") from None
    return replaced


def _check_run_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out}: exists and is not a folder")
    if not out.is_dir():
        return
    if any(p.name not in LOCK_FILES for p in out.iterdir()) and not (out / RUN_FILE).exists():
        raise RunFolderError(
            f"--out {out}: the folder is not empty and holds no {RUN_FILE}; refusing to write "
            "a run into it (pick an empty or new folder, or a previous run's folder)"
        )
    if (out / RUN_FILE).exists():
        try:
            meta: RunMeta | MergeMeta | None = read_run_meta(out / RUN_FILE)
        except RecordError:
            meta = None  # a damaged run.json of an earlier run: replaced like any other
        if isinstance(meta, MergeMeta):
            raise RunFolderError(
                f"--out {out}: holds a {meta.format} report (from parity merge), not a run; "
                "refusing to replace it (pick another folder)"
            )


def _previous_run(out: Path) -> str | None:
    """A one-line description of the run a folder holds, if any."""
    if not (out / RUN_FILE).exists():
        return None
    try:
        meta = read_run_meta(out / RUN_FILE)
    except RecordError:
        meta = None
    if not isinstance(meta, RunMeta) or meta.started is None:
        return f"the earlier run in {out} (its {RUN_FILE} is unreadable)"
    bundles = out / "bundles"
    count = sum(1 for _ in bundles.iterdir()) if bundles.is_dir() else 0
    return (
        f"the earlier run in {out} (`{meta.command}`, started {meta.started}, status "
        f"{meta.status}, {count} bundles)"
    )


def git_commit() -> str | None:
    """The repo's HEAD commit (with "+dirty" when the tree has changes), if it is a git tree."""
    import subprocess

    root = REPO_SHADER_DIRS["webgpu"].parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


__all__ = [
    "RunConfig",
    "RunFolderError",
    "RunSession",
    "RunSetupError",
    "available_jobs",
    "copy_shaders",
    "prepare_run_folder",
    "workers_text",
]
