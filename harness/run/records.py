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
is a dataclass here; `read_records`, `read_run_meta` and `read_bundle_doc` read them with one
type-driven reader (`from_json`) that checks every field against its type and names what is
wrong as `file[:line]: what`; `RecordWriter` and `write_json` write them (`plain`).

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

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import platform
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from harness.check.divergence import PRIORITY, BugKey, Divergence, Kind, key_dtype
from harness.check.lockstep import CaseResult, StepRecord
from harness.gen.case import Case
from harness.model import op_dtype
from harness.run.expectations import Expectation
from harness.run.plan import Chunk, Shard

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

RECORD_VERSION = 2
CASES_FILE = "cases.jsonl"
RUN_FILE = "run.json"
RUN_FORMAT = "parity-run/1"
MERGE_FORMAT = "parity-merge/1"
SUMMARY_FORMAT = "parity-summary/2"
BUNDLE_FORMAT = "parity-bundle/2"
# Bundle formats `read_bundle_doc` reads: /1 wrote `signatures` instead of `bug`.
BUNDLE_FORMATS = ("parity-bundle/1", BUNDLE_FORMAT)

# A record class: `from_json` builds any dataclass.
T = TypeVar("T", bound="DataclassInstance")


class RecordError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


# The errors of an output the disk will not take: full, read-only, or not ours to write.
OUTPUT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}
)


