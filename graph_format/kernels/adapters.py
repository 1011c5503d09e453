"""Adapters: a manifest's Python class for what a manifest cannot say (derived values,
private scratch buffers), and how it is imported from its file."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar, Protocol, cast

from graph_format.kernels.errors import KernelManifestError
from graph_format.kernels.format import BUILTIN_NAMES, Value
from graph_format.signatures import SlotInterface


@dataclass(frozen=True)
class AdapterRef:
    """An adapter class named by a manifest (`adapter = "adapters.py:GemvAdapter"`).

    Attributes:
        file: the Python module's path (inside the manifest's folder).
        name: the class's name in it.
    """

    file: Path
    name: str

    def __str__(self) -> str:
        return f"{self.file.name}:{self.name}"


class KernelAdapter(Protocol):
    """A manifest's Python class for what a manifest cannot say (`adapter = "<file>:<Class>"`):
    derived values a kernel reads, private scratch buffers. Both backends use it alike, and
    only when their runtime was built with `allow_adapters=True` (it runs the user's code).

    Attributes:
        provides: the names `values` adds, each filling a params (push) member of its name;
            none of them may be a value the slot offers. Optional (default none).
    """

    provides: ClassVar[tuple[str, ...]]

    def __init__(self, static: Mapping[str, Value]) -> None:
        """Once per op node, at load: the slot's values that are fixed for the graph."""
        ...

    def values(self, values: Mapping[str, Value]) -> Mapping[str, Value]:
        """At each resize of a step that runs the slot: the derived values (exactly the names
        in `provides`), from the op's values (with `max_workgroups_per_dim`)."""
        ...

    def scratch(self) -> Mapping[str, int]:
        """Extra private buffers, role -> bytes (asked once, after `__init__`), bound to a
        kernel binding of the role's name (or `t_<role>`) like the slot's tensors."""
        ...


def adapter_provides(adapter: type[KernelAdapter]) -> tuple[str, ...]:
    """The names an adapter class says its `values` adds (none when it says nothing)."""
    return tuple(getattr(adapter, "provides", ()))


def load_adapter(ref: AdapterRef, interface: SlotInterface | None = None) -> type[KernelAdapter]:
    """Import the adapter class `ref` names, from its file (not from `sys.path`).

    Runs the module's code: callers ask only when the user allowed adapters. Imported once
    per file content (a module `parity_adapter_<hash>`).

    Args:
        interface: the slot it serves, to check that `provides` adds no name the slot offers.

    Raises:
        KernelManifestError: the module does not import (with its traceback), has no such
            class, or the class lacks `values`/`scratch` or has a bad `provides`.
    """
    where = f"adapter {ref}"
    module = _import_module(ref.file, where)
    found = getattr(module, ref.name, None)
    if not isinstance(found, type):
        classes = sorted(n for n, v in vars(module).items() if isinstance(v, type))
        raise KernelManifestError(
            ref.file,
            f"expected a class {ref.name!r} in {ref.file.name}, got "
            f"{type(found).__name__ if found is not None else 'nothing'} (classes there: "
            f"{', '.join(classes) or 'none'})",
            where=where,
        )
    missing = [m for m in ("values", "scratch") if not callable(getattr(found, m, None))]
    if missing:
        raise KernelManifestError(
            ref.file,
            f"class {ref.name} lacks {' and '.join(missing)}(); an adapter has __init__(static), "
            "values(values) and scratch()",
            where=where,
        )
    provides = getattr(found, "provides", ())
    if not isinstance(provides, tuple | list) or not all(
        isinstance(n, str) and n.isidentifier() for n in provides
    ):
        raise KernelManifestError(
            ref.file,
            f"{ref.name}.provides must be a tuple of value names, got {provides!r}",
            where=where,
        )
    if interface is not None:
        clash = [n for n in provides if n in interface.values or n in BUILTIN_NAMES]
        if clash:
            raise KernelManifestError(
                ref.file,
                f"{ref.name}.provides names {', '.join(clash)}, which slot {interface.name} "
                "offers already; an adapter adds values, never replaces the op's",
                where=where,
            )
    return cast(type[KernelAdapter], found)


def _import_module(file: Path, where: str) -> ModuleType:
    """The module of an adapter's file, imported once per file content.

    Raises:
        KernelManifestError: unreadable, not a module, or its code fails (with its traceback).
    """
    try:
        code = file.read_bytes()
    except OSError as err:
        reason = err.strerror or str(err)
        raise KernelManifestError(file, f"cannot read: {reason}", where=where) from None
    digest = hashlib.sha256(str(file.resolve()).encode() + b"\0" + code).hexdigest()[:16]
    module_name = f"parity_adapter_{digest}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise KernelManifestError(file, "not a Python module", where=where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and the like look themselves up
        try:
            spec.loader.exec_module(module)
        except BaseException as err:  # the user's code: any failure is bad input
            del sys.modules[module_name]
            if isinstance(err, KeyboardInterrupt):
                raise
            text = "".join(traceback.format_exception(err)).strip()
            raise KernelManifestError(file, f"importing it failed:\n{text}", where=where) from None
    return module
