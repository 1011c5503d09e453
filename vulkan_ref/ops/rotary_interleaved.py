"""apply_rotary_emb_interleaved on Vulkan: one dispatch node, one invocation per (real, imag)
pair.

As upstream's `add_rotary_embedding_interleaved_node`: x [B, N, C], freqs_cis holding N * C
(cos, sin) values, out resized to x's sizes. Unlike upstream's Vulkan op, whose shader reads
vec4 texels and so refuses C % 4 != 0, C need only be even, as upstream's WebGPU op accepts.
The freqs are [N, C] only, and the resize function checks them against x's live N (upstream
checks the element count at build time only, so a stale table would be read silently); the
global size is 1-D (numel / 2 pairs) where upstream's is (C/4, N, B).
"""

from __future__ import annotations

from graph_format import InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register
from vulkan_ref.ops.rotary import check_one_float_dtype
from vulkan_ref.tensor import VTensor

WORKGROUP = 64
PAIR = 2


def _check_shapes(
    graph: ComputeGraph, node: OpNode, x: VTensor, freqs: VTensor, out: VTensor
) -> int:
    """Refuse x that is not [B, N, C] with an even C, freqs not [N, C], out not x's sizes;
    returns C."""
    if len(x.max_sizes) != 3:
        raise graph.fail(node, f"x {list(x.max_sizes)} must have rank 3 [B, N, C]", x.name)
    width = x.max_sizes[2]
    if width % PAIR:
        raise graph.fail(node, f"C = {width} is odd: x holds (real, imag) pairs", tensor=x.name)
    if freqs.max_sizes != x.max_sizes[1:]:
        raise graph.fail(
            node, f"freqs_cis {list(freqs.max_sizes)} must be [N, C] of x", tensor=freqs.name
        )
    if out.max_sizes != x.max_sizes:
        raise graph.fail(node, f"out must be {list(x.max_sizes)}", tensor=out.name)
    return width


@register("apply_rotary_emb_interleaved")
def add_rotary_emb_interleaved_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the interleaved rotary node of `node`; freqs_cis is [N, C] at x's live N."""
    x, freqs = graph.tensor_arg(node, "x"), graph.tensor_arg(node, "freqs_cis")
    out = graph.output(node, "out")
    dtype = check_one_float_dtype(graph, node, (x, freqs, out))
    slot = graph.dtype_slot(node, "rotary_emb_interleaved", dtype)
    width = _check_shapes(graph, node, x, freqs, out)

    def fail(reason: str, message: str) -> InputError:
        return InputError(node.name, reason, f"vulkan: {node.name}: {message}")

    def resize_rotary_emb_interleaved_node(g: ComputeGraph) -> None:
        sizes = g.sizes_of(x)
        if sizes[2] != width:
            raise fail("width", f"C must stay {width}; live x {list(sizes)}")
        if g.sizes_of(freqs) != sizes[1:]:
            raise fail(
                "freqs_shape", f"freqs_cis {list(g.sizes_of(freqs))} must be {list(sizes[1:])}"
            )
        g.virtual_resize(out, sizes)

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        pairs = x.numel // PAIR
        return {
            "pairs": pairs,
            "tokens": g.sizes_of(x)[1],
            "workgroups": -(-pairs // WORKGROUP),
        }

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, x.name, freqs.name),
            resize_fn=resize_rotary_emb_interleaved_node,
            slots={slot: slot},
            tensors={"out": out, "x": x, "freqs_cis": freqs},
            static={"row_pairs": width // PAIR, "workgroup_size": WORKGROUP},
            values=values,
        )
    )
