"""Binding a WGSL kernel to its slot: one path for the project's kernels and anyone's.

A slot's kernel is described by a `graph_format.kernels.KernelEntry`: a manifest's
`[webgpu.<slot>]` table, or the implicit entry of the project's own kernel
(`builtin_entry`, also for a `shader_dir` of drop-in copies). `plan_kernel` reflects the
kernel's WGSL (`webgpu_backend.reflection`) and asks the entry what fills each declaration:

- bindings, by role (`KernelEntry.resolve_bindings` over the bindings its entry point
  uses): a storage binding takes a tensor (or scratch buffer) of the op, a uniform binding
  is packed from values;
- each uniform, by member name from the kernel's own struct layout
  (`KernelEntry.resolve_members`): `Packer` turns the layout into one `struct.Struct` once,
  so a resize only evaluates the members' expressions (a bare name is a dict look-up) and
  packs; padding and the gaps between members are written zero;
- overrides: exactly those the entry resolves, each declared by the kernel; one without a
  default that nobody maps is an error;
- the workgroup size: the entry point's own, with the passed overrides applied;
- the logical count: `entry.dispatches[i]` (the op's `workgroups` for the project's kernels).

A plan depends only on the entry, the dispatch and the source text, so `KernelCatalog`
(one per runtime) caches it: a graph build resolves nothing twice. Errors name the file, the
field or binding, what the kernel declares and what the op offers (`KernelInterfaceError`;
the graph raises them as `KernelBuildError` for its op).
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from graph_format.kernels import (
    PARAMS_TARGET,
    Backend,
    Expression,
    ExpressionError,
    KernelAdapter,
    KernelEntry,
    KernelInterfaceError,
    KernelManifest,
    KernelManifestError,
    Value,
    builtin_entry,
    load_adapter,
)
from webgpu_backend import shaders
from webgpu_backend.reflection import (
    EntryPoint,
    Override,
    ResourceBinding,
    WgslReflection,
    WgslType,
    WorkgroupDim,
    reflect_wgsl,
)

BACKEND: Backend = "webgpu"
# How a kernel sees each of its bindings.
BindingKind = Literal["storage_rw", "storage_ro", "uniform"]
# A bind group layout: (binding index, kind) of every binding, by index.
Layout = tuple[tuple[int, BindingKind], ...]

# struct format characters of the scalar types a params member may have
_SCALAR_CODES = {"u32": "I", "i32": "i", "f32": "f"}
_INTEGER_TYPES = ("u32", "i32", "bool")


class Packer:
    """Packs one uniform binding from values, laid out as the kernel's declaration says.

    Built once per kernel plan from the reflected struct (or the scalar or vector type of a
    uniform holding one value): every member becomes a field of one `struct.Struct`, padding
    members and the gaps between members become pad bytes (zero).

    Attributes:
        binding: the uniform's name in the kernel.
        size: bytes of the uniform (the struct's size).
        members: (member, its expression) of every member that takes a value, in order.
    """

    def __init__(
        self,
        slot: str,
        source: Path,
        binding: str,
        fields: Sequence[tuple[str, WgslType, int]],
        size: int,
        resolved: Mapping[str, Expression | None],
    ) -> None:
        self.slot = slot
        self.source = source
        self.binding = binding
        self.size = size
        fmt = "<"
        cursor = 0
        members: list[tuple[str, Expression]] = []
        self._widths: list[int] = []  # 0: a scalar; n: a vecN taking a tuple of n
        self._types: list[str] = []
        for name, wgsl_type, offset in fields:
            if offset > cursor:
                fmt += f"{offset - cursor}x"
            expression = resolved[name]
            nbytes = wgsl_type.size or 0
            if expression is None:  # padding: zero, whatever its type
                fmt += f"{nbytes}x"
            else:
                fmt += _member_format(slot, source, binding, name, wgsl_type, offset)
                members.append((name, expression))
                self._widths.append(wgsl_type.count or 0 if wgsl_type.kind == "vector" else 0)
                self._types.append(wgsl_type.name)
            cursor = offset + nbytes
        if size > cursor:
            fmt += f"{size - cursor}x"
        self.members = tuple(members)
        self.struct = struct.Struct(fmt)
        names = [e.text for _, e in members]
        bare = all(_is_bare(e) for _, e in members)
        # The common case (every member a scalar taken by name): one C-level look-up of all
        # (a uniform without members packs from nothing).
        self.simple: Callable[[Mapping[str, Value]], tuple[Value, ...]] | None = None
        if bare and not any(self._widths):
            if len(names) > 1:
                self.simple = operator.itemgetter(*names)
            else:
                self.simple = _getter_of_one(names[0]) if names else _no_values

    def pack(self, values: Mapping[str, Value]) -> bytes:
        """The uniform's bytes for these values.

        Raises:
            ExpressionError: a member's expression fails (KernelInterfaceError-worthy: the
                caller names the slot and op).
            KernelInterfaceError: a value that does not fit its member (a float or a
                negative number for a u32, a scalar for a vector).
        """
        if self.simple is not None:
            try:
                return self.struct.pack(*self.simple(values))
            except (KeyError, struct.error):
                pass  # the slow path below names the member at fault
        args: list[Value] = []
        for (name, expression), width, type_name in zip(
            self.members, self._widths, self._types, strict=True
        ):
            value = expression.evaluate(values)
            if width:
                if not isinstance(value, tuple) or len(value) != width:
                    raise self._misfit(name, type_name, value, f"a vector of {width}")
                args.extend(value)
            else:
                if isinstance(value, tuple):
                    raise self._misfit(name, type_name, value, "a number")
                if type_name in _INTEGER_TYPES and not isinstance(value, int):
                    raise self._misfit(name, type_name, value, "an integer")
                args.append(value)
        try:
            return self.struct.pack(*args)
        except struct.error as err:
            raise self._range_error(args, str(err)) from None

    def _misfit(
        self, name: str, type_name: str, value: object, wanted: str
    ) -> KernelInterfaceError:
        return KernelInterfaceError(
            self.slot,
            self.source,
            f"{self.binding}.{name} ({type_name}) of {self.source} got {value!r}, expected "
            f"{wanted}",
        )

    def _range_error(self, args: Sequence[Value], reason: str) -> KernelInterfaceError:
        """Name the member whose value its type cannot hold."""
        fields: list[tuple[str, str]] = []
        for (name, _), width, type_name in zip(
            self.members, self._widths, self._types, strict=True
        ):
            fields += [(name, type_name)] * max(width, 1)
        for (name, type_name), value in zip(fields, args, strict=True):
            code = _SCALAR_CODES[type_name.removeprefix("vec").lstrip("234<").rstrip(">")]
            try:
                struct.pack(f"<{code}", value)
            except struct.error as err:
                return KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"{self.binding}.{name} ({type_name}) of {self.source} cannot hold "
                    f"{value!r} ({err})",
                )
        return KernelInterfaceError(self.slot, self.source, f"{self.binding}: {reason}")


def _getter_of_one(name: str) -> Callable[[Mapping[str, Value]], tuple[Value, ...]]:
    return lambda values: (values[name],)


def _no_values(values: Mapping[str, Value]) -> tuple[Value, ...]:
    return ()


def _is_bare(expression: Expression) -> bool:
    return expression.text.isidentifier()


def _member_format(
    slot: str, source: Path, binding: str, name: str, wgsl_type: WgslType, offset: int
) -> str:
    """The struct format of one member: a scalar or a vector of f32, u32 or i32."""
    if wgsl_type.kind == "scalar" and wgsl_type.name in _SCALAR_CODES:
        return _SCALAR_CODES[wgsl_type.name]
    element = wgsl_type.element
    if (
        wgsl_type.kind == "vector"
        and element is not None
        and element.name in _SCALAR_CODES
        and wgsl_type.count
    ):
        return f"{wgsl_type.count}{_SCALAR_CODES[element.name]}"
    raise KernelInterfaceError(
        slot,
        source,
        f"{binding}.{name} ({wgsl_type.name} at offset {offset}) of {source}: a params member "
        "is f32, u32, i32 or a vector of them; list it in padding if the kernel does not read "
        "it from the host",
    )


@dataclass(frozen=True)
class PlannedBinding:
    """One binding of a kernel and what fills it."""

    index: int
    name: str
    kind: BindingKind
    target: str  # a role of the slot (or an adapter's scratch), or "params"


@dataclass(frozen=True)
class KernelPlan:
    """One dispatch of one kernel entry, resolved against its reflected source.

    Attributes:
        entry: the kernel entry (manifest or implicit).
        dispatch: which of `entry.dispatches`.
        source: the WGSL text; `digest` its reflection's sha256.
        bindings: every binding the entry point uses, by index.
        packers: a packer per uniform binding index.
        overrides: (the declared override, its expression) of each override passed.
        workgroup: the entry point's `@workgroup_size`, per dimension.
    """

    entry: KernelEntry
    dispatch: int
    source: str
    digest: str
    bindings: tuple[PlannedBinding, ...]
    packers: dict[int, Packer]
    overrides: tuple[tuple[Override, Expression], ...]
    workgroup: tuple[WorkgroupDim, WorkgroupDim, WorkgroupDim]
    declared_overrides: tuple[Override, ...] = field(repr=False, default=())

    @property
    def layout(self) -> Layout:
        """The bind group layout: (index, kind) of every binding."""
        return tuple((b.index, b.kind) for b in self.bindings)

    def fail(self, message: str) -> KernelInterfaceError:
        """An interface error naming the slot and the kernel's file."""
        return KernelInterfaceError(self.entry.slot, self.entry.source, message)

    def constants(self, static: Mapping[str, Value], op: str) -> dict[str, int | float]:
        """The pipeline constants (override key -> value) for an op's fixed values.

        Raises:
            KernelInterfaceError: an override reads a value the op fixes only per step, or
                gives a value its type cannot take.
        """
        constants: dict[str, int | float] = {}
        for override, expression in self.overrides:
            live = sorted(expression.names - set(static))
            if live:
                raise self.fail(
                    f"overrides.{override.name}: {expression.text!r} reads "
                    f"{', '.join(live)}, which {op} sets only per step (an override is fixed "
                    f"when the pipeline is built; fixed values: {', '.join(sorted(static))})"
                )
            try:
                value = expression.evaluate(static)
            except ExpressionError as err:
                raise self.fail(f"overrides.{override.name}: {err}") from None
            if isinstance(value, tuple):
                raise self.fail(f"overrides.{override.name}: a vector {value} for a scalar")
            if override.type in _INTEGER_TYPES and (
                isinstance(value, float) and not value.is_integer()
            ):
                raise self.fail(
                    f"overrides.{override.name}: {expression.text!r} gave {value!r} for a "
                    f"{override.type} override"
                )
            constants[override.key] = (
                int(value) if override.type in _INTEGER_TYPES else float(value)
            )
        return constants

    def workgroup_size(self, constants: Mapping[str, int | float]) -> tuple[int, int, int]:
        """The entry point's workgroup size with these pipeline constants applied.

        Raises:
            KernelInterfaceError: a dimension whose size cannot be worked out.
        """
        by_name = {o.name: o for o in self.declared_overrides}
        values: dict[str, int | float] = {}
        for override in self.declared_overrides:
            if override.key in constants:
                values[override.name] = constants[override.key]
            elif override.default is not None and not isinstance(override.default, bool):
                values[override.name] = override.default
        sizes: list[int] = []
        for dim in self.workgroup:
            if all(values.get(o) == by_name[o].default for o in dim.overrides if o in by_name):
                size = dim.value  # the overrides it reads are at their defaults
            elif dim.text is not None and dim.text in values:
                size = int(values[dim.text])
            else:
                size = _evaluate_wgsl(dim.text, values)
            if size is None or size < 1:
                raise self.fail(
                    f"the workgroup size {dim.text!r} of {self.entry.source} cannot be worked "
                    f"out with the overrides passed ({dict(values)})"
                )
            sizes.append(size)
        return (sizes[0], sizes[1], sizes[2])


