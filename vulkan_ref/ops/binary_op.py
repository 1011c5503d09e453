"""add and mul on Vulkan: one dispatch node, flat or broadcast shader picked per execute.

`resize_binary_op_node` sets out to the broadcast of the live input sizes (refusing sizes that
do not broadcast, which upstream leaves as a TODO); the node's global size is one invocation
per output element in workgroups of 64. Broadcast offsets are computed in the shader from the
inputs' metadata UBOs.
"""

from __future__ import annotations

from graph_format import InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register

LOCAL_SIZE = (64, 1, 1)
OP_KIND = {"add": 0, "mul": 1}


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


@register("add", "mul")
def add_binary_op_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the add/mul dispatch node of `node`."""
    a = graph.tensor_arg(node, "a")
    b = graph.tensor_arg(node, "b")
    out = graph.output(node, "out")
    bad = [t.name for t in (a, b, out) if t.dtype != "float32"]
    if bad:
        raise graph.fail(node, f"{node.op} is float32 only; {bad} are not")
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

    flat, bcast = f"{node.op}_flat", f"{node.op}_broadcast"
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, a.name, b.name),
            resize_fn=resize_binary_op_node,
            pick_shader=lambda g: flat if g.sizes_of(a) == g.sizes_of(b) else bcast,
            shaders={flat: "binary_flat", bcast: "binary_broadcast"},
            pick_global=lambda g: (out.numel, 1, 1),
            local_size=LOCAL_SIZE,
            bindings=(out, a, b, out.meta, a.meta, b.meta),
            spec_constants=(OP_KIND[node.op],),
        )
    )
