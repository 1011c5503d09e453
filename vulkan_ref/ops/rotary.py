"""apply_rotary_emb and apply_rotary_emb_hf on Vulkan: one dispatch node rotating q and k.

One invocation per rotated pair (q's, then k's): (numel(xq) + numel(xk)) / 2 from live
sizes, so any even D, any batch and different q and k head counts work (upstream's
shader does 8 elements per thread, drops D % 8 tails and only batch 0, docs/design.md §8.9). The
HF shader binds the start_pos SymInt's UBO and reads each half's own table columns (upstream
reads column i for both halves, docs/design.md §8.5). The resize functions check live shapes and
`start_pos + S <= rows` before anything is recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from graph_format import FLOAT_DTYPES, InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.nodes import SymInt
from vulkan_ref.ops import register
from vulkan_ref.tensor import VTensor

WORKGROUP = 64


def _pair_values(
    xq: VTensor, xk: VTensor, position: Callable[[], int] | None
) -> Callable[[ComputeGraph, str], dict[str, int]]:
    """The live values of a rotary slot: the pairs of q and k, S, the head counts (and, for
    the HF tables, start_pos)."""

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        q, k = g.sizes_of(xq), g.sizes_of(xk)
        q_pairs = xq.numel // 2
        total = q_pairs + xk.numel // 2
        live = {
            "q_pairs": q_pairs,
            "total_pairs": total,
            "seq": q[1],
            "q_heads": q[2],
            "k_heads": k[2],
            "workgroups": -(-total // WORKGROUP),
        }
        if position is not None:
            live["start_pos"] = position()
        return live

    return values


def check_one_float_dtype(graph: ComputeGraph, node: OpNode, tensors: tuple[VTensor, ...]) -> str:
    """Refuse mixed dtypes: all float32 or all float16 (the `_f16` slot), as the first tensor's
    type says (any other first type asks for float32); returns that dtype."""
    dtype = tensors[0].dtype if tensors[0].dtype in FLOAT_DTYPES else "float32"
    for tensor in tensors:
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"{node.op} takes all {dtype}; {tensor.name!r} is {tensor.dtype}", tensor.name
            )
    return dtype


def check_qk_build(graph: ComputeGraph, node: OpNode, xq: VTensor, xk: VTensor) -> int:
    """Refuse xq/xk that are not [B, S, H, D] with one even D and one B, S; returns D."""
    for tensor in (xq, xk):
        if len(tensor.max_sizes) != 4:
            raise graph.fail(node, f"{tensor.name!r} must have rank 4 [B, S, H, D]", tensor.name)
    dim = xq.max_sizes[3]
    if dim % 2:
        raise graph.fail(node, f"D = {dim} is odd; rotary pairs need an even D", tensor=xq.name)
    if xk.max_sizes[3] != dim or xk.max_sizes[:2] != xq.max_sizes[:2]:
        raise graph.fail(
            node,
            f"xk {list(xk.max_sizes)} and xq {list(xq.max_sizes)} differ in B, S or D",
            xk.name,
        )
    return dim


def _check_build(
    graph: ComputeGraph, node: OpNode, cos: VTensor, sin: VTensor, width_of_d: int
) -> None:
    """Load-time checks shared by both variants; tables have D / width_of_d columns."""
    xq, xk = graph.tensor_arg(node, "xq"), graph.tensor_arg(node, "xk")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    check_one_float_dtype(graph, node, (xq, xk, cos, sin, xq_out, xk_out))
    width = check_qk_build(graph, node, xq, xk) // width_of_d
    if len(cos.max_sizes) != 2 or cos.max_sizes[1] != width:
        raise graph.fail(
            node, f"{cos.name!r} {list(cos.max_sizes)} must be [rows, {width}]", tensor=cos.name
        )
    if sin.max_sizes != cos.max_sizes:
        raise graph.fail(node, f"{sin.name!r} and {cos.name!r} differ in size", tensor=sin.name)
    if xq_out.max_sizes != xq.max_sizes:
        raise graph.fail(node, f"xq_out must be {list(xq.max_sizes)}", tensor=xq_out.name)
    if xk_out.max_sizes != xk.max_sizes:
        raise graph.fail(node, f"xk_out must be {list(xk.max_sizes)}", tensor=xk_out.name)


def refusal(node: OpNode, reason: str, message: str) -> InputError:
    """The InputError of a live size the rope refuses (`reason` is its key)."""
    return InputError(node.name, reason, f"vulkan: {node.name}: {message}")


def check_live_qk(g: ComputeGraph, node: OpNode, xq: VTensor, xk: VTensor) -> int:
    """Refuse live q/k sizes the kernel cannot rotate; returns the live S."""
    dim = xq.max_sizes[3]
    q, k = g.sizes_of(xq), g.sizes_of(xk)
    if q[3] != dim or k[3] != dim:
        raise refusal(node, "head_dim", f"D must stay {dim}; live xq {list(q)}, xk {list(k)}")
    if k[:2] != q[:2]:
        raise refusal(node, "qk_shape", f"xk {list(k)} and xq {list(q)} differ in B or S")
    return q[1]


@register("apply_rotary_emb")
def add_rotary_emb_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the Llama (pair-interleaved) rotary node of `node`; freqs are [S, D/2] live."""
    cos, sin = graph.tensor_arg(node, "freqs_cos"), graph.tensor_arg(node, "freqs_sin")
    _check_build(graph, node, cos, sin, 2)
    xq, xk = graph.tensor_arg(node, "xq"), graph.tensor_arg(node, "xk")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    half = xq.max_sizes[3] // 2
    slot = graph.dtype_slot(node, "rotary_emb", xq.dtype)

    def resize_rotary_emb_node(g: ComputeGraph) -> None:
        seq = check_live_qk(g, node, xq, xk)
        if g.sizes_of(cos) != (seq, half) or g.sizes_of(sin) != g.sizes_of(cos):
            raise refusal(
                node,
                "freqs_shape",
                f"freqs {list(cos.sizes)} / {list(sin.sizes)} must be [{seq}, {half}]",
            )
        g.virtual_resize(xq_out, g.sizes_of(xq))
        g.virtual_resize(xk_out, g.sizes_of(xk))

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(xq_out.name, xk_out.name, xq.name, xk.name, cos.name, sin.name),
            resize_fn=resize_rotary_emb_node,
            slots={slot: slot},
            tensors={
                "xq_out": xq_out,
                "xk_out": xk_out,
                "xq": xq,
                "xk": xk,
                "freqs_cos": cos,
                "freqs_sin": sin,
            },
            static={"half_dim": half, "workgroup_size": WORKGROUP},
            values=_pair_values(xq, xk, None),
        )
    )


