"""Running the chunks of a work plan: one `ChunkRunner` per process that runs chunks.

`parity run --jobs 1` runs its chunks in its own process; `--jobs N` starts N worker
processes (harness.run.workers), each with a `ChunkRunner` of its own. Either way a
`ChunkRunner` opens both runtimes once (per workgroup limit the plan uses; their memory
pools, pipelines and the SPIR-V cache on disk are then shared by every case it runs) and
runs many chunks with them. For each chunk it runs the Hypothesis search, checks every case
in lockstep, shrinks, classifies each finding's repeatability, writes the bundles (a
provisional one per bug as soon as it is seen, the finding's own once it is shrunk) and
hands every record to a `ChunkSink`: the session writes them into `cases.jsonl` and counts
them (in the same process, or in the parent of the workers).
What a run is asked (`RunConfig`), when it stops (`Stop`) and the tallies a sink receives
live in harness.run.runconfig (re-exported here).

Shrinking: the search finds every bug without shrinking it (harness.check.shrinking
`SEARCH_PHASES`); then each bug is shrunk on its own, in the order the bugs were found (those
this process has not shrunk before first), and bundled and reported on the console
(`parity: finding ...`) as soon as it is. The profile's shrink budget (`shrink_budget_s` per
process over the run, `shrink_finding_s` per finding; harness/run/profiles.py) bounds the
time: a finding whose budget ran out keeps the smallest case seen, and once the run's budget
is spent the rest are bundled as found, each marked with why (`ChunkFinding.unshrunk`).
Memory stays bounded while shrinking: per bug only the smallest case, the latest verdict
and its example's choices are kept.

A stop (`Stop`: a signal, the end of the time budget, or an output the disk would not take)
ends the current chunk after the case it is running, as in the single-process run of
earlier versions.

A bundle is whole on disk before any record names it (written atomically, then its record);
one the disk would not take (`OutputError`: full, read-only) goes to the sink's
`output_error`, stops the run, and leaves its finding recorded as not bundled, with why.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import given, seed, settings, target
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky

from graph_format import Runtime
from graph_format.kernels import load_manifest
from harness.check import timing
from harness.check.backends import open_runtimes
from harness.check.cold import RuntimeSpec, cold_check
from harness.check.coverage import folds_under
from harness.check.divergence import BugKey, Divergence
from harness.check.history import History, Loop
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.check.repeatability import Repeatability, classify
from harness.check.shrinking import SEARCH_PHASES, current_choices, replay_and_shrink_settings
from harness.check.verdict import (
    CaseChecker,
    DivergenceFound,
    exception_for,
    utilization_by_op_type,
)
from harness.families import FAMILIES, covered_ops
from harness.gen.case import Case
from harness.run.bundle import existing_bundle, write_bundle
from harness.run.findings import divergent_keys, finding_id
from harness.run.plan import Chunk, Shard
from harness.run.profiles import PROFILES, hypothesis_settings, quiet_hypothesis
from harness.run.records import (
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    OutputError,
    RunMeta,
    case_record,
)
from harness.run.runconfig import (
    BESIDE,
    BUDGET_SPENT,
    NOT_REPLAYED,
    OUTPUT_ERROR,
    CaseTally,
    ChunkSink,
    ChunkTally,
    RunConfig,
    RunSetupError,
    Stop,
)


@dataclass
class _Engine:
    """The runtimes of one workgroups-per-dimension limit, and a runner over them."""

    runtimes: list[Runtime]
    runner: LockstepRunner
    checker: CaseChecker
    # Every loop these runtimes ran, for a history-dependent finding's bundle.
    history: History = field(default_factory=History)


@dataclass
class _ChunkState:
    chunk: Chunk
    engine: _Engine
    sink: ChunkSink
    seq: int = 0
    unexpected_found: bool = False
    # Smallest divergent case per bug: the findings of an interrupted chunk.
    best: dict[BugKey, tuple[Case, CaseRecord]] = field(default_factory=dict)
    # Smallest case per key that showed beside the key its case stood for (which Hypothesis
    # shrinks by): the finding of a key that no case stood for (harness.run.findings).
    beside: dict[BugKey, tuple[Case, CaseRecord]] = field(default_factory=dict)
    # Per bug, the provisional bundle of its first divergent case (`bundles/<id>`; None:
    # it could not be written).
    provisional: dict[BugKey, str | None] = field(default_factory=dict)
    # The case and record of each verdict raised to Hypothesis, found again when Hypothesis
    # raises its final (shrunk) verdicts; weak, so that the many raised while shrinking go.
    raised: weakref.WeakKeyDictionary[DivergenceFound, tuple[Case, CaseRecord]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # Per bug, in the order found: the choices of the example its shrink replays (the one
    # that last raised it while searching, or where another bug's shrink first showed it).
    choices: dict[BugKey, bytes] = field(default_factory=dict)
    # While one bug is shrunk: its key (a case showing another bug passes) and the time its
    # shrink must end by (`time.monotonic()`).
    target: BugKey | None = None
    shrink_deadline: float | None = None
    # The chunk's view of the example database (nightly): where shrinks keep their examples.
    database: ExampleDatabase | None = None
    # Where the test body last returned (perf_counter): Hypothesis's time starts there.
    left_body: float = 0.0


class _Halt(BaseException):
    """Ends a chunk's search early (a signal or the time budget); Hypothesis lets it through."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


