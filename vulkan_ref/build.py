"""A slot's kernel built at load, once per entry and values fixed at load (`build_kernel`:
its `requires` over those values checked, specialization constants and local size, a
pipeline and the bytes packed once per dispatch), then bound to one node's buffers
(`bind_parts`); a manifest entry's adapter made for a node (`make_adapter`).
`vulkan_ref.graph` calls these for every slot a dispatch node may pick (docs/design.md §4.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from graph_format import SLOTS, GraphBuildError
from graph_format.kernels import (
    PARAMS_TARGET,
    WORKGROUPS_VALUE,
    Expression,
    ExpressionError,
    KernelAdapter,
    KernelEntry,
    KernelRequirementError,
    Value,
    adapter_provides,
    load_adapter,
)
from vulkan_ref.binding import (
    BlockLayout,
    PackError,
    ResolvedBinding,
    ResolvedKernel,
    kernel_failure,
    spec_value,
)
from vulkan_ref.memory import Buffer
from vulkan_ref.nodes import WG, BoundPart, ParamsUBO, Values, adapter_failure, call_adapter
from vulkan_ref.pipeline import (
    ComputePipeline,
    DescriptorLayout,
    PipelineCache,
    ShaderKey,
    SpecValue,
)
from vulkan_ref.pool import Arena, BoundRange
from vulkan_ref.tensor import VTensor


@dataclass(frozen=True)
class PartPlan:
    """One dispatch of a kernel built for some values fixed at load, before any node's
    buffers: its pipeline, what each descriptor binds, the bytes packed once."""

    index: int
    pipeline: ComputePipeline
    descriptors: DescriptorLayout
    bindings: tuple[ResolvedBinding, ...]
    tensors: tuple[str | None, ...]  # per binding: the tensor it binds (`tensor`), if any
    count: Expression | tuple[Expression, Expression, Expression]
    push: BlockLayout | None
    push_data: bytes | None
    params_data: Mapping[int, bytes]  # binding -> a params block fixed at load


@dataclass(frozen=True)
class KernelBuild:
    """A kernel built for some values fixed at load (`ComputeGraph._build`)."""

    local_size: WG
    parts: tuple[PartPlan, ...]
    live_requires: tuple[Expression, ...]
    simple: bool  # one dispatch of the op's count, nothing else packed per resize


def build_kernel(
    pipelines: PipelineCache,
    max_invocations: int,
    op: str,
    entry: KernelEntry,
    resolved: ResolvedKernel,
    static: dict[str, Value],
) -> KernelBuild:
    """What a slot's kernel is for these values fixed at load, whatever node binds it:
    `requires` over fixed values checked, specialization constants and local size, a
    pipeline and the fixed bytes per dispatch. Made once per entry, content and values
    (cached with the pipelines)."""
    for condition in entry.requires:  # a refusal is this graph's: never cached
        if condition.names <= static.keys() and not _holds(entry, condition, static, op):
            raise KernelRequirementError(op, entry.slot, condition.text, entry.source)
    key = ("build", id(resolved), tuple(sorted(static.items())))
    cached = pipelines.kernels.get(key)
    if isinstance(cached, tuple) and cached[0] is resolved:
        build: KernelBuild = cached[1]
        return build

    spec = _spec_values(entry, resolved, static)
    local_size = _local_size(resolved, spec)
    if min(local_size) < 1 or math.prod(local_size) > max_invocations:
        raise GraphBuildError(
            op,
            f"vulkan: the kernel of slot {entry.slot} ({entry.source}) has local size "
            f"{local_size}; the device allows 1 to {max_invocations} invocations per "
            "workgroup",
        )
    plans = _plans(pipelines, entry, resolved, static, spec)
    live_requires = tuple(c for c in entry.requires if not c.names <= static.keys())
    (only, *more) = plans
    simple = (  # the op's count is all that changes at a resize
        not more
        and isinstance(only.count, Expression)
        and only.count.text == WORKGROUPS_VALUE
        and len(only.params_data) == sum(b.params is not None for b in only.bindings)
        and (only.push is None or only.push_data is not None)
        and not live_requires
    )
    build = KernelBuild(local_size, tuple(plans), live_requires, simple)
    pipelines.kernels[key] = (resolved, build)  # held: its id stays its own
    return build


def _spec_values(entry: KernelEntry, resolved: ResolvedKernel, static: Values) -> list[SpecValue]:
    """The kernel's specialization constants for the values fixed at load."""
    spec: list[SpecValue] = []
    for spec_id, (fmt, expr) in sorted(resolved.spec.items()):
        live = sorted(expr.names - static.keys())
        if live:
            raise kernel_failure(
                entry,
                f"specialization constant {spec_id} = {expr.text!r} reads {', '.join(live)}, "
                "which change with the live sizes; a specialization constant is fixed when "
                f"the pipeline is built, at load (values fixed at load: "
                f"{', '.join(sorted(static))})",
            )
        value = _evaluate_static(entry, expr, static, f"specialization constant {spec_id}")
        spec.append((spec_id, fmt, spec_value(entry, spec_id, fmt, value)))
    return spec


def _local_size(resolved: ResolvedKernel, spec: list[SpecValue]) -> WG:
    """The kernel's local size: its declared one, with the axes a specialization constant
    sets taken from `spec`."""
    chosen = {spec_id: value for spec_id, _, value in spec}
    ids, defaults = resolved.local_size_ids, resolved.local_size_defaults
    local = tuple(
        int(chosen[i]) if i is not None and i in chosen else default
        for i, default in zip(ids, defaults, strict=True)
    )
    return (local[0], local[1], local[2])