@register("apply_rotary_emb_hf")
def add_rotary_emb_hf_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the HF (rotate-half) rotary node of `node`; tables are [rows, D], rows start_pos+s."""
    cos, sin = graph.tensor_arg(node, "cos"), graph.tensor_arg(node, "sin")
    _check_build(graph, node, cos, sin, 1)
    xq, xk = graph.tensor_arg(node, "xq"), graph.tensor_arg(node, "xk")
    xq_out, xk_out = graph.output(node, "xq_out"), graph.output(node, "xk_out")
    dim = xq.max_sizes[3]
    slot = graph.dtype_slot(node, "rotary_emb_hf", xq.dtype)
    start_pos = graph.symint_arg(node, "start_pos")

    def position() -> int:
        return start_pos.value if isinstance(start_pos, SymInt) else start_pos

    def resize_rotary_emb_hf_node(g: ComputeGraph) -> None:
        seq = check_live_qk(g, node, xq, xk)
        table = g.sizes_of(cos)
        if g.sizes_of(sin) != table or table[1] != dim:
            raise refusal(
                node, "table_shape", f"tables {list(table)} / {list(sin.sizes)} need {dim} columns"
            )
        pos = position()
        if pos < 0 or pos + seq > table[0]:
            raise refusal(
                node, "start_pos", f"rows {pos}..{pos + seq - 1} are not all in the {table[0]} rows"
            )
        g.virtual_resize(xq_out, g.sizes_of(xq))
        g.virtual_resize(xk_out, g.sizes_of(xk))

    symint_args = (start_pos.name,) if isinstance(start_pos, SymInt) else ()
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(xq_out.name, xk_out.name, xq.name, xk.name, cos.name, sin.name, *symint_args),
            resize_fn=resize_rotary_emb_hf_node,
            slots={slot: slot},
            tensors={
                "xq_out": xq_out,
                "xk_out": xk_out,
                "xq": xq,
                "xk": xk,
                "cos": cos,
                "sin": sin,
            },
            static={"half_dim": dim // 2, "workgroup_size": WORKGROUP},
            values=_pair_values(xq, xk, position),
            uniforms={"start_pos": graph.int_ubo(node, "start_pos")},
        )
    )