def chunk_cases(family: str, fold_limit: int | None = None) -> st.SearchStrategy[Case]:
    """The cases a chunk of `family` searches: the family's own, or under a profile's lowered
    workgroup limit (`fold_limit`) only those that fold a grid of an op the family answers
    for (`harness.families.covered_ops`), so that the `fold` cell the exit rule requires
    (harness.run.exitrule) is reached on purpose, not by chance.

    Why: measured with the contract model over run seeds 0-19, the pr fold chunks (15
    examples) of embedding, rope_interleaved, update_cache, sigmoid and silu drew no folding
    case for 1 or 2 of the 20 seeds each (seed 0: embedding). A Hypothesis filter redraws a
    case that does not fold (three draws, then another example; a rejected draw costs a
    contract-model pass, no device run), and its shrinker drops the rejected draws and
    shrinks a failure to a case that still folds. tests/unit/test_exitrule.py checks that
    every family's fold chunk finds folding cases.
    """
    strategy = FAMILIES[family]()
    ops = covered_ops(family)
    if fold_limit is None or not ops:
        return strategy
    limit = fold_limit
    return strategy.filter(lambda case: folds_under(case, limit, ops))


def _size(case: Case) -> tuple[int, int]:
    return (
        len(case.steps),
        sum(int(np.size(v)) for step in case.steps for v in step.values()),
    )