def _evaluate_wgsl(text: str | None, values: Mapping[str, int | float]) -> int | None:
    """A workgroup-size expression over overrides (integer literals, + - * / %, names), or
    None when it uses anything else."""
    if text is None:
        return None
    plain = re.sub(r"\b(\d+)[ui]\b", r"\1", text).replace("/", "//")
    try:
        value = Expression.compile(plain).evaluate(values)
    except ExpressionError:
        return None
    return value if isinstance(value, int) else None


def plan_kernel(
    entry: KernelEntry,
    dispatch: int,
    source: str,
    *,
    extra_values: Collection[str] = (),
    extra_roles: Collection[str] = (),
) -> KernelPlan:
    """Resolve dispatch `dispatch` of `entry` against its WGSL `source`.

    Args:
        extra_values: the names an adapter adds to the values.
        extra_roles: an adapter's scratch buffers.

    Raises:
        WgslReflectionError: the parser refused the source (a KernelBuildError).
        KernelInterfaceError: the kernel's declarations do not fit the entry (the message
            names the file, the field or binding, what the kernel declares and what the op
            offers).
    """
    reflection = reflect_wgsl(source, str(entry.source))
    point, workgroup = _entry_point(entry, reflection)
    declared = _declared_bindings(entry, reflection, point)
    planned = _plan_bindings(entry, declared, dispatch, extra_roles)
    packers = _packers(entry, declared, dispatch, extra_values)
    return KernelPlan(
        entry=entry,
        dispatch=dispatch,
        source=source,
        digest=reflection.sha256,
        bindings=planned,
        packers=packers,
        overrides=_passed_overrides(entry, reflection),
        workgroup=workgroup,
        declared_overrides=reflection.overrides,
    )


