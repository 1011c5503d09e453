"""One `parity run`: the chunks of a work plan searched with Hypothesis, recorded as they go.

Lifecycle of a `RunSession`:
1. `start()` opens both runtimes (BackendUnavailable if a driver is missing), locks and
   prepares the output folder (`harness.run.runlock`: one parity process per folder; `close()`
   releases it) and writes `run.json` (seed, profile, plan, adapters, versions).
2. `run()` searches each chunk of this shard's plan. Every executed case is appended to
   `cases.jsonl` at once; when a chunk ends, each minimal failing case gets a repro bundle
   (one per finding: a chunk that shrinks to a finding already bundled reuses it) and the
   chunk a record naming them. Progress lines go to stderr.
3. SIGINT/SIGTERM stop after the current case (a second signal stops at once); the time
   budget stops generation (a chunk that found a failure may finish shrinking, within a
   grace period). Either way the run is finalized: summary, JUnit XML and HTML report.

A SIGKILL skips step 3, but `cases.jsonl` already holds every finding, and `parity report`
renders it.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from hypothesis import given, seed, settings, target
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from graph_format import Runtime
from harness.check.backends import BACKENDS, open_runtimes
from harness.check.coverage import Coverage, missing_cells
from harness.check.divergence import BugKey
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.check.repeatability import classify
from harness.check.verdict import (
    CaseChecker,
    DivergenceFound,
    exception_for,
    utilization_by_op_type,
)
from harness.families import FAMILIES
from harness.gen.case import Case
from harness.run.bundle import (
    REPO_SHADER_DIRS,
    copy_shaders,
    existing_bundle,
    source_digests,
    write_bundle,
)
from harness.run.exitcodes import ExitStatus
from harness.run.expectations import Expectations
from harness.run.findings import CLEAN, KNOWN, UNEXPECTED, finding_id, severity, totals_text
from harness.run.plan import Chunk, Shard, make_plan, plan_digest, shard_of
from harness.run.profiles import PROFILES, hypothesis_settings
from harness.run.records import (
    CASES_FILE,
    RUN_FILE,
    RUN_FORMAT,
    Budgets,
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    MergeMeta,
    RecordError,
    RecordWriter,
    RunMeta,
    Totals,
    case_record,
    read_run_meta,
    versions,
    write_json,
)
from harness.run.runlock import LOCK_FILES, RunFolderLock

# Files and folders a run writes; only these are cleared when a run folder is reused.
RUN_OUTPUTS = (RUN_FILE, CASES_FILE, "summary.json", "junit.xml", "index.html")
RUN_OUTPUT_DIRS = ("bundles", "failures", "cases", "assets")


class RunFolderError(ValueError):
    """The output folder cannot be used; the message says why."""


class RunSetupError(ValueError):
    """The devices cannot run as asked (a workgroup limit above theirs); the message says why."""


class _Stop(BaseException):
    """Ends a chunk's search early (a signal or the time budget); Hypothesis lets it through."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RunConfig:
    """Everything a run is asked to do (resolved from the command line)."""

    families: list[str]
    profile: str
    seed: int
    max_examples: int  # per family
    chunk_examples: int
    out: Path
    shard: Shard = field(default_factory=Shard)
    time_budget_s: float | None = None
    database: Path | None = None
    shader_dirs: Mapping[str, Path] = field(default_factory=dict)
    expectations: Expectations = field(default_factory=Expectations)
    progress_every_s: float = 10.0
    repeats: int = 3  # re-runs per backend to classify a divergent case's repeatability
    command: str = ""
    max_workgroups_per_dim: int | None = None  # a lowered limit for every chunk


class _KeyedDatabase(ExampleDatabase):
    """A view of a database under a per-chunk key prefix, so chunks never share entries."""

    def __init__(self, inner: ExampleDatabase, prefix: bytes) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = prefix

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Any:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


@dataclass
class _Totals:
    """The run's own tallies, counted as summary.json counts them (harness.run.findings)."""

    severity: dict[str, int] = field(default_factory=dict)  # case id -> CLEAN/KNOWN/UNEXPECTED
    steps: int = 0
    findings: set[str] = field(default_factory=set)  # finding ids
    examples_done: int = 0  # planned examples of finished chunks

    def add_case(self, record: CaseRecord) -> None:
        """Count an executed case once, however often Hypothesis runs it."""
        if record.case_id not in self.severity:
            self.steps += record.steps
        level = severity(record.divergences)
        self.severity[record.case_id] = max(self.severity.get(record.case_id, CLEAN), level)

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


