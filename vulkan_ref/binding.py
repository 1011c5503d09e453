"""Binding any kernel to a slot: one path for the project's GLSL and for a user's kernels.

A kernel is a `KernelEntry` (`graph_format.kernels`): a manifest's `[vulkan.<slot>]` table,
or the implicit entry of the project's own kernel (`builtin_entry`, source
`glsl/<stem>.comp` or the same file in a `--glsl-dir` folder). Binding it takes four steps,
the first three once per kernel and runtime (cached in the runtime's `PipelineCache`):

1. **Compile or read** its SPIR-V: GLSL with `vulkan_ref.spirv` (`-O -g`: names kept), or a
   precompiled module (`spirv = "x.spv"`) as it is.
2. **Reflect** it (`vulkan_ref.reflection`): descriptor bindings with their block layouts,
   push constants, specialization constants, the local size.
3. **Resolve** every declaration against the entry (`resolve_bindings`, `resolve_members`,
   `resolve_spec`): each binding's target (a role, `<tensor>.meta`, `params`), each
   params/push member's expression with its offset and type, each specialization constant's
   expression by id. A declaration nothing fills is a `KernelBuildError` naming the file,
   the binding, member or constant, what the kernel declares and what the op offers.

The fourth is per op node (`ComputeGraph.add_dispatch_node`): the targets become buffers,
specialization constants are evaluated on the values fixed at load, the pipeline is taken
from the cache, and at each resize only the compiled expressions run and bytes are packed
(`BlockLayout.pack`).

Binding names: a binding's name is its block's instance name, or for an anonymous block of
one member that member's name (`t_out` in `buffer OutBuffer { float t_out[]; }`). A member
or binding of a module without debug names has none: map it by index (`bindings.3`,
`params.0`, `push.0`: the member's position in its block).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from graph_format import KernelBuildError, KernelValuesError
from graph_format.kernels import (
    META_SUFFIX,
    PARAMS_TARGET,
    Expression,
    ExpressionError,
    KernelEntry,
    KernelInterfaceError,
    Value,
    builtin_entry,
)
from vulkan_ref.pipeline import DescriptorKind, PipelineCache
from vulkan_ref.reflection import (
    Block,
    BlockMember,
    DescriptorBinding,
    SpirvReflection,
    reflect_spirv,
    value_shape,
)
from vulkan_ref.spirv import INCLUDE_DIR, compile_glsl_file, include_files, spirv_version_error
from vulkan_ref.tensor import META_NBYTES

# A scalar type's struct format and what a value must be to fill it.
_FORMATS: dict[str, tuple[str, str]] = {
    "float": ("f", "float"),
    "double": ("d", "float"),
    "float16_t": ("e", "float"),
    "half": ("e", "float"),
    "int": ("i", "int"),
    "uint": ("I", "uint"),
    "bool": ("I", "bool"),
    "int8_t": ("b", "int"),
    "uint8_t": ("B", "uint"),
    "int16_t": ("h", "int"),
    "uint16_t": ("H", "uint"),
    "int64_t": ("q", "int"),
    "uint64_t": ("Q", "uint"),
}
# Specialization constant types: their SpecValue format ("?" a VkBool32).
_SPEC_FORMATS = {"uint": "I", "int": "i", "float": "f", "bool": "?"}


def kernel_failure(
    entry: KernelEntry, message: str, op: str | None = None, *, values: bool = False
) -> KernelBuildError:
    """A KernelBuildError (a finding against Vulkan) about `entry`'s kernel: named by its
    slot (a shader glslc or spirv-cross refuses is named by its file's stem), the message
    opening with the slot. `values`: a manifest kernel's expressions failed on a step's
    values (a KernelValuesError: no compiler involved)."""
    if not message.startswith(f"{entry.slot}: "):
        message = f"{entry.slot}: {message}"
    kind = KernelValuesError if values and not entry.builtin else KernelBuildError
    return kind("vulkan", entry.slot, str(entry.source), message, op=op)


def project_entry(cache: PipelineCache, slot: str, folder: str, stem: str) -> KernelEntry:
    """The implicit entry of the project's kernel of `slot`, `<folder>/<stem>.comp`: one
    object per slot and file in the runtime's `cache`, so that what is resolved from it is
    cached there."""
    key = ("entry", slot, folder, stem)
    found = cache.kernels.get(key)
    if not isinstance(found, KernelEntry):
        found = builtin_entry("vulkan", slot, Path(folder) / f"{stem}.comp")
        cache.kernels[key] = found
    return found


# --- 1. compiled kernels -----------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledKernel:
    """A kernel's SPIR-V and its reflection."""

    source: Path
    code: bytes
    sha256: str
    reflection: SpirvReflection


def _stamp(paths: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """What tells a file changed: the mtime and size of each."""
    out = []
    for path in paths:
        stat = os.stat(path)
        out.append((stat.st_mtime_ns, stat.st_size))
    return tuple(out)


def compiled_kernel(cache: PipelineCache, entry: KernelEntry) -> CompiledKernel:
    """The SPIR-V of `entry`'s kernel and its reflection, compiled and reflected once per
    content (a changed file, or one it includes, is compiled again).

    Raises:
        KernelBuildError: no such file, glslc refused it, or spirv-cross could not reflect
            it (with the tool's whole message).
    """
    key = ("compiled", id(entry))
    cached = cache.kernels.get(key)
    try:
        if isinstance(cached, tuple) and cached[0] is entry and _stamp(cached[1]) == cached[2]:
            found: CompiledKernel = cached[3]
            return found
        include_dirs: tuple[Path, ...]
        if entry.builtin:  # a folder laid out like glsl/
            include_dirs = (entry.source.parent / "include",)
        else:  # a user's kernel: its folder, then the project's TensorMeta header
            include_dirs = (entry.source.parent, INCLUDE_DIR)
        if entry.kind == "spirv":
            files = [str(entry.source)]
            code = entry.source.read_bytes()
        else:
            included = include_files(entry.source, include_dirs)
            files = [str(entry.source), *map(str, included)]
            code = compile_glsl_file(entry.source, include_dirs, entry.defines)
        stamp = _stamp(files)
    except FileNotFoundError as err:
        raise kernel_failure(entry, f"no such file: {err.filename or err}") from None
    except OSError as err:
        raise kernel_failure(entry, f"cannot read {entry.source}: {err.strerror}") from None
    # Checked before the module reaches reflection or the driver: the validation layer's own
    # words ("Invalid SPIR-V binary version ...") name neither the file nor the fix.
    too_new = spirv_version_error(code, entry.source, cache.ctx.api_version)
    if too_new is not None:
        raise kernel_failure(entry, too_new)
    entry_point = None if entry.kind == "glsl" else entry.entry
    reflection = reflect_spirv(code, str(entry.source), entry_point)
    if reflection.entry_point != entry.entry:
        raise kernel_failure(
            entry,
            f"entry point {entry.entry!r} is not in {entry.source} (it declares "
            f"{reflection.entry_point!r}; GLSL's is always 'main')",
        )
    if reflection.stage != "comp":
        raise kernel_failure(entry, f"{entry.source} is a {reflection.stage} shader, not compute")
    compiled = CompiledKernel(entry.source, code, hashlib.sha256(code).hexdigest(), reflection)
    cache.kernels[key] = (entry, files, stamp, compiled)  # the entry is held: its id stays
    return compiled


# --- 3. resolved declarations ------------------------------------------------------------------


@dataclass(frozen=True)
class PackedMember:
    """A params or push-constant member and the expression that fills it."""

    name: str
    glsl_type: str
    offset: int
    scalar: struct.Struct  # one element (all its components)
    kind: str  # what a value must be: "float", "int", "uint", "bool"
    components: int
    count: int  # array elements (1: not an array)
    stride: int  # bytes between array elements
    expression: Expression


@dataclass(frozen=True)
class BlockLayout:
    """A params uniform or push-constant block: its size and the members to fill (the rest
    stays zero: padding).

    Attributes:
        what: the block, for messages: "params (binding 3)" or "push".
        names: the values its expressions read.
    """

    what: str
    size: int
    members: tuple[PackedMember, ...]
    names: frozenset[str]

    def pack(self, values: Mapping[str, Value]) -> bytes:
        """The block's bytes for these values.

        Raises:
            PackError: an expression fails, or its value does not fit its member.
        """
        data = bytearray(self.size)
        for m in self.members:
            try:
                value = m.expression.evaluate(values)
            except ExpressionError as err:
                raise PackError(self, m, str(err)) from None
            items = value if isinstance(value, tuple) else (value,)
            if len(items) != m.components * m.count:
                raise PackError(
                    self,
                    m,
                    f"{m.expression.text!r} gave {value!r}; a {m.glsl_type}"
                    + (f"[{m.count}]" if m.count > 1 else "")
                    + f" takes {m.components * m.count} number(s)",
                )
            converted = [_convert(self, m, v) for v in items]
            try:
                for i in range(m.count):
                    part = converted[i * m.components : (i + 1) * m.components]
                    m.scalar.pack_into(data, m.offset + i * m.stride, *part)
            except struct.error as err:
                raise PackError(
                    self, m, f"{m.expression.text!r} gave {value!r}, out of a {m.glsl_type}'s range"
                ) from err
        return bytes(data)


class PackError(ValueError):
    """A member's expression failed or gave a value its member cannot hold."""

    def __init__(self, block: BlockLayout, member: PackedMember, reason: str) -> None:
        super().__init__(f"{block.what} member {member.name!r} ({member.glsl_type}): {reason}")


def _convert(block: BlockLayout, member: PackedMember, value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PackError(block, member, f"{value!r} is not a number")
    if member.kind == "float":
        return float(value)
    if isinstance(value, float):
        raise PackError(
            block,
            member,
            f"{member.expression.text!r} gave {value!r}, a float for an integer member ('/' "
            "is true division: use //, ceil() or div_up())",
        )
    if member.kind == "bool":
        return 1 if value else 0
    return value


def _member_name(member: BlockMember, index: int) -> str:
    """A member's name, or its index in its block where the module has no names."""
    return member.name if member.name is not None else str(index)


def _where(member: BlockMember, binding: int | None = None) -> str:
    """Where a member lies, for messages: "uint at offset 4 of binding 0"."""
    dims = "".join(f"[{d}]" for d in member.array)
    at = f" of binding {binding}" if binding is not None else ""
    return f"{member.type}{dims} at offset {member.offset}{at}"


def binding_name(b: DescriptorBinding) -> str | None:
    """A binding's name: its instance name, or the only member's of an anonymous block."""
    if b.name is not None:
        return b.name
    if b.block is not None and len(b.block.members) == 1:
        return b.block.members[0].name
    return None


def _layout(
    entry: KernelEntry, what: str, block: Block, filled: Mapping[str, Expression | None]
) -> BlockLayout:
    """A block's members with the expressions `filled` gives them (None: zero)."""
    members = []
    names: set[str] = set()
    for index, member in enumerate(block.members):
        name = _member_name(member, index)
        expression = filled.get(name)
        if expression is None:
            continue
        shape = value_shape(member.type)
        fmt = _FORMATS.get(shape[0]) if shape else None
        if shape is None or fmt is None or (member.array and len(member.array) > 1):
            raise kernel_failure(
                entry,
                f"{what} member {name!r} of {entry.source} is a {member.type}"
                + "".join(f"[{d}]" for d in member.array)
                + "; a member filled from values is a scalar, a vector or an array of them "
                "(list it in padding to leave it zero)",
            )
        count = member.array[0] if member.array else 1
        if count == 0:
            raise kernel_failure(
                entry, f"{what} member {name!r} of {entry.source} is a runtime-sized array"
            )
        scalar = struct.Struct("<" + fmt[0] * shape[1])
        members.append(
            PackedMember(
                name,
                member.type,
                member.offset,
                scalar,
                fmt[1],
                shape[1],
                count,
                member.array_stride or scalar.size,
                expression,
            )
        )
        names |= expression.names
    size = max(block.size, max((m.offset + m.stride * m.count for m in members), default=0))
    return BlockLayout(what, -(-size // 4) * 4, tuple(members), frozenset(names))


@dataclass(frozen=True)
class ResolvedBinding:
    """One descriptor of the kernel and what fills it."""

    binding: int
    kind: DescriptorKind
    target: str  # a role, "<tensor>.meta" or "params"
    params: BlockLayout | None = None  # for "params"
    # for "params": the value a one-int block holds, which a UBO the op already keeps may
    # fill (a SymInt's: `DispatchNode.uniforms`)
    single_value: str | None = None

    @property
    def tensor(self) -> str | None:
        """The tensor whose buffer (a role) or TensorMeta (`<tensor>.meta`) it binds."""
        if self.kind == "storage":
            return self.target
        return self.target[: -len(META_SUFFIX)] if self.target.endswith(META_SUFFIX) else None


@dataclass(frozen=True)
class ResolvedDispatch:
    """One dispatch of the kernel (a split slot has several)."""

    bindings: tuple[ResolvedBinding, ...]
    push: BlockLayout | None
    count: Expression | tuple[Expression, Expression, Expression]


@dataclass(frozen=True)
class ResolvedKernel:
    """A kernel's declarations resolved against its entry, for one set of scratch roles."""

    entry: KernelEntry
    kernel: CompiledKernel
    spec: Mapping[int, tuple[str, Expression]]  # id -> (SpecValue format, expression)
    local_size_ids: tuple[int | None, int | None, int | None]
    local_size_defaults: tuple[int, int, int]
    dispatches: tuple[ResolvedDispatch, ...]
    names: frozenset[str] = field(default=frozenset())  # every value an expression reads


def resolve_kernel(
    cache: PipelineCache,
    entry: KernelEntry,
    scratch: Sequence[str] = (),
    provides: Sequence[str] = (),
) -> ResolvedKernel:
    """`entry`'s kernel compiled, reflected and resolved (once per content and context).

    Args:
        scratch: the roles of its adapter's scratch buffers.
        provides: the values its adapter adds.

    Raises:
        KernelBuildError: the kernel does not compile or reflect, or a declaration does not
            fit the entry (the message names the file, the binding, member or constant, what
            the kernel declares and what the op offers).
    """
    kernel = compiled_kernel(cache, entry)
    key = ("resolved", id(entry), kernel.sha256, tuple(scratch), tuple(provides))
    cached = cache.kernels.get(key)
    if isinstance(cached, tuple) and cached[0] is entry:
        found: ResolvedKernel = cached[1]
        return found
    try:
        resolved = _resolve(entry, kernel, scratch, provides)
    except KernelInterfaceError as err:
        raise kernel_failure(entry, str(err)) from None
    cache.kernels[key] = (entry, resolved)  # the entry is held: its id stays its own
    return resolved


def _resolve(
    entry: KernelEntry, kernel: CompiledKernel, scratch: Sequence[str], provides: Sequence[str]
) -> ResolvedKernel:
    reflection = kernel.reflection
    _check_descriptors(entry, reflection)
    names: set[str] = set()
    dispatches = []
    for index in range(len(entry.dispatches)):
        dispatch, read = _resolve_dispatch(entry, reflection, index, scratch, provides)
        dispatches.append(dispatch)
        names |= read
    local_ids = tuple(d.spec_id for d in reflection.local_size)
    spec = _resolve_spec(entry, reflection, local_ids)
    for _, expr in spec.values():
        names |= expr.names
    for expr in entry.requires:
        names |= expr.names
    return ResolvedKernel(
        entry,
        kernel,
        spec,
        (local_ids[0], local_ids[1], local_ids[2]),
        (
            reflection.local_size[0].value,
            reflection.local_size[1].value,
            reflection.local_size[2].value,
        ),
        tuple(dispatches),
        frozenset(names),
    )


def _check_descriptors(entry: KernelEntry, reflection: SpirvReflection) -> None:
    """Every descriptor is a storage or uniform buffer of set 0: what the runtime binds."""
    source = entry.source
    for b in reflection.bindings:
        if b.set != 0:
            raise kernel_failure(
                entry,
                f"binding {b.binding} ({binding_name(b)!r}) of {source} is in descriptor set "
                f"{b.set}; the runtime binds set 0 only",
            )
        if b.kind not in ("storage_buffer", "uniform_buffer") or b.block is None:
            raise kernel_failure(
                entry,
                f"binding {b.binding} ({binding_name(b)!r}) of {source} is a "
                f"{b.kind.replace('_', ' ')} descriptor; the runtime binds storage and uniform "
                "buffers only",
            )


def _resolve_dispatch(
    entry: KernelEntry,
    reflection: SpirvReflection,
    index: int,
    scratch: Sequence[str],
    provides: Sequence[str],
) -> tuple[ResolvedDispatch, set[str]]:
    """Dispatch `index` of `entry` resolved: each binding's target (a params uniform with
    its layout), the push block's layout, the count; and the value names it reads."""
    declared = [(b.binding, binding_name(b)) for b in reflection.bindings]
    roles = {*entry.interface.tensors, *scratch}
    targets = entry.resolve_bindings(declared, dispatch=index, extra_roles=scratch)
    for b in reflection.bindings:
        _check_kind(entry, b, targets[b.binding], roles)
    filled, filled_push = _resolve_members(entry, reflection, targets, index, provides)
    names: set[str] = set()
    bindings = []
    for b in reflection.bindings:
        assert b.block is not None  # checked by _check_descriptors
        target = targets[b.binding]
        if target in roles:
            bindings.append(ResolvedBinding(b.binding, "storage", target))
        elif target.endswith(META_SUFFIX):
            bindings.append(ResolvedBinding(b.binding, "uniform", target))
        else:
            what = f"params (binding {b.binding})"
            ours = {
                _member_name(m, i): filled[_member_name(m, i)]
                for i, m in enumerate(b.block.members)
            }
            layout = _layout(entry, what, b.block, ours)
            names |= layout.names
            bindings.append(
                ResolvedBinding(b.binding, "uniform", target, layout, _single_value(layout))
            )
    push = None
    if reflection.push_constants is not None:
        push = _layout(entry, "push", reflection.push_constants, filled_push)
        names |= push.names
    count = entry.dispatches[index].count
    for expr in count if isinstance(count, tuple) else (count,):
        names |= expr.names
    return ResolvedDispatch(tuple(bindings), push, count), names


def _resolve_members(
    entry: KernelEntry,
    reflection: SpirvReflection,
    targets: Mapping[int, str],
    index: int,
    provides: Sequence[str],
) -> tuple[dict[str, Expression | None], dict[str, Expression | None]]:
    """What fills each member of dispatch `index`'s params blocks and of the push block.

    Both blocks are resolved before either fails: a kernel's members without a value are
    named in one error, the params block's and the push block's together.
    """
    params_blocks = [b for b in reflection.bindings if targets[b.binding] == PARAMS_TARGET]
    params_members = {
        _member_name(m, i): _where(m, b.binding)
        for b in params_blocks
        for i, m in enumerate(b.block.members if b.block else ())
    }
    filled: dict[str, Expression | None] = {}
    filled_push: dict[str, Expression | None] = {}
    blocks: list[
        tuple[Literal["params", "push"], dict[str, str], dict[str, Expression | None]]
    ] = []
    if params_blocks:
        blocks.append(("params", params_members, filled))
    if reflection.push_constants is not None:
        members = reflection.push_constants.members
        push_members = {_member_name(m, i): _where(m) for i, m in enumerate(members)}
        blocks.append(("push", push_members, filled_push))
    problems: list[str] = []
    for block, declared_members, out in blocks:
        try:
            out.update(
                entry.resolve_members(
                    list(declared_members),
                    dispatch=index,
                    block=block,
                    extra_values=provides,
                    layout=declared_members,
                )
            )
        except KernelInterfaceError as err:
            problems.append(str(err).removeprefix(f"{entry.slot}: "))
    if problems:
        raise KernelInterfaceError(entry.slot, entry.source, "; and ".join(problems))
    return filled, filled_push


def _resolve_spec(
    entry: KernelEntry, reflection: SpirvReflection, local_ids: Sequence[int | None]
) -> dict[int, tuple[str, Expression]]:
    """The specialization constants to set, by id: (SpecValue format, expression)."""
    spec_declared = [  # the local size's own unnamed constants are listed as such
        (s.id, s.name)
        for s in reflection.spec_constants
        if s.name is not None or s.id not in local_ids
    ]
    chosen = entry.resolve_spec(spec_declared, [i for i in local_ids if i is not None])
    types = {s.id: s.type for s in reflection.spec_constants}
    spec: dict[int, tuple[str, Expression]] = {}
    for spec_id, expr in chosen.items():
        glsl_type = "uint" if spec_id in local_ids else types.get(spec_id, "uint")
        if glsl_type not in _SPEC_FORMATS:
            raise kernel_failure(
                entry,
                f"specialization constant {spec_id} of {entry.source} is a {glsl_type}; the "
                f"runtime sets {', '.join(_SPEC_FORMATS)} constants",
            )
        spec[spec_id] = (_SPEC_FORMATS[glsl_type], expr)
    return spec


def _check_kind(entry: KernelEntry, b: DescriptorBinding, target: str, roles: set[str]) -> None:
    """A binding's kind fits its target: a storage buffer for a tensor, a uniform block for
    TensorMeta (as large at most) or params."""
    assert b.block is not None
    shown = f"binding {b.binding} ({binding_name(b)!r}) of {entry.source}"
    if target in roles:
        if b.kind != "storage_buffer":
            mapping = f'{{ {binding_name(b) or b.binding} = "params" }}'
            raise kernel_failure(
                entry,
                f"{shown} is a uniform buffer, but {target!r} is a tensor (a storage buffer); "
                f"map a params block with bindings = {mapping}",
            )
    elif target.endswith(META_SUFFIX):
        meta = f"{target!r} is the project's TensorMeta uniform ({META_NBYTES} bytes, "
        meta += "glsl/include/tensor_meta.glslh)"
        if b.kind != "uniform_buffer":
            raise kernel_failure(entry, f"{shown} is a storage buffer, but {meta}")
        if b.block.size > META_NBYTES:
            raise kernel_failure(
                entry, f"{shown} is a uniform block of {b.block.size} bytes, but {meta}"
            )
    elif b.kind != "uniform_buffer":
        raise kernel_failure(
            entry,
            f"{shown} is a storage buffer, but 'params' is a uniform buffer packed from "
            f"values; map it to a role (roles: {', '.join(sorted(roles))})",
        )


def _single_value(layout: BlockLayout) -> str | None:
    """The value a block holds as its only member, a 32-bit int at offset 0, filled by that
    value's own name: a UBO the op keeps for it (a SymInt's) can be bound instead."""
    if len(layout.members) != 1 or layout.size > 16:
        return None
    (m,) = layout.members
    one_int = m.kind in ("int", "uint") and m.scalar.size == 4 and m.count == 1
    if one_int and m.offset == 0 and m.expression.text == m.name:
        return m.name
    return None


# --- 4. per op node: values fixed at load ------------------------------------------------------


def spec_value(entry: KernelEntry, spec_id: int, fmt: str, value: Value) -> int | float:
    """A specialization constant's value checked against its type.

    Raises:
        KernelBuildError: a vector, a float for an integer constant, or out of range.
    """
    where = f"specialization constant {spec_id} of {entry.source}"
    if isinstance(value, tuple):
        raise kernel_failure(entry, f"{where} is a scalar; its expression gave {value!r}")
    if fmt == "f":
        return float(value)
    if fmt == "?":
        return 1 if value else 0
    if isinstance(value, float):
        raise kernel_failure(entry, f"{where} is an integer; its expression gave {value!r}")
    low, high = (0, 1 << 32) if fmt == "I" else (-(1 << 31), 1 << 31)
    if not low <= value < high:
        raise kernel_failure(entry, f"{where} cannot hold {value}")
    return value
