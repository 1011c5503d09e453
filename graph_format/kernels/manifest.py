"""A parsed manifest (`KernelManifest`), its TOML data, and the implicit entry of the
project's own kernels (`builtin_entry`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph_format.kernels.binding import KernelDispatch, KernelEntry
from graph_format.kernels.expressions import Expression
from graph_format.kernels.format import (
    MANIFEST_FORMAT,
    PRECISIONS,
    PROJECT_PADDING,
    WORKGROUPS_VALUE,
    Backend,
)
from graph_format.signatures import SLOTS


@dataclass(frozen=True)
class KernelManifest:
    """A parsed `kernels.toml`: the slots it replaces on each backend.

    Attributes:
        path: the manifest file.
        entries: by (backend, slot).
    """

    path: Path
    entries: dict[tuple[Backend, str], KernelEntry]

    @property
    def folder(self) -> Path:
        """The kernel folder: every path of the manifest is relative to it."""
        return self.path.parent

    def entry(self, backend: Backend, slot: str) -> KernelEntry | None:
        """The entry replacing `slot` on `backend`, or None (the project's kernel runs)."""
        return self.entries.get((backend, slot))

    def slots(self, backend: Backend) -> tuple[str, ...]:
        """The slots replaced on `backend`."""
        return tuple(slot for b, slot in self.entries if b == backend)

    def scratch_entry(self, backend: Backend, op: str) -> KernelEntry | None:
        """An entry of `op` on `backend` that carries the op's manifest-sized scratch roles
        (`KernelEntry.op_scratch`, the same on each of them), or None when none is sized."""
        for (b, slot), entry in self.entries.items():
            if b == backend and entry.op_scratch and SLOTS[slot].op == op:
                return entry
        return None

    def files(self) -> tuple[Path, ...]:
        """The manifest and every file it names (shaders, adapter modules): what a bundle
        carries, each once."""
        files = [self.path]
        for entry in self.entries.values():
            files.append(entry.source)
            if entry.adapter is not None:
                files.append(entry.adapter.file)
        return tuple(dict.fromkeys(files))

    def to_doc(self) -> dict[str, Any]:
        """The manifest as TOML data (what `parse_manifest` reads back to an equal one)."""
        doc: dict[str, Any] = {"format": MANIFEST_FORMAT}
        for (backend, slot), entry in self.entries.items():
            doc.setdefault(backend, {})[slot] = _entry_doc(entry, self.folder)
        return doc


def _exprs_doc(exprs: Mapping[Any, Expression]) -> dict[str, str]:
    return {str(key): expr.text for key, expr in exprs.items()}


def _dispatch_doc(dispatch: KernelDispatch) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if dispatch.bindings:
        doc["bindings"] = {str(k): v for k, v in dispatch.bindings.items()}
    if dispatch.params:
        doc["params"] = _exprs_doc(dispatch.params)
    if dispatch.push:
        doc["push"] = _exprs_doc(dispatch.push)
    count = dispatch.count
    doc["dispatch"] = [e.text for e in count] if isinstance(count, tuple) else count.text
    return doc


def _entry_doc(entry: KernelEntry, folder: Path) -> dict[str, Any]:
    adapter = entry.adapter
    # Each key that differs from its default, in this order (what a reader of the TOML sees).
    optional: dict[str, Any] = {
        "entry": entry.entry if entry.entry != "main" else None,
        "overrides": _exprs_doc(entry.overrides or {}),
        "spec": _exprs_doc(entry.spec or {}),
        "padding": list(entry.padding),
        "fold": entry.fold,
        "exact": entry.exact,
        "requires": [r.text for r in entry.requires],
        "defines": dict(entry.defines),
        "scratch": _exprs_doc(entry.scratch),
        "masked_columns": entry.masked_columns,
        "precision": entry.precision if entry.precision != PRECISIONS[0] else None,
        "adapter": (
            None
            if adapter is None
            else f"{adapter.file.relative_to(folder).as_posix()}:{adapter.name}"
        ),
    }
    doc: dict[str, Any] = {
        "file" if entry.kind == "wgsl" else entry.kind: entry.source.relative_to(folder).as_posix()
    }
    doc.update((key, value) for key, value in optional.items() if value)
    if len(entry.dispatches) == 1:
        doc.update(_dispatch_doc(entry.dispatches[0]))
    else:
        doc["dispatch_list"] = [_dispatch_doc(d) for d in entry.dispatches]
    return doc


def builtin_entry(backend: Backend, slot: str, source: Path) -> KernelEntry:
    """The implicit manifest entry of the project's own kernel of `slot` in `source`.

    Params and push members by the same-name value, members matching `^_pad` zero, bindings
    by the default rule, overrides and specialization constants by the project rule (see
    `KernelEntry`), one dispatch of the op's own `workgroups` count, folded when past the
    per-dimension limit (every project kernel recovers its 1-D index).

    Raises:
        KeyError: `slot` is not a slot of any op.
    """
    if slot not in SLOTS:
        raise KeyError(f"no slot {slot!r}; known: {sorted(SLOTS)}")
    return KernelEntry(
        backend=backend,
        slot=slot,
        source=source,
        kind="wgsl" if backend == "webgpu" else "glsl",
        dispatches=(KernelDispatch({}, {}, {}, Expression.compile(WORKGROUPS_VALUE)),),
        overrides=None if backend == "webgpu" else {},
        spec=None if backend == "vulkan" else {},
        padding_pattern=PROJECT_PADDING,
        fold=True,
        builtin=True,
    )