@dataclass
class _Engine:
    """The runtimes of one workgroups-per-dimension limit, and a runner over them."""

    runtimes: list[Runtime]
    runner: LockstepRunner
    checker: CaseChecker


@dataclass
class _ChunkState:
    chunk: Chunk
    engine: _Engine
    seq: int = 0
    unexpected_found: bool = False
    # Smallest divergent case per bug: the findings of an interrupted chunk.
    best: dict[BugKey, tuple[Case, CaseRecord]] = field(default_factory=dict)
    # Per bug, the provisional bundle of its first divergent case (`bundles/<id>`).
    provisional: dict[BugKey, str] = field(default_factory=dict)
    # The case and record of each verdict raised to Hypothesis, found again when Hypothesis
    # raises its final (shrunk) verdicts; weak, so that the many raised while shrinking go.
    raised: weakref.WeakKeyDictionary[DivergenceFound, tuple[Case, CaseRecord]] = field(
        default_factory=weakref.WeakKeyDictionary
    )


def _size(case: Case) -> tuple[int, int]:
    return (
        len(case.steps),
        sum(int(np.size(v)) for step in case.steps for v in step.values()),
    )


class RunSession:
    """Runs one shard of a work plan into an output folder (see the module docstring)."""

    def __init__(self, config: RunConfig, log: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        profile = PROFILES[config.profile]
        self.steer = profile.steer
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
        self.stop_reason: str | None = None
        self.started = time.monotonic()
        self.runtimes: list[Runtime] = []
        self.runner: LockstepRunner | None = None
        self.engines: dict[int | None, _Engine] = {}  # by lowered limit (None: the device's)
        self.writer: RecordWriter | None = None
        self.database: ExampleDatabase | None = None
        self.meta = RunMeta()
        self.lock: RunFolderLock | None = None
        self.coverage = Coverage()
        self.ops_run: set[str] = set()
        self.exit_status = ExitStatus.CLEAN
        self.errors: list[str] = []
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
        """
        for limit in dict.fromkeys([None, *(c.max_workgroups_per_dim for c in self.mine)]):
            try:
                runtimes = open_runtimes(BACKENDS, self.config.shader_dirs, limit)
            except ValueError as err:  # a limit the device cannot lower to
                raise RunSetupError(f"--max-workgroups-per-dim: {err}") from None
            runner = LockstepRunner(runtimes)
            # No re-runs while searching: classifying every divergent case would multiply
            # the cost of a frequent bug. Each final finding is classified once (see
            # `_findings`); a failure that does not replay reaches us as Hypothesis's
            # FlakyFailure group.
            self.engines[limit] = _Engine(runtimes, runner, CaseChecker(runner, repeats=0))
        self.runtimes = self.engines[None].runtimes
        self.runner = self.engines[None].runner
        out = self.config.out
        self.lock = RunFolderLock(out, self.config.command)
        replaced = prepare_run_folder(out, self.lock)
        if replaced is not None:
            self.log(f"parity: replacing {replaced}")
        if self.config.database is not None:
            self.database = DirectoryBasedExampleDatabase(str(self.config.database))
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
            database=str(self.config.database) if self.config.database else None,
            shard=self.config.shard,
            plan=list(self.plan),
            plan_digest=plan_digest(self.plan),
            chunks=[c.id for c in self.mine],
            adapters=self.runner.adapters,
            versions=versions(),
            git=git_commit(),
            # "+dirty" covers tracked files only: hashes of the code itself, for replay.
            sources=source_digests(dirs),
            shader_dirs={b: str(p) for b, p in dirs.items()},
            shader_overrides={b: str(p) for b, p in self.config.shader_dirs.items()},
            expectations=list(self.config.expectations.entries),
            expectations_file=self.config.expectations.source,
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        write_json(out / RUN_FILE, self.meta)
        self.writer = RecordWriter(out / CASES_FILE)

    # ------------------------------------------------------------------ the run

    def run(self) -> str:
        """Search every chunk of this shard; returns the run's status.

        "complete", "time_budget" (stopped by --time-budget), "interrupted" (a signal) or
        "error" (a chunk failed for a reason other than a divergence).
        """
        assert self.writer is not None, "start() first"
        # The time budget is for the search: device start-up in start() does not count.
        self.started = time.monotonic()
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        status = "complete"
        try:
            for chunk in self.mine:
                self._chunk_no += 1
                if self.stop_reason is not None:
                    self._skip(chunk, self.stop_reason)
                    continue
                if self._out_of_time():
                    self.stop_reason = "time_budget"
                    self._skip(chunk, "time_budget")
                    continue
                self._run_chunk(chunk)
        except KeyboardInterrupt:
            self.stop_reason = self.stop_reason or "interrupted"
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.writer.close()
        if self.stop_reason is not None:
            status = "time_budget" if self.stop_reason == "time_budget" else "interrupted"
        elif self.errors:
            status = "error"
        self.exit_status = self._exit_status(status)
        self.meta.status = status
        self.meta.exit_status = int(self.exit_status)
        self.meta.stop_reason = self.stop_reason
        self.meta.errors = self.errors
        self.meta.duration_s = round(time.monotonic() - self.started, 2)
        self.meta.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_json(self.config.out / RUN_FILE, self.meta)
        self.log(f"parity: {status}: {totals_text(self.totals.counts())}, {self.meta.duration_s} s")
        return status

    def _exit_status(self, status: str) -> ExitStatus:
        """The process's exit status, from this run's own tallies (never from the files,
        which only this process writes while it holds the folder's lock)."""
        if status == "interrupted":
            return ExitStatus.INTERRUPTED
        if status == "error":
            return ExitStatus.INTERNAL_ERROR
        if self.totals.counts().unexpected_cases:
            return ExitStatus.DIVERGENT
        # Required coverage cells are judged, as in the summary, on a complete unsharded run
        # and for the op types it exercised.
        profile = PROFILES[self.config.profile]
        required = {
            op: cells for op, cells in profile.required_coverage.items() if op in self.ops_run
        }
        checked = status == "complete" and self.config.shard.count == 1
        if checked and missing_cells(self.coverage, required, BACKENDS):
            return ExitStatus.DIVERGENT
        return ExitStatus.CLEAN

    def close(self) -> None:
        """Release the output folder's lock (idempotent)."""
        if self.lock is not None:
            self.lock.release()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stop_reason is not None:
            raise KeyboardInterrupt  # a second signal: stop now
        self.stop_reason = name
        self.log(f"parity: {name}: stopping after the current case (again to stop at once)")

    def _out_of_time(self, grace: bool = False) -> bool:
        budget = self.config.time_budget_s
        if budget is None:
            return False
        if grace:
            budget += max(30.0, 0.25 * budget)
        return time.monotonic() - self.started > budget

    def _skip(self, chunk: Chunk, reason: str) -> None:
        assert self.writer is not None
        self.writer.write(self._chunk_record(chunk, "skipped", 0, [], 0.0, reason=reason))

    def _chunk_record(
        self,
        chunk: Chunk,
        status: str,
        cases: int,
        findings: list[ChunkFinding],
        duration: float,
        reason: str | None = None,
    ) -> ChunkRecord:
        return ChunkRecord(
            chunk=chunk.id,
            family=chunk.family,
            index=chunk.index,
            seed=chunk.seed,
            max_examples=chunk.max_examples,
            max_workgroups_per_dim=chunk.max_workgroups_per_dim,
            shard=str(self.config.shard),
            status=status,
            reason=reason,
            cases=cases,
            findings=findings,
            duration_s=round(duration, 3),
        )

    def _run_chunk(self, chunk: Chunk) -> None:
        assert self.writer is not None
        state = _ChunkState(chunk, self.engines[chunk.max_workgroups_per_dim])
        started = time.monotonic()
        limit = chunk.max_workgroups_per_dim
        self.log(
            f"parity: chunk {self._chunk_no}/{len(self.mine)} {chunk.id} "
            f"(seed {chunk.seed}, {chunk.max_examples} examples"
            + (f", {limit} workgroups per grid dimension" if limit else "")
            + ")"
        )
        database = (
            _KeyedDatabase(self.database, f"parity:{chunk.id}:".encode())
            if self.database is not None
            else None
        )
        chunk_settings = settings(
            hypothesis_settings(self.config.profile, max_examples=chunk.max_examples),
            database=database,
        )

        def run_case(case: Case) -> None:
            self._check(state, case)

        run_case.__name__ = f"parity_{chunk.family}_{chunk.index}"
        test = seed(chunk.seed)(chunk_settings(given(case=FAMILIES[chunk.family]())(run_case)))
        finals: list[DivergenceFound] = []
        status, reason = "complete", None
        try:
            test()
        except DivergenceFound as err:
            finals = [err]
        except _Stop as stop:
            status, reason = (
                ("time_budget" if stop.reason == "time_budget" else "interrupted"),
                (stop.reason),
            )
        except KeyboardInterrupt:
            self.stop_reason = self.stop_reason or "SIGINT"
            status, reason = "interrupted", self.stop_reason
        except BaseExceptionGroup as group:
            found, rest = group.split(DivergenceFound)
            finals = _leaves(found) if found else []
            if rest is not None:
                status, reason = "error", _describe(rest)
        except Exception as err:  # a harness or Hypothesis error: recorded, the run goes on
            status, reason = "error", _describe(err)
        if status == "error":
            self.errors.append(f"{chunk.id}: {reason}")
            self.log(f"parity: chunk {chunk.id} failed: {reason}")
        findings = self._findings(chunk, state, finals, shrunk=status == "complete")
        self.totals.examples_done += chunk.max_examples
        duration = time.monotonic() - started
        record = self._chunk_record(chunk, status, state.seq, findings, duration, reason)
        self.writer.write(record)
        self._drop_provisional(state, findings)
        self._progress(force=True, current=chunk)

    def _check(self, state: _ChunkState, case: Case) -> None:
        """The Hypothesis test body: run, record, steer, fail on unexpected divergences."""
        assert self.runner is not None and self.writer is not None
        if self.stop_reason is not None and self.stop_reason != "time_budget":
            raise _Stop(self.stop_reason)
        if self._out_of_time(grace=state.unexpected_found):
            raise _Stop("time_budget")
        result, repeat = state.engine.checker.run(case)
        chunk = state.chunk
        record = case_record(case, result, chunk=chunk.id, family=chunk.family, seq=state.seq)
        record.max_workgroups_per_dim = chunk.max_workgroups_per_dim
        if repeat is not None:
            record.repeatability = repeat.to_json()
        adapters = self.runner.adapters
        for d in record.divergences:
            d.expected = self.config.expectations.match(d, chunk.family, adapters)
        unexpected = [
            d
            for d, r in zip(result.divergences, record.divergences, strict=True)
            if r.expected is None
        ]
        # A case found non-deterministic keeps that verdict on every replay, even one that
        # happens to pass, so Hypothesis never sees it as flaky.
        nondeterministic = repeat is not None and not repeat.deterministic
        record.unexpected = len(unexpected)
        record.shard = str(self.config.shard)
        # The bug the case stands for: the key of its primary unexpected divergence
        # (harness.check.divergence.BugKey), the same key the exception below and its finding use.
        key = record.bug
        if repeat is not None and nondeterministic:
            key = BugKey.nondeterministic(repeat.backends)
        # The first divergent case of each bug gets a provisional bundle at once, so that a
        # run killed while Hypothesis shrinks still leaves a replayable finding; its record
        # names it (written first: a kill mid-bundle leaves no bundle.json, and no claim).
        provisional = None
        if key is not None and (unexpected or nondeterministic) and key not in state.provisional:
            provisional = self._provisional_id(chunk, record)
            state.provisional[key] = f"bundles/{provisional}"
            record.provisional_bundle = state.provisional[key]
        state.seq += 1
        self.writer.write(record)
        if provisional is not None:
            self._write_bundle(state, provisional, case, record, shrunk=False, provisional=True)
        self.coverage.merge(record.coverage)
        self.ops_run.update(record.ops)
        self.totals.add_case(record)
        self._progress(current=chunk)
        if self.steer:
            # Hunt for the worst cases: Hypothesis hill-climbs on each op type's error/budget.
            for op_type, value in utilization_by_op_type(case, result).items():
                target(min(value, 1e6), label=f"{op_type} error/budget")
        if key is not None and (unexpected or nondeterministic):
            state.unexpected_found = True
            best = state.best.get(key)
            if best is None or _size(case) < _size(best[0]):
                state.best[key] = (case, record)
            # The exception class stands for the bug key, so that Hypothesis only accepts
            # shrinks that keep it (harness/check/verdict.py).
            err = exception_for(key)(_only(result, unexpected), repeat)
            state.raised[err] = (case, record)
            raise err

    def _findings(
        self, chunk: Chunk, state: _ChunkState, finals: list[DivergenceFound], shrunk: bool
    ) -> list[ChunkFinding]:
        """Write a bundle per finding; the findings as listed in the chunk record."""
        picked = [state.raised[err] for err in finals if err in state.raised]
        if not picked:
            # Interrupted before Hypothesis finished: the smallest case seen per bug.
            picked = list(state.best.values())
            shrunk = False
        out = []
        for case, record in picked:
            bug = record.bug
            bundle_id = finding_id(record.case_id, bug)
            known = existing_bundle(self.config.out / "bundles" / bundle_id)
            bundle: str | None
            if known is not None:
                # Another chunk already shrank to this case with this bug: one finding, one
                # bundle; the summary lists every chunk that found it.
                record.repeatability = known.repeatability
                bundle = f"bundles/{bundle_id}"
            else:
                if self.config.repeats:
                    repeat = classify(case, state.engine.runtimes, self.config.repeats)
                    record.repeatability = repeat.to_json()
                bundle = self._write_bundle(state, bundle_id, case, record, shrunk=shrunk)
            self.totals.findings.add(bundle_id)
            out.append(
                ChunkFinding(
                    case_id=record.case_id,
                    seq=record.seq,
                    bundle=bundle,
                    shrunk=shrunk,
                    bug=bug,
                    unexpected=record.unexpected,
                    repeatability=(record.repeatability or {}).get("class"),
                )
            )
        return out

    @staticmethod
    def _provisional_id(chunk: Chunk, record: CaseRecord) -> str:
        """Provisional bundles live apart from findings' (content-addressed) bundles, so
        that dropping one never removes a finding another chunk reuses."""
        return f"provisional-{chunk.family}-{chunk.index}-{record.case_id}"

    def _write_bundle(
        self,
        state: _ChunkState,
        bundle_id: str,
        case: Case,
        record: CaseRecord,
        *,
        shrunk: bool,
        provisional: bool = False,
    ) -> str | None:
        """Write one bundle; its path in the run folder, or None if it could not be written
        (the finding stays in the records, and the run's errors say why)."""
        try:
            write_bundle(
                self.config.out / "bundles" / bundle_id,
                case,
                record,
                run=self.meta,
                runtimes=state.engine.runtimes,
                shader_dirs=self.config.shader_dirs,
                shrunk=shrunk,
                provisional=provisional,
            )
        except Exception as err:
            self.errors.append(f"{state.chunk.id}: bundle {bundle_id}: {_describe(err)}")
            return None
        return f"bundles/{bundle_id}"

    def _drop_provisional(self, state: _ChunkState, findings: list[ChunkFinding]) -> None:
        """Remove the chunk's provisional bundles that its findings replaced."""
        kept = {f.bundle for f in findings}
        for path in state.provisional.values():
            if path not in kept:
                shutil.rmtree(self.config.out / path, ignore_errors=True)

    # ------------------------------------------------------------------ progress

    def _progress(self, force: bool = False, current: Chunk | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < self.config.progress_every_s:
            return
        self._last_progress = now
        elapsed = now - self.started
        self.log(
            f"parity: [{self._chunk_no}/{len(self.mine)} chunks"
            + (f", {current.id}" if current else "")
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


def _only(result: CaseResult, divergences: list[Any]) -> CaseResult:
    return dataclasses.replace(result, divergences=divergences)


def _leaves(group: BaseException) -> list[DivergenceFound]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for sub in group.exceptions for leaf in _leaves(sub)]
    return [group] if isinstance(group, DivergenceFound) else []


def _describe(err: BaseException) -> str:
    """The whole text of an error (a compiler's output runs over many lines: keep them)."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in err.exceptions)
    return f"{type(err).__name__}: {str(err).strip()}"


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
    "copy_shaders",
    "prepare_run_folder",
]
