"""`extends`: a section inheriting another's keys, and errors that say which section
wrote an inherited key (with its line in the manifest's text)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graph_format.kernels.errors import KernelManifestError, _shown, _suggest
from graph_format.kernels.format import _MEMBER_TABLES, _SOURCE_KEYS, EXTENDS_KEY, Backend


def _extended_section(
    path: Path, text: str, backend: Backend, sections: Mapping[str, Any], chain: tuple[str, ...]
) -> str:
    """The slot whose section the last section of `chain` extends: another section of the
    same backend in this manifest, not one that extends it back.

    Raises:
        KernelManifestError: not a slot's name, another backend's section, no such section,
            or a cycle (with the line of the `extends` key).
    """
    slot = chain[-1]
    where = f"{backend}.{slot}.{EXTENDS_KEY}"
    line = _key_line(text, backend, slot, EXTENDS_KEY)
    target = sections[slot][EXTENDS_KEY]
    others = [s for s in sections if s != slot]
    expected = (
        f"expected the slot of another [{backend}.<slot>] section: "
        f"{', '.join(others) or 'none in this manifest'}"
    )
    if not isinstance(target, str):
        raise KernelManifestError(path, f"{expected}, got {_shown(target)}", where=where, line=line)
    backend_of, dot, named = target.rpartition(".")
    if dot and backend_of != backend:
        raise KernelManifestError(
            path,
            f"a section extends one of its own backend: [{backend}.<slot>], got "
            f"{target!r} (a {backend} kernel's keys do not fit another backend)",
            where=where,
            line=line,
        )
    if named not in sections:
        raise KernelManifestError(
            path,
            f"no section [{backend}.{named}] in this manifest{_suggest(named, others)}; "
            + expected,
            where=where,
            line=line,
        )
    if named in chain:
        start = chain[chain.index(named) :]
        raise KernelManifestError(
            path,
            f"extends a section that extends it: {backend}.{' -> '.join((*start, named))}",
            where=f"{backend}.{named}.{EXTENDS_KEY}",
            line=_key_line(text, backend, named, EXTENDS_KEY),
        )
    return named


def _merged(
    backend: Backend,
    section: Mapping[str, Any],
    named: str,
    base: Mapping[str, Any],
    base_from: Mapping[str, str],
) -> tuple[dict[str, Any], dict[str, str]]:
    """`section` merged over `base` (the resolved section of slot `named`, whose inherited
    keys came from `base_from`), and where each key it inherits comes from."""
    merged = {
        k: dict(v) if k in _MEMBER_TABLES and isinstance(v, dict) else v for k, v in base.items()
    }
    inherited = {key: base_from.get(key, named) for key in _section_keys(base)}
    own = {k: v for k, v in section.items() if k != EXTENDS_KEY}
    if any(k in own for k in _SOURCE_KEYS[backend]):
        for key in _SOURCE_KEYS[backend]:
            merged.pop(key, None)
            inherited.pop(key, None)
    for key, value in own.items():
        if key in _MEMBER_TABLES and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
            for member in value:
                inherited.pop(f"{key}.{member}", None)
        else:
            merged[key] = value
            inherited = {k: v for k, v in inherited.items() if k.split(".")[0] != key}
    return merged, inherited


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