def _fail(entry: KernelEntry, message: str) -> KernelInterfaceError:
    """An interface error naming the entry's slot and kernel file."""
    return KernelInterfaceError(entry.slot, entry.source, message)


def _entry_point(
    entry: KernelEntry, reflection: WgslReflection
) -> tuple[EntryPoint, tuple[WorkgroupDim, WorkgroupDim, WorkgroupDim]]:
    """The entry's compute entry point and its @workgroup_size, which it must declare."""
    compute = [e.name for e in reflection.entry_points if e.stage == "compute"]
    if entry.entry not in compute:
        raise _fail(
            entry,
            f"entry: {entry.source} has no compute entry point {entry.entry!r} (declared: "
            f"{', '.join(compute) or 'none'})",
        )
    point = reflection.entry_point(entry.entry)
    if point.workgroup_size is None:
        raise _fail(
            entry, f"{entry.source}: entry point {entry.entry!r} declares no @workgroup_size"
        )
    return point, point.workgroup_size


def _declared_bindings(
    entry: KernelEntry, reflection: WgslReflection, point: EntryPoint
) -> list[ResourceBinding]:
    """The bindings the entry point uses: buffers of @group(0), what the runtime binds."""
    used = set(point.resources)
    declared = [b for b in reflection.bindings if (b.group, b.binding) in used]
    for b in declared:
        if b.group != 0:
            raise _fail(
                entry,
                f"binding {b.binding} {b.name!r} of {entry.source} is in @group({b.group}); "
                "the webgpu runtime binds @group(0) only",
            )
        if b.kind is None:
            raise _fail(
                entry,
                f"binding {b.binding} {b.name!r} of {entry.source} is a {b.resource}; a kernel "
                "of a slot binds buffers only",
            )
    return declared


