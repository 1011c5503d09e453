"""Results as data: the JSONL record of every case a run executes, and reading them back.

A run folder's `cases.jsonl` is the source of truth for everything the reports show. Each
line is one JSON object, written and flushed as soon as the case (or chunk) finishes, so a
run that is interrupted or killed keeps every finding made so far. Two record types:

- `{"record": "case", ...}`: one executed example (see `case_record`);
- `{"record": "chunk", ...}`: the end of one chunk of the work plan, naming its findings
  (the minimal failing cases Hypothesis shrank to) and the bundles written for them.

Plain data only: the records are built from `Case`, `CaseResult`, `StepRecord` and
`Divergence` and never hold harness objects, so `parity report` and `parity merge` can read
them without a device.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import platform
import re
from collections.abc import Iterator, Mapping
from enum import Enum
from pathlib import Path
from typing import IO, Any

import numpy as np

from harness.check.divergence import Divergence
from harness.check.lockstep import CaseResult, StepRecord
from harness.gen.case import Case

RECORD_VERSION = 1
CASES_FILE = "cases.jsonl"
RUN_FILE = "run.json"


class RecordError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


def plain(value: Any) -> Any:
    """`value` as JSON-safe plain data: numpy scalars and arrays, tuples, enums, dataclasses.

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
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, Path):
        return str(value)
    return str(value)


def as_float(value: Any) -> float:
    """Read back a float written by `plain` ("inf" and "nan" included)."""
    if isinstance(value, str):
        return float(value)
    return float(value) if value is not None else float("nan")


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


def divergence_record(d: Divergence, case: Case, expected: str | None = None) -> dict[str, Any]:
    """A divergence as plain data, with its op type, regime and signature added.

    The signature (op type, class, blamed backend, regime) is what a shrunk case must keep
    and what the report groups failures by. A regime the harness recorded itself (a
    `regime` field or detail) wins over the coarse one computed here.
    """
    data = plain(d.to_json())
    op_type = op_types(case).get(d.op or "", d.op or "-")
    regime = data.get("regime") or data.get("details", {}).get("regime") or regime_of(case, d.step)
    data["op_type"] = op_type
    data["regime"] = regime
    data["signature"] = signature_key(op_type, str(data["kind"]), str(d.blame), str(regime))
    data["expected"] = expected
    return data


def signature_key(op_type: str, kind: str, blame: str, regime: str) -> str:
    """The grouping key of a divergence: `op_type|kind|blame|regime`."""
    return f"{op_type}|{kind}|{blame}|{regime}"


def step_json(step: StepRecord) -> dict[str, Any]:
    """One step of the timeline: live inputs, the model's and every backend's observables."""
    data = plain(step)
    data["model"] = {
        "error": data.pop("expected_error"),
        "cur_dims": data.pop("expected_cur_dims"),
        "dispatches": data.pop("expected_dispatches"),
    }
    data["divergences"] = [plain(d.to_json()) for d in step.divergences]
    return data


def case_record(
    case: Case,
    result: CaseResult,
    *,
    chunk: str,
    family: str,
    seq: int,
    expected: Mapping[int, str | None] | None = None,
) -> dict[str, Any]:
    """The JSONL record of one executed case.

    Args:
        chunk: the work-plan chunk it belongs to (`family/index`).
        seq: its position among the chunk's examples.
        expected: divergence index -> id of the expectation it matched (None: unexpected).
    """
    expected = expected or {}
    divergences = [
        divergence_record(d, case, expected.get(i)) for i, d in enumerate(result.divergences)
    ]
    record: dict[str, Any] = {
        "record": "case",
        "v": RECORD_VERSION,
        "chunk": chunk,
        "family": family,
        "seq": seq,
        "case_id": case_id(case),
        "name": case.name,
        "meta": plain(case.meta),
        "ops": sorted(set(op_types(case).values())),
        "step_shapes": case.step_shapes(),
        "steps": len(case.steps),
        "ok": result.ok,
        "unexpected": sum(1 for d in divergences if d["expected"] is None),
        "max_utilization": plain(result.max_utilization),
        "duration_s": round(result.duration_s, 4),
        "divergences": divergences,
    }
    record["coverage"] = result.coverage.to_json()
    first = result.first_divergence()
    if first is not None:
        record["first_divergent"] = plain(first)
    if divergences:
        # The full timeline only for divergent cases: it is what a failure page shows, and a
        # killed run must be able to show it before any bundle exists.
        record["timeline"] = [step_json(s) for s in result.steps]
    return record


