"""sigmoid, silu and the fused silu_mul on WebGPU: one invocation per element.

sigmoid and silu share the `unary_activation` shader (an op-kind override constant); their
hook follows x. silu_mul's hook follows both gate and up and refuses live shapes that differ
(no broadcasting); a co-input that is still stale mid-propagation makes it fail only for
that pass, as the graph holds such errors until the fixpoint converges.
"""

from __future__ import annotations

import struct

from graph_format import InputError, OpNode
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register

WORKGROUP_SIZE = 64
OP_KINDS = {"sigmoid": 0, "silu": 1}
# struct Params { numel: u32, pad x3 }
PARAMS = struct.Struct("<4I")


@register("sigmoid", "silu")
def build_unary(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the sigmoid/silu dispatch of `node` and its hook on x."""
    x = graph.arg_tensor(node, "x")
    out = graph.output(node, "out")
    for tensor in (x, out):
        if tensor.dtype != "float32":
            raise graph.fail(
                node, f"{tensor.name!r} must be float32, got {tensor.dtype}", tensor=tensor.name
            )
    if out.dims != x.dims:
        raise graph.fail(
            node, f"out must have x's dims {list(x.dims)}, got {list(out.dims)}", tensor=out.name
        )
    params = graph.create_params(PARAMS.size)
    dispatch = graph.add_dispatch(
        node,
        {node.op: "unary_activation"},
        workgroup_size=WORKGROUP_SIZE,
        writes=[out],
        reads=[x],
        params=params,
        constants={"op_kind": OP_KINDS[node.op]},
    )

    def resize() -> None:
        graph.set_cur_dims(out, x.cur_dims)
        params.update(PARAMS.pack(x.cur_numel, 0, 0, 0))
        dispatch.count = -(-x.cur_numel // WORKGROUP_SIZE)

    graph.add_resize_hook(node, [x.name], resize)


@register("silu_mul")
def build_silu_mul(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the fused silu(gate) * up dispatch of `node` and its hook on gate and up."""
    gate = graph.arg_tensor(node, "gate")
    up = graph.arg_tensor(node, "up")
    out = graph.output(node, "out")
    for tensor in (gate, up, out):
        if tensor.dtype != "float32":
            raise graph.fail(
                node, f"{tensor.name!r} must be float32, got {tensor.dtype}", tensor=tensor.name
            )
    if up.dims != gate.dims:
        raise graph.fail(
            node, f"up must have gate's dims {list(gate.dims)}, got {list(up.dims)}", tensor=up.name
        )
    if out.dims != gate.dims:
        raise graph.fail(
            node,
            f"out must have gate's dims {list(gate.dims)}, got {list(out.dims)}",
            tensor=out.name,
        )
    params = graph.create_params(PARAMS.size)
    dispatch = graph.add_dispatch(
        node,
        "silu_mul",
        workgroup_size=WORKGROUP_SIZE,
        writes=[out],
        reads=[gate, up],
        params=params,
    )

    def resize() -> None:
        if gate.cur_dims != up.cur_dims:
            raise InputError(
                node.name,
                "shape",
                f"webgpu: op {node.name!r}: live gate {list(gate.cur_dims)} and up "
                f"{list(up.cur_dims)} must be equal",
            )
        graph.set_cur_dims(out, gate.cur_dims)
        params.update(PARAMS.pack(gate.cur_numel, 0, 0, 0))
        dispatch.count = -(-gate.cur_numel // WORKGROUP_SIZE)

    graph.add_resize_hook(node, [gate.name, up.name], resize)