def _plan_bindings(
    entry: KernelEntry,
    declared: Sequence[ResourceBinding],
    dispatch: int,
    extra_roles: Collection[str],
) -> tuple[PlannedBinding, ...]:
    """Each binding's target: a uniform takes the params, a storage binding a role (a role
    written in the dispatch bound once)."""
    targets = entry.resolve_bindings(
        [(b.binding, b.name) for b in declared], dispatch=dispatch, extra_roles=extra_roles
    )
    planned: list[PlannedBinding] = []
    access: dict[str, str] = {}
    for b in declared:
        target = targets[b.binding]
        kind = cast(BindingKind, b.kind)
        if (kind == "uniform") != (target == PARAMS_TARGET):
            want = "a uniform packed from values ('params')" if kind == "uniform" else "a role"
            raise _fail(
                entry,
                f"binding {b.binding} {b.name!r} of {entry.source} is {_kind_text(kind)} "
                f"({b.type.name}) but is given {target!r}; it takes {want}",
            )
        if kind != "uniform":
            if target in access and "storage_rw" in (access[target], kind):
                raise _fail(
                    entry,
                    f"binding {b.binding} {b.name!r} of {entry.source} binds role {target!r} "
                    "a second time, and one of them writes it (a buffer written in a dispatch "
                    "is bound once; an out-of-place kernel writes a role of its own, sized in "
                    'the manifest: scratch.<role> = "<bytes>")',
                )
            access[target] = kind
        planned.append(PlannedBinding(b.binding, b.name, kind, target))
    return tuple(planned)


