"""update_cache on WebGPU: value's rows written into a state cache at input_pos.

One dispatch slot `update_cache`, one invocation per element of value. The hook follows value
and the input_pos SymInt, checks the live shape and `0 <= input_pos`, `input_pos + S <= C`
before anything is dispatched (so a refused step leaves the cache as it was) and writes no
output: the cache is a state tensor, updated in place.
"""

from __future__ import annotations

from graph_format import InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64


@register("update_cache")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the update_cache dispatch of `node` and its hook."""
    value = graph.arg_tensor(node, "value")
    cache = graph.arg_tensor(node, "cache")
    _check_build(graph, node, value, cache)
    _, _, heads, dim = value.dims
    rows = cache.dims[1]
    input_pos = graph.int_or_symint(node, "input_pos")
    static: dict[str, Value] = {
        "heads": heads,
        "head_dim": dim,
        "workgroup_size": WORKGROUP_SIZE,
    }
    dispatch = graph.add_kernel(
        node,
        {"update_cache": "update_cache"},
        tensors={"cache": cache, "value": value},
        static=static,
    )

    def fail(reason: str, message: str) -> InputError:
        return InputError(node.name, reason, f"webgpu: op {node.name!r}: {message}")

    def resize() -> None:
        live = value.cur_dims
        seq = live[1]
        if live != (1, seq, heads, dim):
            raise fail("shape", f"live value {list(live)} must be [1, S, {heads}, {dim}]")
        pos = input_pos()
        if pos < 0:
            raise fail("input_pos", f"input_pos {pos} is negative")
        if pos + seq > rows:
            raise fail("cache_overflow", f"input_pos {pos} + S {seq} exceeds the {rows} cache rows")
        workgroups = -(-seq * heads * dim // WORKGROUP_SIZE)
        dispatch.set({"seq": seq, "input_pos": pos, "workgroups": workgroups})

    triggers = [value.name]
    pos_name = node.arg("input_pos")
    if pos_name in graph.symints:
        triggers.append(pos_name)
    graph.add_resize_hook(node, triggers, resize)


def _check_build(
    graph: WebGPUGraph, node: OpNode, value: WebGPUTensor, cache: WebGPUTensor
) -> None:
    """Check value and cache at load: float32 [1, ., ., .], the cache a state tensor of the
    value's heads and head dim."""
    for tensor in (value, cache):
        if tensor.dtype != "float32":
            raise graph.fail(
                node, f"{tensor.name!r} must be float32, got {tensor.dtype}", tensor.name
            )
        if len(tensor.dims) != 4 or tensor.dims[0] != 1:
            raise graph.fail(
                node, f"{tensor.name!r} must be [1, ., ., .], got {list(tensor.dims)}", tensor.name
            )
    if not cache.is_state:
        raise graph.fail(node, f"cache {cache.name!r} must be a state tensor", cache.name)
    heads, dim = value.dims[2:]
    if cache.dims[2:] != (heads, dim):
        raise graph.fail(
            node, f"cache must be [1, C, {heads}, {dim}], got {list(cache.dims)}", cache.name
        )