class ChunkRunner:
    """Runs chunks of a plan on runtimes it opens once (see the module docstring).

    Args:
        config: the run's configuration.
        stop: the stop this runner obeys (checked before every case).
    """

    def __init__(self, config: RunConfig, stop: Stop) -> None:
        self.config = config
        self.stop = stop
        self.steer = PROFILES[config.profile].steer
        self.engines: dict[int | None, _Engine] = {}  # by lowered limit (None: the device's)
        # Read by every process that runs chunks (a worker too) from the file the run named.
        self.manifest = load_manifest(config.kernels) if config.kernels is not None else None
        self.meta = RunMeta()  # run.json, for bundles; set once the run folder is ready
        self.database: ExampleDatabase | None = (
            DirectoryBasedExampleDatabase(str(config.database)) if config.database else None
        )
        profile = PROFILES[config.profile]
        budget = config.shrink_budget_s
        self.shrink_budget_s = budget if budget is not None else profile.shrink_budget_s
        self.shrink_finding_s = min(profile.shrink_finding_s, self.shrink_budget_s)
        self.shrink_spent = 0.0  # seconds this process has spent shrinking
        self.shrunk_bugs: set[BugKey] = set()  # bugs this process has shrunk (first ones first)

    def open(self, limits: Iterable[int | None]) -> dict[str, dict[str, Any]]:
        """Open the runtimes of each workgroup limit (None: the devices' own); the adapters.

        Raises:
            BackendUnavailable: a driver is missing (the message names the package).
            RunSetupError: a limit is above a device's.
        """
        for limit in dict.fromkeys([None, *limits]):
            if limit in self.engines:
                continue
            try:
                runtimes = open_runtimes(
                    self.config.backends,
                    self.config.shader_dirs,
                    limit,
                    manifest=self.manifest,
                    allow_adapters=self.manifest is not None,
                )
            except ValueError as err:  # a limit the device cannot lower to
                raise RunSetupError(f"--max-workgroups-per-dim: {err}") from None
            runner = LockstepRunner(runtimes)
            # No re-runs while searching: classifying every divergent case would multiply
            # the cost of a frequent bug. Each final finding is classified once (see
            # `_findings`); a failure that does not replay reaches us as Hypothesis's
            # FlakyFailure group.
            self.engines[limit] = _Engine(
                runtimes, runner, CaseChecker(runner, repeats=0), History().watch(runtimes)
            )
        return self.adapters

    @property
    def adapters(self) -> dict[str, dict[str, Any]]:
        """Each backend's adapter facts (its device's own limits)."""
        return self.engines[None].runner.adapters

    # ------------------------------------------------------------------ a chunk

    def run_chunk(self, chunk: Chunk, sink: ChunkSink) -> None:
        """Search one chunk; every case and the chunk's end go to `sink`."""
        if chunk.max_workgroups_per_dim not in self.engines:
            self.open([chunk.max_workgroups_per_dim])
        state = _ChunkState(chunk, self.engines[chunk.max_workgroups_per_dim], sink)
        started = time.monotonic()
        database = state.database = (
            _KeyedDatabase(self.database, f"parity:{chunk.id}:".encode())
            if self.database is not None
            else None
        )
        base = hypothesis_settings(self.config.profile, max_examples=chunk.max_examples)
        # Search only: the test body records each bug and lets Hypothesis go on (a failing
        # example would end a search that does not shrink); each bug is shrunk on its own
        # afterwards (`_findings`).
        chunk_settings = settings(base, database=database, phases=SEARCH_PHASES)
        test = seed(chunk.seed)(chunk_settings(self._test(state)))
        status, reason = "complete", None
        state.left_body = time.perf_counter()
        try:
            with quiet_hypothesis(sink.log, chunk.id):
                test()
        except _Halt as halt:
            status = "time_budget" if halt.reason == "time_budget" else "interrupted"
            reason = halt.reason
        except KeyboardInterrupt:
            self.stop.reason = self.stop.reason or "SIGINT"
            status, reason = "interrupted", self.stop.reason
        except BaseException as err:  # a harness or Hypothesis error: recorded, the run goes on
            if not isinstance(err, Exception | BaseExceptionGroup):
                raise  # SystemExit and the like
            status, reason = "error", describe(err)
        if status == "error":
            sink.error(f"{chunk.id}: {reason}")
            sink.log(f"parity: chunk {chunk.id} failed: {reason}")
        findings, stopped = self._findings(state, base, complete=status == "complete")
        if stopped is not None and status == "complete":  # a signal or the time budget
            status = "time_budget" if stopped == "time_budget" else "interrupted"
            reason = stopped
        record = chunk_record(
            chunk,
            self.config.shard,
            status,
            cases=state.seq,
            findings=findings,
            duration=time.monotonic() - started,
            reason=reason,
        )
        tally = ChunkTally(
            chunk.id,
            chunk.max_examples,
            [_bundle_name(f) for f in findings],
            _replaced_provisional(state, findings),
        )
        sink.chunk(record, tally)

    def _test(self, state: _ChunkState) -> Any:
        """The chunk's Hypothesis test (without settings): its family's cases, `_check`ed."""
        chunk = state.chunk

        def run_case(case: Case) -> None:
            entered = time.perf_counter()
            timing.add("generation", entered - state.left_body)
            try:
                self._check(state, case)
            finally:
                state.left_body = time.perf_counter()

        run_case.__name__ = f"parity_{chunk.family}_{chunk.index}"
        # A fold chunk of the profile (not every chunk of --max-workgroups-per-dim) is built
        # to fold: its cases are drawn to fold the grids the exit rule requires it to.
        profile = PROFILES[self.config.profile]
        folding = (
            chunk.max_workgroups_per_dim
            if self.config.max_workgroups_per_dim is None
            and chunk.max_workgroups_per_dim == profile.fold_limit
            else None
        )
        return given(case=chunk_cases(chunk.family, folding))(run_case)

    def _check(self, state: _ChunkState, case: Case) -> None:
        """The Hypothesis test body: run, record, steer, fail on unexpected divergences."""
        self._check_stop(state)
        result, repeat = state.engine.checker.run(case)
        records_started = time.perf_counter()
        record, unexpected = self._case_record(state, case, result, repeat)
        # A case found non-deterministic keeps that verdict on every replay, even one that
        # happens to pass, so Hypothesis never sees it as flaky.
        nondeterministic = repeat is not None and not repeat.deterministic
        # The bug the case stands for: the key of its primary unexpected divergence
        # (harness.check.divergence.BugKey), the same key the exception below and its finding use.
        key = record.bug
        if repeat is not None and nondeterministic:
            key = BugKey.nondeterministic(repeat.backends)
        failing = key is not None and bool(unexpected or nondeterministic)
        # The first divergent case of each bug gets a provisional bundle at once, so that a
        # run killed while Hypothesis shrinks still leaves a replayable finding. It is written
        # (atomically) before the record that names it: a kill or a full disk mid-bundle
        # leaves a record that names no bundle, never one naming a bundle that is not there.
        state.seq += 1
        timing.add("records", time.perf_counter() - records_started)
        if key is not None and failing and key not in state.provisional:
            bundle_id = _provisional_id(state.chunk, record)
            path, _ = self._write_bundle(
                state, bundle_id, case, record, shrunk=False, provisional=True
            )
            state.provisional[key] = record.provisional_bundle = path
        records_started = time.perf_counter()
        state.sink.case(record)
        timing.add("records", time.perf_counter() - records_started)
        if self.steer:
            # Hunt for the worst cases: Hypothesis hill-climbs on each op type's error/budget.
            for label, value in utilization_by_op_type(case, result).items():
                target(min(value, 1e6), label=label)
        if key is None or not failing:
            return
        state.unexpected_found = True
        _remember(state, key, case, record, nondeterministic)
        if state.target is None:
            return  # searching: recorded; the search goes on
        if key != state.target:
            return  # shrinking another bug: to that shrink, this case passes
        # The exception class stands for the bug key, so that Hypothesis only accepts
        # shrinks that keep it (harness/check/verdict.py).
        err = exception_for(key)(_only(result, unexpected), repeat)
        state.raised[err] = (case, record)
        raise err

    def _check_stop(self, state: _ChunkState) -> None:
        """Raise `_Halt` when a signal, the time budget or the bug's shrink budget says stop."""
        if self.stop.reason is not None and self.stop.reason != "time_budget":
            raise _Halt(self.stop.reason)
        if self.stop.out_of_time(grace=state.unexpected_found):
            raise _Halt("time_budget")
        if state.shrink_deadline is not None and time.monotonic() > state.shrink_deadline:
            raise _Halt(BUDGET_SPENT)

    def _case_record(
        self,
        state: _ChunkState,
        case: Case,
        result: CaseResult,
        repeat: Repeatability | None,
    ) -> tuple[CaseRecord, list[Divergence]]:
        """A run case's record (its divergences matched against the expectations), and its
        unexpected divergences."""
        chunk = state.chunk
        record = case_record(case, result, chunk=chunk.id, family=chunk.family, seq=state.seq)
        record.max_workgroups_per_dim = chunk.max_workgroups_per_dim
        if repeat is not None:
            record.repeatability = repeat
        adapters = state.engine.runner.adapters
        for d in record.divergences:
            d.expected = self.config.expectations.match(d, chunk.family, adapters)
        unexpected = [
            d
            for d, r in zip(result.divergences, record.divergences, strict=True)
            if r.expected is None
        ]
        record.unexpected = len(unexpected)
        record.shard = str(self.config.shard)
        return record, unexpected

    def _findings(
        self,
        state: _ChunkState,
        base: settings,
        complete: bool,
    ) -> tuple[list[ChunkFinding], str | None]:
        """Shrink, bundle and report each finding in turn; the findings as listed in the chunk
        record, and why shrinking stopped early ("time_budget" or a signal's name), if it did.

        A complete search has its bugs shrunk one by one, first found first (those this
        process has not shrunk before ahead of the others), within the shrink budget, each
        from the smallest case seen with it; an interrupted one keeps those cases, unshrunk.
        """
        picked: dict[BugKey, tuple[Case, CaseRecord]] = {}
        # Stopped (or failed) before Hypothesis finished: the smallest case seen per bug.
        why = None if complete else "its chunk's search did not finish"
        out: list[ChunkFinding] = []
        stopped: str | None = None
        done: set[BugKey] = set()
        while True:
            # Shrinking one bug can show others (a smaller graph whose first divergence is
            # another op's): each joins the queue, after those found before it.
            for key in state.best:
                if key not in picked:
                    picked[key] = state.best[key]
            waiting = [k for k in picked if k not in done]
            if not waiting:
                break
            # First found first; bugs this process has not shrunk before ahead of the rest.
            found = list(state.choices)
            waiting.sort(key=lambda k: (k in self.shrunk_bugs, _index(found, k)))
            key = waiting[0]
            done.add(key)
            case, record = picked[key]
            unshrunk = why or stopped
            if unshrunk is None and key in state.choices:
                last = len(waiting) == 1  # no finding waits for it: no share to keep to
                case, record, unshrunk, halted = self._shrink_or_halt(
                    state, key, base, (case, record), last
                )
                stopped = halted or stopped
            elif unshrunk is None:
                unshrunk = NOT_REPLAYED
            out.append(self._finding(state, case, record, unshrunk=unshrunk))
        # Then a finding per key that only showed beside another (its smallest case, as
        # found: no case stood for it, so none can be shrunk by it).
        covered = {f.bug for f in out} | set(state.best)
        for bug, (case, record) in state.beside.items():
            if bug not in covered:
                out.append(self._finding(state, case, record, unshrunk=BESIDE, bug=bug))
        return out, stopped

    def _shrink_or_halt(
        self,
        state: _ChunkState,
        key: BugKey,
        base: settings,
        found: tuple[Case, CaseRecord],
        last: bool,
    ) -> tuple[Case, CaseRecord, str | None, str | None]:
        """`_shrink`, and why the run stopped when a signal or the time budget stopped it
        while shrinking (the bug then keeps its smallest case seen, unshrunk), else None."""
        try:
            return (*self._shrink(state, key, base, found, last), None)
        except (_Halt, KeyboardInterrupt) as halt:  # a signal, or the time budget
            if isinstance(halt, KeyboardInterrupt):  # a second signal
                self.stop.reason = self.stop.reason or "SIGINT"
            stopped = halt.reason if isinstance(halt, _Halt) else self.stop.reason
            case, record = state.best.get(key, found)
            return case, record, f"the run stopped while shrinking ({stopped})", stopped

    def _shrink(
        self,
        state: _ChunkState,
        key: BugKey,
        base: settings,
        found: tuple[Case, CaseRecord],
        last: bool,
    ) -> tuple[Case, CaseRecord, str | None]:
        """Shrink one bug from the example that showed it while searching; (case, record,
        why it is not shrunk, or None). Its share of the budget is `shrink_finding_s`, unless
        it is the `last` of its chunk (then whatever the run's budget has left).

        Raises:
            _Halt: a signal, or the run's time budget (not the shrink budget's).
        """
        left = self.shrink_budget_s - self.shrink_spent
        if left <= 0:
            return (*found, BUDGET_SPENT)
        started = time.monotonic()
        share = left if last else min(left, self.shrink_finding_s)
        state.target, state.shrink_deadline = key, started + share
        # The settings go on top: `seed` alone would turn the database off.
        test = replay_and_shrink_settings(base, state.choices[key], state.database)(
            seed(state.chunk.seed)(self._test(state))
        )
        try:
            with quiet_hypothesis(state.sink.log, state.chunk.id):
                test()
        except DivergenceFound as err:
            if type(err).bug == key and err in state.raised:
                self.shrunk_bugs.add(key)
                case, record = state.raised[err]
                return case, record, None
            return (*found, NOT_REPLAYED)
        except _Halt as halt:
            if halt.reason != BUDGET_SPENT:
                raise
            # The smallest case seen with the bug: partly shrunk, perhaps.
            return (*state.best.get(key, found), BUDGET_SPENT)
        except (Flaky, BaseExceptionGroup):  # it failed, then passed (or another way)
            return (*found, NOT_REPLAYED)
        finally:
            state.target, state.shrink_deadline = None, None
            self.shrink_spent += time.monotonic() - started
        return (*found, NOT_REPLAYED)  # it passed when replayed

    def _finding(
        self,
        state: _ChunkState,
        case: Case,
        record: CaseRecord,
        *,
        unshrunk: str | None,
        bug: BugKey | None = None,
    ) -> ChunkFinding:
        """The finding of `case` for `bug` (default: the key the case stands for), its
        bundle written unless another chunk wrote it already, and its line on the console
        (at once); `unshrunk`: why it is not shrunk, None when it is."""
        shrunk = unshrunk is None
        key = bug or record.bug
        bundle_id = finding_id(record.case_id, key)
        known = existing_bundle(self.config.out / "bundles" / bundle_id)
        bundle: str | None
        bundle_error = None
        if known is not None:
            # Another chunk already shrank to this case with this bug: one finding, one
            # bundle; the summary lists every chunk that found it.
            record.repeatability = known.repeatability
            bundle = f"bundles/{bundle_id}"
        else:
            history: list[Loop] = []
            if self.config.repeats:
                repeat = classify(case, state.engine.runtimes, self.config.repeats)
                # Not once a signal stopped the run: whoever sent it wants it to end. Nor
                # once the shrink budget is spent: a fresh process per finding is what makes
                # a bug every op shows slow to report (the cold re-runs count against it).
                signalled = self.stop.reason not in (None, "time_budget")
                cold = self.config.cold_rerun and not signalled and repeat.deterministic
                if cold and key is not None and self.shrink_spent < self.shrink_budget_s:
                    started = time.monotonic()
                    repeat, history = self._cold(state, case, key, repeat)
                    self.shrink_spent += time.monotonic() - started
                record.repeatability = repeat
            bundle, bundle_error = self._write_bundle(
                state,
                bundle_id,
                case,
                record,
                shrunk=shrunk,
                unshrunk=unshrunk,
                bug=bug,
                history=history,
            )
            provisional = f"bundles/{_provisional_id(state.chunk, record)}"
            if bundle is None and bug is None and provisional in state.provisional.values():
                # Not written (a full disk?), but the same case's provisional one is.
                bundle, bundle_error = provisional, None
        size = f"{len(case.steps)} steps, {len(case.graph.ops)} ops"
        how = f"shrunk to {size}" if shrunk else f"unshrunk: {unshrunk} ({size})"
        state.sink.log(
            f"parity: finding {key} in chunk {state.chunk.id}: {how}: {bundle or 'no bundle'}"
        )
        return ChunkFinding(
            case_id=record.case_id,
            seq=record.seq,
            bundle=bundle,
            shrunk=shrunk,
            bug=key,
            unexpected=record.unexpected,
            repeatability=record.repeatability.kind if record.repeatability else None,
            beside=record.bug if key != record.bug else None,
            bundle_error=bundle_error,
            unshrunk=unshrunk,
        )

    def _cold(
        self, state: _ChunkState, case: Case, bug: BugKey, repeat: Repeatability
    ) -> tuple[Repeatability, list[Loop]]:
        """Re-run a finding in a fresh process (harness.check.cold): its repeatability
        refined, and the history its bundle keeps (empty unless it needs one)."""
        history = state.engine.history
        spec = RuntimeSpec(
            {b: str(d) for b, d in self.config.shader_dirs.items()},
            state.chunk.max_workgroups_per_dim,
            str(self.config.kernels) if self.config.kernels is not None else None,
            allow_adapters=self.manifest is not None,
            backends=self.config.backends,
        )
        verdict = cold_check(case, bug, history.before(case), spec, dropped=history.dropped)
        if verdict.error is not None:
            state.sink.log(f"parity: {state.chunk.id}: cold re-run of {bug}: {verdict.error}")
        return repeat.with_cold(verdict.kind, verdict.to_json()), verdict.loops

    def _write_bundle(
        self,
        state: _ChunkState,
        bundle_id: str,
        case: Case,
        record: CaseRecord,
        *,
        shrunk: bool,
        provisional: bool = False,
        unshrunk: str | None = None,
        bug: BugKey | None = None,
        history: list[Loop] | None = None,
    ) -> tuple[str | None, str | None]:
        """Write one bundle (of `bug`, default its case's own key); its path in the run
        folder, or None and why it could not be written (the finding stays in the records,
        and the run's errors say why). One the disk would not take stops the run
        (`OUTPUT_ERROR`): more would not fit either."""
        try:
            write_bundle(
                self.config.out / "bundles" / bundle_id,
                case,
                record,
                run=self.meta,
                runtimes=state.engine.runtimes,
                shader_dirs=self.config.shader_dirs,
                manifest=self.manifest,
                shrunk=shrunk,
                provisional=provisional,
                unshrunk=unshrunk,
                bug=bug,
                history=history or (),
            )
        except OutputError as err:
            state.sink.output_error(err)
            if self.stop.reason in (None, "time_budget"):
                self.stop.reason = OUTPUT_ERROR
            return None, str(err)
        except Exception as err:
            state.sink.error(f"{state.chunk.id}: bundle {bundle_id}: {describe(err)}")
            return None, describe(err)
        return f"bundles/{bundle_id}", None


