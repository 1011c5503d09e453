"""SPIR-V reflection: what a compiled kernel declares (descriptors, push constants, spec
constants, local size), for the project's own GLSL and for SPIR-V compiled elsewhere.

Debian's `spirv-cross --reflect` reads the module (installed by scripts/setup.sh). Its JSON
gives descriptor bindings with their block layouts (offsets and strides as the compiler
decorated them, so whatever std140/std430/scalar layout the source used), push constants,
specialization constants and the local size. Two things it leaves out are read from the
module's own words (the SPIR-V binary format is a flat list of instructions):
- debug names: spirv-cross invents `_153`/`_m0` for ids without `OpName` (the project's
  kernels are compiled with `-O`, which strips names); such names are reported as None;
- which specialization constant sets a local-size dimension: a spec id may carry two
  constants (`layout(local_size_x_id = 7)` and `layout(constant_id = 7) const uint N = 32`),
  each with its own default; the local size's default is the one in the `WorkgroupSize`
  composite (or `LocalSizeId` operands).

Results are cached by the sha256 of the module: in memory and on disk in
`$VULKAN_PARITY_REFLECT_CACHE/spirv` (default `.cache/reflect/spirv` in the checkout).

`warm_glsl` compiles and reflects every kernel of a GLSL folder in a pool of threads (glslc
and spirv-cross are processes: threads overlap them), so that a cold start does not pay for
each kernel in turn when a graph first needs it; a kernel it cannot build is left for the
graph that needs it to report (the refusal is kept: no second compile).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vulkan_ref.spirv
from graph_format import BackendUnavailable, KernelBuildError
from vulkan_ref.spirv import GLSL_DIR, compile_glsl, compile_glsl_file

ROOT = Path(__file__).resolve().parents[1]
SPIRV_MAGIC = 0x07230203
TIMEOUT_S = 60


class ReflectionUnavailable(BackendUnavailable):
    """spirv-cross is not installed; the message says what to install."""


class SpirvReflectionError(KernelBuildError):
    """A module spirv-cross could not reflect (or that is not SPIR-V); carries its whole
    message."""

    def __init__(self, name: str, message: str) -> None:
        self.message = message
        super().__init__("vulkan", Path(name).stem, name, message)

    def _text(self) -> str:
        needed = f" (needed by op {self.op!r})" if self.op else ""
        head = f"vulkan: {self.shader}: cannot reflect kernel {self.kernel!r}{needed}"
        return f"{head}:\n{self.compiler}"


@dataclass(frozen=True)
class BlockMember:
    """One member of a UBO, SSBO or push-constant block (or of a struct inside one)."""

    name: str | None  # None when the module has no debug name for it
    type: str  # GLSL spelling: float, uint, uvec4, mat3, float16_t; a struct's name or "struct"
    offset: int
    size: int | None  # bytes up to the end of its last component; None: runtime-sized array
    array: tuple[int, ...] = ()  # array dims, outermost first; 0 is runtime-sized
    array_stride: int | None = None
    matrix_stride: int | None = None
    members: tuple[BlockMember, ...] = ()  # a struct member's own members


@dataclass(frozen=True)
class Block:
    """The layout of a block type."""

    name: str | None  # the block's type name (`OutBuffer`), None when stripped
    size: int  # bytes of its fixed part (a runtime-sized last array counts 0)
    members: tuple[BlockMember, ...]

    def member(self, name: str) -> BlockMember:
        """The member called `name`."""
        for member in self.members:
            if member.name == name:
                return member
        raise KeyError(
            f"block {self.name} has no member {name!r}: {[m.name for m in self.members]}"
        )


@dataclass(frozen=True)
class DescriptorBinding:
    """A descriptor of the entry point."""

    set: int
    binding: int
    name: str | None  # the instance name, None for an anonymous block or stripped names
    kind: str  # "storage_buffer" | "uniform_buffer" | another spirv-cross resource kind
    readonly: bool
    writeonly: bool
    block: Block | None  # None for images and samplers

    @property
    def access(self) -> str:
        """ "read", "write" or "read_write" (a uniform buffer is "read")."""
        if self.kind == "uniform_buffer" or self.readonly:
            return "read"
        return "write" if self.writeonly else "read_write"


@dataclass(frozen=True)
class SpecConstant:
    """A specialization constant (`layout(constant_id = N) const T name = default`)."""

    id: int
    name: str | None
    type: str  # uint, int, float, bool
    default: int | float | bool


@dataclass(frozen=True)
class LocalSizeDim:
    """One dimension of the local size."""

    value: int  # the literal, or the spec constant's default
    spec_id: int | None  # the specialization constant that sets it, if any


@dataclass(frozen=True)
class SpirvReflection:
    """Everything reflection knows about one SPIR-V entry point."""

    name: str  # the file (or label) it was read from
    sha256: str  # of the module's bytes
    entry_point: str
    stage: str  # spirv-cross's mode: "comp", ...
    local_size: tuple[LocalSizeDim, LocalSizeDim, LocalSizeDim]
    bindings: tuple[DescriptorBinding, ...]  # sorted by (set, binding)
    push_constants: Block | None
    spec_constants: tuple[SpecConstant, ...]  # sorted by id; one per id
    has_debug_names: bool  # whether the module kept OpName debug names
    tool: str = field(default="spirv-cross")

    def binding(self, binding: int, set: int = 0) -> DescriptorBinding:
        """The descriptor at (`set`, `binding`)."""
        for b in self.bindings:
            if (b.set, b.binding) == (set, binding):
                return b
        declared = [(b.set, b.binding, b.name) for b in self.bindings]
        raise KeyError(f"{self.name}: no descriptor at set {set} binding {binding}: {declared}")


# --- the module's own words: names, decorations, the WorkgroupSize composite -----------------

_OP_NAME, _OP_MEMBER_NAME, _OP_EXECUTION_MODE_ID = 5, 6, 331
_OP_SPEC_CONSTANT_COMPOSITE, _OP_VARIABLE, _OP_DECORATE = 51, 59, 71
_DECORATION_BUILTIN, _DECORATION_BINDING, _DECORATION_SET = 11, 33, 34
_BUILTIN_WORKGROUP_SIZE, _STORAGE_PUSH_CONSTANT, _MODE_LOCAL_SIZE_ID = 25, 9, 38


@dataclass
class _Words:
    """What reflection needs from the module's instructions."""

    names: dict[int, str] = field(default_factory=dict)
    member_names: dict[tuple[int, int], str] = field(default_factory=dict)
    variables: dict[tuple[int, int], int] = field(default_factory=dict)  # (set, binding) -> id
    push_constant_variables: list[int] = field(default_factory=list)
    local_size_ids: tuple[int, ...] = ()  # ids of the constants that set the local size