def _plans(
    pipelines: PipelineCache,
    entry: KernelEntry,
    resolved: ResolvedKernel,
    static: Values,
    spec: list[SpecValue],
) -> list[PartPlan]:
    """Per dispatch of the kernel's entry: its pipeline and the bytes packed once."""
    plans = []
    for index, dispatch in enumerate(resolved.dispatches):
        params_data = {
            b.binding: _pack_static(entry, b.params, static)
            for b in dispatch.bindings
            if b.params is not None and b.params.names <= static.keys()
        }
        push = dispatch.push
        push_data = None
        if push is not None and push.names <= static.keys():
            push_data = _pack_static(entry, push, static)
        descriptors = tuple((b.binding, b.kind) for b in dispatch.bindings)
        shader = ShaderKey(
            resolved.kernel.sha256,
            entry.entry,
            descriptors,
            push.size if push is not None else 0,
            tuple(spec),
        )
        pipeline = pipelines.get(shader, resolved.kernel.code)
        if pipeline.messages:  # the validation layer refused the shader or its pipeline
            raise kernel_failure(entry, "\n".join(pipeline.messages))
        plans.append(
            PartPlan(
                index,
                pipeline,
                descriptors,
                dispatch.bindings,
                tuple(b.tensor for b in dispatch.bindings),
                dispatch.count,
                push,
                push_data,
                params_data,
            )
        )
    return plans


def bind_parts(
    build: KernelBuild,
    op: str,
    tensors: Mapping[str, VTensor],
    uniforms: Mapping[str, Buffer],
    arena: Arena,
) -> tuple[BoundPart, ...]:
    """Each dispatch of a built kernel bound to one node's buffers: its tensors by role, a
    uniform the op keeps for a single value, else a params UBO of its own (written here when
    it holds only values fixed at load)."""
    parts = []
    for plan in build.parts:
        ranges: list[BoundRange] = []
        params: list[ParamsUBO] = []
        for b, tensor in zip(plan.bindings, plan.tensors, strict=True):
            if tensor is not None:
                found = tensors.get(tensor)
                if found is None:  # the op module's bug: it hands every role of its slots
                    raise ValueError(f"{op}: no tensor {tensor!r} ({sorted(tensors)})")
                ranges.append(found.buffer if b.kind == "storage" else found.meta)
            elif b.single_value is not None and b.single_value in uniforms:
                ranges.append(uniforms[b.single_value])
            else:
                assert b.params is not None
                ubo = ParamsUBO(arena.uniform(b.params.size), b.params)
                ranges.append(ubo.buffer)
                packed = plan.params_data.get(b.binding)
                if packed is not None:  # fixed at load: packed once
                    ubo.written = packed
                    ubo.buffer.write(0, packed)
                else:
                    params.append(ubo)
        parts.append(
            BoundPart(
                plan.index,
                plan.pipeline,
                plan.descriptors,
                tuple(ranges),
                plan.count,
                plan.push,
                plan.push_data,
                tuple(params),
            )
        )
    return tuple(parts)


def make_adapter(
    op: str,
    entry: KernelEntry,
    static: Mapping[str, Value],
    roles: Mapping[str, VTensor],
    scratch_bytes: Callable[[str, str, int], VTensor],
) -> tuple[KernelAdapter, tuple[str, ...], dict[str, VTensor]]:
    """The entry's adapter for a node of `op` (whose tensors by role are `roles`), the
    values it adds, its scratch buffers by role (made by `scratch_bytes(owner, label,
    nbytes)`).

    Raises:
        KernelManifestError: the adapter's module does not import, lacks the class, or
            its `provides` names a value the slot offers.
        KernelBuildError: the adapter's own code fails, or asks for bad scratch.
    """
    assert entry.adapter is not None
    cls = load_adapter(entry.adapter, entry.interface)
    adapter = call_adapter(op, entry, "__init__", cls, MappingProxyType(dict(static)))
    sizes = call_adapter(op, entry, "scratch", adapter.scratch)
    if not isinstance(sizes, Mapping):
        raise adapter_failure(op, entry, f"scratch() returned {sizes!r}, not a mapping")
    taken = {*roles, *SLOTS[entry.slot].tensors, *entry.shared_roles, PARAMS_TARGET}
    scratch: dict[str, VTensor] = {}
    for role, nbytes in sizes.items():
        if not isinstance(role, str) or not role.isidentifier() or role in taken:
            raise adapter_failure(
                op,
                entry,
                f"scratch() names {role!r}; a scratch role is a new name (taken: "
                f"{', '.join(sorted(taken))})",
            )
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
            raise adapter_failure(
                op, entry, f"scratch() gives {role} {nbytes!r} bytes; expected an int >= 1"
            )
        scratch[role] = scratch_bytes(op, f"{entry.slot}.{role}", nbytes)
    return adapter, adapter_provides(cls), scratch


def _evaluate_static(entry: KernelEntry, expr: Expression, static: Values, what: str) -> Value:
    """An expression over the values fixed at load (a build error if it fails)."""
    try:
        value = expr.evaluate(static)
    except ExpressionError as err:
        raise kernel_failure(entry, f"{what}: {err}") from None
    assert not isinstance(value, bool)  # not a condition
    return value


def _holds(entry: KernelEntry, condition: Expression, values: Values, op: str) -> bool:
    """Whether a `requires` condition holds (a build error if it cannot be evaluated)."""
    try:
        return bool(condition.evaluate(values))
    except ExpressionError as err:
        raise kernel_failure(entry, f"requires {condition.text!r}: {err}", op) from None


def _pack_static(entry: KernelEntry, layout: BlockLayout, static: Values) -> bytes:
    """A block that reads only values fixed at load, packed once."""
    try:
        return layout.pack(static)
    except PackError as err:
        raise kernel_failure(entry, str(err)) from None
