"""add and mul on Vulkan: one dispatch node, flat or broadcast slot picked per execute.

`resize_binary_op_node` sets out to the broadcast of the live input sizes (refusing sizes that
do not broadcast, which upstream leaves as a TODO); the count is one invocation per output
element in workgroups of 64. The project's broadcast kernel computes its offsets from the
inputs' metadata UBOs; the broadcast slot also offers them as values (`out_sizes`,
`a_strides`, `b_strides`) for kernels that take them as params. With a float scalar instead
of b (`x + 3.0`), the `<op>_scalar` slot alone (`<op>_scalar_f16` for f16 a and out), the
scalar a specialization constant (`SCALAR`, from the value `scalar`).
"""

from __future__ import annotations

import math

import numpy as np

from graph_format import FLOAT_DTYPES, InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register
from vulkan_ref.ops.activation import elementwise_values

WORKGROUP = 64
RANK = 4  # the vectors of the broadcast slot's values: out's dims right-aligned to 4
OP_KIND = {"add": 0, "mul": 1}
FLOAT32_MAX = float(np.finfo(np.float32).max)


def broadcast_sizes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """Sizes of a broadcast of `a` and `b` (aligned at the innermost dim), None if invalid."""
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        sa = a[-i] if i <= len(a) else 1
        sb = b[-i] if i <= len(b) else 1
        if sa == sb or sb == 1:
            out.append(sa)
        elif sa == 1:
            out.append(sb)
        else:
            return None
    return tuple(reversed(out))


def broadcast_strides(sizes: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a tensor of live `sizes` along the RANK dims of `out`, both
    right-aligned with leading 1s: 0 where it broadcasts (a dim of 1 under a larger one)."""
    padded = (1,) * (RANK - len(sizes)) + sizes
    padded_out = (1,) * (RANK - len(out)) + out
    strides = []
    for d in range(RANK):
        step = math.prod(padded[d + 1 :])
        strides.append(step if padded[d] == padded_out[d] and padded[d] != 1 else 0)
    return tuple(strides)


@register("add", "mul")
def add_binary_op_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the add/mul dispatch node of `node`."""
    has_b = node.optional_arg("b") is not None
    if has_b == (node.optional_arg("scalar") is not None):
        raise graph.fail(node, f"{node.op} takes a tensor b or a scalar: exactly one of them")
    if not has_b:
        add_scalar_op_node(graph, node)
        return
    a = graph.tensor_arg(node, "a")
    b = graph.tensor_arg(node, "b")
    out = graph.output(node, "out")
    dtype = a.dtype
    bad = [t.name for t in (a, b, out) if t.dtype != dtype or dtype not in FLOAT_DTYPES]
    if bad:
        raise graph.fail(node, f"{node.op} takes all float32 or all float16; {bad} are not")
    too_big = [t.name for t in (a, b, out) if len(t.max_sizes) > 4]
    if too_big:
        raise graph.fail(node, f"{node.op} supports rank <= 4; {too_big} exceed it")
    if broadcast_sizes(a.max_sizes, b.max_sizes) != out.max_sizes:
        raise graph.fail(
            node,
            f"out {list(out.max_sizes)} is not the broadcast of {list(a.max_sizes)} and "
            f"{list(b.max_sizes)}",
            tensor=out.name,
        )

    def resize_binary_op_node(g: ComputeGraph) -> None:
        sizes = broadcast_sizes(g.sizes_of(a), g.sizes_of(b))
        if sizes is None:
            raise InputError(
                node.name,
                "broadcast",
                f"vulkan: {node.name}: cannot broadcast {list(a.sizes)} with {list(b.sizes)}",
            )
        g.virtual_resize(out, sizes)

    # Half precision: the `_f16` slots, whose kernels are the `_f16` files.
    flat = graph.dtype_slot(node, f"{node.op}_flat", dtype)
    bcast = graph.dtype_slot(node, f"{node.op}_broadcast", dtype)
    suffix = "_f16" if dtype == "float16" else ""

    def values(g: ComputeGraph, slot: str) -> dict[str, int | tuple[int, ...]]:
        numel = out.numel
        live: dict[str, int | tuple[int, ...]] = {
            "numel": numel,
            "workgroups": -(-numel // WORKGROUP),
        }
        if slot == bcast:
            sizes = g.sizes_of(out)
            live["out_sizes"] = (1,) * (RANK - len(sizes)) + sizes
            live["a_strides"] = broadcast_strides(g.sizes_of(a), sizes)
            live["b_strides"] = broadcast_strides(g.sizes_of(b), sizes)
        return live

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, a.name, b.name),
            resize_fn=resize_binary_op_node,
            slots={flat: f"binary_flat{suffix}", bcast: f"binary_broadcast{suffix}"},
            pick_slot=lambda g: flat if g.sizes_of(a) == g.sizes_of(b) else bcast,
            tensors={"out": out, "a": a, "b": b},
            static={"op_kind": OP_KIND[node.op], "workgroup_size": WORKGROUP},
            values=values,
        )
    )


def add_scalar_op_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the `<op>_scalar` dispatch node of `node`: a with a float literal."""
    scalar = float(graph.scalar_arg(node, "scalar"))
    if not abs(scalar) <= FLOAT32_MAX:
        raise graph.fail(node, f"scalar {scalar} does not fit a finite float32")
    a = graph.tensor_arg(node, "a")
    out = graph.output(node, "out")
    if a.dtype != out.dtype or a.dtype not in FLOAT_DTYPES:
        raise graph.fail(
            node,
            f"{node.op} takes a and out both float32 or both float16; "
            f"they are {a.dtype} and {out.dtype}",
        )
    too_big = [t.name for t in (a, out) if len(t.max_sizes) > 4]
    if too_big:
        raise graph.fail(node, f"{node.op} supports rank <= 4; {too_big} exceed it")
    if out.max_sizes != a.max_sizes:
        raise graph.fail(
            node, f"out {list(out.max_sizes)} must be a's {list(a.max_sizes)}", tensor=out.name
        )

    def resize_scalar_op_node(g: ComputeGraph) -> None:
        g.virtual_resize(out, g.sizes_of(a))

    # Half precision: the `_f16` slot (f16 a and out, the scalar a float constant).
    slot = graph.dtype_slot(node, f"{node.op}_scalar", a.dtype)
    suffix = "_f16" if a.dtype == "float16" else ""
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, a.name),
            resize_fn=resize_scalar_op_node,
            slots={slot: f"binary_scalar{suffix}"},
            tensors={"out": out, "a": a},
            static={"op_kind": OP_KIND[node.op], "scalar": scalar, "workgroup_size": WORKGROUP},
            values=elementwise_values(out, WORKGROUP),
        )
    )
