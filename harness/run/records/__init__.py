"""Results as data: every file a run writes and reads, as typed records, in one place.

A run folder's `cases.jsonl` is the source of truth for everything the reports show. Each
line is one JSON object, written and flushed as soon as the case (or chunk) finishes, so a
run that is interrupted or killed keeps every finding made so far. Two record types:

- `{"record": "case", ...}`: one executed example (`CaseRecord`, built by `case_record`);
- `{"record": "chunk", ...}`: the end of one chunk of the work plan, naming its findings
  (`ChunkFinding`: the minimal failing cases Hypothesis shrank to) and the bundles written
  for them (`ChunkRecord`).

Next to them: `run.json` (`RunMeta`, or `MergeMeta` for a merged folder), a bundle's
`bundle.json` (`BundleDoc`) and `summary.json` (`Summary`, built by harness.run.summary). Each
is a dataclass here, and so is what they carry from room to room: a divergence's details
(per kind, `harness.check.divergence.Details`), the first divergent op (`FirstDivergent`),
repeatability (`harness.check.repeatability.Repeatability`), a bundle's evidence
(`EvidenceElement`). `read_records`, `read_run_meta` and `read_bundle_doc` read them with one
type-driven reader (`from_json`, harness.run.records.convert) that checks every field
against its type and names what is wrong as `file[:line]: what`; `RecordWriter` and
`write_json` write them (`plain`).

The package's modules: `files` (names, formats, errors, whole-file reads and writes),
`convert` (the reader), `cases` (cases.jsonl), `documents` (run.json, bundle.json,
summary.json); everything is imported from `harness.run.records`.

Writing: a disk that is full, read-only or not ours raises `OutputError` naming the file
(`writing` turns such an OSError into one, for any writer), and leaves what was there whole:
a record line is appended entirely or not at all, a JSON or text file (`write_json`,
`write_text`) is replaced by its new version or stays the old one.

Record versions: `v` 2 (this one) carries each divergence's bug key (`bug`,
harness.check.divergence.BugKey) and a finding's `bug`; version 1 records (the `signature`
strings `op_type|kind|blame|regime`) still read, their bug keys recomputed from the
divergences' fields. Fields this harness does not know are not kept.

Plain data only: the records are built from `Case`, `CaseResult`, `StepRecord` and
`Divergence` and never hold harness objects, so `parity report` and `parity merge` can read
them without a device.
"""

from __future__ import annotations

from harness.check.divergence import LoggedDispatch
from harness.run.records.cases import (
    CaseRecord,
    ChunkFinding,
    ChunkRecord,
    DivergenceRecord,
    Observed,
    Record,
    RecordWriter,
    TimelineStep,
    case_id,
    case_record,
    divergence_record,
    op_dtypes,
    op_types,
    primary_bug,
    read_records,
    record_from_json,
    record_line,
    regime_of,
)
from harness.run.records.convert import (
    from_json,
)
from harness.run.records.documents import (
    Budgets,
    BugGroup,
    BundleDoc,
    BundleHistory,
    BundleRun,
    ElementInput,
    ElementValues,
    EvidenceElement,
    ExpectationStatus,
    Finding,
    MergeMeta,
    RunLine,
    RunMeta,
    Stats,
    Summary,
    Totals,
    WorkerLine,
    read_bundle_doc,
    read_run_meta,
)
from harness.run.records.files import (
    BUNDLE_FORMAT,
    BUNDLE_FORMATS,
    CASES_FILE,
    MERGE_FORMAT,
    OUTPUT_ERRNOS,
    RECORD_VERSION,
    RUN_FILE,
    RUN_FORMAT,
    SUMMARY_FORMAT,
    OutputError,
    RecordError,
    as_float,
    plain,
    read_json,
    versions,
    write_json,
    write_text,
    writing,
)

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_FORMATS",
    "CASES_FILE",
    "MERGE_FORMAT",
    "OUTPUT_ERRNOS",
    "RECORD_VERSION",
    "RUN_FILE",
    "RUN_FORMAT",
    "SUMMARY_FORMAT",
    "Budgets",
    "BugGroup",
    "BundleDoc",
    "BundleHistory",
    "BundleRun",
    "CaseRecord",
    "ChunkFinding",
    "ChunkRecord",
    "DivergenceRecord",
    "ElementInput",
    "ElementValues",
    "EvidenceElement",
    "ExpectationStatus",
    "Finding",
    "LoggedDispatch",
    "MergeMeta",
    "Observed",
    "OutputError",
    "Record",
    "RecordError",
    "RecordWriter",
    "RunLine",
    "RunMeta",
    "Stats",
    "Summary",
    "TimelineStep",
    "Totals",
    "WorkerLine",
    "as_float",
    "case_id",
    "case_record",
    "divergence_record",
    "from_json",
    "op_dtypes",
    "op_types",
    "plain",
    "primary_bug",
    "read_bundle_doc",
    "read_json",
    "read_records",
    "read_run_meta",
    "record_from_json",
    "record_line",
    "regime_of",
    "versions",
    "write_json",
    "write_text",
    "writing",
]