def _replaced_provisional(state: _ChunkState, findings: list[ChunkFinding]) -> list[str]:
    """The chunk's provisional bundles that its findings replace (none when a finding could
    not be bundled: they are then all there is)."""
    if any(f.bundle is None for f in findings):
        return []
    kept = {f.bundle for f in findings}
    return [p for p in state.provisional.values() if p is not None and p not in kept]


def chunk_record(
    chunk: Chunk,
    shard: Shard,
    status: str,
    *,
    cases: int = 0,
    findings: list[ChunkFinding] | None = None,
    duration: float = 0.0,
    reason: str | None = None,
) -> ChunkRecord:
    """The record of a chunk's end (run, skipped, or lost with its worker)."""
    return ChunkRecord(
        chunk=chunk.id,
        family=chunk.family,
        index=chunk.index,
        seed=chunk.seed,
        max_examples=chunk.max_examples,
        max_workgroups_per_dim=chunk.max_workgroups_per_dim,
        shard=str(shard),
        status=status,
        reason=reason,
        cases=cases,
        findings=findings or [],
        duration_s=round(duration, 3),
    )


def _bundle_name(finding: ChunkFinding) -> str:
    """A finding's id (its bundle folder's name), counted once however many chunks find it."""
    return finding_id(finding.case_id, finding.bug)