class RecordWriter:
    """Appends records to `cases.jsonl`, one line each, flushed at once.

    Flushing hands each line to the OS, so it survives the process being killed (SIGKILL
    included); only a crash of the machine itself could lose the last lines.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line."""
        self._file.write(json.dumps(plain(record), separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._file.closed:
            self._file.close()


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a `cases.jsonl`, in order.

    A last line without its newline is what a killed run leaves mid-write: it is skipped.
    Any other line that is not a JSON object is an error.

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
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: cut short by a kill
                return
            raise RecordError(
                f"{path}:{number}: corrupt record: expected one JSON object per line, "
                f"got invalid JSON ({err.msg} at column {err.colno})"
            ) from None
        if not isinstance(record, dict) or record.get("record") not in ("case", "chunk"):
            raise RecordError(
                f'{path}:{number}: expected a JSON object with "record": "case" or '
                f'"chunk", got {type(record).__name__} {str(record)[:60]!r}'
            )
        problem = record_problem(record)
        if problem is not None:
            raise RecordError(f"{path}:{number}: {record['record']} record: {problem}")
        yield record


# The fields reports read from each record type, with their JSON types (a record may hold
# more); names that become file names must be plain.
_CASE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "chunk": str,
    "family": str,
    "seq": int,
    "case_id": str,
    "ops": list,
    "step_shapes": list,
    "steps": int,
    "unexpected": int,
    "divergences": list,
}
_DIVERGENCE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "kind": str,
    "blame": str,
    "step": int,
    "signature": str,
    "expected": (str, type(None)),
}
_CHUNK_FIELDS: dict[str, type | tuple[type, ...]] = {
    "chunk": str,
    "status": str,
    "findings": list,
}
_FINDING_FIELDS: dict[str, type | tuple[type, ...]] = {
    "case_id": str,
    "signatures": list,
    "unexpected": int,
    "bundle": (str, type(None)),
}
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_CHUNK_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*/[0-9]+")
_BUNDLE_PATH = re.compile(r"bundles/[A-Za-z0-9_][A-Za-z0-9_.-]*")


def record_problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with a case or chunk record (a missing or mistyped field, a name that
    would leave the run folder as a path), or None when it is well formed."""
    if record["record"] == "case":
        problem = _fields_problem(record, _CASE_FIELDS, "")
        for i, d in enumerate(record.get("divergences", [])):
            problem = problem or _fields_problem(d, _DIVERGENCE_FIELDS, f"divergences[{i}].")
    else:
        problem = _fields_problem(record, _CHUNK_FIELDS, "")
        for i, f in enumerate(record.get("findings", [])):
            where = f"findings[{i}]."
            problem = problem or _fields_problem(f, _FINDING_FIELDS, where)
            if problem is None and f["bundle"] is not None:
                problem = _name_problem(f"{where}bundle", f["bundle"], _BUNDLE_PATH)
            if problem is None:
                problem = _name_problem(f"{where}case_id", f["case_id"], _PLAIN_NAME)
    if problem is None:
        problem = _name_problem("chunk", record["chunk"], _CHUNK_ID)
    if problem is None and record["record"] == "case":
        problem = _name_problem("case_id", record["case_id"], _PLAIN_NAME)
        bundle = record.get("provisional_bundle")
        if problem is None and bundle is not None:
            problem = (
                _name_problem("provisional_bundle", bundle, _BUNDLE_PATH)
                if isinstance(bundle, str)
                else f"field 'provisional_bundle' must be a string, got {_json_type(bundle)}"
            )
    return problem


def _fields_problem(
    data: Any, fields: Mapping[str, type | tuple[type, ...]], where: str
) -> str | None:
    if not isinstance(data, dict):
        return f"{where.rstrip('.') or 'record'} must be a JSON object, got {type(data).__name__}"
    for name, kind in fields.items():
        if name not in data:
            return f"field {where}{name!r} is missing"
        value = data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            wanted = " or ".join("null" if k is type(None) else _JSON_NAMES[k] for k in kinds)
            return (
                f"field {where}{name!r} must be {wanted}, got {_json_type(value)} "
                f"{json.dumps(value)[:40]}"
            )
    return None


def _name_problem(field_name: str, value: str, pattern: re.Pattern[str]) -> str | None:
    if pattern.fullmatch(value) and ".." not in value:
        return None
    return (
        f"field {field_name!r} = {value!r} is not a plain name (letters, digits, '_', '-', "
        "'.'; no path separators): it names files in the run folder"
    )


_JSON_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number"
    return _JSON_NAMES.get(type(value), type(value).__name__)


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


def write_json(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write `doc` as indented JSON, atomically (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(plain(doc), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
