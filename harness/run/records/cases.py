"""cases.jsonl: case and chunk records, built from what a case's run found, written a line at
a time (`RecordWriter`) and read back (`read_records`)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.check.coverage import CoverageCells
from harness.check.divergence import (
    PRIORITY,
    BugKey,
    Details,
    Divergence,
    FirstDivergent,
    Kind,
    LoggedDispatch,
    details_of,
    key_dtype,
)
from harness.check.lockstep import CaseResult, StepRecord
from harness.check.repeatability import Repeatability
from harness.gen.case import Case
from harness.model import op_dtype
from harness.run.records.convert import from_json
from harness.run.records.files import RECORD_VERSION, OutputError, RecordError, plain, writing


@dataclass
class DivergenceRecord:
    """One divergence as recorded (`Divergence.to_json()` plus what the run adds).

    Attributes:
        kind, blame, step, message, op, tensor, factor, details: as `Divergence`'s.
        expected: the id of the expectation it matched (None: unexpected, or not matched
            yet: a step of the timeline).
        op_type: the op's type (`-` when it is about no op).
        dtype: `float16` for an op that ran in half precision, else empty.
        regime: the shape regime it showed in (the harness's own, else `regime_of`).
        cause: the key it counts under when it follows from another op's bug
            (`harness.check.divergence.Divergence.cause`).
    """

    kind: str
    blame: str
    step: int
    expected: str | None = None
    message: str = ""
    op: str | None = None
    op_type: str = "-"
    tensor: str | None = None
    factor: float | None = None
    details: Details = field(default_factory=Details)
    regime: str = ""
    dtype: str = ""
    cause: BugKey | None = None

    def __post_init__(self) -> None:
        self.details = details_of(self.kind, self.details)

    @property
    def bug(self) -> BugKey:
        """Its bug key (harness.check.divergence.BugKey): its `cause`'s, when it has one."""
        if self.cause is not None:
            return self.cause
        return BugKey.of(self.kind, self.op_type, self.blame, self.factor, self.dtype)

    def to_json(self) -> dict[str, Any]:
        """The record, with its bug key's text form."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return data | {"bug": str(self.bug)}


_KINDS = {k.value for k in Kind}


def _rank(d: DivergenceRecord) -> tuple[int, int]:
    """How a divergence ranks for the case's primary one (harness.check.divergence.primary)."""
    kind = Kind(d.kind) if d.kind in _KINDS else None
    return (d.step, PRIORITY[kind] if kind is not None else len(PRIORITY))


def primary_bug(divergences: Sequence[DivergenceRecord]) -> BugKey | None:
    """The bug key a case stands for: that of its primary unexpected divergence (earliest
    step, most fundamental class, first op), else of its primary known one; the key the
    search raised for it (harness.run.session), so the key its finding is named by."""
    pool = [d for d in divergences if d.expected is None] or list(divergences)
    return min(pool, key=_rank).bug if pool else None


@dataclass
class Observed:
    """What the contract model expected, or one backend reported, in one step.

    Attributes:
        error: the error it raised (or the model expects), `Class: message`.
        cur_dims: every tensor's live dims after the step.
        utilization: error/budget per compared tensor (`op:tensor`, `out:tensor`).
    """

    error: str | None = None
    cur_dims: dict[str, list[int]] = field(default_factory=dict)
    dispatches: list[LoggedDispatch] = field(default_factory=list)
    utilization: dict[str, float] = field(default_factory=dict)
    validation_messages: list[str] = field(default_factory=list)


@dataclass
class TimelineStep:
    """One step of a divergent case's timeline (harness.check.lockstep.StepRecord as recorded).

    Attributes:
        inputs: each input's live dims (tensors) or value (SymInts).
        model: the contract model's expectation; `backends`: what each backend reported.
        divergences: the divergences of this step.
    """

    index: int
    inputs: dict[str, Any] = field(default_factory=dict)
    model: Observed = field(default_factory=Observed)
    backends: dict[str, Observed] = field(default_factory=dict)
    divergences: list[DivergenceRecord] = field(default_factory=list)

    @classmethod
    def of(cls, step: StepRecord, case: Case) -> TimelineStep:
        """The timeline entry of a step the lockstep runner recorded."""
        return cls(
            index=step.index,
            inputs=dict(step.inputs),
            model=Observed(
                error=step.expected_error,
                cur_dims=dict(step.expected_cur_dims),
                dispatches=[LoggedDispatch(**d) for d in step.expected_dispatches],
            ),
            backends={
                name: Observed(
                    error=b.error,
                    cur_dims=dict(b.cur_dims),
                    dispatches=[LoggedDispatch(**d) for d in b.dispatches],
                    utilization=dict(b.utilization),
                    validation_messages=list(b.validation_messages),
                )
                for name, b in step.backends.items()
            },
            divergences=[divergence_record(d, case) for d in step.divergences],
        )


@dataclass
class CaseRecord:
    """One executed case (a line `{"record": "case", ...}` of cases.jsonl).

    Attributes:
        chunk: the work-plan chunk it belongs to (`family/index`).
        family: its case family.
        seq: its position among the chunk's examples.
        case_id: the content hash of the case (`case_id`).
        ops: the op types of its graph.
        step_shapes: per step, each input's live dims (tensors) or value (SymInts).
        steps: its number of steps.
        unexpected: how many of its divergences no expectation matched.
        divergences: what the oracles found.
        timeline: for a divergent case, every step's observables: what a failure page
            shows before any bundle exists.
        coverage: per op type and backend, the regimes and variants it exercised.
        first_divergent: the first divergent op (`FirstDivergent`), when one is known.
        repeatability: its repeatability class and evidence, when classified.
        provisional_bundle: `bundles/<id>` of the provisional bundle of its bug in its
            chunk, on the first divergent case of each bug.
        source: the shard it came from, in a merged folder.
        unavailable: why some backends could not run it ("" when all did): their devices
            lack the precision its graph needs; the others ran it
            (`harness.check.lockstep.CaseResult.unavailable`).
        bits: per `op_type|kernels|a~b`, [the largest ULP distance between backends a and
            b where that op's inputs were bit-identical on both, the tolerance its kernels
            declare for the pair or None] (`harness.check.lockstep.CaseResult.bits`): what
            the exact tier compared.
        max_utilization: the largest error / rigorous budget of any comparison;
            `max_statistical_utilization` the largest error / statistical bound where that
            tier is tighter (long reductions; docs/oracles.md, "The statistical tier").
    """

    chunk: str
    family: str
    seq: int
    case_id: str
    ops: list[str]
    step_shapes: list[dict[str, Any]]
    steps: int
    unexpected: int
    divergences: list[DivergenceRecord]
    name: str = "case"
    meta: dict[str, Any] = field(default_factory=dict)
    max_utilization: float = 0.0
    max_statistical_utilization: float = 0.0
    duration_s: float = 0.0
    coverage: CoverageCells = field(default_factory=dict)
    first_divergent: FirstDivergent | None = None
    timeline: list[TimelineStep] = field(default_factory=list)
    repeatability: Repeatability | None = None
    max_workgroups_per_dim: int | None = None
    shard: str | None = None
    provisional_bundle: str | None = None
    source: int = 0
    unavailable: str = ""
    bits: dict[str, list[int | None]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No divergence at all."""
        return not self.divergences

    @property
    def bug(self) -> BugKey | None:
        """The bug the case stands for (`primary_bug`), None when it is clean."""
        return primary_bug(self.divergences)

    def to_json(self) -> dict[str, Any]:
        """The JSONL line's object."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data |= {"ok": self.ok, "bug": self.bug}
        return {"record": "case", "v": RECORD_VERSION, **data}


@dataclass
class ChunkFinding:
    """One finding of a chunk: a minimal failing case and its bug.

    Attributes:
        bug: the bug key it was shrunk by (None in version 1 records: then the case
            record's `bug`).
        bundle: `bundles/<finding id>`, named only once the bundle is whole on disk (None
            when it could not be written).
        bundle_error: why no bundle was written (e.g. `cannot write bundles/<id>: No space
            left on device`), when that is known.
        shrunk: Hypothesis finished shrinking it.
        repeatability: its repeatability class.
        unshrunk: why it is not shrunk, when it is not ("shrink budget spent", ...).
        beside: for a key that showed only beside another in its chunk's cases, the key its
            case stood for (and was shrunk by): the finding is that case as found
            (`harness.run.findings.divergent_keys`); None for a case's own key.
    """

    case_id: str
    unexpected: int
    bundle: str | None
    seq: int = 0
    shrunk: bool = False
    bug: BugKey | None = None
    repeatability: str | None = None
    bundle_error: str | None = None
    unshrunk: str | None = None
    beside: BugKey | None = None


@dataclass
class ChunkRecord:
    """The end of one chunk (a line `{"record": "chunk", ...}` of cases.jsonl).

    Attributes:
        status: complete, time_budget, interrupted, error or skipped.
        reason: why it stopped or was skipped.
        cases: examples it ran.
        findings: its minimal failing cases.
    """

    chunk: str
    status: str
    findings: list[ChunkFinding]
    family: str = ""
    index: int = 0
    seed: int = 0
    max_examples: int = 0
    max_workgroups_per_dim: int | None = None
    shard: str | None = None
    reason: str | None = None
    cases: int = 0
    duration_s: float = 0.0
    source: int = 0

    def __post_init__(self) -> None:
        self.family = self.family or self.chunk.rsplit("/", 1)[0]

    def to_json(self) -> dict[str, Any]:
        """The JSONL line's object."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"record": "chunk", "v": RECORD_VERSION, **data}


Record = CaseRecord | ChunkRecord


def divergence_record(d: Divergence, case: Case, expected: str | None = None) -> DivergenceRecord:
    """A divergence as recorded, with its op type and regime added."""
    return DivergenceRecord(
        kind=str(d.kind),
        blame=str(d.blame),
        step=d.step,
        expected=expected,
        message=d.message,
        op=d.op,
        op_type=op_types(case).get(d.op or "", d.op or "-"),
        tensor=d.tensor,
        factor=d.factor,
        details=d.details,
        regime=regime_of(case, d.step),
        dtype=key_dtype(op_dtypes(case).get(d.op or "")),
        cause=d.cause,
    )


def case_record(
    case: Case,
    result: CaseResult,
    *,
    chunk: str,
    family: str,
    seq: int,
    expected: Mapping[int, str | None] | None = None,
) -> CaseRecord:
    """The record of one executed case.

    Args:
        chunk: the work-plan chunk it belongs to (`family/index`).
        seq: its position among the chunk's examples.
        expected: divergence index -> id of the expectation it matched (None: unexpected).
    """
    expected = expected or {}
    divergences = [
        divergence_record(d, case, expected.get(i)) for i, d in enumerate(result.divergences)
    ]
    return CaseRecord(
        chunk=chunk,
        family=family,
        seq=seq,
        case_id=case_id(case),
        name=case.name,
        meta=plain(case.meta),
        ops=sorted(set(op_types(case).values())),
        step_shapes=case.step_shapes(),
        steps=len(case.steps),
        unexpected=sum(1 for d in divergences if d.expected is None),
        max_utilization=result.max_utilization,
        max_statistical_utilization=result.max_statistical_utilization,
        duration_s=round(result.duration_s, 4),
        divergences=divergences,
        coverage=result.coverage.to_json(),
        first_divergent=result.first_divergence(),
        # The full timeline only for divergent cases: it is what a failure page shows, and a
        # killed run must be able to show it before any bundle exists.
        timeline=[TimelineStep.of(s, case) for s in result.steps] if divergences else [],
        unavailable=result.unavailable,
        bits={key: list(value) for key, value in result.bits.items()},
    )


def case_id(case: Case) -> str:
    """A content hash of a case: graph, constants and every step's inputs (12 hex digits).

    The same draw gives the same id in any process, which is how sharded and unsharded runs
    are compared case by case.
    """
    h = hashlib.sha256()
    h.update(json.dumps(case.graph.to_json(), sort_keys=True).encode())
    for name in sorted(case.graph.constants):
        array = np.ascontiguousarray(case.graph.constants[name])
        h.update(f"{name}:{array.dtype}:{array.shape}".encode())
        h.update(array.tobytes())
    for i, step in enumerate(case.steps):
        for name in sorted(step):
            value = step[name]
            if isinstance(value, np.ndarray):
                array = np.ascontiguousarray(value)
                h.update(f"{i}/{name}:{array.dtype}:{array.shape}".encode())
                h.update(array.tobytes())
            else:
                h.update(f"{i}/{name}={int(value)}".encode())
    return h.hexdigest()[:12]


def op_types(case: Case) -> dict[str, str]:
    """Op node name -> op type (e.g. "rms_norm_1" -> "rms_norm")."""
    return {node.name: node.op for node in case.graph.ops}


def op_dtypes(case: Case) -> dict[str, str]:
    """Op node name -> the precision it runs in (`harness.model.op_dtype`)."""
    return {node.name: op_dtype(case.graph, node) for node in case.graph.ops}


def regime_of(case: Case, step: int) -> str:
    """A coarse shape regime of a step, for grouping failures when the harness records none.

    The live row count (product of the leading dims) of the first tensor input against its
    maximum: "rows=1", "rows=max" or "rows<max"; "load" for a load-time divergence.
    """
    if step < 0 or step >= len(case.steps):
        return "load"
    for name in case.graph.inputs:
        value = case.steps[step].get(name)
        if isinstance(value, np.ndarray):
            live = math.prod(value.shape[:-1]) if value.ndim > 1 else value.shape[0]
            dims = case.graph.tensor(name).dims
            top = math.prod(dims[:-1]) if len(dims) > 1 else dims[0]
            if live == 1:
                return "rows=1"
            return "rows=max" if live == top else "rows<max"
    return "scalars"


def record_line(record: Record) -> str:
    """A record as its line of `cases.jsonl` (without the newline)."""
    return json.dumps(plain(record), separators=(",", ":"))


class RecordWriter:
    """Appends records to `cases.jsonl`, one line each, handed to the OS at once.

    Each line goes to the OS as it is written (no buffer in this process), so it survives
    the process being killed (SIGKILL included); only a crash of the machine itself could
    lose the last lines. A line the disk will not take (full, read-only) is cut off again,
    so the file holds whole lines only, and `OutputError` names it. One process writes a
    run's file: a worker of `parity run --jobs N` sends its lines to its parent, which writes
    them (harness.run.workers says why).

    Raises:
        OutputError: the file cannot be opened for appending.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        with writing(path):
            self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: Record) -> None:
        """Write one record as one line."""
        self.write_line(record_line(record))

    def write_line(self, line: str) -> None:
        """Write one record already made into its line (`record_line`).

        Raises:
            OutputError: the disk would not take the whole line; the file is as it was.
        """
        if self._fd is None:
            raise ValueError(f"{self.path}: written after close()")  # a harness bug
        data = (line + "\n").encode("utf-8")
        size = os.fstat(self._fd).st_size
        try:
            with writing(self.path):
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
        except OutputError:
            # A partial line would tear the record (and every line after it): cut it off.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_records(path: Path) -> Iterator[Record]:
    """The records of a `cases.jsonl`, in order.

    A last line without its newline is what a killed run leaves mid-write: it is skipped.
    Any other line that is not a well-formed record is an error.

    Raises:
        RecordError: naming the file, the line number and what is wrong.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise RecordError(f"{path}: cannot be read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise RecordError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: cut short by a kill
                return
            raise RecordError(
                f"{path}:{number}: corrupt record: expected one JSON object per line, "
                f"got invalid JSON ({err.msg} at column {err.colno})"
            ) from None
        if not isinstance(data, dict) or data.get("record") not in ("case", "chunk"):
            raise RecordError(
                f'{path}:{number}: expected a JSON object with "record": "case" or '
                f'"chunk", got {type(data).__name__} {str(data)[:60]!r}'
            )
        try:
            yield record_from_json(data)
        except ValueError as err:
            raise RecordError(f"{path}:{number}: {data['record']} record: {err}") from None


def record_from_json(data: Mapping[str, Any]) -> Record:
    """A case or chunk record from its JSON object (any record version).

    Raises:
        ValueError: a missing or mistyped field, or a name that would leave the run folder
            as a path; the message says which.
    """
    record: Record
    if data.get("record") == "case":
        record = from_json(CaseRecord, data)
        problem = _name_problem("case_id", record.case_id, _PLAIN_NAME)
        if problem is None and record.provisional_bundle is not None:
            problem = _name_problem("provisional_bundle", record.provisional_bundle, _BUNDLE)
    else:
        record = from_json(ChunkRecord, data)
        problem = None
        for i, f in enumerate(record.findings):
            where = f"findings[{i}]."
            if problem is None and f.bundle is not None:
                problem = _name_problem(f"{where}bundle", f.bundle, _BUNDLE)
            if problem is None:
                problem = _name_problem(f"{where}case_id", f.case_id, _PLAIN_NAME)
    problem = problem or _name_problem("chunk", record.chunk, _CHUNK_ID)
    if problem is not None:
        raise ValueError(problem)
    return record


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_CHUNK_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*/[0-9]+")
_BUNDLE = re.compile(r"bundles/[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _name_problem(field_name: str, value: str, pattern: re.Pattern[str]) -> str | None:
    """What is wrong with a name that becomes a path in the run folder, if anything."""
    if pattern.fullmatch(value) and ".." not in value:
        return None
    return (
        f"field {field_name!r} = {value!r} is not a plain name (letters, digits, '_', '-', "
        "'.'; no path separators): it names files in the run folder"
    )
