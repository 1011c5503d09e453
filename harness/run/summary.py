"""From records to a run's summary (`summary.json`) and its JUnit XML.

`summarize` reads nothing but run metadata (`run.json`, one per shard when merging) and the
JSONL records, so a report can be rebuilt from a killed run, re-rendered later, or merged
from shards. summary.json (format `parity-summary/2`, `harness.run.records.Summary`) holds:

- `status`, `complete`, `exit_status` and `verdict`, both from the one exit rule
  (harness.run.exitrule): the exit status of the command that wrote the summary (for
  `parity run` its own, from its tallies (0, 1, 3, 4, 130; 2 when the disk would not take
  its output); for `report` and `merge` the records' verdict: 1 an unexpected divergence, 4
  a required coverage cell left empty, else 0) and the line that titles the report;
- `profile`, `seed`, `families`, `budgets`, `shards`, `runs` (per shard: device, status,
  the run's exit status, duration, its `jobs` and `workers` with each one's adapters),
  `adapters` (per backend: adapter, driver, API),
  `versions`, `duration_s`;
- `totals`: cases, steps, divergent / unexpected / known / unavailable cases (a device
  without the case's precision), divergences, findings, bugs (a case is a distinct case id
  per device and a finding a distinct case and bug: see harness.run.findings; the CLI's
  lines print the same numbers);
- `per_family` and `per_op`: cases, steps, divergent cases, divergences by class; for
  each family also its chunks by status and the time its chunks ran (`duration_s`, summed
  over the processes that ran them: a time budget's share);
- `coverage`: per op type and backend, the shape regimes and kernel variants every run of
  every case exercised; `coverage_required` (the cells of the ops the run's families answer
  for: harness.run.exitrule), `coverage_checked` (a complete run of every shard),
  `coverage_missing` ((op, backend, cell) left empty) and `coverage_fill` (per family
  with an empty cell, what would fill it);
- `bugs`: failures grouped by bug key (`harness.check.divergence.BugKey`: op type, class, blamed
  backend, numeric band) and expectation, with the regimes each showed in and its cases,
  divergences and findings;
- `findings`: the minimal failing cases, one per distinct case and bug, with their bundle
  and every chunk that found them; provisional ones for a chunk that never finished (a
  killed run);
- `expectations`: each known-divergence entry with its status (matched, stale,
  not_applicable, not_exercised) and match count;
- `kernel_sources`: per slot and backend, where its kernel came from ("project", the
  `--wgsl-dir`/`--glsl-dir` folder, or a `--kernels` manifest's file), paths relative to
  the run folder; the coverage marks the variants that ran a manifest's kernel as
  `foreign`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from graph_format import SLOTS, runtime_api
from harness.check.backends import SHADER_LANGUAGES
from harness.check.coverage import Coverage
from harness.check.divergence import BugKey
from harness.run.commands import relative_path
from harness.run.exitrule import judge
from harness.run.expectations import entry_status
from harness.run.findings import CLEAN, UNEXPECTED, divergent_keys, finding_id, severity
from harness.run.records import (
    BugGroup,
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    ExpectationStatus,
    Finding,
    Record,
    RunLine,
    RunMeta,
    Stats,
    Summary,
    Totals,
)


def device_label(adapters: Mapping[str, Mapping[str, Any]]) -> str:
    """A short name for the devices a run used, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`."""
    names = sorted({str(a.get("adapter", "?")) for a in adapters.values()})
    return " + ".join(names) or "?"


def _case_size(record: CaseRecord) -> tuple[int, int]:
    numel = 0
    for step in record.step_shapes:
        for value in step.values():
            if isinstance(value, list):
                n = 1
                for d in value:
                    n *= int(d)
                numel += n
    return (len(record.step_shapes), numel)


@dataclass
class DistinctCase:
    """One distinct case (see harness.run.findings): its most severe run's record, where it ran.

    Attributes:
        source: the shard of the record kept; `device`: the devices it ran on.
        chunks, families: every chunk (and family) that ran it.
    """

    record: CaseRecord
    source: int
    device: str
    chunks: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)


@dataclass
class _Tally:
    """What the distinct cases add up to: the counts, each bug's group, each expectation's
    matches, and the ops and families that ran."""

    totals: Stats
    per_family: dict[str, Stats]
    per_op: dict[str, Stats] = field(default_factory=dict)
    by_bug: dict[tuple[BugKey, str | None], BugGroup] = field(default_factory=dict)
    matches: Counter[str] = field(default_factory=Counter)
    ops_run: set[str] = field(default_factory=set)
    families_run: set[str] = field(default_factory=set)


def summarize(
    runs: Sequence[RunMeta], records: Sequence[Sequence[Record]], run_dir: Path | None = None
) -> Summary:
    """The summary of one run, or of several shards merged.

    Args:
        runs: each shard's run.json.
        records: each shard's records (same order as `runs`).
        run_dir: the run folder, which `kernel_sources` names paths relative to (default:
            as run.json records them).
    """
    first = runs[0]
    chunk_records = _chunk_records(records)
    coverage = _coverage(records)
    cases = distinct_cases(runs, records)
    tally = _tally(cases, first.families)
    findings = _findings(runs, records, cases, chunk_records)
    _credit_findings(tally.by_bug, findings)
    expectations = _expectations(runs, tally)
    _chunk_tallies(runs, records, chunk_records, tally.per_family)
    statuses = [run.status for run in runs]
    complete = all(s == "complete" for s in statuses) and all(
        (source, c) in chunk_records for source, run in enumerate(runs) for c in run.chunks
    )
    shards = sorted({(run.shard.index, run.shard.count) for run in runs})
    # The exit rule (harness.run.exitrule) judges the required coverage cells only on a
    # complete run of every shard.
    verdict = judge(
        profile=first.profile,
        plan=first.plan,
        adapters=first.adapters,
        coverage=coverage,
        unexpected_cases=tally.totals.unexpected_cases,
        checked=complete and _all_shards(shards),
    )
    groups = sorted(tally.by_bug.values(), key=lambda g: (g.expected is not None, -g.cases))
    return Summary(
        status=_overall_status(statuses, complete),
        complete=complete,
        exit_status=int(verdict.exit_status),
        verdict=verdict.title,
        profile=first.profile,
        seed=first.seed,
        families=list(first.families),
        budgets=first.budgets,
        shards=[f"{i}/{n}" for i, n in shards],
        runs=[_run_line(run) for run in runs],
        adapters=first.adapters,
        adapter_sets=_distinct(run.adapters for run in runs),
        versions=first.versions,
        duration_s=round(sum(float(run.duration_s or 0.0) for run in runs), 2),
        totals=_totals(tally, findings),
        per_family=tally.per_family,
        per_op=tally.per_op,
        coverage={
            op: {b: {k: sorted(v) for k, v in cell.items()} for b, cell in sorted(per.items())}
            for op, per in sorted(coverage.cells.items())
        },
        coverage_required={op: list(cells) for op, cells in sorted(verdict.required.items())},
        kernel_sources=kernel_sources(first, run_dir),
        coverage_checked=verdict.checked,
        coverage_missing=[list(m) for m in verdict.missing],
        coverage_fill=list(verdict.fill),
        bugs=groups,
        findings=findings,
        expectations=expectations,
    )


def _coverage(records: Sequence[Sequence[Record]]) -> Coverage:
    """What every run of every case exercised, as `parity run` merges it from its tallies."""
    coverage = Coverage()
    for recs in records:
        for each in recs:
            if isinstance(each, CaseRecord):
                coverage.merge(each.coverage)
    return coverage


def _tally(cases: Sequence[DistinctCase], families: Sequence[str]) -> _Tally:
    """The counts of the distinct cases: in total, per family and per op, per bug."""
    tally = _Tally(Stats(), {family: Stats() for family in families})
    for c in cases:
        r = c.record
        for family in c.families:
            tally.families_run.add(family)
            _count(tally.per_family.setdefault(family, Stats()), r)
        _count(tally.totals, r)
        for op in r.ops:
            tally.ops_run.add(op)
            _count(tally.per_op.setdefault(op, Stats()), r, only_op=op)
        _group_divergences(tally, r)
    return tally


def _group_divergences(tally: _Tally, r: CaseRecord) -> None:
    """A case's divergences added to their bug groups (known and unexpected occurrences of
    one bug are separate groups) and to their expectations' matches."""
    groups_hit: set[tuple[BugKey, str | None]] = set()
    for d in r.divergences:
        if d.expected:
            tally.matches[d.expected] += 1
        key = (d.bug, d.expected)
        group = tally.by_bug.setdefault(key, BugGroup(d.bug, d.expected, example=d.message))
        group.divergences += 1
        if d.regime not in group.regimes:
            group.regimes.append(d.regime)
        if key not in groups_hit:  # a case counts once per group, however many steps hit
            groups_hit.add(key)
            group.cases += 1


def _credit_findings(
    by_bug: Mapping[tuple[BugKey, str | None], BugGroup], findings: Sequence[Finding]
) -> None:
    """Each finding counted in its bug's group (an unexpected one's, or each known one's)."""
    for f in findings:
        for expected in [None] if f.unexpected else f.known:
            found = by_bug.get((f.bug, expected))
            if found is not None:
                found.findings += 1
                found.failures.append(f.id)


def _expectations(runs: Sequence[RunMeta], tally: _Tally) -> list[ExpectationStatus]:
    """Each known-divergence entry with its match count and status."""
    adapters_seen = [run.adapters for run in runs]
    return [
        ExpectationStatus(
            entry,
            tally.matches[entry.id],
            entry_status(
                entry, tally.matches[entry.id], adapters_seen, tally.ops_run, tally.families_run
            ),
        )
        for entry in runs[0].expectations
    ]


def _chunk_tallies(
    runs: Sequence[RunMeta],
    records: Sequence[Sequence[Record]],
    chunk_records: Mapping[tuple[int, str], ChunkRecord],
    per_family: dict[str, Stats],
) -> None:
    """Each family's chunks by status ("missing": never recorded) and the time they ran."""
    chunk_status: dict[str, Counter[str]] = defaultdict(Counter)
    for source, run in enumerate(runs):
        for chunk_id in run.chunks:
            rec = chunk_records.get((source, chunk_id))
            family = chunk_id.rsplit("/", 1)[0]
            chunk_status[family][rec.status if rec else "missing"] += 1
    for family, counter in chunk_status.items():
        per_family.setdefault(family, Stats()).chunks = dict(counter)
    for family, seconds in _family_seconds(records, chunk_records).items():
        per_family.setdefault(family, Stats()).duration_s = round(seconds, 2)


def _all_shards(shards: Sequence[tuple[int, int]]) -> bool:
    """Whether the (index, count) shards are every shard of one split (or the run was not
    split)."""
    counts = {n for _, n in shards}
    return not shards or (
        len(counts) == 1 and {i for i, _ in shards} == set(range(1, next(iter(counts)) + 1))
    )


def _run_line(run: RunMeta) -> RunLine:
    """One shard's line of the summary."""
    return RunLine(
        shard=str(run.shard),
        device=device_label(run.adapters),
        status=run.status,
        exit_status=run.exit_status,
        stop_reason=run.stop_reason,
        errors=list(run.errors),
        duration_s=run.duration_s,
        started=run.started,
        git=run.git,
        shader_overrides=dict(run.shader_overrides),
        jobs=run.jobs,
        workers=list(run.workers),
    )


def _totals(tally: _Tally, findings: Sequence[Finding]) -> Totals:
    totals = tally.totals
    return Totals(
        cases=totals.cases,
        steps=totals.steps,
        divergent_cases=totals.divergent_cases,
        unexpected_cases=totals.unexpected_cases,
        known_cases=totals.known_cases,
        divergences=sum(totals.divergences.values()),
        findings=len(findings),
        unexpected_findings=sum(1 for f in findings if f.unexpected),
        bugs=len(tally.by_bug),
        max_utilization=totals.max_utilization,
        max_statistical_utilization=totals.max_statistical_utilization,
        unavailable_cases=totals.unavailable_cases,
    )


def folder_source(run: RunMeta, backend: str, run_dir: Path | None = None) -> str:
    """Where `run` built `backend`'s kernels from when no manifest replaced them: "project"
    (the repo's wgsl/ or glsl/), or `--wgsl-dir DIR`/`--glsl-dir DIR` (DIR relative to
    `run_dir` when given)."""
    api = runtime_api(backend)
    folder = run.shader_overrides.get(api)
    if folder is None:
        return "project"
    flag = f"--{SHADER_LANGUAGES[api]}-dir"
    return f"{flag} {relative_path(folder, run_dir) if run_dir is not None else folder}"


def kernel_sources(run: RunMeta, run_dir: Path | None = None) -> dict[str, dict[str, str]]:
    """slot -> backend -> where its kernel came from: the manifest's file for a slot a
    manifest replaced (`parity run --kernels`: "<file> (manifest <kernels.toml>)"), else
    the backend's folder (`folder_source`); paths relative to `run_dir` when given."""
    out: dict[str, dict[str, str]] = {}
    for slot in SLOTS:
        for backend, info in sorted(run.adapters.items()):
            replaced = info.get("kernels", {}) or {}
            if slot in replaced:
                manifest = info.get("manifest", run.kernels)
                if run_dir is not None and manifest:
                    manifest = relative_path(manifest, run_dir)
                source = f"{replaced[slot]} (manifest {manifest})"
            else:
                source = folder_source(run, backend, run_dir)
            out.setdefault(slot, {})[backend] = source
    return out


def _chunk_records(
    records: Sequence[Sequence[Record]],
) -> dict[tuple[int, str], ChunkRecord]:
    """(shard source, chunk id) -> its chunk record."""
    return {
        (source, r.chunk): r
        for source, recs in enumerate(records)
        for r in recs
        if isinstance(r, ChunkRecord)
    }


def _family_seconds(
    records: Sequence[Sequence[Record]], chunk_records: Mapping[tuple[int, str], ChunkRecord]
) -> dict[str, float]:
    """The time each family's chunks ran, summed over every process that ran them: a
    chunk's own duration, or for a chunk that never ended the time of its cases."""
    seconds: dict[str, float] = defaultdict(float)
    for rec in chunk_records.values():
        seconds[rec.chunk.rsplit("/", 1)[0]] += rec.duration_s
    for source, recs in enumerate(records):
        for r in recs:
            if isinstance(r, CaseRecord) and (source, r.chunk) not in chunk_records:
                seconds[r.family] += r.duration_s
    return dict(seconds)


def _count(stats: Stats, r: CaseRecord, only_op: str | None = None) -> None:
    stats.cases += 1
    stats.steps += r.steps
    stats.unavailable_cases += bool(r.unavailable)
    divergences = [d for d in r.divergences if only_op is None or d.op_type == only_op]
    util = r.max_utilization
    if util == util and util > stats.max_utilization:  # NaN-safe
        stats.max_utilization = util
    tight = r.max_statistical_utilization
    if tight == tight and tight > stats.max_statistical_utilization:
        stats.max_statistical_utilization = tight
    for d in divergences:
        stats.divergences[d.kind] = stats.divergences.get(d.kind, 0) + 1
    for key, (ulps, allowed) in r.bits.items():
        op, _, pair = key.split("|")
        if op == only_op and allowed is not None and ulps is not None:
            seen = stats.exact.setdefault(pair, [0, 0])
            stats.exact[pair] = [max(seen[0], ulps), max(seen[1], allowed)]
    level = severity(divergences)
    if level != CLEAN:
        stats.divergent_cases += 1
        if level == UNEXPECTED:
            stats.unexpected_cases += 1
        else:
            stats.known_cases += 1


def distinct_cases(
    runs: Sequence[RunMeta], records: Sequence[Sequence[Record]]
) -> list[DistinctCase]:
    """One entry per distinct case (see harness.run.findings), in (shard, family, chunk
    index, position in the chunk) order, whatever the order of the records.

    A case is its `case_id` on one device: Hypothesis runs a case several times (shrinking,
    the final replay) and several chunks may reach the same one. The record kept is the
    most severe run of it (unexpected, then known, then clean); among equals the one of the
    first chunk in (family, index) order and the earliest in it, so that what is kept does
    not depend on the order of the records (workers write them as they finish).
    """
    out: dict[tuple[str, str], DistinctCase] = {}
    for source, recs in enumerate(records):
        device = device_label(runs[source].adapters)
        for r in recs:
            if not isinstance(r, CaseRecord):
                continue
            key = (device, r.case_id)
            kept = out.get(key)
            if kept is None:
                kept = out[key] = DistinctCase(r, source, device)
            elif _keep_rank(r, source) < _keep_rank(kept.record, kept.source):
                kept.record, kept.source = r, source
            if r.chunk not in kept.chunks:
                kept.chunks.append(r.chunk)
            if r.family not in kept.families:
                kept.families.append(r.family)
    for kept in out.values():
        kept.chunks.sort(key=_chunk_order)
        kept.families.sort()
    return sorted(out.values(), key=lambda c: _keep_rank(c.record, c.source)[1:])


def _keep_rank(r: CaseRecord, source: int) -> tuple[int, int, tuple[str, int], int]:
    """Which record of a case `distinct_cases` keeps: the lowest rank."""
    return (-severity(r.divergences), source, _chunk_order(r.chunk), r.seq)


def _chunk_order(chunk: str) -> tuple[str, int]:
    family, _, index = chunk.rpartition("/")
    return (family, int(index) if index.isdigit() else -1)


def _findings(
    runs: Sequence[RunMeta],
    records: Sequence[Sequence[Record]],
    cases: Sequence[DistinctCase],
    chunk_records: Mapping[tuple[int, str], ChunkRecord],
) -> list[Finding]:
    """Findings from chunk records, plus provisional ones for chunks that never finished.

    Chunk findings of the same case and bug on one device are one finding
    (harness.run.findings.finding_id) listing every chunk that found it.
    """
    found = _FindingSet(runs, {(c.device, c.record.case_id): c.record for c in cases})
    ordered = sorted(chunk_records.items(), key=lambda kv: (kv[0][0], _chunk_order(kv[0][1])))
    for (source, chunk), rec in ordered:
        for f in rec.findings:
            found.add(source, chunk, f, provisional=False)
    for (source, chunk, bug), r in sorted(
        _provisional(records, chunk_records).items(), key=lambda kv: kv[0][:2]
    ):
        own = bug == r.bug
        provisional = ChunkFinding(
            case_id=r.case_id,
            unexpected=r.unexpected,
            bundle=r.provisional_bundle if own else None,
            bug=bug,
            shrunk=False,
            beside=None if own else r.bug,
        )
        found.add(source, chunk, provisional, provisional=True)
    return list(found.by_key.values())


def _provisional(
    records: Sequence[Sequence[Record]], chunk_records: Mapping[tuple[int, str], ChunkRecord]
) -> dict[tuple[int, str, BugKey], CaseRecord]:
    """A chunk that never ended (a killed run): its smallest divergent case per bug, every
    key of a case's unexpected divergences (harness.run.findings.divergent_keys), by
    (shard source, chunk, bug)."""
    best: dict[tuple[int, str, BugKey], CaseRecord] = {}
    for source, recs in enumerate(records):
        for r in recs:
            if not isinstance(r, CaseRecord) or (source, r.chunk) in chunk_records:
                continue
            if not r.unexpected:
                continue
            # One provisional finding per bug, whatever regime it showed in: the case with a
            # provisional bundle of it (replayable), else the smallest seen. A case's
            # provisional bundle is of the key it stands for.
            for bug in divergent_keys(r.divergences):
                key = (source, r.chunk, bug)
                rank = _provisional_rank(r, bug)
                if key not in best or rank < _provisional_rank(best[key], bug):
                    best[key] = r
    return best


class _FindingSet:
    """The findings of a run, one per distinct case and bug on one device, by
    (device, finding id)."""

    def __init__(
        self, runs: Sequence[RunMeta], by_case: Mapping[tuple[str, str], CaseRecord]
    ) -> None:
        self.runs = runs
        self.by_case = by_case
        self.by_key: dict[tuple[str, str], Finding] = {}
        self.ids: set[str] = set()

    def add(self, source: int, chunk: str, found: ChunkFinding, provisional: bool) -> None:
        """A chunk's finding: a new one, or merged into the same case and bug's."""
        device = device_label(self.runs[source].adapters)
        record = self.by_case.get((device, found.case_id))
        # A version 1 chunk record names no bug: the one its case stands for.
        bug = found.bug or (record.bug if record is not None else None) or BugKey("-", "?", "?")
        base = finding_id(found.case_id, bug)
        known = self.by_key.get((device, base))
        if known is not None:
            _merge_finding(known, source, chunk, found, provisional)
            return
        # The same finding on another device (a merge of several devices' shards) gets its
        # own page, named like the bundle `parity merge` copies for it.
        fid = base if base not in self.ids else f"{base}-s{source}"
        self.ids.add(fid)
        divergences = record.divergences if record is not None else []
        self.by_key[(device, base)] = Finding(
            id=fid,
            bug=bug,
            case_id=found.case_id,
            chunk=chunk,
            family=chunk.rsplit("/", 1)[0],
            device=device,
            source=source,
            chunks=[chunk],
            sources=[source],
            bundle=found.bundle,
            bundle_error=found.bundle_error,
            shrunk=found.shrunk,
            unshrunk=None if found.shrunk else found.unshrunk,
            provisional=provisional,
            repeatability=found.repeatability,
            unexpected=found.unexpected,
            known=sorted({d.expected for d in divergences if d.expected}),
            steps=record.steps if record is not None else None,
            step_shapes=record.step_shapes if record is not None else None,
            beside=found.beside,
        )


def _merge_finding(
    known: Finding, source: int, chunk: str, found: ChunkFinding, provisional: bool
) -> None:
    """Another chunk's finding of the same case and bug merged into `known`."""
    if chunk not in known.chunks:
        known.chunks.append(chunk)
    if source not in known.sources:
        known.sources.append(source)
    known.bundle = known.bundle or found.bundle
    known.bundle_error = None if known.bundle else known.bundle_error or found.bundle_error
    known.shrunk = known.shrunk or found.shrunk
    known.unshrunk = None if known.shrunk else known.unshrunk or found.unshrunk
    known.provisional = known.provisional and provisional
    known.repeatability = known.repeatability or found.repeatability


def _provisional_rank(record: CaseRecord, bug: BugKey) -> tuple[int, tuple[int, int]]:
    bundled = record.provisional_bundle is not None and record.bug == bug
    return (0 if bundled else 1, _case_size(record))


def _overall_status(statuses: Sequence[str], complete: bool) -> str:
    for status in ("running", "interrupted", "error", "time_budget"):
        if status in statuses:
            # A run.json still saying "running" was never finalized: the run was killed.
            return "killed" if status == "running" else status
    return "complete" if complete else "incomplete"


def _distinct(items: Iterable[dict[str, dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
    out: list[dict[str, dict[str, Any]]] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def junit_xml(summary: Summary, records: Sequence[Sequence[Record]]) -> str:
    """JUnit XML for CI dashboards: a suite per family, a test case per chunk, and a suite
    `parity.coverage` with one test case, failed when a complete run left a required coverage
    cell empty (harness.run.exitrule), where the run requires any.

    A chunk fails when it found an unexpected divergence, errors when the harness failed or
    the chunk never finished (a killed run), and is skipped when the time budget or a signal
    stopped the run before it.
    """
    suites = ET.Element("testsuites", name="parity")
    findings: dict[tuple[int, str], list[Finding]] = defaultdict(list)
    for f in summary.findings:
        # A finding fails every chunk that found it (a chunk id is unique on a device).
        for source in f.sources:
            for chunk in f.chunks:
                findings[(source, chunk)].append(f)
    for family, chunks in _chunks_by_family(summary, records).items():
        suite = ET.SubElement(suites, "testsuite", name=f"parity.{family}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="profile", value=str(summary.profile))
        ET.SubElement(props, "property", name="seed", value=str(summary.seed))
        counts: Counter[str] = Counter()
        for chunk, rec, source in chunks:
            name = chunk + (f" [{summary.runs[source].shard}]" if len(summary.runs) > 1 else "")
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"parity.{family}",
                name=name,
                time=str(rec.duration_s if rec else 0),
            )
            counts["tests"] += 1
            counts[_chunk_verdict(case, rec, findings[(source, chunk)])] += 1
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
    if summary.coverage_required and summary.coverage_checked:
        # The exit rule's coverage verdict, so that a dashboard shows why a clean run failed.
        suite = ET.SubElement(suites, "testsuite", name="parity.coverage", tests="1")
        short = bool(summary.coverage_missing)
        suite.set("failures", "1" if short else "0")
        case = ET.SubElement(
            suite, "testcase", classname="parity.coverage", name="required coverage"
        )
        if short:
            ET.SubElement(case, "failure", message=summary.verdict).text = "\n".join(
                summary.coverage_fill
            )
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode")


def _chunks_by_family(
    summary: Summary, records: Sequence[Sequence[Record]]
) -> dict[str, list[tuple[str, ChunkRecord | None, int]]]:
    """Family -> (chunk id, its chunk record or None, shard source) of every chunk that
    wrote a record, the summary's families first."""
    chunk_records = _chunk_records(records)
    by_family: dict[str, list[tuple[str, ChunkRecord | None, int]]] = {
        f: [] for f in summary.families
    }
    for source, recs in enumerate(records):
        ids = list(dict.fromkeys(r.chunk for r in recs))
        for chunk in ids:
            by_family.setdefault(chunk.rsplit("/", 1)[0], []).append(
                (chunk, chunk_records.get((source, chunk)), source)
            )
    return by_family


def _chunk_verdict(case: ET.Element, rec: ChunkRecord | None, findings: list[Finding]) -> str:
    """A chunk's test case filled in (its error, skip or failure, its known findings); the
    count it adds to ("errors", "skipped", "failures", or "passed")."""
    if rec is None:
        ET.SubElement(case, "error", message="no result: the run stopped before this chunk ended")
        return "errors"
    unexpected = [f for f in findings if f.unexpected]
    verdict = "passed"
    if rec.status == "skipped":
        verdict = "skipped"
        ET.SubElement(case, "skipped", message=f"not run: {rec.reason}")
    elif rec.status == "error":
        verdict = "errors"
        ET.SubElement(case, "error", message=str(rec.reason))
    elif unexpected:
        verdict = "failures"
        failure = ET.SubElement(
            case,
            "failure",
            message=f"{len(unexpected)} unexpected finding(s): "
            + ", ".join(str(f.bug) for f in unexpected),
        )
        failure.text = "\n".join(f"{f.id}: bundle {f.bundle}" for f in unexpected)
    known = [f for f in findings if not f.unexpected]
    if known:
        ET.SubElement(case, "system-out").text = "known: " + ", ".join(
            k for f in known for k in f.known
        )
    return verdict
