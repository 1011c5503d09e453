"""The files of a run folder as the records read and write them: names and formats, errors,
JSON-safe plain data (`plain`), whole-file writes (`write_json`, `write_text`) and reads."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import platform
from collections.abc import Iterator, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from harness.check.divergence import BugKey

RECORD_VERSION = 2
CASES_FILE = "cases.jsonl"
RUN_FILE = "run.json"
RUN_FORMAT = "parity-run/1"
MERGE_FORMAT = "parity-merge/1"
SUMMARY_FORMAT = "parity-summary/2"
BUNDLE_FORMAT = "parity-bundle/2"
# Bundle formats `read_bundle_doc` reads: /1 wrote `signatures` instead of `bug`.
BUNDLE_FORMATS = ("parity-bundle/1", BUNDLE_FORMAT)


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
    if isinstance(value, float | np.floating | np.integer | np.bool_):
        return _plain_number(value)
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
    return str(value)  # a Path, or anything else: its text


def _plain_number(value: float | np.floating[Any] | np.integer[Any] | np.bool_) -> Any:
    """A numpy or Python float, a numpy integer or bool as `plain` writes it."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    f = float(value)
    if math.isfinite(f):
        return f
    return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")


def as_float(value: Any) -> float:
    """Read back a float written by `plain` ("inf" and "nan" included)."""
    if isinstance(value, str):
        return float(value)
    return float(value) if value is not None else float("nan")


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
