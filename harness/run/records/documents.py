"""run.json, bundle.json and summary.json as records: a run's description (`RunMeta`, or
`MergeMeta` for a merged folder), a bundle's (`BundleDoc`, with the evidence of its worst
elements) and a run's summary (`Summary`, built by harness.run.summary)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.check.coverage import CoverageCells
from harness.check.divergence import BugKey, FirstDivergent
from harness.check.repeatability import Repeatability
from harness.run.expectations import Expectation
from harness.run.plan import Chunk, Shard
from harness.run.records.cases import DivergenceRecord, primary_bug
from harness.run.records.convert import from_json
from harness.run.records.files import (
    BUNDLE_FORMATS,
    MERGE_FORMAT,
    RUN_FORMAT,
    SUMMARY_FORMAT,
    RecordError,
    read_json,
)

# ---------------------------------------------------------------------------- run.json


@dataclass
class Budgets:
    """A run's search budget (per family)."""

    max_examples: int = 0
    chunk_examples: int = 0
    time_budget_s: float | None = None


@dataclass
class WorkerLine:
    """One worker process of a `parity run --jobs N` (harness.run.workers), as run.json and
    the summary list it.

    Attributes:
        index: its number (1-based); a worker started to replace one that died gets the
            next free number.
        adapter: the adapter index it was asked to open (`--adapters`), or None: the default.
        adapters: per backend, the adapter it opened (its name).
        chunks: chunks it ran to their end; `cases`: the cases it ran.
        peak_rss_mb: its largest resident memory, in MiB, as of its last chunk.
        exit: how it ended: "done", "died: <why>", "failed to start: <why>", or "running"
            (a run that never finalized).
    """

    index: int
    pid: int = 0
    adapter: int | None = None
    adapters: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    cases: int = 0
    peak_rss_mb: float | None = None
    exit: str = "running"