def _remember(
    state: _ChunkState, key: BugKey, case: Case, record: CaseRecord, nondeterministic: bool
) -> None:
    """A failing case kept when it is the smallest seen of its bug (with the choices its
    shrink starts from) or of a bug that showed beside it."""
    best = state.best.get(key)
    if best is None or _size(case) < _size(best[0]):
        state.best[key] = (case, record)
        # The example this bug's shrink starts from: the smallest seen with it.
        if state.target is None or key not in state.choices:
            choices = current_choices()
            if choices is not None:
                state.choices[key] = choices
    for other in [] if nondeterministic else divergent_keys(record.divergences)[1:]:
        seen = state.beside.get(other)
        if seen is None or _size(case) < _size(seen[0]):
            state.beside[other] = (case, record)


def _provisional_id(chunk: Chunk, record: CaseRecord) -> str:
    """Provisional bundles live apart from findings' (content-addressed) bundles, so that
    dropping one never removes a finding another chunk reuses."""
    return f"provisional-{chunk.family}-{chunk.index}-{record.case_id}"


def _index(items: list[BugKey], key: BugKey) -> int:
    return items.index(key) if key in items else len(items)


def _only(result: CaseResult, divergences: list[Any]) -> CaseResult:
    return dataclasses.replace(result, divergences=divergences)


def describe(err: BaseException) -> str:
    """The whole text of an error (a compiler's output runs over many lines: keep them)."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(describe(e) for e in err.exceptions)
    return f"{type(err).__name__}: {str(err).strip()}"


__all__ = [
    "BESIDE",
    "BUDGET_SPENT",
    "NOT_REPLAYED",
    "OUTPUT_ERROR",
    "CaseTally",
    "ChunkRunner",
    "ChunkSink",
    "ChunkTally",
    "RunConfig",
    "RunSetupError",
    "Stop",
    "chunk_record",
    "describe",
]