def _packers(
    entry: KernelEntry,
    declared: Sequence[ResourceBinding],
    dispatch: int,
    extra_values: Collection[str],
) -> dict[int, Packer]:
    """A packer per uniform binding, its members resolved by name (each name once)."""
    uniforms = [b for b in declared if b.kind == "uniform"]
    members: dict[str, tuple[ResourceBinding, WgslType, int]] = {}
    for b in uniforms:
        for name, wgsl_type, offset in _uniform_fields(b):
            if name in members:
                raise _fail(
                    entry,
                    f"{entry.source} declares a params member {name!r} in two uniforms "
                    f"({members[name][0].name} and {b.name}); members are filled by name",
                )
            members[name] = (b, wgsl_type, offset)
    layout = {name: f"{t.name} at offset {offset}" for name, (_, t, offset) in members.items()}
    resolved = entry.resolve_members(
        list(members), dispatch=dispatch, extra_values=extra_values, layout=layout
    )
    return {
        b.binding: Packer(
            entry.slot,
            entry.source,
            b.name,
            _uniform_fields(b),
            b.type.size or 0,
            resolved,
        )
        for b in uniforms
    }


def _passed_overrides(
    entry: KernelEntry, reflection: WgslReflection
) -> tuple[tuple[Override, Expression], ...]:
    """(declared override, its expression) of each override the entry passes; one without
    a default must be passed."""
    names = [o.name for o in reflection.overrides]
    passed = entry.resolve_overrides(names)
    by_name = {o.name: o for o in reflection.overrides}
    missing = [o.name for o in reflection.overrides if o.required and o.name not in passed]
    if missing:
        offered = ", ".join(entry.interface.values)
        raise _fail(
            entry,
            f"override {missing[0]!r} of {entry.source} has no default and no value; map it "
            f'with overrides = {{ {missing[0]} = "<expression>" }} ({entry.interface.op} '
            f"offers [{offered}])",
        )
    return tuple((by_name[name], expression) for name, expression in passed.items())


def _kind_text(kind: BindingKind) -> str:
    return {
        "uniform": "a uniform",
        "storage_ro": "read-only storage",
        "storage_rw": "read-write storage",
    }[kind]


def _uniform_fields(binding: ResourceBinding) -> list[tuple[str, WgslType, int]]:
    """(member, type, offset) of a uniform: its struct's members, or the binding itself for
    a uniform holding one scalar or vector (named after the value it holds)."""
    if binding.type.kind == "struct":
        return [(m.name, m.type, m.offset) for m in binding.type.members]
    return [(binding.name, binding.type, 0)]


