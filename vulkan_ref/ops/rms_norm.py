"""rms_norm on Vulkan: a dispatch node with one 64-lane workgroup per row.

The shader reads the live row width and row count from x's metadata UBO; the node's
count is one workgroup per live row, and the vec4 slot is picked when the live width is a
multiple of 4; in half precision (float16 x, weight and out) the one `rms_norm_f16` slot at
every width. The resize function keeps out at x's live sizes and refuses a live width
other than the weight's length (upstream silently used the build-time width).
"""

from __future__ import annotations

from graph_format import FLOAT_DTYPES, InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register

WORKGROUP = 64  # lanes per row; a power of two (tree reduction)


@register("rms_norm")
def add_rms_norm_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the rms_norm dispatch node of `node`."""
    x = graph.tensor_arg(node, "x")
    weight = graph.tensor_arg(node, "weight")
    out = graph.output(node, "out")
    eps = float(graph.scalar_arg(node, "eps"))
    dtype = x.dtype
    bad = [t.name for t in (x, weight, out) if t.dtype != dtype or dtype not in FLOAT_DTYPES]
    if bad:
        raise graph.fail(node, f"rms_norm takes all float32 or all float16; {bad} are not")
    if len(weight.max_sizes) != 1 or weight.max_sizes[0] != x.max_sizes[-1]:
        raise graph.fail(
            node,
            f"weight must be [{x.max_sizes[-1]}] to match x's width, got {list(weight.max_sizes)}",
            tensor=weight.name,
        )
    if out.max_sizes != x.max_sizes:
        raise graph.fail(
            node,
            f"out must be {list(x.max_sizes)} like x, got {list(out.max_sizes)}",
            tensor=out.name,
        )

    def resize_rms_norm_node(g: ComputeGraph) -> None:
        sizes = g.sizes_of(x)
        if sizes[-1] != weight.max_sizes[0]:
            raise InputError(
                node.name,
                "row_width",
                f"vulkan: {node.name}: live width {sizes[-1]} of {x.name!r} differs from the "
                f"weight length {weight.max_sizes[0]}",
            )
        g.virtual_resize(out, sizes)

    if dtype == "float16":
        half = graph.dtype_slot(node, "rms_norm", dtype)
        slots = {half: half}
    else:
        slots = {"rms_norm": "rms_norm", "rms_norm_vec4": "rms_norm_vec4"}

    def pick_slot(g: ComputeGraph) -> str:
        if dtype == "float16":
            return half
        return "rms_norm_vec4" if g.sizes_of(x)[-1] % 4 == 0 else "rms_norm"

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        rows = x.numel // g.sizes_of(x)[-1]
        return {"num_rows": rows, "workgroups": rows}

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, x.name, weight.name),
            resize_fn=resize_rms_norm_node,
            slots=slots,
            pick_slot=pick_slot,
            tensors={"out": out, "x": x, "weight": weight},
            static={"row_width": weight.max_sizes[0], "eps": eps, "workgroup_size": WORKGROUP},
            values=values,
        )
    )
