"""How one kernel implements one slot (`KernelEntry`, its `KernelDispatch`es), and the
binding rules: what fills each binding, params (push) member, override and specialization
constant a kernel declares, by name."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from graph_format.kernels.adapters import AdapterRef
from graph_format.kernels.errors import ExpressionError, KernelInterfaceError
from graph_format.kernels.expressions import Expression
from graph_format.kernels.format import (
    META_SUFFIX,
    PARAMS_TARGET,
    PROJECT_WORKGROUP_OVERRIDE,
    WORKGROUP_SIZE_VALUE,
    Backend,
    Count,
    SourceKind,
    Value,
)
from graph_format.signatures import SIGNATURES, SLOTS, SlotInterface


@dataclass(frozen=True)
class KernelDispatch:
    """One dispatch of a slot's kernel (a split slot has several, e.g. one per output).

    Attributes:
        bindings: explicit kernel binding (name, or index as an int) -> target: a role of
            the slot, `"params"`, or (Vulkan) `"<op tensor>.meta"`. Bindings not listed
            follow the default rule (`KernelEntry.resolve_bindings`).
        params: explicit params member -> expression; others take the same-name value.
        push: (Vulkan) explicit push-constant member -> expression; others as params.
        count: the logical workgroup count (1-D), or an explicit [x, y, z] grid.
    """

    bindings: dict[str | int, str]
    params: dict[str, Expression]
    push: dict[str, Expression]
    count: Expression | tuple[Expression, Expression, Expression]

    def workgroups(self, values: Mapping[str, Value]) -> Count:
        """The count for these values: an int >= 0, or a grid of three.

        Raises:
            ExpressionError: an expression fails, or gives a float or a negative count.
        """
        exprs = self.count if isinstance(self.count, tuple) else (self.count,)
        counts = [e.evaluate_int(values) for e in exprs]
        for expr, count in zip(exprs, counts, strict=True):
            if count < 0:
                raise ExpressionError(expr.text, f"gave a negative workgroup count {count}")
        if isinstance(self.count, tuple):
            return (counts[0], counts[1], counts[2])
        return counts[0]


def _default_target(
    name: str, backend: Backend, slot: SlotInterface, extra_roles: Collection[str] = ()
) -> str | None:
    """The target a binding called `name` takes by default, or None."""
    for role in (*slot.tensors, *extra_roles):
        if name in (role, f"t_{role}"):
            return role
    if name == PARAMS_TARGET or name in slot.values:  # a uniform of one value: packed too
        return PARAMS_TARGET
    role = name.removesuffix("_meta")
    if backend == "vulkan" and name != role and role in SIGNATURES[slot.op].tensors:
        return role + META_SUFFIX
    return None


@dataclass(frozen=True)
class KernelEntry:
    """How one kernel implements one slot on one backend: a manifest's `[<backend>.<slot>]`
    table, or the project's own kernel (`builtin_entry`).

    Attributes:
        backend: "webgpu" or "vulkan".
        slot: the slot's name (`interface` is its declaration).
        source: the shader file: WGSL, GLSL, or a SPIR-V module.
        kind: "wgsl", "glsl" or "spirv".
        entry: the entry point.
        overrides: (WebGPU) override -> expression, ONLY these are passed; None: the project
            rule (wg_size from `workgroup_size`, every other declared override that names a
            value from that value).
        spec: (Vulkan) specialization constant (name, or id as an int) -> expression, ONLY
            these are set; None: the project rule (local-size spec ids from
            `workgroup_size`, a named constant from the value of its name in lower case).
        padding: params/push members written as zero.
        padding_pattern: a regex: matching members are zero too (the project's `^_pad`).
        fold: the kernel recovers a 1-D workgroup index from a 2-D grid
            (wid.x + wid.y * num_workgroups.x), so a count past the per-dimension limit may
            be folded.
        requires: conditions over the values; a case breaking one is an expected refusal of
            this backend.
        exact: the kernel rounds alike with the kernel the other backend runs for its slot
            (the project's, or that backend's manifest entry, which must say so too): on one
            device, bit-identical outputs on bit-identical inputs, held to by the exact tier
            (docs/oracles.md "Exact equality"). A foreign kernel promises nothing unless
            its manifest says so.
        adapter: a Python class for structural differences, or None.
        defines: (Vulkan GLSL) preprocessor macro -> its text, passed to glslc as
            `-D<name>=<text>` (so a kernel written for a template compiles from its source).
        dispatches: one per dispatch, in order (one unless the manifest splits the slot).
        builtin: the project's own kernel.
        scratch: the scratch roles this section sizes, role -> bytes (an expression over the
            values fixed at load): a scratch role of the op (`part_o`) resized, or a new
            role that the op's kernels on this backend share.
        op_scratch: every scratch size the manifest's sections of this op declare on this
            backend, role -> ((slot, expression), ...): one buffer per role per op node, of
            the largest size (filled in when the manifest is parsed).
        masked_columns: (the causal attention's qk and softmax slots) whether the kernel
            writes ("written") or skips ("skipped") the masked score columns, or reads
            ("read") or ignores ("ignored") them; None: the project's behaviour.
        precision: the arithmetic the kernel computes in, "f32" (the default: f16 tensors
            are loaded to and stored from f32 arithmetic) or "f16" (an f16 slot's kernel
            that computes in f16 too): the harness derives the op's budget for that
            arithmetic (`parse_precision`; docs/oracles.md "Kernels that compute in f16").
    """

    backend: Backend
    slot: str
    source: Path
    kind: SourceKind
    dispatches: tuple[KernelDispatch, ...]
    entry: str = "main"
    overrides: dict[str, Expression] | None = None
    spec: dict[str | int, Expression] | None = None
    padding: tuple[str, ...] = ()
    padding_pattern: str | None = None
    fold: bool = False
    requires: tuple[Expression, ...] = ()
    exact: bool = False
    adapter: AdapterRef | None = None
    defines: dict[str, str] = field(default_factory=dict)
    builtin: bool = False
    scratch: dict[str, Expression] = field(default_factory=dict)
    op_scratch: dict[str, tuple[tuple[str, Expression], ...]] = field(
        default_factory=dict, compare=False
    )
    masked_columns: str | None = None
    precision: str = "f32"

    @property
    def interface(self) -> SlotInterface:
        """The slot's declared interface."""
        return SLOTS[self.slot]

    @property
    def shared_roles(self) -> tuple[str, ...]:
        """The scratch roles the manifest adds to the op on this backend (not roles of the
        slot): a kernel binds them by name like the slot's own roles."""
        own = _op_roles(self.interface.op)
        return tuple(r for r in self.op_scratch if r not in own)

    def expressions(self) -> dict[str, Expression]:
        """Every expression of the entry by its key in the manifest's table (`dispatch`,
        `params.k_bytes`, `dispatch_list[1].push.pass_index`, `requires[0]`, ...)."""
        out: dict[str, Expression] = {}
        for name, expr in (self.overrides or {}).items():
            out[f"overrides.{name}"] = expr
        for key, expr in (self.spec or {}).items():
            out[f"spec.{key}"] = expr
        for i, condition in enumerate(self.requires):
            out[f"requires[{i}]"] = condition
        for role, expr in self.scratch.items():
            out[f"scratch.{role}"] = expr
        for i, dispatch in enumerate(self.dispatches):
            at = f"dispatch_list[{i}]." if len(self.dispatches) > 1 else ""
            for block in ("params", "push"):
                for member, expr in getattr(dispatch, block).items():
                    out[f"{at}{block}.{member}"] = expr
            counts = dispatch.count if isinstance(dispatch.count, tuple) else (dispatch.count,)
            for j, count in enumerate(counts):
                out[f"{at}dispatch" + (f"[{j}]" if len(counts) > 1 else "")] = count
        return out

    def failure_text(self, err: Exception) -> str:
        """`err`'s text, opened by the manifest key of the expression it is about
        (`webgpu.q4gsw_gemm.dispatch: expression ...`) when it is an ExpressionError of
        one of this entry's expressions."""
        if isinstance(err, ExpressionError) and not self.builtin:
            keys = [k for k, e in self.expressions().items() if e.text == err.expression]
            if keys:
                return f"{self.backend}.{self.slot}.{' / '.join(keys)}: {err}"
        return str(err)

    def unmet_requirements(self, values: Mapping[str, Value]) -> list[str]:
        """The `requires` conditions these values break (empty: the kernel takes the case).

        Raises:
            ExpressionError: a condition cannot be evaluated on these values.
        """
        return [r.text for r in self.requires if not r.evaluate(values)]

    def is_padding(self, member: str) -> bool:
        """Whether `member` of the params or push block is written as zero."""
        if member in self.padding:
            return True
        return (
            self.padding_pattern is not None and re.search(self.padding_pattern, member) is not None
        )

    def resolve_members(
        self,
        declared: Sequence[str],
        *,
        dispatch: int = 0,
        block: Literal["params", "push"] = "params",
        extra_values: Collection[str] = (),
        layout: Mapping[str, str] | None = None,
    ) -> dict[str, Expression | None]:
        """What fills each member the kernel's params (or push-constant) block declares:
        its expression, or None for zero padding.

        A member takes, in order: its explicit `params.<member>` (`push.<member>`)
        expression; zero if it is padding; the value of the same name (the op's, or one of
        `extra_values`, the names an adapter adds).

        Args:
            layout: member -> where it lies ("u32 at offset 12"), for the error message.

        Raises:
            KernelInterfaceError: explicit members the block does not declare, or members
                that are neither mapped, padding, nor a value the op (or adapter) offers: all
                of them in one message (a foreign block may hold 20-odd members).
        """
        explicit = getattr(self.dispatches[dispatch], block)
        problems = []
        undeclared = [member for member in explicit if member not in declared]
        if undeclared:
            keys = ", ".join(f"{block}.{member}" for member in undeclared)
            names = ", ".join(repr(member) for member in undeclared)
            problems.append(
                f"{keys}: the {block} block of {self.source} declares no "
                f"member{'s' if len(undeclared) > 1 else ''} {names} (declared: "
                f"{', '.join(declared) or 'none'})"
            )
        resolved: dict[str, Expression | None] = {}
        missing = []
        for member in declared:
            if member in explicit:
                resolved[member] = explicit[member]
            elif self.is_padding(member):
                resolved[member] = None
            elif member in self.interface.values or member in extra_values:
                resolved[member] = Expression.compile(member)
            else:
                missing.append(member)
        if missing:
            shown = ", ".join(
                repr(m) + (f" ({layout[m]})" if layout and m in layout else "") for m in missing
            )
            offered = f"{self.interface.op} offers [{', '.join(self.interface.values)}]"
            if extra_values:
                offered += f", its adapter adds [{', '.join(extra_values)}]"
            if len(missing) == 1:
                problems.append(
                    f"{block} member {shown} of {self.source} has no value; {offered}; map it "
                    f'with {block}.{missing[0]} = "<expression>" or list it in padding'
                )
            else:
                problems.append(
                    f"{block} members {shown} of {self.source} have no value ({len(missing)} "
                    f"of {len(declared)} members); {offered}; map each with "
                    f'{block}.<member> = "<expression>" or list it in padding'
                )
        if problems:
            raise KernelInterfaceError(self.slot, self.source, "; and ".join(problems))
        return resolved

    def resolve_bindings(
        self,
        declared: Sequence[tuple[int, str | None]],
        *,
        dispatch: int = 0,
        extra_roles: Collection[str] = (),
    ) -> dict[int, str]:
        """The target of each binding the kernel declares, as (index, name or None), by
        index: a role, "params" or (Vulkan) "<role>.meta".

        A binding takes, in order: an explicit `bindings` entry by index, then by name; the
        role of its name or of its name minus a `t_` prefix (the slot's roles, then
        `extra_roles`: an adapter's scratch buffers); "params" for a binding named `params`
        or after one of the slot's values (a uniform of one value, such as the project
        GLSL's `input_pos`); (Vulkan) `<tensor>.meta` for a name `<tensor>_meta` of an op
        tensor.

        Raises:
            KernelInterfaceError: an explicit entry the kernel does not declare, or a binding
                no rule fills (the message lists what the kernel declares and the roles).
        """
        explicit = self.dispatches[dispatch].bindings
        names = {name: index for index, name in declared if name is not None}
        indices = {index for index, _ in declared}
        listed = ", ".join(f"{i} {n!r}" if n else str(i) for i, n in declared) or "none"
        roles = [*self.interface.tensors, *extra_roles]
        for key in explicit:
            if key not in (indices if isinstance(key, int) else names):
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"bindings.{key}: {self.source} declares no binding {key!r} "
                    f"(declared: {listed})",
                )
        resolved: dict[int, str] = {}
        for index, name in declared:
            target = explicit.get(index)
            if target is None and name is not None:
                target = explicit.get(name) or _default_target(
                    name, self.backend, self.interface, extra_roles
                )
            if target is None:
                shown = f"{index} ({name!r})" if name else f"{index} (unnamed)"
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"binding {shown} of {self.source} fills no role of the slot (the kernel "
                    f"declares: {listed}; the slot's roles: {', '.join(roles)}; or 'params'); "
                    f'map it with bindings = {{ {name or index} = "<role>" }}',
                )
            resolved[index] = target
        return resolved

    def resolve_overrides(self, declared: Sequence[str]) -> dict[str, Expression]:
        """The overrides to pass, by the name the kernel declares (WebGPU).

        Raises:
            KernelInterfaceError: an override of the entry that the kernel does not declare.
        """
        if self.overrides is None:
            rule = {PROJECT_WORKGROUP_OVERRIDE: WORKGROUP_SIZE_VALUE}
            return {
                name: Expression.compile(rule.get(name, name))
                for name in declared
                if rule.get(name, name) in self.interface.values
            }
        for name in self.overrides:
            if name not in declared:
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"override {name!r} is not declared in {self.source} (declared: "
                    f"{', '.join(declared) or 'none'})",
                )
        return dict(self.overrides)

    def resolve_spec(
        self, declared: Sequence[tuple[int, str | None]], local_size_ids: Iterable[int] = ()
    ) -> dict[int, Expression]:
        """The specialization constants to set, by id (Vulkan). `declared` are the named
        constants as (id, name or None); `local_size_ids` the spec ids of the local size.

        Raises:
            KernelInterfaceError: a constant of the entry that the kernel does not declare.
        """
        local_ids = set(local_size_ids)
        if self.spec is None:
            rule = {i: Expression.compile(WORKGROUP_SIZE_VALUE) for i in sorted(local_ids)}
            for spec_id, name in declared:
                for candidate in (name, name.lower()) if name else ():
                    if spec_id not in rule and candidate in self.interface.values:
                        rule[spec_id] = Expression.compile(candidate)
            return rule
        by_name = {name: spec_id for spec_id, name in declared if name is not None}
        ids = {spec_id for spec_id, _ in declared} | local_ids
        resolved: dict[int, Expression] = {}
        for key, expr in self.spec.items():
            found = key if isinstance(key, int) else by_name.get(key)
            if found is None or found not in ids:
                listed = [f"{i} {n!r}" if n else str(i) for i, n in declared]
                listed += [f"{i} (local size)" for i in sorted(local_ids)]
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"specialization constant {key!r} is not declared in {self.source} "
                    f"(declared: {', '.join(listed) or 'none'})",
                )
            resolved[found] = expr
        return resolved


def _op_roles(op: str) -> set[str]:
    """Every role of every slot of `op`: its tensors and its own scratch buffers."""
    return {role for s in SIGNATURES[op].slots.values() for role in s.tensors}
