"""update_cache on Vulkan (upstream's `update_cache_impl` in `SDPA.cpp`): one dispatch node.

The node's resize function checks value's live shape, `input_pos >= 0` and `input_pos + S <=
C` and raises before anything is recorded, so a refused step leaves the cache as it was
(upstream's shader drops rows past the end silently, docs/design.md §8.8). The shader reads
S, H and D from value's metadata UBO and input_pos from the SymInt's UBO (a constant UBO for
an int literal); the cache is a state tensor updated in place, the op has no output.
"""

from __future__ import annotations

from graph_format import InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.nodes import SymInt
from vulkan_ref.ops import register
from vulkan_ref.tensor import VTensor

WORKGROUP = 64


def _check_build(
    graph: ComputeGraph, node: OpNode, value: VTensor, cache: VTensor
) -> tuple[int, int, int]:
    """Refuse a value or cache that is not float32 [1, ., H, D], a cache that is not a state
    tensor or does not hold value's H and D; returns the cache's rows, H and D."""
    for tensor in (value, cache):
        if tensor.dtype != "float32":
            raise graph.fail(
                node, f"update_cache is float32 only; {tensor.name!r} is not", tensor.name
            )
        if len(tensor.max_sizes) != 4 or tensor.max_sizes[0] != 1:
            raise graph.fail(
                node, f"{tensor.name!r} {list(tensor.max_sizes)} must be [1, ., ., .]", tensor.name
            )
    if not cache.is_state:
        raise graph.fail(node, f"{cache.name!r} must be a state tensor", tensor=cache.name)
    _, _, heads, dim = value.max_sizes
    if cache.max_sizes[2:] != (heads, dim):
        raise graph.fail(
            node, f"cache {list(cache.max_sizes)} does not hold value's heads and D", cache.name
        )
    return cache.max_sizes[1], heads, dim


@register("update_cache")
def add_update_cache_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the update_cache dispatch node of `node`."""
    value = graph.tensor_arg(node, "value")
    cache = graph.tensor_arg(node, "cache")
    rows, heads, dim = _check_build(graph, node, value, cache)
    input_pos = graph.symint_arg(node, "input_pos")

    def pos() -> int:
        return input_pos.value if isinstance(input_pos, SymInt) else input_pos

    def resize_update_cache_node(g: ComputeGraph) -> None:
        sizes = g.sizes_of(value)
        seq = sizes[1]
        if sizes != (1, seq, heads, dim):
            raise InputError(
                node.name,
                "shape",
                f"vulkan: {node.name}: value {list(sizes)} must be [1, S, {heads}, {dim}]",
            )
        if pos() < 0:
            raise InputError(node.name, "input_pos", f"vulkan: {node.name}: input_pos {pos()} < 0")
        if pos() + seq > rows:
            raise InputError(
                node.name,
                "cache_overflow",
                f"vulkan: {node.name}: rows {pos()}..{pos() + seq - 1} do not fit the "
                f"{rows}-row cache",
            )

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        seq = g.sizes_of(value)[1]
        return {"seq": seq, "input_pos": pos(), "workgroups": -(-seq * heads * dim // WORKGROUP)}

    symint_args = (input_pos.name,) if isinstance(input_pos, SymInt) else ()
    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(cache.name, value.name, *symint_args),
            resize_fn=resize_update_cache_node,
            slots={"update_cache": "update_cache"},
            tensors={"cache": cache, "value": value},
            static={"heads": heads, "head_dim": dim, "workgroup_size": WORKGROUP},
            values=values,
            uniforms={"input_pos": graph.int_ubo(node, "input_pos")},
        )
    )
