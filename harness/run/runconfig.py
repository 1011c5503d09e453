"""What a run is asked to do and what its chunk runners hand on: the run's configuration
(`RunConfig`), when chunks stop (`Stop`), why a finding stays unshrunk, and the tallies a
`ChunkRunner` (harness.run.chunks) hands its `ChunkSink` (the session, or a worker's pipe).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.check.backends import BACKENDS
from harness.check.divergence import BugKey
from harness.run.expectations import Expectations
from harness.run.findings import divergent_keys, severity
from harness.run.plan import Shard
from harness.run.records import (
    CaseRecord,
    ChunkRecord,
    OutputError,
)

# The stop reason of a run whose output the disk would not take (a full or read-only disk).
OUTPUT_ERROR = "output error"


class RunSetupError(ValueError):
    """The devices cannot run as asked (a workgroup limit above theirs); the message says why."""


@dataclass(frozen=True)
class RunConfig:
    """Everything a run is asked to do (resolved from the command line).

    Attributes:
        jobs: chunk-running processes: 1 runs the chunks in the command's own process;
            N > 1 starts N workers (harness.run.workers).
        adapters: the adapter (by index, `parity list` order) each worker opens, dealt out
            round robin; empty: every worker opens the default one.
        timings: accumulate the host-time split of harness.check.timing (benchmarks).
        kernels: a kernel manifest (`parity run --kernels`) whose kernels replace slots on
            the backends its sections name; its adapters run (the user named it).
        worker_cases: with N > 1 workers, a worker that has run this many cases is replaced
            by a fresh process between two chunks: a driver's memory that grows with every
            case it runs (lavapipe 22.x, docs/benchmarks.md "Memory per worker") is given back
            with the process. None: never replaced. `--jobs 1` runs in its own process and
            never replaces it.
    """

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
    kernels: Path | None = None
    expectations: Expectations = field(default_factory=Expectations)
    progress_every_s: float = 10.0
    repeats: int = 3  # re-runs per backend to classify a divergent case's repeatability
    cold_rerun: bool = True  # also re-run each finding in a fresh process (harness.check.cold)
    command: str = ""
    max_workgroups_per_dim: int | None = None  # a lowered limit for every chunk
    jobs: int = 1
    adapters: tuple[int, ...] = ()
    timings: bool = False
    worker_cases: int | None = None
    shrink_budget_s: float | None = None  # None: the profile's (`Profile.shrink_budget_s`)
    # The runtimes checked in lockstep, by name (`harness.check.backends.lockstep_backends`).
    backends: tuple[str, ...] = BACKENDS


# Why a finding is not shrunk (`ChunkFinding.unshrunk`).
BUDGET_SPENT = "shrink budget spent"
NOT_REPLAYED = "its case did not fail again when replayed for shrinking"
BESIDE = "it showed only beside another bug, the one its case was shrunk by"


@dataclass
class Stop:
    """Why chunks should stop, shared by the code that decides it and the chunks that obey.

    Attributes:
        reason: a signal's name ("SIGINT", "SIGTERM"), "time_budget" or `OUTPUT_ERROR`;
            None: go on.
        started: when the search began (`time.monotonic()`); the time budget counts from it.
            CLOCK_MONOTONIC is the machine's, so a worker may be handed its parent's.
    """

    budget_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    reason: str | None = None

    def out_of_time(self, grace: bool = False) -> bool:
        """The time budget is spent (with `grace`: also its grace period for shrinking)."""
        budget = self.budget_s
        if budget is None:
            return False
        if grace:
            budget += max(30.0, 0.25 * budget)
        return time.monotonic() - self.started > budget


@dataclass
class CaseTally:
    """What the session counts of a case record (its totals, coverage and ops), small enough
    for a worker to send beside the record's line."""

    case_id: str
    steps: int
    level: int  # harness.run.findings: CLEAN, KNOWN or UNEXPECTED
    coverage: dict[str, Any]
    ops: list[str]
    # What a chunk lost with its worker keeps of a divergent case (harness.run.workers).
    seq: int = 0
    bug: BugKey | None = None
    unexpected: int = 0
    provisional_bundle: str | None = None
    others: list[BugKey] = field(default_factory=list)  # its keys beside `bug`

    @classmethod
    def of(cls, record: CaseRecord) -> CaseTally:
        """The tally of one case record."""
        return cls(
            record.case_id,
            record.steps,
            severity(record.divergences),
            record.coverage,
            list(record.ops),
            record.seq,
            record.bug,
            record.unexpected,
            record.provisional_bundle,
            divergent_keys(record.divergences)[1:],
        )


@dataclass
class ChunkTally:
    """What the session counts of a chunk's end: its planned examples and finding ids, and
    the provisional bundles (`bundles/<id>`) its record replaces, removed only once that
    record is written (until then, they are what its case records name)."""

    chunk: str
    examples: int
    findings: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)


class ChunkSink(Protocol):
    """Where a `ChunkRunner` hands what it produces (the session, or a worker's pipe)."""

    def case(self, record: CaseRecord) -> None:
        """One executed case, as soon as it ran."""

    def chunk(self, record: ChunkRecord, tally: ChunkTally) -> None:
        """The end of a chunk, naming its findings."""

    def error(self, text: str) -> None:
        """A failure that is not a divergence (a chunk that failed, a bundle not written)."""

    def output_error(self, error: OutputError) -> None:
        """An output the disk would not take (a bundle): the run stops."""

    def log(self, line: str) -> None:
        """A progress line for stderr."""
