"""sigmoid, silu and the fused silu_mul on WebGPU: one invocation per element.

sigmoid and silu share the `unary_activation` shader (an op-kind override constant); their
hook follows x. silu_mul's hook follows both gate and up and refuses live shapes that differ
(no broadcasting); a co-input that is still stale mid-propagation makes it fail only for
that pass, as the graph holds such errors until the fixpoint converges.
"""

from __future__ import annotations

from collections.abc import Sequence

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64
OP_KINDS = {"sigmoid": 0, "silu": 1}


def _float_dtype(graph: WebGPUGraph, node: OpNode, tensors: Sequence[WebGPUTensor]) -> str:
    """The one float dtype of the op's tensors (the first's, when it is a float type): float32,
    or float16 for the `_f16` kernels. Raises the build error naming the first tensor of
    another dtype."""
    first = tensors[0].dtype
    want = first if first in FLOAT_DTYPES else "float32"
    for tensor in tensors:
        if tensor.dtype != want:
            raise graph.fail(
                node, f"{tensor.name!r} must be {want}, got {tensor.dtype}", tensor=tensor.name
            )
    return want


@register("sigmoid", "silu")
def build_unary(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the sigmoid/silu dispatch of `node` and its hook on x."""
    x = graph.arg_tensor(node, "x")
    out = graph.output(node, "out")
    dtype = _float_dtype(graph, node, (x, out))
    if out.dims != x.dims:
        raise graph.fail(
            node, f"out must have x's dims {list(x.dims)}, got {list(out.dims)}", tensor=out.name
        )
    static: dict[str, Value] = {"op_kind": OP_KINDS[node.op], "workgroup_size": WORKGROUP_SIZE}
    # sigmoid and silu share a kernel file per precision.
    stem = "unary_activation_f16" if dtype == "float16" else "unary_activation"
    slot = graph.dtype_slot(node, node.op, dtype)
    dispatch = graph.add_kernel(node, {slot: stem}, tensors={"out": out, "x": x}, static=static)

    def resize() -> None:
        graph.set_cur_dims(out, x.cur_dims)
        numel = x.cur_numel
        dispatch.set({"numel": numel, "workgroups": -(-numel // WORKGROUP_SIZE)})

    graph.add_resize_hook(node, [x.name], resize)


@register("silu_mul")
def build_silu_mul(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the fused silu(gate) * up dispatch of `node` and its hook on gate and up."""
    gate = graph.arg_tensor(node, "gate")
    up = graph.arg_tensor(node, "up")
    out = graph.output(node, "out")
    dtype = _float_dtype(graph, node, (gate, up, out))
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
    static: dict[str, Value] = {"workgroup_size": WORKGROUP_SIZE}
    slot = graph.dtype_slot(node, "silu_mul", dtype)
    dispatch = graph.add_kernel(
        node, {slot: slot}, tensors={"out": out, "gate": gate, "up": up}, static=static
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
        numel = gate.cur_numel
        dispatch.set({"numel": numel, "workgroups": -(-numel // WORKGROUP_SIZE)})

    graph.add_resize_hook(node, [gate.name, up.name], resize)