def _string(words: tuple[int, ...]) -> str:
    raw = struct.pack(f"<{len(words)}I", *words)
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _module_words(name: str, module: bytes) -> tuple[int, ...]:
    """The module's 32-bit words in its own byte order (the magic number tells which)."""
    if len(module) < 20 or len(module) % 4:
        raise SpirvReflectionError(name, f"not a SPIR-V module: {len(module)} bytes")
    order = "<" if struct.unpack_from("<I", module)[0] == SPIRV_MAGIC else ">"
    if struct.unpack_from(f"{order}I", module)[0] != SPIRV_MAGIC:
        magic = struct.unpack_from("<I", module)[0]
        raise SpirvReflectionError(name, f"not a SPIR-V module: magic 0x{magic:08x}")
    return struct.unpack(f"{order}{len(module) // 4}I", module)


def _instructions(name: str, words: tuple[int, ...]) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(opcode, operands) of each instruction after the 5-word header, in order."""
    at = 5
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if count == 0 or at + count > len(words):
            raise SpirvReflectionError(name, f"malformed SPIR-V: instruction at word {at}")
        yield opcode, words[at + 1 : at + count]
        at += count


@dataclass
class _Scan:
    """One pass over the instructions: what `_Words` keeps, and what resolves it at the end."""

    found: _Words = field(default_factory=_Words)
    sets: dict[int, int] = field(default_factory=dict)  # variable id -> descriptor set
    bindings: dict[int, int] = field(default_factory=dict)  # variable id -> binding
    workgroup_size_id: int | None = None  # the constant decorated BuiltIn WorkgroupSize
    composites: dict[int, tuple[int, ...]] = field(default_factory=dict)  # spec composites

    def take(self, opcode: int, operands: tuple[int, ...]) -> None:
        """Keep what one instruction says that reflection needs."""
        if opcode == _OP_NAME:
            self.found.names[operands[0]] = _string(operands[1:])
        elif opcode == _OP_MEMBER_NAME:
            self.found.member_names[(operands[0], operands[1])] = _string(operands[2:])
        elif opcode == _OP_DECORATE and len(operands) >= 3:
            self._decorate(operands[0], operands[1], operands[2])
        elif opcode == _OP_SPEC_CONSTANT_COMPOSITE:
            self.composites[operands[1]] = tuple(operands[2:])
        elif opcode == _OP_VARIABLE and operands[2] == _STORAGE_PUSH_CONSTANT:
            self.found.push_constant_variables.append(operands[1])
        elif opcode == _OP_EXECUTION_MODE_ID and operands[1] == _MODE_LOCAL_SIZE_ID:
            self.found.local_size_ids = tuple(operands[2:5])

    def _decorate(self, target: int, decoration: int, value: int) -> None:
        if decoration == _DECORATION_SET:
            self.sets[target] = value
        elif decoration == _DECORATION_BINDING:
            self.bindings[target] = value
        elif decoration == _DECORATION_BUILTIN and value == _BUILTIN_WORKGROUP_SIZE:
            self.workgroup_size_id = target

    def words(self) -> _Words:
        """The scan's result: variables by (set, binding), the local size's constants."""
        found = self.found
        found.variables = {(self.sets.get(v, 0), b): v for v, b in self.bindings.items()}
        if not found.local_size_ids and self.workgroup_size_id in self.composites:
            found.local_size_ids = self.composites[self.workgroup_size_id]
        return found


def _scan(name: str, module: bytes) -> _Words:
    scan = _Scan()
    for opcode, operands in _instructions(name, _module_words(name, module)):
        scan.take(opcode, operands)
    return scan.words()


# --- spirv-cross's JSON into the data model ---------------------------------------------------

_SCALAR_BYTES = {
    "float": 4, "int": 4, "uint": 4, "bool": 4, "double": 8, "float16_t": 2, "half": 2,
    "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int64_t": 8, "uint64_t": 8,
}  # fmt: skip
_VECTOR_PREFIX = {
    "vec": "float", "ivec": "int", "uvec": "uint", "bvec": "bool", "dvec": "double",
    "f16vec": "float16_t", "i8vec": "int8_t", "u8vec": "uint8_t", "i16vec": "int16_t",
    "u16vec": "uint16_t", "i64vec": "int64_t", "u64vec": "uint64_t",
}  # fmt: skip
_MATRIX_PREFIX = {"mat": "float", "dmat": "double", "f16mat": "float16_t"}


def value_shape(glsl_type: str) -> tuple[str, int] | None:
    """(scalar type, components) of a scalar or vector GLSL type (`uvec4` -> ("uint", 4)),
    None for a matrix, a struct or an unknown type."""
    if glsl_type in _SCALAR_BYTES:
        return glsl_type, 1
    for prefix, scalar in _VECTOR_PREFIX.items():
        width = glsl_type.removeprefix(prefix)
        if width != glsl_type and width.isdigit():
            return scalar, int(width)
    return None


def _value_size(glsl_type: str, matrix_stride: int | None, row_major: bool) -> int | None:
    """Bytes of one scalar, vector or matrix value (matrices: columns x matrix stride)."""
    if glsl_type in _SCALAR_BYTES:
        return _SCALAR_BYTES[glsl_type]
    for prefix, scalar in _MATRIX_PREFIX.items():
        shape = glsl_type.removeprefix(prefix)
        if shape != glsl_type and shape[:1].isdigit():
            columns, _, rows = shape.partition("x")
            c, r = int(columns), int(rows or columns)
            major, minor = (r, c) if row_major else (c, r)
            stride = matrix_stride or 0
            return (major - 1) * stride + minor * _SCALAR_BYTES[scalar]
    for prefix, scalar in _VECTOR_PREFIX.items():
        width = glsl_type.removeprefix(prefix)
        if width != glsl_type and width.isdigit():
            return int(width) * _SCALAR_BYTES[scalar]
    return None


class _Converter:
    def __init__(self, raw: dict[str, Any], words: _Words) -> None:
        self.types: dict[str, Any] = raw.get("types", {})
        self.words = words

    def type_name(self, key: str) -> str | None:
        return self.words.names.get(int(key.lstrip("_"))) or None

    def block(self, key: str, size: int | None = None) -> Block:
        members = self.members(key)
        if size is None:
            size = max((m.offset + (m.size or 0) for m in members), default=0)
        return Block(self.type_name(key), size, members)

    def members(self, key: str) -> tuple[BlockMember, ...]:
        type_id = int(key.lstrip("_"))
        out = []
        for index, m in enumerate(self.types[key]["members"]):
            glsl_type = m["type"]
            nested: tuple[BlockMember, ...] = ()
            value: int | None
            if glsl_type in self.types:
                nested = self.members(glsl_type)
                value = max((n.offset + (n.size or 0) for n in nested), default=0)
                glsl_type = self.type_name(glsl_type) or "struct"
            else:
                value = _value_size(glsl_type, m.get("matrix_stride"), m.get("row_major", False))
            # spirv-cross lists array dims innermost first; the stride is the outermost's.
            dims = tuple(reversed(m.get("array", [])))
            stride = m.get("array_stride")
            size: int | None = value
            if dims:
                size = None if dims[0] == 0 else dims[0] * stride
                if size is not None and math.prod(dims[1:]) == 0:
                    size = None
            name = self.words.member_names.get((type_id, index)) or None
            out.append(
                BlockMember(
                    name, glsl_type, m["offset"], size, dims, stride, m.get("matrix_stride"), nested
                )
            )
        return tuple(out)


_DESCRIPTOR_KINDS = {"ssbos": "storage_buffer", "ubos": "uniform_buffer"}
_OTHER_RESOURCES = (
    "images", "textures", "separate_images", "separate_samplers", "acceleration_structures",
)  # fmt: skip


def _build(name: str, sha: str, tool: str, raw: dict[str, Any], words: _Words) -> SpirvReflection:
    convert = _Converter(raw, words)
    entries = raw.get("entryPoints", [])
    if not entries:
        raise SpirvReflectionError(name, "the module has no entry point")
    entry = entries[0]

    # One spec constant per id: a named declaration wins over the unnamed local-size one.
    spec_by_id: dict[int, SpecConstant] = {}
    default_by_variable: dict[int, Any] = {}
    for s in raw.get("specialization_constants", []):
        default_by_variable[s["variable_id"]] = s["default_value"]
        value = s["default_value"]
        if s["type"] == "bool":
            value = bool(value)
        constant = SpecConstant(s["id"], s["name"] or None, s["type"], value)
        if s["id"] not in spec_by_id or (constant.name and not spec_by_id[s["id"]].name):
            spec_by_id[s["id"]] = constant
    spec_constants = tuple(spec_by_id[i] for i in sorted(spec_by_id))

    local_size = []
    for axis in range(3):
        value = entry["workgroup_size"][axis]
        if not entry.get("workgroup_size_is_spec_constant_id", [False] * 3)[axis]:
            local_size.append(LocalSizeDim(value, None))
            continue
        spec_id = value
        component = words.local_size_ids[axis] if len(words.local_size_ids) == 3 else None
        if component in default_by_variable:
            default = default_by_variable[component]
        else:
            default = spec_by_id[spec_id].default if spec_id in spec_by_id else 1
        local_size.append(LocalSizeDim(int(default), spec_id))

    bindings = []
    for key, kind in (*_DESCRIPTOR_KINDS.items(), *((k, k.rstrip("s")) for k in _OTHER_RESOURCES)):
        for r in raw.get(key, []):
            variable = words.variables.get((r["set"], r["binding"]))
            instance = words.names.get(variable) if variable is not None else None
            block = convert.block(r["type"], r["block_size"]) if key in _DESCRIPTOR_KINDS else None
            bindings.append(
                DescriptorBinding(
                    r["set"],
                    r["binding"],
                    instance or None,
                    kind,
                    bool(r.get("readonly")),
                    bool(r.get("writeonly")),
                    block,
                )
            )
    bindings.sort(key=lambda b: (b.set, b.binding))

    push = raw.get("push_constants", [])
    push_constants = convert.block(push[0]["type"]) if push else None
    return SpirvReflection(
        name,
        sha,
        entry["name"],
        entry["mode"],
        (local_size[0], local_size[1], local_size[2]),
        tuple(bindings),
        push_constants,
        spec_constants,
        bool(words.names),
        tool,
    )


# --- running spirv-cross, and the caches ------------------------------------------------------


def cache_dir() -> Path:
    """Where reflections are kept: $VULKAN_PARITY_REFLECT_CACHE/spirv, or .cache/reflect/spirv."""
    env = os.environ.get("VULKAN_PARITY_REFLECT_CACHE")
    return (Path(env) if env else ROOT / ".cache" / "reflect") / "spirv"


@functools.cache  # the tool on PATH and its build: the process's environment
def _spirv_cross() -> tuple[str, str]:
    """(executable, a key of its build: sha256 of the binary)."""
    exe = shutil.which("spirv-cross")
    if exe is None:
        raise ReflectionUnavailable(
            "vulkan: SPIR-V reflection needs spirv-cross; install Debian's 'spirv-cross' "
            "(scripts/setup.sh does)"
        )
    return exe, hashlib.sha256(Path(exe).read_bytes()).hexdigest()[:16]


# (sha256 of a module, entry point) -> its reflection or spirv-cross's refusal. Kept for the
# process: a pure function of the module's bytes (and the tool's build, fixed for the
# process), the same for any runtime (docs/design.md §2.2).
_MEMORY: dict[tuple[str, str | None], SpirvReflection] = {}
_REFUSED: dict[tuple[str, str | None], str] = {}
# Threads reflect one module at a time each: one lock per module and entry point.
_KEYS_LOCK = threading.Lock()
_KEY_LOCKS: dict[tuple[str, str | None], threading.Lock] = {}


def reflect_spirv(
    module: bytes, name: str = "<spirv>", entry_point: str | None = None
) -> SpirvReflection:
    """The reflection of a SPIR-V module (of `entry_point`, default its first).

    Raises:
        SpirvReflectionError: spirv-cross refused the module (its whole message), or it is
            not SPIR-V.
        ReflectionUnavailable: spirv-cross is not installed.
    """
    sha = hashlib.sha256(module).hexdigest()
    key = (sha, entry_point)
    with _KEYS_LOCK:
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:
        return _reflect(module, name, entry_point, sha)


def _reflect(module: bytes, name: str, entry_point: str | None, sha: str) -> SpirvReflection:
    key = (sha, entry_point)
    if key in _REFUSED:
        raise SpirvReflectionError(name, _REFUSED[key])
    if key in _MEMORY:
        found = _MEMORY[key]
        return found if found.name == name else dataclasses.replace(found, name=name)
    words = _scan(name, module)
    exe, build = _spirv_cross()
    suffix = f"-{entry_point}" if entry_point else ""
    cached = cache_dir() / f"{sha[:32]}{suffix}-{build}.json"
    if cached.exists():
        raw = json.loads(cached.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "module.spv"
            path.write_bytes(module)
            command = [exe, str(path), "--reflect"]
            if entry_point:
                command += ["--entry", entry_point, "--stage", "comp"]
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
            )
        if proc.returncode != 0 or not proc.stdout.strip():
            message = f"spirv-cross exited {proc.returncode}:\n{proc.stderr.strip()}"
            _REFUSED[key] = message
            raise SpirvReflectionError(name, message)
        raw = json.loads(proc.stdout)
        cached.parent.mkdir(parents=True, exist_ok=True)
        staged = cached.with_suffix(f".{os.getpid()}.tmp")
        staged.write_text(json.dumps(raw))
        os.replace(staged, cached)
    _MEMORY[key] = _build(name, sha, "spirv-cross", raw, words)
    return _MEMORY[key]


def reflect_spirv_file(path: Path, entry_point: str | None = None) -> SpirvReflection:
    """The reflection of the SPIR-V file at `path`."""
    return reflect_spirv(Path(path).read_bytes(), str(path), entry_point)


def reflect_glsl_kernel(
    kernel: str, defines: Mapping[str, int | str] | None = None, glsl_dir: Path | None = None
) -> SpirvReflection:
    """The reflection of `<glsl_dir>/<kernel>.comp` as vulkan_ref.spirv compiles it."""
    path = (glsl_dir or GLSL_DIR) / f"{kernel}.comp"
    return reflect_spirv(compile_glsl(kernel, defines, glsl_dir), str(path))


def warm_glsl(
    executor: Executor, glsl_dir: Path | None = None, stems: Sequence[str] | None = None
) -> list[Future[None]]:
    """Compile and reflect the kernels `<glsl_dir>/<stem>.comp` (default folder: the repo's
    `glsl/`; default stems: every `.comp` there, the `_f16` ones last) on `executor`, in
    order, as a graph's kernels are (vulkan_ref.binding.compiled_kernel: same flags, so
    the same cache entries).

    A kernel glslc or spirv-cross refuses is skipped: its refusal is kept, and the graph
    that needs it reports it as it would without warming. A missing tool or file ends its
    job too: opening the runtime, or the graph, says what is wrong.
    """
    root = glsl_dir or vulkan_ref.spirv.GLSL_DIR  # read now: a test may point it elsewhere
    if stems is None:
        stems = sorted((p.stem for p in root.glob("*.comp")), key=lambda s: ("_f16" in s, s))

    def warm(path: Path) -> None:
        # A refusal is reported by the graph that needs the kernel, if one does.
        with contextlib.suppress(KernelBuildError, BackendUnavailable, OSError):
            reflect_spirv(compile_glsl_file(path, (path.parent / "include",)), str(path))

    return [executor.submit(warm, root / f"{stem}.comp") for stem in dict.fromkeys(stems)]