class OutputError(Exception):
    """An output the disk would not take: `cannot write PATH: <the OS's reason>`.

    Not an OSError, so that no handler of the OS's errors swallows it on its way to the
    command's one error line (exit status 2).

    Attributes:
        path: what could not be written (a file, or a bundle's folder).
        errno: the OS's error number (`errno.ENOSPC`, `errno.EROFS`, ...).
    """

    def __init__(self, path: Path, errno: int) -> None:
        super().__init__(path, errno)
        self.path = path
        self.errno = errno

    def __str__(self) -> str:
        return f"cannot write {self.path}: {os.strerror(self.errno)}"


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Raise `OutputError(path, errno)` for an OSError of `OUTPUT_ERRNOS` inside the block
    (any other error goes on as it is: a harness bug, not the disk)."""
    try:
        yield
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS:
            raise
        raise OutputError(path, err.errno) from None


def plain(value: Any) -> Any:
    """`value` as JSON-safe plain data: numpy scalars and arrays, tuples, enums, dataclasses
    (through their `to_json` when they have one), bug keys (their text form).

    Non-finite floats become the strings "inf", "-inf" and "nan" (JSON has no spelling for
    them, and CI dashboards reject Python's `NaN` token).
    """
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bool | None | str | int):
        return value
    if isinstance(value, float | np.floating):
        f = float(value)
        if math.isfinite(f):
            return f
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, BugKey):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_json = getattr(value, "to_json", None)
        if callable(to_json):
            return plain(to_json())
        return plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, Path):
        return str(value)
    return str(value)


def as_float(value: Any) -> float:
    """Read back a float written by `plain` ("inf" and "nan" included)."""
    if isinstance(value, str):
        return float(value)
    return float(value) if value is not None else float("nan")


# ---------------------------------------------------------------------------- reading


_NON_FINITE = ("inf", "-inf", "nan")
_JSON_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number"
    return _JSON_NAMES.get(type(value), type(value).__name__)


class _Mismatch(Exception):
    """A value of the wrong JSON type somewhere inside a field (raised to its field)."""

    def __init__(self, wanted: str, value: Any, problem: str | None = None) -> None:
        super().__init__(wanted)
        self.wanted = wanted
        self.value = value
        self.problem = problem  # a message of its own (a field deeper inside), if any


# Kept for the process: a pure function of the record classes (constant after import).
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """A record class's field types, resolved once."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """A `cls` dataclass from JSON data, every field checked against its type hint.

    Supported hints: str, int, float (also "inf", "-inf", "nan" as `plain` writes them),
    bool, Any, None in unions, list[X], dict[str, X], nested dataclasses and `BugKey` (its
    text form). A field without a default is required; keys that are not fields are
    ignored.

    Raises:
        ValueError: `field <where><name> is missing` or `field ... must be <type>, got ...`.
    """
    if not isinstance(data, dict):
        name = where.rstrip(".") or "record"
        raise ValueError(f"{name} must be a JSON object, got {_json_type(data)}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                raise ValueError(f"field {where}{f.name!r} is missing")
            continue
        try:
            values[f.name] = _convert(hints[f.name], data[f.name], f"{where}{f.name}.")
        except _Mismatch as err:
            if err.problem is not None:
                raise ValueError(err.problem) from None
            raise ValueError(
                f"field {where}{f.name!r} must be {err.wanted}, got {_json_type(err.value)} "
                f"{json.dumps(err.value)[:40]}"
            ) from None
    return cls(**values)


def _convert(hint: Any, value: Any, where: str) -> Any:
    """`value` read as `hint`; raises _Mismatch naming the type that was wanted."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        wanted = [o for o in options if o is not type(None)]
        for option in wanted:
            try:
                return _convert(option, value, where)
            except _Mismatch as err:
                if err.problem is not None:
                    raise
        names = [_wanted(o) for o in options]
        raise _Mismatch(" or ".join(names), value)
    if origin is list:
        if not isinstance(value, list):
            raise _Mismatch("a list", value)
        (item,) = typing.get_args(hint)
        return [_item(item, v, f"{where[:-1]}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch("an object", value)
        _, item = typing.get_args(hint)
        return {str(k): _item(item, v, f"{where}{k}") for k, v in value.items()}
    if hint is BugKey:
        if not isinstance(value, str):
            raise _Mismatch(_wanted(hint), value)
        try:
            return BugKey.parse(value)
        except ValueError:
            raise _Mismatch(_wanted(hint), value) from None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _Mismatch("an object", value)
        try:
            return from_json(hint, value, where)
        except ValueError as err:
            raise _Mismatch("an object", value, str(err)) from None
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and value in _NON_FINITE:
            return float(value)
        raise _Mismatch("a number", value)
    if hint in (str, int, bool):
        if isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):
            return value
        raise _Mismatch(_JSON_NAMES[hint], value)
    raise TypeError(f"records: no JSON reading for {hint!r}")  # a bug in a record class


def _item(hint: Any, value: Any, where: str) -> Any:
    """An item of a list or object, whose mismatch names the item itself."""
    try:
        return _convert(hint, value, f"{where}.")
    except _Mismatch as err:
        if err.problem is not None:
            raise
        raise _Mismatch(
            err.wanted,
            value,
            f"field {where} must be {err.wanted}, got {_json_type(value)} {json.dumps(value)[:40]}",
        ) from None


def _wanted(hint: Any) -> str:
    if hint is BugKey:
        return "a bug key op_type[@float16]|kind|blame[|band]"
    if typing.get_origin(hint) is list:
        return "a list"
    if typing.get_origin(hint) is dict or dataclasses.is_dataclass(hint):
        return "an object"
    return _JSON_NAMES.get(hint, str(hint))


# ---------------------------------------------------------------------------- case records


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
    details: dict[str, Any] = field(default_factory=dict)
    regime: str = ""
    dtype: str = ""
    cause: BugKey | None = None

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
class LoggedDispatch:
    """One entry of a dispatch log, as the contract model predicted it or a backend ran it.

    Attributes:
        wg: workgroup size; `count`: logical workgroup count; `ran`: not skipped.
        grid: the physical grid a backend handed the API (None for the model's).
    """

    op: str
    kernel: str
    wg: list[int]
    count: list[int]
    ran: bool
    grid: list[int] | None = None

    def logical(self) -> tuple[str, tuple[int, ...], tuple[int, ...], bool]:
        """What must match across the backends and the model."""
        return (self.kernel, tuple(self.wg), tuple(self.count), self.ran)


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
        repeatability: `harness.check.repeatability.Repeatability.to_json()` when classified.
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
    coverage: dict[str, Any] = field(default_factory=dict)
    first_divergent: dict[str, Any] | None = None
    timeline: list[TimelineStep] = field(default_factory=list)
    repeatability: dict[str, Any] | None = None
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
    """A divergence as recorded, with its op type and regime added.

    A regime the harness recorded itself (a `regime` detail) wins over the coarse one
    computed here.
    """
    data = plain(d.to_json())
    regime = data.get("details", {}).get("regime") or regime_of(case, d.step)
    return DivergenceRecord(
        kind=str(data["kind"]),
        blame=str(d.blame),
        step=d.step,
        expected=expected,
        message=d.message,
        op=d.op,
        op_type=op_types(case).get(d.op or "", d.op or "-"),
        tensor=d.tensor,
        factor=d.factor,
        details=data.get("details", {}),
        regime=str(regime),
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
    first = result.first_divergence()
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
        first_divergent=plain(first) if first is not None else None,
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
    utilization: dict[str, Any] = field(default_factory=dict)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    step_shapes: list[dict[str, Any]] | None = None
    max_workgroups_per_dim: int | None = None
    repeatability: dict[str, Any] | None = None
    first_divergent: dict[str, Any] | None = None
    run: BundleRun = field(default_factory=BundleRun)
    sources: dict[str, Any] = field(default_factory=dict)
    chunk_seed: int | None = None
    shaders: dict[str, str] = field(default_factory=dict)
    kernels: dict[str, str] = field(default_factory=dict)
    commands_cwd: str = ""
    commands: list[str] = field(default_factory=list)
    beside: BugKey | None = None
    history: dict[str, Any] | None = None

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
    coverage: dict[str, Any] = field(default_factory=dict)
    coverage_required: dict[str, list[str]] = field(default_factory=dict)
    coverage_checked: bool = False
    coverage_missing: list[list[str]] = field(default_factory=list)
    coverage_fill: list[str] = field(default_factory=list)
    kernel_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    bugs: list[BugGroup] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    expectations: list[ExpectationStatus] = field(default_factory=list)


# ---------------------------------------------------------------------------- helpers


def versions() -> dict[str, str]:
    """Versions of everything that changes results: Python, wgpu, vulkan, hypothesis, numpy."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("wgpu", "vulkan", "hypothesis", "numpy", "jinja2", "vulkan-parity"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from `path`.

    Raises:
        RecordError: naming the file and what was expected.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(f"{path}: missing: expected the {what} here") from None
    except OSError as err:
        raise RecordError(f"{path}: cannot be read: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise RecordError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}); expected the {what}"
        ) from None
    if not isinstance(doc, dict):
        raise RecordError(f"{path}: expected a JSON object ({what}), got {type(doc).__name__}")
    return doc


def write_json(path: Path, doc: Any) -> Path:
    """Write `doc` (a record, or anything `plain` takes) as indented JSON, atomically (a
    reader never sees half a file).

    Raises:
        OutputError: the disk would not take it; the old file, if any, is kept.
    """
    return write_text(path, json.dumps(plain(doc), indent=1) + "\n")


def write_text(path: Path, text: str) -> Path:
    """Write a text file (UTF-8) atomically: a temporary file beside it, renamed over it.

    Raises:
        OutputError: the disk would not take it (full, read-only, not ours); the old file,
            if any, is kept and no temporary file is left.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path):
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return path
