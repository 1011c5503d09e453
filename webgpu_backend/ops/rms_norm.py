"""rms_norm on WebGPU: one workgroup of 64 lanes per row, scalar or vec4 kernel; hook on x.
In half precision (float16 x, weight and out) the one `rms_norm_f16` kernel at every width.

Unlike upstream (docs/design.md §8.9), the hook re-reads the live row width and rejects a width
that differs from the weight's, instead of silently normalizing with the build-time width.
"""

from __future__ import annotations

import math

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register

WORKGROUP_SIZE = 64


@register("rms_norm")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the rms_norm dispatch of `node` and its resize hook."""
    x = graph.arg_tensor(node, "x")
    weight = graph.arg_tensor(node, "weight")
    out = graph.output(node, "out")
    eps = float(graph.arg_scalar(node, "eps"))
    dtypes = [t.dtype for t in (x, weight, out)]
    if len(set(dtypes)) != 1 or dtypes[0] not in FLOAT_DTYPES:
        raise graph.fail(
            node, f"x, weight and out must be all float32 or all float16, got {dtypes}"
        )
    width = x.dims[-1]
    if weight.dims != (width,):
        raise graph.fail(
            node,
            f"weight must have dims [{width}] (x's last dim), got {list(weight.dims)}",
            tensor=weight.name,
        )
    if out.dims != x.dims:
        raise graph.fail(
            node, f"out must have x's dims {list(x.dims)}, got {list(out.dims)}", tensor=out.name
        )

    # The row width is the weight length, fixed at build, so the variant is fixed too.
    if x.dtype == "float16":
        slot = graph.dtype_slot(node, "rms_norm", x.dtype)
    else:
        slot = "rms_norm_vec4" if width % 4 == 0 else "rms_norm"
    static: dict[str, Value] = {"row_width": width, "eps": eps, "workgroup_size": WORKGROUP_SIZE}
    dispatch = graph.add_kernel(
        node, {slot: slot}, tensors={"out": out, "x": x, "weight": weight}, static=static
    )

    def resize() -> None:
        dims = x.cur_dims
        if dims[-1] != width:
            raise InputError(
                node.name,
                "row_width",
                f"webgpu: op {node.name!r}: x's live last dim must stay {width} (the weight "
                f"length), got {dims[-1]}",
            )
        rows = math.prod(dims[:-1])
        dispatch.set({"num_rows": rows, "workgroups": rows})
        graph.set_cur_dims(out, dims)

    graph.add_resize_hook(node, [x.name], resize)
