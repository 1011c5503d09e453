"""Reading a `kernels.toml`: every error names the file and the field."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from graph_format.kernels.adapters import AdapterRef
from graph_format.kernels.binding import KernelDispatch, KernelEntry, _op_roles
from graph_format.kernels.errors import ExpressionError, KernelManifestError, _shown, _suggest
from graph_format.kernels.expressions import Expression
from graph_format.kernels.extends import _extended_section, _inherited, _merged
from graph_format.kernels.format import (
    _DISPATCH_KEYS,
    _SECTION_KEYS,
    _SOURCE_KEYS,
    _WRONG_BACKEND,
    BACKENDS,
    BUILTIN_NAMES,
    EXTENDS_KEY,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MASK_READERS,
    MASK_WRITERS,
    MASKED_IGNORED,
    MASKED_READ,
    MASKED_SKIPPED,
    MASKED_WRITTEN,
    META_SUFFIX,
    PARAMS_TARGET,
    PRECISIONS,
    WORKGROUPS_VALUE,
    Backend,
    SourceKind,
)
from graph_format.kernels.manifest import KernelManifest
from graph_format.kernels.scratch import _share_scratch
from graph_format.signatures import F16_SUFFIX, SIGNATURES, SLOTS, SlotInterface


def parse_precision(path: Path, where: str, section: Mapping[str, Any], slot: SlotInterface) -> str:
    """A section's `precision = "f32" | "f16"` ("f32" when absent). "f16" says the kernel
    computes in f16 arithmetic, not only loads and stores f16, so it belongs to an f16
    slot (`<slot>_f16`, whose tensors are f16): a kernel of an f32 slot computing in f16
    would round its f32 inputs, which no budget covers.

    Raises:
        KernelManifestError: another value, or "f16" on a slot of f32 tensors (one line
            naming the file and the key).
    """
    value = section.get("precision", PRECISIONS[0])
    key = f"{where}.precision"
    if value not in PRECISIONS:
        raise KernelManifestError(
            path,
            f"expected {' or '.join(repr(p) for p in PRECISIONS)} (the arithmetic the kernel "
            f"computes in), got {_shown(value)}",
            where=key,
        )
    if value != PRECISIONS[0] and not slot.name.endswith(F16_SUFFIX):
        twins = [s for s in SIGNATURES[slot.op].slots if s.endswith(F16_SUFFIX)]
        raise KernelManifestError(
            path,
            f"precision = {value!r} is for a kernel of an f16 slot (of {slot.op}: "
            f"{', '.join(twins) or 'none'}); slot {slot.name} loads and stores f32, and a "
            "kernel rounding its f32 inputs to f16 has no budget",
            where=key,
        )
    return cast(str, value)


class _Parser:
    """Checks one manifest's data; every error names the file and the field."""

    def __init__(self, path: Path, check_files: bool, text: str = "") -> None:
        self.path = path
        self.folder = path.parent
        self.check_files = check_files
        self.text = text

    def fail(self, where: str | None, what: str) -> KernelManifestError:
        return KernelManifestError(self.path, what, where=where)

    def table(self, where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {_shown(value)}")
        return value

    def keys(self, where: str, table: Mapping[str, Any], allowed: Sequence[str]) -> None:
        for key in table:
            if key not in allowed:
                hint = _suggest(key, allowed)
                raise self.fail(
                    f"{where}.{key}" if where else key,
                    f"unknown key {key!r}{hint}; expected one of {', '.join(allowed)}",
                )

    def manifest(self, doc: dict[str, Any]) -> KernelManifest:
        self.check_format(doc)
        self.keys("", doc, ("format", *BACKENDS))
        # The scratch roles each op's sections add, by (backend, op): any section of the
        # op may bind them, so they are known before a section's bindings are checked.
        self.shared = _shared_roles(doc)
        entries: dict[tuple[Backend, str], KernelEntry] = {}
        for backend in BACKENDS:
            entries.update(self.sections(backend, self.table(backend, doc.get(backend, {}))))
        if not entries:
            raise self.fail(None, "names no slot; expected [webgpu.<slot>] or [vulkan.<slot>]")
        self.check_masked_columns(entries)
        return KernelManifest(self.path, _share_scratch(entries))

    def check_format(self, doc: Mapping[str, Any]) -> None:
        """The `format` line: present, and the one this version reads."""
        if "format" not in doc:
            raise self.fail(
                "format", f'missing; the first line must be format = "{MANIFEST_FORMAT}"'
            )
        if doc["format"] != MANIFEST_FORMAT:
            raise self.fail(
                "format",
                f"expected {MANIFEST_FORMAT!r}, got {_shown(doc['format'])} (this version "
                f"reads {MANIFEST_FORMAT} only)",
            )

    def sections(
        self, backend: Backend, sections: Mapping[str, Any]
    ) -> dict[tuple[Backend, str], KernelEntry]:
        """The entries of one backend's sections, each with what it `extends` merged in."""
        for slot in sections:
            if slot not in SLOTS:
                raise self.fail(
                    f"{backend}.{slot}",
                    f"unknown slot {slot!r}{_suggest(slot, SLOTS)}; expected a slot of "
                    "`parity list` (graph_format/ops/*.toml)",
                )
        entries: dict[tuple[Backend, str], KernelEntry] = {}
        resolved: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
        for slot in sections:
            section, inherited = self.extended(backend, sections, slot, resolved, ())
            try:
                entries[(backend, slot)] = self.entry(backend, SLOTS[slot], section)
            except KernelManifestError as err:
                raise _inherited(err, f"{backend}.{slot}.", inherited) from None
        return entries

    def check_masked_columns(self, entries: Mapping[tuple[Backend, str], KernelEntry]) -> None:
        """A softmax that reads the masked columns runs only after qk kernels writing them:
        every qk slot the manifest replaces on that backend says so, and one at least (a qk
        precision left to the project is refused per graph: `masked_columns_unwritten`)."""
        for (backend, slot), entry in entries.items():
            if slot not in MASK_READERS or entry.masked_columns != MASKED_READ:
                continue
            replaced = [w for w in MASK_WRITERS if (backend, w) in entries]
            for writer in replaced or MASK_WRITERS[:1]:
                found = entries.get((backend, writer))
                if found is None or found.masked_columns != MASKED_WRITTEN:
                    runs = f"{backend}.{writer}" if found else f"the project's {writer} kernel"
                    raise self.fail(
                        f"{backend}.{slot}.masked_columns",
                        f"{MASKED_READ!r}: the softmax reads the masked columns of each "
                        f"scores row, which {runs} does not write (only its masked_columns = "
                        f'"{MASKED_WRITTEN}" does); replace {writer} on {backend} with a '
                        f'kernel that writes them and says masked_columns = "{MASKED_WRITTEN}", '
                        "or read only the unmasked columns",
                    )

    def extended(
        self,
        backend: Backend,
        sections: Mapping[str, Any],
        slot: str,
        resolved: dict[str, tuple[dict[str, Any], dict[str, str]]],
        chain: tuple[str, ...],
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Section `slot` with what it `extends` merged in, and where each inherited key
        (`file`, `params.n_rows`) comes from (the slot of the section that wrote it).

        The section named by `extends` (of the same backend, itself resolved first) gives
        every key; the section's own keys replace them, except that the member tables
        (`params`, `push`, `spec`, `overrides`, `bindings`) merge member by member and a
        source key (`file`, `glsl`, `spirv`) replaces every inherited source key.
        """
        if slot in resolved:
            return resolved[slot]
        section = self.table(f"{backend}.{slot}", sections[slot])
        if EXTENDS_KEY not in section:
            resolved[slot] = (section, {})
            return resolved[slot]
        path = (*chain, slot)
        named = _extended_section(self.path, self.text, backend, sections, path)
        base, base_from = self.extended(backend, sections, named, resolved, path)
        resolved[slot] = _merged(backend, section, named, base, base_from)
        return resolved[slot]

    def entry(self, backend: Backend, slot: SlotInterface, section: Any) -> KernelEntry:
        where = f"{backend}.{slot.name}"
        section = self.table(where, section)
        source, kind = self.source(backend, where, section)
        entry_point = section.get("entry", "main")
        if not isinstance(entry_point, str) or not entry_point.isidentifier():
            raise self.fail(
                f"{where}.entry", f"expected a function name, got {_shown(entry_point)}"
            )
        overrides = self.exprs(where, "overrides", section, slot) if backend == "webgpu" else {}
        spec = (
            {_name_or_index(k): e for k, e in self.exprs(where, "spec", section, slot).items()}
            if backend == "vulkan"
            else {}
        )
        padding = section.get("padding", [])
        if not isinstance(padding, list) or not all(isinstance(p, str) for p in padding):
            raise self.fail(
                f"{where}.padding", f"expected a list of member names, got {_shown(padding)}"
            )
        # In this order, the dispatches last: a section with several errors is told the
        # same first one as ever.
        fold = self.flag(where, section, "fold")
        exact = self.flag(where, section, "exact")
        requires = self.requires(where, section, slot)
        adapter = (
            self.adapter(f"{where}.adapter", section["adapter"]) if "adapter" in section else None
        )
        defines = self.defines(f"{where}.defines", section, kind)
        scratch = self.scratch(backend, where, section, slot)
        masked = self.masked_columns(where, section, slot)
        precision = parse_precision(self.path, where, section, slot)
        return KernelEntry(
            backend=backend,
            slot=slot.name,
            source=source,
            kind=kind,
            dispatches=self.dispatches(backend, where, section, slot, fold=fold),
            entry=entry_point,
            overrides=overrides if backend == "webgpu" else {},
            spec=spec if backend == "vulkan" else {},
            padding=tuple(padding),
            fold=fold,
            requires=requires,
            adapter=adapter,
            exact=exact,
            defines=defines,
            scratch=scratch,
            masked_columns=masked,
            precision=precision,
        )

    def source(
        self, backend: Backend, where: str, section: Mapping[str, Any]
    ) -> tuple[Path, SourceKind]:
        """The section's keys checked (another backend's key named as such), and its one
        shader file with its kind."""
        for key in section:
            if (backend, key) in _WRONG_BACKEND:
                raise self.fail(
                    f"{where}.{key}", f"not a {backend} key: {_WRONG_BACKEND[(backend, key)]}"
                )
        self.keys(where, section, _SECTION_KEYS[backend])
        given = [k for k in _SOURCE_KEYS[backend] if k in section]
        if len(given) != 1:
            keys = " or ".join(f"{k} = ..." for k in _SOURCE_KEYS[backend])
            raise self.fail(
                where,
                f"expected exactly one of {keys}, got "
                + (" and ".join(given) if given else "none"),
            )
        source_key = given[0]
        source = self.file(f"{where}.{source_key}", section[source_key])
        return source, "wgsl" if source_key == "file" else cast(SourceKind, source_key)

    def flag(self, where: str, section: Mapping[str, Any], key: str) -> bool:
        """A true/false key of the section (false when absent)."""
        value = section.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", f"expected true or false, got {_shown(value)}")
        return value

    def requires(
        self, where: str, section: Mapping[str, Any], slot: SlotInterface
    ) -> tuple[Expression, ...]:
        """The section's `requires` conditions."""
        requires = section.get("requires", [])
        if not isinstance(requires, list):
            raise self.fail(
                f"{where}.requires", f"expected a list of conditions, got {_shown(requires)}"
            )
        return tuple(
            self.expr(f"{where}.requires[{i}]", text, slot, condition=True)
            for i, text in enumerate(requires)
        )

    def dispatches(
        self,
        backend: Backend,
        where: str,
        section: Mapping[str, Any],
        slot: SlotInterface,
        *,
        fold: bool,
    ) -> tuple[KernelDispatch, ...]:
        """The section's dispatch, or its `dispatch_list` (each inheriting the section's
        keys); a folded kernel's counts are 1-D."""
        shared = self.dispatch(backend, where, section, slot, fallback=None)
        if "dispatch_list" in section:
            items = section["dispatch_list"]
            if not isinstance(items, list) or not items:
                raise self.fail(
                    f"{where}.dispatch_list",
                    f"expected [[{where}.dispatch_list]] tables, one per dispatch, got "
                    f"{_shown(items)}",
                )
            dispatches = tuple(
                self.dispatch(
                    backend,
                    f"{where}.dispatch_list[{i}]",
                    self.table(f"{where}.dispatch_list[{i}]", item),
                    slot,
                    fallback=shared,
                    keys=_DISPATCH_KEYS[backend],
                )
                for i, item in enumerate(items)
            )
        else:
            dispatches = (shared,)
        for i, d in enumerate(dispatches):
            if fold and isinstance(d.count, tuple):
                index = f".dispatch_list[{i}]" if "dispatch_list" in section else ""
                raise self.fail(
                    f"{where}{index}.dispatch",
                    "fold = true folds a 1-D count; an [x, y, z] grid is dispatched as written",
                )
        return dispatches

    def scratch(
        self, backend: Backend, where: str, section: Mapping[str, Any], slot: SlotInterface
    ) -> dict[str, Expression]:
        """`scratch.<role> = "<bytes>"`: a scratch role of the op resized, or a new one."""
        sized = self.exprs(where, "scratch", section, slot)
        where = f"{where}.scratch"
        op = SIGNATURES[slot.op]
        own = sorted(_op_roles(slot.op) - set(op.tensors))
        for role in sized:
            if role in op.tensors or role == PARAMS_TARGET or not role.isidentifier():
                what = (
                    f"a tensor of op {slot.op}, which the graph sizes"
                    if role in op.tensors
                    else "not a role name"
                )
                raise self.fail(
                    f"{where}.{role}",
                    f"{role!r} is {what}; expected a scratch role of the op "
                    f"({', '.join(own) or 'none'}) or a new name",
                )
            if role not in slot.tensors and role in own:
                raise self.fail(
                    f"{where}.{role}",
                    f"{role!r} is a scratch role of other slots of {slot.op}, not of "
                    f"{slot.name} (its roles: {', '.join(slot.tensors)}); size it in the "
                    "section of a slot that binds it",
                )
        return sized

    def masked_columns(
        self, where: str, section: Mapping[str, Any], slot: SlotInterface
    ) -> str | None:
        """`masked_columns`: what a causal qk kernel writes, or a softmax reads."""
        if "masked_columns" not in section:
            return None
        value = section["masked_columns"]
        where = f"{where}.masked_columns"
        if slot.name in MASK_WRITERS:
            allowed = (MASKED_WRITTEN, MASKED_SKIPPED)
        elif slot.name in MASK_READERS:
            allowed = (MASKED_READ, MASKED_IGNORED)
        else:
            raise self.fail(
                where,
                f"slot {slot.name} has no masked columns; the key belongs to the causal "
                f"attention's qk ({', '.join(MASK_WRITERS)}) and softmax "
                f"({', '.join(MASK_READERS)}) sections",
            )
        if value not in allowed:
            raise self.fail(
                where, f"expected {' or '.join(repr(a) for a in allowed)}, got {_shown(value)}"
            )
        return cast(str, value)

    def dispatch(
        self,
        backend: Backend,
        where: str,
        table: Mapping[str, Any],
        slot: SlotInterface,
        *,
        fallback: KernelDispatch | None,
        keys: Sequence[str] | None = None,
    ) -> KernelDispatch:
        """A dispatch from `table`'s keys; a split's entry inherits the section's."""
        if keys is not None:
            self.keys(where, table, keys)
        bindings = dict(fallback.bindings) if fallback else {}
        bindings.update(self.bindings(backend, where, table, slot))
        params = dict(fallback.params) if fallback else {}
        params.update(self.exprs(where, "params", table, slot))
        push = dict(fallback.push) if fallback else {}
        if backend == "vulkan":
            push.update(self.exprs(where, "push", table, slot))
        if "dispatch" in table:
            count = self.count(f"{where}.dispatch", table["dispatch"], slot)
        elif fallback is not None:
            count = fallback.count
        else:
            count = Expression.compile(WORKGROUPS_VALUE)
        return KernelDispatch(bindings, params, push, count)

    def count(
        self, where: str, value: Any, slot: SlotInterface
    ) -> Expression | tuple[Expression, Expression, Expression]:
        if isinstance(value, list):
            if len(value) != 3:
                raise self.fail(
                    where, f"expected one expression or [x, y, z], got {len(value)} items"
                )
            x, y, z = (self.expr(f"{where}[{i}]", v, slot) for i, v in enumerate(value))
            return (x, y, z)
        return self.expr(where, value, slot)

    def bindings(
        self, backend: Backend, where: str, table: Mapping[str, Any], slot: SlotInterface
    ) -> dict[str | int, str]:
        where = f"{where}.bindings"
        raw = self.table(where, table.get("bindings", {}))
        metas = SIGNATURES[slot.op].tensors
        shared = sorted(self.shared.get((backend, slot.op), ()))
        targets = [*slot.tensors, *shared, PARAMS_TARGET]
        if backend == "vulkan":
            targets += [t + META_SUFFIX for t in metas]
        out: dict[str | int, str] = {}
        for key, target in raw.items():
            if not isinstance(target, str) or target not in targets:
                roles = ", ".join([*slot.tensors, *shared])
                expected = f"a role of slot {slot.name} ({roles}) or 'params'"
                if backend == "vulkan":
                    expected += f", or '<tensor>.meta' of an op tensor ({', '.join(metas)})"
                elif isinstance(target, str) and target.endswith(META_SUFFIX):
                    expected += " (WebGPU kernels have no metadata buffers)"
                raise self.fail(f"{where}.{key}", f"expected {expected}, got {_shown(target)}")
            out[_name_or_index(key)] = target
        return out

    def exprs(
        self, where: str, key: str, table: Mapping[str, Any], slot: SlotInterface
    ) -> dict[str, Expression]:
        raw = self.table(f"{where}.{key}", table.get(key, {}))
        return {name: self.expr(f"{where}.{key}.{name}", text, slot) for name, text in raw.items()}

    def expr(
        self, where: str, text: Any, slot: SlotInterface, *, condition: bool = False
    ) -> Expression:
        try:
            expr = Expression.compile(text, condition=condition)
        except ExpressionError as err:
            raise self.fail(where, str(err)) from None
        for name in sorted(expr.names):
            if name not in slot.values and name not in BUILTIN_NAMES:
                raise self.fail(
                    where,
                    f"{expr.text!r} reads {name!r}{_suggest(name, slot.values)}, which slot "
                    f"{slot.name} does not offer; expected one of {', '.join(slot.values)} "
                    f"(or {', '.join(BUILTIN_NAMES)})",
                )
        return expr

    def file(self, where: str, value: Any, *, suffix: str | None = None) -> Path:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"expected a file name, got {_shown(value)}")
        path = self.folder / value
        if Path(value).is_absolute() or ".." in Path(value).parts:
            raise self.fail(where, f"expected a path inside the manifest's folder, got {value!r}")
        if suffix is not None and path.suffix != suffix:
            raise self.fail(where, f"expected a {suffix} file, got {value!r}")
        if self.check_files and not path.is_file():
            raise self.fail(where, f"no file {value!r} in {self.folder}")
        return path

    def defines(self, where: str, section: Mapping[str, Any], kind: SourceKind) -> dict[str, str]:
        """A GLSL kernel's preprocessor macros, each as the text glslc's -D gives it."""
        if "defines" not in section:
            return {}
        raw = self.table(where, section["defines"])
        if kind != "glsl":
            raise self.fail(
                where,
                "defines are passed to glslc -D when it compiles a glsl = ... kernel; a SPIR-V "
                "module is compiled already (build it with them)",
            )
        out: dict[str, str] = {}
        for name, value in raw.items():
            at = f"{where}.{name}"
            if not _MACRO.fullmatch(name):
                raise self.fail(at, f"expected a macro name ([A-Za-z_][A-Za-z0-9_]*), got {name!r}")
            if name.startswith("GL_") or "__" in name:
                raise self.fail(at, f"{name!r} is reserved in GLSL (names with GL_ or __)")
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise self.fail(
                    at, f"expected a string, an integer or a float, got {_shown(value)}"
                )
            text = value if isinstance(value, str) else repr(value)
            if "\n" in text or "\r" in text:
                raise self.fail(at, f"expected one line of macro text, got {text!r}")
            out[name] = text
        return out

    def adapter(self, where: str, value: Any) -> AdapterRef:
        module, _, name = value.partition(":") if isinstance(value, str) else ("", "", "")
        if not module or not name.isidentifier():
            raise self.fail(where, f'expected "<module>.py:<Class>", got {_shown(value)}')
        return AdapterRef(self.file(where, module, suffix=".py"), name)