class KernelCatalog:
    """Where each slot's kernel comes from for one runtime, and the plans resolved so far.

    A slot takes its manifest entry when the manifest replaces it on webgpu, else the
    project's kernel (from `shader_dir` when given: drop-in copies laid out like `wgsl/`).

    Attributes:
        shader_dir: the project kernels' folder (None: the repo's `wgsl/`).
        manifest: the user's manifest, or None.
        allow_adapters: whether a manifest's adapter classes may be imported and run.
    """

    def __init__(
        self,
        shader_dir: Path | None = None,
        manifest: KernelManifest | None = None,
        allow_adapters: bool = False,
    ) -> None:
        self.shader_dir = shader_dir
        self.manifest = manifest
        self.allow_adapters = allow_adapters
        self._builtin: dict[tuple[str, str], KernelEntry] = {}
        self._sources: dict[Path, str] = {}
        # (id of the entry, dispatch, source text, adapter names, scratch roles) -> plan; the
        # plan holds its entry, so the id is not reused while cached
        self._plans: dict[tuple[int, int, str, tuple[str, ...], tuple[str, ...]], KernelPlan] = {}

    def entry(self, slot: str, stem: str) -> KernelEntry:
        """The entry implementing `slot`: the manifest's, or the project kernel `stem`."""
        if self.manifest is not None:
            found = self.manifest.entry(BACKEND, slot)
            if found is not None:
                return found
        key = (slot, stem)
        entry = self._builtin.get(key)
        if entry is None:
            path = (self.shader_dir or shaders.WGSL_DIR) / f"{stem}.wgsl"
            entry = self._builtin[key] = builtin_entry(BACKEND, slot, path)
        return entry

    def source(self, entry: KernelEntry, stem: str) -> str:
        """The WGSL text of `entry` (a project kernel through `shaders.load_wgsl`), read
        once for the runtime's life.

        Raises:
            KernelManifestError: a manifest's file cannot be read.
        """
        if entry.builtin:
            found = self._sources.get(entry.source)
            if found is None:
                found = self._sources[entry.source] = shaders.load_wgsl(stem, self.shader_dir)
            return found
        text = self._sources.get(entry.source)
        if text is None:
            try:
                text = entry.source.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                path = self.manifest.path if self.manifest else entry.source
                raise KernelManifestError(
                    path, f"cannot read {entry.source}: {reason}", where=f"webgpu.{entry.slot}"
                ) from None
            self._sources[entry.source] = text
        return text

    def adapter(self, entry: KernelEntry) -> type[KernelAdapter] | None:
        """The entry's adapter class, or None.

        Raises:
            KernelManifestError: adapters are not allowed in this runtime, or the class
                does not load.
        """
        if entry.adapter is None:
            return None
        if not self.allow_adapters:
            path = self.manifest.path if self.manifest else entry.source
            raise KernelManifestError(
                path,
                f"names the adapter {entry.adapter}, which runs Python from the kernel folder; "
                "it runs only when allowed (WebGPURuntime(allow_adapters=True); the parity "
                "command's --allow-adapters)",
                where=f"webgpu.{entry.slot}.adapter",
            )
        return load_adapter(entry.adapter, entry.interface)

    def plan(
        self,
        entry: KernelEntry,
        dispatch: int,
        source: str,
        extra_values: tuple[str, ...] = (),
        extra_roles: tuple[str, ...] = (),
    ) -> KernelPlan:
        """`plan_kernel`, cached for the runtime's life."""
        key = (id(entry), dispatch, source, extra_values, extra_roles)
        plan = self._plans.get(key)
        if plan is None:
            plan = plan_kernel(
                entry, dispatch, source, extra_values=extra_values, extra_roles=extra_roles
            )
            self._plans[key] = plan
        return plan

    def close(self) -> None:
        """Forget the sources and plans read so far (the runtime's `close`)."""
        self._builtin.clear()
        self._sources.clear()
        self._plans.clear()

    def replaced(self) -> dict[str, str]:
        """Slot -> source file of every slot the manifest replaces on webgpu."""
        if self.manifest is None:
            return {}
        return {
            slot: str(self.manifest.entries[(BACKEND, slot)].source)
            for slot in self.manifest.slots(BACKEND)
        }