@dataclass
class RunMeta:
    """`run.json` of one run (shard), written by `parity run` when it starts and again when
    it ends (`status`, `exit_status`, `stop_reason`, `errors`, `duration_s`, `finished`).

    Attributes:
        status: `running` until the run is finalized (a killed run stays so).
        plan: every chunk of the run's plan; `chunks`: the ids of this shard's.
        adapters: per backend, the runtime's `info()`.
        sources: hashes of the code the run ran (harness.run.bundle.source_digests).
        kernels: the kernel manifest of `--kernels` (its kernels.toml), or None.
        expectations: the known divergences it ran with.
        jobs: the processes that ran its chunks (1: the command's own); `workers`: each
            worker process of a `--jobs N` run (N > 1), with its adapters.
    """

    format: str = RUN_FORMAT
    note: str = ""
    status: str = "running"
    command: str = ""
    profile: str = ""
    seed: int = 0
    families: list[str] = field(default_factory=list)
    budgets: Budgets = field(default_factory=Budgets)
    max_workgroups_per_dim: int | None = None
    database: str | None = None
    shard: Shard = field(default_factory=Shard)
    plan: list[Chunk] = field(default_factory=list)
    plan_digest: str = ""
    chunks: list[str] = field(default_factory=list)
    adapters: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    git: str | None = None
    sources: dict[str, Any] = field(default_factory=dict)
    shader_dirs: dict[str, str] = field(default_factory=dict)
    shader_overrides: dict[str, str] = field(default_factory=dict)
    kernels: str | None = None
    expectations: list[Expectation] = field(default_factory=list)
    expectations_file: str | None = None
    started: str | None = None
    duration_s: float | None = None
    exit_status: int | None = None
    stop_reason: str | None = None
    errors: list[str] = field(default_factory=list)
    finished: str | None = None
    jobs: int = 1
    workers: list[WorkerLine] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """run.json's object (expectations as `Expectations.to_json` writes them)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["expectations"] = [e.to_json() for e in self.expectations]
        return data


@dataclass
class MergeMeta:
    """`run.json` of a folder written by `parity merge`: every shard's run.json, in order
    (its records carry their shard's position as `source`)."""

    runs: list[RunMeta]
    sources: list[str] = field(default_factory=list)
    format: str = MERGE_FORMAT
    note: str = "written by `parity merge`; cases.jsonl records carry their shard as 'source'"


def read_run_meta(path: Path) -> RunMeta | MergeMeta:
    """A run folder's run.json: a run's (`RunMeta`) or a merge's (`MergeMeta`).

    Raises:
        RecordError: missing, not JSON, or not a run description; naming the file.
    """
    doc = read_json(path, "run description written by `parity run`")
    try:
        if doc.get("format") == MERGE_FORMAT:
            return from_json(MergeMeta, doc)
        if "plan" not in doc:
            raise ValueError("not a parity run description (no 'plan')")
        return from_json(RunMeta, doc)
    except ValueError as err:
        raise RecordError(f"{path}: {err}") from None


# ---------------------------------------------------------------------------- bundle.json


@dataclass
class BundleRun:
    """What a bundle keeps of the run that found it: enough to search its chunk again and
    to say where it was found."""

    seed: int = 0
    profile: str = ""
    families: list[str] = field(default_factory=list)
    budgets: Budgets = field(default_factory=Budgets)
    shard: Shard = field(default_factory=Shard)
    adapters: dict[str, dict[str, Any]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    git: str | None = None
    shader_dirs: dict[str, str] = field(default_factory=dict)
    # The runtimes it was found on, by name, in the run's order (empty in bundles written
    # before there were several WebGPU implementations: webgpu and vulkan).
    backends: list[str] = field(default_factory=list)


@dataclass
class ElementInput:
    """The values of one op argument around a worst element (harness.run.evidence's
    `_input_view`): `where` says how they were picked, `selection` which they are (an
    index expression), `highlight` the position of the one at the element's own position
    (None: none is), `start` the first's index in its row of `length` values."""

    slot: str
    name: str
    where: str
    selection: str
    values: list[float]
    highlight: int | None = None
    start: int = 0
    length: int = 0


@dataclass
class ElementValues:
    """One backend's values at a worst element: its output, the float64 reference and the
    budget it was judged by (`reference_scope`: "op", the op's reference on the backend's
    own inputs, or "graph", end to end), |error| and error/budget, and the op's inputs."""

    actual: float
    reference: float
    budget: float
    error: float
    utilization: float
    reference_scope: str = "graph"
    inputs: list[ElementInput] = field(default_factory=list)


@dataclass
class EvidenceElement:
    """The element of a diverging tensor furthest over its budget on any backend
    (`worst_on`), and each backend's values there: an entry of bundle.json's `evidence`."""

    step: int
    tensor: str
    shape: list[int]
    index: list[int]
    worst_on: str
    backends: dict[str, ElementValues] = field(default_factory=dict)
    op: str | None = None
    op_type: str | None = None


@dataclass
class BundleHistory:
    """Where a history-dependent finding's history lies in its bundle (`folder`, relative to
    it: harness.check.history's files), its `loops` and its distinct `cases`."""

    folder: str = "history"
    loops: int = 0
    cases: int = 0


@dataclass
class BundleDoc:
    """A bundle's `bundle.json` (see harness.run.bundle for the folder around it).

    Attributes:
        id: the finding id (the folder's name).
        bug: the bug key it was found with (computed from `divergences` for a bundle of
            format /1, which recorded `signatures` instead).
        beside: the key its case stood for when `bug` only showed beside it (the case is
            as found: shrinking followed that key); None otherwise.
        divergences: the divergences of its case.
        utilization: per step and backend, the error/budget of every compared tensor.
        evidence: the worst element of each diverging tensor (harness.run.bundle).
        repeatability: its class from the bundle's re-runs, with their hashes.
        first_divergent: the first divergent op of its case.
        run: what it keeps of the run that found it.
        sources: hashes of the code it was found with.
        shaders: relative path -> sha256 of every shader it holds.
        kernels: with a kernel manifest (`parity run --kernels`): `kernels/<path>` ->
            sha256 of the manifest and every file it names, copied into the bundle.
        commands: replay commands, run from the run folder.
        history: for a history-dependent finding (its bug shows only after what ran before
            it in the worker), where its history lies (`folder`, relative to the bundle:
            harness.check.history's files), its `loops` and distinct `cases`; None
            otherwise (and in bundles written before histories were kept).
    """

    format: str
    id: str = ""
    case_id: str | None = None
    family: str | None = None
    chunk: str | None = None
    shrunk: bool = True
    unshrunk: str | None = None  # why it is not shrunk, when it is not
    provisional: bool = False
    bug: BugKey | None = None
    divergences: list[DivergenceRecord] = field(default_factory=list)
    max_utilization: float | None = None
    utilization: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    evidence: list[EvidenceElement] = field(default_factory=list)
    step_shapes: list[dict[str, Any]] | None = None
    max_workgroups_per_dim: int | None = None
    repeatability: Repeatability | None = None
    first_divergent: FirstDivergent | None = None
    run: BundleRun = field(default_factory=BundleRun)
    sources: dict[str, Any] = field(default_factory=dict)
    chunk_seed: int | None = None
    shaders: dict[str, str] = field(default_factory=dict)
    kernels: dict[str, str] = field(default_factory=dict)
    commands_cwd: str = ""
    commands: list[str] = field(default_factory=list)
    beside: BugKey | None = None
    history: BundleHistory | None = None

    def __post_init__(self) -> None:
        if self.bug is None:
            self.bug = primary_bug(self.divergences)


def read_bundle_doc(path: Path) -> BundleDoc:
    """A bundle.json (either bundle format).

    Raises:
        RecordError: missing, not JSON, or malformed; naming the file.
    """
    doc = read_json(path, "bundle description")
    if doc.get("format") not in BUNDLE_FORMATS:
        raise RecordError(
            f"{path}: format must be one of {list(BUNDLE_FORMATS)}, got {doc.get('format')!r}"
        )
    limit = doc.get("max_workgroups_per_dim")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise RecordError(
            f"{path}: max_workgroups_per_dim must be a positive integer or null, got {limit!r}"
        )
    try:
        return from_json(BundleDoc, doc)
    except ValueError as err:
        raise RecordError(f"{path}: {err}") from None


# ---------------------------------------------------------------------------- summary.json


@dataclass
class Totals:
    """The counts every summary line prints (harness.run.findings.totals_text) and more.

    A case is a distinct case id per device, however many times the search ran it; a
    divergence one failed check of one step; a finding a distinct minimal case and bug.
    """

    cases: int = 0
    steps: int = 0
    divergent_cases: int = 0
    unexpected_cases: int = 0
    known_cases: int = 0
    divergences: int = 0
    findings: int = 0
    unexpected_findings: int = 0
    bugs: int = 0  # groups in `Summary.bugs`
    max_utilization: float = 0.0
    max_statistical_utilization: float = 0.0  # under the statistical tier (docs/oracles.md)
    # Cases a device could not run (f16 on a device without half precision): not failures.
    unavailable_cases: int = 0


@dataclass
class Stats:
    """Counts of the cases of one family or one op type."""

    cases: int = 0
    steps: int = 0
    divergent_cases: int = 0
    unexpected_cases: int = 0
    known_cases: int = 0
    max_utilization: float = 0.0
    max_statistical_utilization: float = 0.0
    divergences: dict[str, int] = field(default_factory=dict)  # by class
    unavailable_cases: int = 0  # a device lacked their precision (f16)
    # Ops: per pair of backends `a~b`, [the largest ULP distance seen on bit-identical
    # inputs, the largest tolerance declared] where the exact tier compared them.
    exact: dict[str, list[int]] = field(default_factory=dict)
    chunks: dict[str, int] | None = None  # families: chunks by status
    # Families: the time their chunks ran (summed over the processes that ran them), so a
    # time-budgeted run shows each family's share.
    duration_s: float | None = None


@dataclass
class BugGroup:
    """The divergences of one bug (and one expectation, or none): the report's grouping.

    Attributes:
        regimes: the shape regimes it showed in.
        cases: divergent cases that showed it; `divergences`: every occurrence.
        findings: how many findings stand for it, with their ids in `failures`.
        example: one occurrence's message.
    """

    bug: BugKey
    expected: str | None = None
    regimes: list[str] = field(default_factory=list)
    cases: int = 0
    divergences: int = 0
    findings: int = 0
    example: str = ""
    failures: list[str] = field(default_factory=list)


@dataclass
class Finding:
    """A finding of the summary: one minimal case and its bug, on one device, with every
    chunk that found it (harness.run.findings).

    Attributes:
        id: its name (`finding_id`; suffixed `-s<source>` for another device of a merge).
        source, sources: the shard of its first chunk, and of every chunk.
        chunk, chunks: its first chunk, and every chunk that found it.
        provisional: from a chunk that never ended (a killed run).
        known: ids of the expectations its case's divergences matched.
        beside: the key its case stood for, when its own key only showed beside that one
            (`ChunkFinding.beside`).
    """

    id: str
    bug: BugKey
    case_id: str
    chunk: str
    family: str
    device: str
    source: int = 0
    chunks: list[str] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    bundle: str | None = None
    bundle_error: str | None = None  # why it has no bundle, when known
    shrunk: bool = False
    unshrunk: str | None = None  # why it is not shrunk, when it is not
    provisional: bool = False
    repeatability: str | None = None
    unexpected: int = 0
    known: list[str] = field(default_factory=list)
    steps: int | None = None
    step_shapes: list[dict[str, Any]] | None = None
    beside: BugKey | None = None


@dataclass
class RunLine:
    """One shard's run, as the summary lists it."""

    shard: str
    device: str
    status: str
    exit_status: int | None = None  # the run process's own, once finalized
    stop_reason: str | None = None
    errors: list[str] = field(default_factory=list)
    duration_s: float | None = None
    started: str | None = None
    git: str | None = None
    shader_overrides: dict[str, str] = field(default_factory=dict)
    jobs: int = 1
    workers: list[WorkerLine] = field(default_factory=list)


@dataclass
class ExpectationStatus:
    """An expectation entry and what the run made of it: `matched`, `stale`,
    `not_applicable` or `not_exercised`, with its number of matches."""

    entry: Expectation
    matches: int
    status: str

    def to_json(self) -> dict[str, Any]:
        """The entry's fields, with `matches` and `status`."""
        return self.entry.to_json() | {"matches": self.matches, "status": self.status}


@dataclass
class Summary:
    """`summary.json` (see harness.run.summary for how each part is counted)."""

    status: str
    complete: bool
    exit_status: int
    totals: Totals
    verdict: str = ""  # the report's title (harness.run.exitrule)
    format: str = SUMMARY_FORMAT
    note: str = "internal to the parity harness; rebuilt by `parity report` from cases.jsonl"
    merged: bool = False
    profile: str | None = None
    seed: int | None = None
    families: list[str] = field(default_factory=list)
    budgets: Budgets = field(default_factory=Budgets)
    shards: list[str] = field(default_factory=list)
    runs: list[RunLine] = field(default_factory=list)
    adapters: dict[str, dict[str, Any]] = field(default_factory=dict)
    adapter_sets: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0
    per_family: dict[str, Stats] = field(default_factory=dict)
    per_op: dict[str, Stats] = field(default_factory=dict)
    coverage: CoverageCells = field(default_factory=dict)
    coverage_required: dict[str, list[str]] = field(default_factory=dict)
    coverage_checked: bool = False
    coverage_missing: list[list[str]] = field(default_factory=list)
    coverage_fill: list[str] = field(default_factory=list)
    kernel_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    bugs: list[BugGroup] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    expectations: list[ExpectationStatus] = field(default_factory=list)
