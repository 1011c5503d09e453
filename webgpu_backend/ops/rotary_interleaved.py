"""apply_rotary_emb_interleaved on WebGPU: one dispatch, one invocation per (real, imag) pair.

x is [B, N, C] with (real, imag) pairs along C, freqs_cis [N, C] with (cos, sin) pairs; C must
be even (upstream's WebGPU op accepts any even C). The hook follows x and
freqs_cis and checks their live shapes against each other: freqs_cis must be [N, C] for x's
live N (upstream checks only the max sizes, at build time).
"""

from __future__ import annotations

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64
PAIR = 2


@register("apply_rotary_emb_interleaved")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the interleaved rotary dispatch of `node` and its resize hook."""
    x, freqs = graph.arg_tensor(node, "x"), graph.arg_tensor(node, "freqs_cis")
    out = graph.output(node, "out")
    # All float32 or all float16 (the `_f16` slot), as x's type says.
    dtype = x.dtype if x.dtype in FLOAT_DTYPES else "float32"
    for tensor in (x, freqs, out):
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"{tensor.name!r} must be {dtype}, got {tensor.dtype}", tensor=tensor.name
            )
    slot = graph.dtype_slot(node, "rotary_emb_interleaved", dtype)
    width = _check_dims(graph, node, x, freqs, out)
    static: dict[str, Value] = {"row_pairs": width // PAIR, "workgroup_size": WORKGROUP_SIZE}
    dispatch = graph.add_kernel(
        node,
        {slot: slot},
        tensors={"out": out, "x": x, "freqs_cis": freqs},
        static=static,
    )

    def fail(reason: str, message: str) -> InputError:
        return InputError(node.name, reason, f"webgpu: op {node.name!r}: {message}")

    def resize() -> None:
        dims = x.cur_dims
        if dims[2] != width:
            raise fail("width", f"live C {dims[2]} must stay {width}")
        if freqs.cur_dims != dims[1:]:
            raise fail(
                "freqs_shape", f"live freqs_cis {list(freqs.cur_dims)} must be {list(dims[1:])}"
            )
        graph.set_cur_dims(out, dims)
        pairs = x.cur_numel // PAIR
        workgroups = -(-pairs // WORKGROUP_SIZE)
        dispatch.set({"pairs": pairs, "tokens": dims[1], "workgroups": workgroups})

    graph.add_resize_hook(node, [x.name, freqs.name], resize)


def _check_dims(
    graph: WebGPUGraph, node: OpNode, x: WebGPUTensor, freqs: WebGPUTensor, out: WebGPUTensor
) -> int:
    """Check x [B, N, C] of (real, imag) pairs, freqs_cis [N, C] and out at load; returns C."""
    if len(x.dims) != 3:
        raise graph.fail(node, f"x must be [B, N, C], got {list(x.dims)}", tensor=x.name)
    width = x.dims[2]
    if width % PAIR:
        raise graph.fail(node, f"C = {width} must be even ((real, imag) pairs)", tensor=x.name)
    if freqs.dims != x.dims[1:]:
        raise graph.fail(
            node, f"freqs_cis must be {list(x.dims[1:])}, got {list(freqs.dims)}", freqs.name
        )
    if out.dims != x.dims:
        raise graph.fail(node, f"out must be {list(x.dims)}", tensor=out.name)
    return width
