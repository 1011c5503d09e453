"""WGSL reflection: what a kernel declares (entry points, bindings, struct layouts, overrides).

A maintained parser reads the source: the npm package `wgsl_reflect` (version pinned in
`wgsl_reflect.mjs`, installed by scripts/setup.sh into `.cache/node`), run by node through
the shim `wgsl_reflect.mjs` beside this module. The shim adds what the package lacks
(expressions as attribute arguments, evaluated workgroup sizes and override defaults, `@id`
ids); docs/reflection.md lists each gap.

Every struct layout the package computes is checked here against WGSL's memory layout rules
(alignment and size of each type, `@align`/`@size`, struct size rounded to its alignment);
a disagreement is an error, never silently used. The member alignments in the result come
from the same rules (the package reports none).

Results are cached by the sha256 of the source (with the shim's and the package's version):
in memory for the process and on disk in `$VULKAN_PARITY_REFLECT_CACHE/wgsl` (default
`.cache/reflect/wgsl` in the checkout), so a second reflection spawns no process. Threads may
reflect at once: a source one thread is reflecting is waited for, never reflected twice.
`warm_wgsl` reflects a whole folder in one node process (a cold start would otherwise
start one per kernel as graphs first need them).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph_format import BackendUnavailable, KernelBuildError
from webgpu_backend import shaders

ROOT = Path(__file__).resolve().parents[1]
SHIM = Path(__file__).with_name("wgsl_reflect.mjs")
# Where scripts/setup.sh installs the npm package (ignored by git).
NODE_PREFIX = ROOT / ".cache" / "node"
# How long one node process may take for a batch of sources (a cold parse is ~0.1 s each).
TIMEOUT_S = 300


class ReflectionUnavailable(BackendUnavailable):
    """node or the pinned npm package `wgsl_reflect` is missing; the message says what to do."""


class WgslReflectionError(KernelBuildError):
    """wgsl_reflect could not read a WGSL source, or its layout broke WGSL's rules.

    Attributes:
        line: 1-based line of the fault, when the parser says.
        column: 1-based column of the fault, when known.
        message: the tool's whole message.
    """

    def __init__(
        self, name: str, message: str, line: int | None = None, column: int | None = None
    ) -> None:
        self.line = line
        self.column = column
        self.message = message
        super().__init__("webgpu", Path(name).stem, name, message)

    def _text(self) -> str:
        where = self.shader
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        needed = f" (needed by op {self.op!r})" if self.op else ""
        return f"webgpu: {where}: cannot reflect kernel {self.kernel!r}{needed}:\n{self.compiler}"


@dataclass(frozen=True)
class WgslType:
    """A WGSL type with its layout (WGSL's alignment and size rules).

    `name` is the canonical spelling: `f32`, `vec4<f16>`, `mat3x3<f32>`, `atomic<u32>`,
    `array<vec4<f32>>` (runtime-sized), `array<u32, 16>`, or a struct's name.
    """

    kind: str  # "scalar" | "vector" | "matrix" | "array" | "atomic" | "struct" | "other"
    name: str
    size: int | None  # bytes; None for a runtime-sized array (or an unknown "other" type)
    align: int | None  # None for "other" types (textures, samplers)
    element: WgslType | None = None  # vector/matrix component, array element, atomic's type
    count: int | None = None  # vector width, matrix columns, array length (None: runtime)
    rows: int | None = None  # matrix rows
    stride: int | None = None  # array element stride
    members: tuple[StructMember, ...] = ()  # struct members, in declaration order

    def member(self, name: str) -> StructMember:
        """The struct member called `name`."""
        for member in self.members:
            if member.name == name:
                return member
        raise KeyError(
            f"struct {self.name} has no member {name!r}: {[m.name for m in self.members]}"
        )


@dataclass(frozen=True)
class StructMember:
    """One member of a struct: where it lies and how big it is."""

    name: str
    type: WgslType
    offset: int
    size: int | None  # None for a runtime-sized array (the last member of a storage struct)
    align: int


@dataclass(frozen=True)
class ResourceBinding:
    """A module-scope resource variable (`@group(g) @binding(b) var<...> name: type`)."""

    group: int
    binding: int
    name: str
    resource: str  # "uniform" | "storage" | "texture" | "sampler" | "storage_texture" | ...
    access: str | None  # "read" | "read_write" for buffers
    type: WgslType
    line: int | None

    @property
    def kind(self) -> str | None:
        """How a bind group layout sees it: "uniform", "storage_ro", "storage_rw" (None for
        textures and samplers)."""
        if self.resource == "uniform":
            return "uniform"
        if self.resource == "storage":
            return "storage_rw" if self.access == "read_write" else "storage_ro"
        return None

    @property
    def element(self) -> WgslType | None:
        """The element type of an array binding (`array<vec4<f32>>` -> `vec4<f32>`)."""
        return self.type.element if self.type.kind == "array" else None

    @property
    def min_binding_size(self) -> int | None:
        """The smallest buffer binding the kernel accepts: the type's size, or for a
        runtime-sized array its fixed part plus one element (what wgpu checks)."""
        t = self.type
        if t.kind == "array" and t.count is None:
            return t.stride
        if t.kind == "struct" and t.members and t.members[-1].size is None:
            last = t.members[-1]
            return _round_up(t.align or 1, last.offset + (last.type.stride or 0))
        return t.size


@dataclass(frozen=True)
class Override:
    """A pipeline-overridable constant."""

    name: str
    type: str | None  # "u32" | "i32" | "f32" | "f16" | "bool"; None: inferred from an expression
    id: int | None  # from @id(n)
    default: int | float | bool | None  # evaluated default; None when there is none
    default_text: str | None  # the initializer as written, e.g. "block_w * 2u"
    line: int | None

    @property
    def key(self) -> str:
        """The key a pipeline's `constants` takes for it: its id when it has one, else its
        name (the WebGPU rule)."""
        return str(self.id) if self.id is not None else self.name

    @property
    def required(self) -> bool:
        """Whether a pipeline must pass a value (no default)."""
        return self.default_text is None


@dataclass(frozen=True)
class WorkgroupDim:
    """One dimension of `@workgroup_size(...)`."""

    text: str | None  # as written ("wg_size", "64u", "TILE * 2u"); None when omitted
    value: int | None  # evaluated with every override at its default (None: not evaluable)
    overrides: tuple[str, ...]  # overrides it depends on; () for a fixed size


@dataclass(frozen=True)
class EntryPoint:
    """An entry point and what it uses."""

    name: str
    stage: str  # "compute" | "vertex" | "fragment"
    line: int | None
    workgroup_size: tuple[WorkgroupDim, WorkgroupDim, WorkgroupDim] | None
    resources: tuple[tuple[int, int], ...]  # (group, binding) of each resource it uses
    overrides: tuple[str, ...]  # names of the overrides it uses


@dataclass(frozen=True)
class WgslReflection:
    """Everything reflection knows about one WGSL source."""

    name: str  # the file (or label) it was read from
    sha256: str  # of the source text
    tool: str  # e.g. "wgsl_reflect 1.6.0"
    enables: tuple[str, ...]  # `enable` directives, e.g. ("f16",)
    entry_points: tuple[EntryPoint, ...]
    bindings: tuple[ResourceBinding, ...]  # sorted by (group, binding)
    overrides: tuple[Override, ...]  # in declaration order
    structs: tuple[WgslType, ...]  # every struct declared, with its layout

    @property
    def uses_f16(self) -> bool:
        """Whether the source enables f16 (the device needs the shader-f16 feature)."""
        return "f16" in self.enables

    def entry_point(self, name: str | None = None) -> EntryPoint:
        """The compute entry point `name`, or the only one when `name` is None."""
        compute = [e for e in self.entry_points if e.stage == "compute"]
        if name is None:
            if len(compute) != 1:
                raise KeyError(
                    f"{self.name}: expected one compute entry point, found "
                    f"{[e.name for e in compute]}; name the one to use"
                )
            return compute[0]
        for entry in compute:
            if entry.name == name:
                return entry
        raise KeyError(f"{self.name}: no compute entry point {name!r}: {[e.name for e in compute]}")

    def binding(self, binding: int, group: int = 0) -> ResourceBinding:
        """The resource at (`group`, `binding`)."""
        for b in self.bindings:
            if (b.group, b.binding) == (group, binding):
                return b
        declared = [(b.group, b.binding, b.name) for b in self.bindings]
        raise KeyError(f"{self.name}: nothing bound at group {group} binding {binding}: {declared}")

    def struct(self, name: str) -> WgslType:
        """The struct called `name`."""
        for s in self.structs:
            if s.name == name:
                return s
        raise KeyError(f"{self.name}: no struct {name!r}: {[s.name for s in self.structs]}")

    def override(self, name: str) -> Override:
        """The override called `name`."""
        for o in self.overrides:
            if o.name == name:
                return o
        raise KeyError(f"{self.name}: no override {name!r}: {[o.name for o in self.overrides]}")


# --- WGSL's memory layout rules (https://www.w3.org/TR/WGSL/#memory-layouts) ---------------

_SCALARS = {"f32": 4, "i32": 4, "u32": 4, "f16": 2, "bool": 4}


def _round_up(align: int, n: int) -> int:
    return -(-n // align) * align


def _vector_layout(count: int, component: int) -> tuple[int, int]:
    """(align, size) of vecN<T> with a T of `component` bytes."""
    return (2 if count == 2 else 4) * component, count * component


class _Builder:
    """Turns the shim's JSON into the data model, checking the package's layouts."""

    def __init__(self, name: str, raw: dict[str, Any]) -> None:
        self.name = name
        self.raw_structs = {s["name"]: s for s in raw["structs"]}
        self.structs: dict[str, WgslType] = {}

    def fail(self, message: str, line: int | None = None) -> WgslReflectionError:
        return WgslReflectionError(self.name, message, line)

    def type(self, t: dict[str, Any]) -> WgslType:
        kind = t["kind"]
        if kind == "scalar":
            size = _SCALARS.get(t["name"])
            return WgslType("scalar", t["name"], size, size)
        if kind == "atomic":
            element = self.type(t["element"])
            return WgslType(
                "atomic", f"atomic<{element.name}>", element.size, element.align, element
            )
        if kind == "vector":
            element = self.type(t["element"])
            align, size = _vector_layout(t["count"], element.size or 0)
            name = f"vec{t['count']}<{element.name}>"
            return WgslType("vector", name, size, align, element, count=t["count"])
        if kind == "matrix":
            element = self.type(t["element"])
            columns, rows = t["columns"], t["rows"]
            align, column_size = _vector_layout(rows, element.size or 0)
            size = columns * _round_up(align, column_size)
            name = f"mat{columns}x{rows}<{element.name}>"
            return WgslType("matrix", name, size, align, element, count=columns, rows=rows)
        if kind == "array":
            element = self.type(t["element"])
            if element.size is None or element.align is None:
                raise self.fail(f"array of {element.name}: its element has no fixed size")
            stride = _round_up(element.align, element.size)
            if t["stride"] != stride:
                raise self.fail(
                    f"wgsl_reflect gives array<{element.name}> a stride of {t['stride']}; "
                    f"WGSL's layout rules give {stride}"
                )
            count = t["count"]
            name = f"array<{element.name}>" if count is None else f"array<{element.name}, {count}>"
            size = None if count is None else count * stride
            return WgslType("array", name, size, element.align, element, count=count, stride=stride)
        if kind == "struct":
            return self.struct(t["name"])
        return WgslType("other", t["name"], t.get("size"), None)

    def struct(self, name: str) -> WgslType:
        if name in self.structs:
            return self.structs[name]
        raw = self.raw_structs[name]
        members: list[StructMember] = []
        end = 0
        struct_align = 1
        for m in raw["members"]:
            t = self.type(m["type"])
            if t.align is None:
                raise self.fail(f"struct {name} member {m['name']!r}: {t.name} has no layout")
            align = m["align_attribute"] or t.align
            size = m["size_attribute"] or t.size
            offset = _round_up(align, end)
            if m["offset"] != offset or (size is not None and m["size"] != size):
                raise self.fail(
                    f"wgsl_reflect lays out struct {name} member {m['name']!r} ({t.name}) at "
                    f"offset {m['offset']}, size {m['size']}; WGSL's layout rules give offset "
                    f"{offset}, size {size}",
                    raw["line"],
                )
            members.append(StructMember(m["name"], t, offset, size, align))
            end = offset + (size or 0)
            struct_align = max(struct_align, align)
        size = _round_up(struct_align, end)
        if raw["size"] != size or raw["align"] != struct_align:
            raise self.fail(
                f"wgsl_reflect gives struct {name} size {raw['size']}, align {raw['align']}; "
                f"WGSL's layout rules give size {size}, align {struct_align}",
                raw["line"],
            )
        self.structs[name] = WgslType("struct", name, size, struct_align, members=tuple(members))
        return self.structs[name]


def _build(name: str, sha: str, tool: str, raw: dict[str, Any]) -> WgslReflection:
    builder = _Builder(name, raw)
    structs = tuple(builder.struct(s["name"]) for s in raw["structs"])
    bindings = tuple(
        sorted(
            (
                ResourceBinding(
                    b["group"],
                    b["binding"],
                    b["name"],
                    b["resource"],
                    b["access"],
                    builder.type(b["type"]),
                    b["line"],
                )
                for b in raw["bindings"]
            ),
            key=lambda b: (b.group, b.binding),
        )
    )
    overrides = tuple(
        Override(o["name"], o["type"], o["id"], o["default"], o["default_text"], o["line"])
        for o in raw["overrides"]
    )
    entry_points = []
    for e in raw["entry_points"]:
        size = e["workgroup_size"]
        dims: tuple[WorkgroupDim, WorkgroupDim, WorkgroupDim] | None = None
        if size is not None:  # the shim always gives the three dimensions of a compute entry
            x, y, z = (WorkgroupDim(d["text"], d["value"], tuple(d["overrides"])) for d in size)
            dims = (x, y, z)
        entry_points.append(
            EntryPoint(
                e["name"],
                e["stage"],
                e["line"],
                dims,
                tuple(sorted({(g, b) for g, b in e["resources"]})),
                tuple(dict.fromkeys(e["overrides"])),
            )
        )
    return WgslReflection(
        name, sha, tool, tuple(raw["enables"]), tuple(entry_points), bindings, overrides, structs
    )


# --- running the shim, and the caches -------------------------------------------------------


def cache_dir() -> Path:
    """Where reflections are kept: $VULKAN_PARITY_REFLECT_CACHE/wgsl, or .cache/reflect/wgsl."""
    env = os.environ.get("VULKAN_PARITY_REFLECT_CACHE")
    return (Path(env) if env else ROOT / ".cache" / "reflect") / "wgsl"


@functools.cache  # node on PATH: the process's environment
def _node() -> str:
    exe = shutil.which("node")
    if exe is None:
        raise ReflectionUnavailable(
            "webgpu: WGSL reflection needs node (Debian package 'nodejs') and the npm package "
            "wgsl_reflect; run scripts/setup.sh"
        )
    return exe


def _package_json() -> Path:
    """The installed wgsl_reflect's package.json (read when asked: tests move NODE_PREFIX)."""
    return NODE_PREFIX / "node_modules" / "wgsl_reflect" / "package.json"


@functools.cache  # the process's environment, checked once
def require_tool() -> None:
    """Raise ReflectionUnavailable, saying what is missing, unless node and the pinned npm
    package are both installed and node runs the shim (once per process: an empty request):
    every WebGPU kernel is bound through its reflection, so a runtime without them could
    load no graph (checked when a runtime opens, so that a run refuses at set-up, not as a
    failure of every op)."""
    package = _package_json()
    missing = [
        *(["node (Debian package 'nodejs')"] if shutil.which("node") is None else []),
        *([f"the npm package wgsl_reflect in {NODE_PREFIX}"] if not package.exists() else []),
    ]
    if missing:
        raise ReflectionUnavailable(
            f"webgpu: WGSL reflection needs {' and '.join(missing)}; run scripts/setup.sh "
            "(it installs both)"
        )
    _run_shim([])


@functools.cache  # the installed shim and package: the process's environment
def _tool_key() -> str:
    """What besides the source decides a reflection: the shim and the installed package."""
    package = _package_json()
    version = json.loads(package.read_text())["version"] if package.exists() else "missing"
    return hashlib.sha256(SHIM.read_bytes() + version.encode()).hexdigest()[:16]


# sha256 of a source -> its reflection (named after the first file it was read from), or the
# parser's refusal (message, line, column). Kept for the process: a pure function of the
# source text (and the shim and package, fixed for the process), the same for any runtime
# (docs/design.md §2.2).
_MEMORY: dict[str, WgslReflection] = {}
_REFUSED: dict[str, tuple[str, int | None, int | None]] = {}
# Sources a thread is reflecting now (sha256 -> set once done), and the lock over these maps.
_IN_FLIGHT: dict[str, threading.Event] = {}
_LOCK = threading.Lock()


def _run_shim(codes: Sequence[str]) -> tuple[str, list[dict[str, Any]]]:
    """(tool, one raw result per source) from one node process."""
    request = json.dumps({"sources": [{"code": code} for code in codes]})
    modules = NODE_PREFIX / "node_modules"
    proc = subprocess.run(
        [_node(), str(SHIM), str(modules)],
        input=request,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        # The shim answers every source it can read, a refusal included: exiting with a
        # failure is node or its install failing (a missing module node itself needs).
        raise ReflectionUnavailable(
            f"webgpu: WGSL reflection: node could not run {SHIM.name} (exit status "
            f"{proc.returncode}): {' '.join(proc.stderr.split())[:500]}; run scripts/setup.sh"
        )
    answer = json.loads(proc.stdout)
    if "setup_error" in answer:
        raise ReflectionUnavailable(
            f"webgpu: WGSL reflection: {answer['setup_error']}; run scripts/setup.sh "
            f"(it runs `npm install --prefix {NODE_PREFIX} wgsl_reflect@<the version pinned "
            f"in {SHIM.name}>`)"
        )
    return f"{answer['tool']} {answer['version']}", answer["results"]


def reflect_wgsl_many(sources: Iterable[tuple[str, str]]) -> list[WgslReflection]:
    """Reflections of several (name, source) pairs; the uncached ones in one node process.

    Raises:
        WgslReflectionError: for the first source that cannot be reflected, naming it.
        ReflectionUnavailable: node or the npm package is missing.
    """
    items = list(sources)
    shas = [hashlib.sha256(code.encode()).hexdigest() for _, code in items]
    while True:  # until every source is reflected, here or by another thread
        with _LOCK:
            waiting = {_IN_FLIGHT[sha] for sha in shas if sha in _IN_FLIGHT}
            mine = {
                sha: code
                for (_, code), sha in zip(items, shas, strict=True)
                if sha not in _MEMORY and sha not in _REFUSED and sha not in _IN_FLIGHT
            }
            for sha in mine:
                _IN_FLIGHT[sha] = threading.Event()
        if mine:
            try:
                _reflect_pending(mine, dict(zip(shas, (name for name, _ in items), strict=True)))
            finally:
                with _LOCK:
                    for sha in mine:
                        _IN_FLIGHT.pop(sha).set()
        for event in waiting:
            event.wait()
        if not waiting:
            break
    out = []
    for (name, _), sha in zip(items, shas, strict=True):
        if sha in _REFUSED:
            raise WgslReflectionError(name, *_REFUSED[sha])
        found = _MEMORY[sha]
        out.append(found if found.name == name else dataclasses.replace(found, name=name))
    return out


def _reflect_pending(pending: dict[str, str], names: dict[str, str]) -> None:
    """Reflect the sources `pending` (sha256 -> code): from the disk cache, or in one node
    process; each result goes to _MEMORY or _REFUSED."""
    disk = cache_dir()
    run: dict[str, str] = {}
    for sha, code in pending.items():
        cached = disk / f"{sha[:32]}-{_tool_key()}.json"
        if cached.exists():
            stored = json.loads(cached.read_text())
            _MEMORY[sha] = _build(stored["name"], sha, stored["tool"], stored["raw"])
        else:
            run[sha] = code
    if not run:
        return
    tool, results = _run_shim(list(run.values()))
    for sha, raw in zip(run, results, strict=True):
        if "error" in raw:
            error = raw["error"]
            _REFUSED[sha] = (f"{tool}: {error['message']}", error["line"], error["column"])
            continue
        try:
            _MEMORY[sha] = _build(names[sha], sha, tool, raw)
        except WgslReflectionError as error:
            _REFUSED[sha] = (error.message, error.line, error.column)
            continue
        disk.mkdir(parents=True, exist_ok=True)
        target = disk / f"{sha[:32]}-{_tool_key()}.json"
        staged = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        staged.write_text(json.dumps({"name": names[sha], "tool": tool, "raw": raw}))
        os.replace(staged, target)


def warm_wgsl(wgsl_dir: Path | None = None, stems: Sequence[str] | None = None) -> None:
    """Reflect the kernels `<wgsl_dir>/<stem>.wgsl` (default folder: the repo's `wgsl/`;
    default stems: every `.wgsl` there) in one node process, as a graph's kernels are (same
    sources, so the same cache entries).

    A source the parser refuses is skipped: its refusal is kept, and the graph that needs it
    reports it as it would without warming. A missing node or file ends it too: opening the
    runtime, or the graph, says what is wrong.
    """
    root = wgsl_dir or shaders.WGSL_DIR  # read now: a test may point it elsewhere
    if stems is None:
        stems = sorted(p.stem for p in root.glob("*.wgsl"))
    try:
        paths = [root / f"{stem}.wgsl" for stem in dict.fromkeys(stems)]
        reflect_wgsl_many([(str(p), p.read_text()) for p in paths if p.is_file()])
    except (KernelBuildError, BackendUnavailable, OSError, RuntimeError):
        pass  # reported by the graph that needs the kernel, if one does


def reflect_wgsl(source: str, name: str = "<wgsl>") -> WgslReflection:
    """The reflection of WGSL `source`; `name` (its file) labels errors and the result.

    Raises:
        WgslReflectionError: the parser refused the source (with line and column) or its
            layouts broke WGSL's rules.
        ReflectionUnavailable: node or the npm package is missing.
    """
    return reflect_wgsl_many([(name, source)])[0]


def reflect_wgsl_file(path: Path) -> WgslReflection:
    """The reflection of the WGSL file at `path`."""
    return reflect_wgsl(Path(path).read_text(), str(path))
