"""sigmoid, silu and the fused silu_mul on Vulkan: one dispatch node each, one invocation per
element in workgroups of 64; the shaders read the live numel from out's metadata UBO.

sigmoid and silu share the `unary_activation` shader, specialized by the op-kind constant
(`OP_KIND`, from the value `op_kind`).
silu_mul's resize function refuses gate and up of different live sizes (no broadcasting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from graph_format import FLOAT_DTYPES, InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register
from vulkan_ref.tensor import VTensor

WORKGROUP = 64
OP_KIND = {"sigmoid": 0, "silu": 1}


def _float_dtype(graph: ComputeGraph, node: OpNode, tensors: Sequence[VTensor]) -> str:
    """The one float dtype of the op's tensors (float32, or float16 for its `_f16` slots):
    the first tensor's when it is a float type; a build error names the first tensor of
    another."""
    first = tensors[0].dtype
    want = first if first in FLOAT_DTYPES else "float32"
    for tensor in tensors:
        if tensor.dtype != want:
            raise graph.fail(
                node, f"{node.op} takes {want} here; {tensor.name!r} is not", tensor.name
            )
    return want


def elementwise_values(
    out: VTensor, workgroup: int
) -> Callable[[ComputeGraph, str], dict[str, int]]:
    """The live values of a slot with an invocation per element of out, in workgroups of
    `workgroup`: out's live numel and the count."""

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        numel = out.numel
        return {"numel": numel, "workgroups": -(-numel // workgroup)}

    return values


@register("sigmoid", "silu")
def add_unary_activation_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the sigmoid/silu dispatch node of `node`."""
    x = graph.tensor_arg(node, "x")
    out = graph.output(node, "out")
    dtype = _float_dtype(graph, node, (x, out))
    if out.max_sizes != x.max_sizes:
        raise graph.fail(
            node, f"out must be {list(x.max_sizes)} like x, got {list(out.max_sizes)}", out.name
        )

    def resize_unary_activation_node(g: ComputeGraph) -> None:
        g.virtual_resize(out, g.sizes_of(x))

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, x.name),
            resize_fn=resize_unary_activation_node,
            # sigmoid and silu share a kernel file per precision.
            slots={
                graph.dtype_slot(node, node.op, dtype): (
                    "unary_activation_f16" if dtype == "float16" else "unary_activation"
                )
            },
            tensors={"out": out, "x": x},
            static={"op_kind": OP_KIND[node.op], "workgroup_size": WORKGROUP},
            values=elementwise_values(out, WORKGROUP),
        )
    )


@register("silu_mul")
def add_silu_mul_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the fused silu(gate) * up dispatch node of `node`."""
    gate = graph.tensor_arg(node, "gate")
    up = graph.tensor_arg(node, "up")
    out = graph.output(node, "out")
    dtype = _float_dtype(graph, node, (gate, up, out))
    slot = graph.dtype_slot(node, "silu_mul", dtype)
    if up.max_sizes != gate.max_sizes:
        raise graph.fail(
            node, f"up must be {list(gate.max_sizes)} like gate, got {list(up.max_sizes)}", up.name
        )
    if out.max_sizes != gate.max_sizes:
        raise graph.fail(
            node,
            f"out must be {list(gate.max_sizes)} like gate, got {list(out.max_sizes)}",
            out.name,
        )

    def resize_silu_mul_node(g: ComputeGraph) -> None:
        if g.sizes_of(gate) != g.sizes_of(up):
            raise InputError(
                node.name,
                "shape",
                f"vulkan: {node.name}: gate {list(gate.sizes)} and up {list(up.sizes)} differ",
            )
        g.virtual_resize(out, g.sizes_of(gate))

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, gate.name, up.name),
            resize_fn=resize_silu_mul_node,
            slots={slot: slot},
            tensors={"out": out, "gate": gate, "up": up},
            static={"workgroup_size": WORKGROUP},
            values=elementwise_values(out, WORKGROUP),
        )
    )
