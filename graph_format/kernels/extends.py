"""`extends`: a section inheriting another's keys, and errors that say which section
wrote an inherited key (with its line in the manifest's text)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from graph_format.kernels.errors import KernelManifestError
from graph_format.kernels.format import _MEMBER_TABLES


def _section_keys(section: Mapping[str, Any]) -> list[str]:
    """A section's keys, a member table's by member (`file`, `params.n_rows`)."""
    return [
        f"{key}.{member}" if member is not None else key
        for key, value in section.items()
        for member in (value if key in _MEMBER_TABLES and isinstance(value, dict) else [None])
    ]


def _inherited(
    err: KernelManifestError, prefix: str, inherited: Mapping[str, str]
) -> KernelManifestError:
    """`err` saying which section wrote the key it is about, when an extending section
    inherited it (`... (inherited from [webgpu.add_broadcast])`)."""
    if not inherited or err.where is None or not err.where.startswith(prefix):
        return err
    key = err.where.removeprefix(prefix)
    top = re.split(r"[.\[]", key, maxsplit=1)[0]
    source = inherited.get(key) or inherited.get(top)
    if source is None:
        return err
    backend = prefix.split(".")[0]
    return KernelManifestError(
        err.path,
        f"{err.what} (inherited from [{backend}.{source}])",
        where=err.where,
        line=err.line,
    )


def _key_line(text: str, backend: str, slot: str, key: str) -> int | None:
    """The line of `key` in the `[backend.slot]` table of a manifest's text (or of a
    dotted `backend.slot.key` / inline-table form naming both), for an error; None when
    not found."""
    lines = text.splitlines()
    header = re.compile(
        rf'^\s*\[\s*"?{re.escape(backend)}"?\s*\.\s*"?{re.escape(slot)}"?\s*\]\s*(#.*)?$'
    )
    assignment = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=')
    inside = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("["):
            inside = header.match(line) is not None
        elif inside and assignment.match(line):
            return number
    loose = re.compile(rf"\b{re.escape(slot)}\b.*\b{re.escape(key)}\s*=")
    return next((n for n, line in enumerate(lines, 1) if loose.search(line)), None)