# A preprocessor macro's name, as GLSL's grammar has it.
_MACRO = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _shared_roles(doc: Mapping[str, Any]) -> dict[tuple[Backend, str], set[str]]:
    """The scratch roles each op's sections add (roles of no slot of the op), by
    (backend, op)."""
    shared: dict[tuple[Backend, str], set[str]] = {}
    for backend in BACKENDS:
        sections = doc.get(backend, {})
        for slot, section in sections.items() if isinstance(sections, dict) else ():
            declared = section.get("scratch") if isinstance(section, dict) else None
            if slot in SLOTS and isinstance(declared, dict):
                roles = shared.setdefault((backend, SLOTS[slot].op), set())
                roles.update(r for r in declared if r not in _op_roles(SLOTS[slot].op))
    return shared


def _name_or_index(key: str) -> str | int:
    """A binding or spec-constant key: a decimal number is an index (TOML keys are text)."""
    return int(key) if key.isdecimal() else key


def parse_manifest(text: str, path: Path, *, check_files: bool = True) -> KernelManifest:
    """The manifest in `text`, read from `path` (its folder holds the files it names).

    Args:
        check_files: check that every named file exists (off for a manifest read out of a
            bundle's index before its files are unpacked).

    Raises:
        KernelManifestError: bad TOML (with its line), an old or unknown format, an unknown
            key, backend or slot, a role or value the slot lacks, a bad expression, a missing
            file. The message names the file and the field.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        found = re.search(r"at line (\d+)", str(err))
        raise KernelManifestError(
            path, f"not valid TOML: {err}", line=int(found.group(1)) if found else None
        ) from None
    return _Parser(path, check_files, text).manifest(doc)


def load_manifest(location: Path) -> KernelManifest:
    """The manifest of a kernel folder (its `kernels.toml`), or of a manifest file.

    Raises:
        KernelManifestError: unreadable, or as `parse_manifest`.
    """
    path = location / MANIFEST_NAME if location.is_dir() else location
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise KernelManifestError(path, f"cannot read the manifest: {reason}") from None
    return parse_manifest(text, path)
