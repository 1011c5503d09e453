"""add and mul on WebGPU: elementwise with numpy broadcasting, hooks on both inputs; or with
a float scalar operand (`x + 3.0`), a hook on a alone.

One dispatch slot with two variants: `<op>_flat` when both live shapes are equal and
`<op>_broadcast` otherwise, re-selected by the hook; `<op>_scalar` alone for a scalar (passed
to the kernel as an f32 params member; `<op>_scalar_f16` for f16 a and out). 64 invocations
per workgroup, one per output element. Shapes that do not broadcast raise from the hook;
because the hook may run while a co-input is still stale, the graph holds that error until
propagation converges.
"""

from __future__ import annotations

import math

import numpy as np

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import Dims

WORKGROUP_SIZE = 64
MAX_RANK = 4
OP_KINDS = {"add": 0, "mul": 1}
FLOAT32_MAX = float(np.finfo(np.float32).max)


def broadcast_dims(a: Dims, b: Dims) -> Dims | None:
    """numpy's broadcast of two shapes, or None when they are incompatible."""
    rank = max(len(a), len(b))
    a4 = (1,) * (rank - len(a)) + a
    b4 = (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a4, b4, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def _strides(dims: Dims, out: Dims) -> tuple[int, ...]:
    """Element strides of `dims` right-aligned to 4 dims, 0 where it broadcasts into `out`."""
    padded = (1,) * (MAX_RANK - len(dims)) + dims
    padded_out = (1,) * (MAX_RANK - len(out)) + out
    strides = [0] * MAX_RANK
    step = 1
    for d in reversed(range(MAX_RANK)):
        strides[d] = step if padded[d] == padded_out[d] and padded[d] != 1 else 0
        step *= padded[d]
    return tuple(strides)


@register("add", "mul")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the add/mul dispatch of `node` and its hook on both inputs (or on a)."""
    b_given = node.optional_arg("b") is not None
    if b_given == (node.optional_arg("scalar") is not None):
        raise graph.fail(node, f"{node.op} needs exactly one of the tensor b and the scalar")
    if not b_given:
        build_scalar(graph, node)
        return
    a = graph.arg_tensor(node, "a")
    b = graph.arg_tensor(node, "b")
    out = graph.output(node, "out")
    dtypes = [t.dtype for t in (a, b, out)]
    if len(set(dtypes)) != 1 or dtypes[0] not in FLOAT_DTYPES:
        raise graph.fail(node, f"a, b and out must be all float32 or all float16, got {dtypes}")
    for tensor in (a, b, out):
        if len(tensor.dims) > MAX_RANK:
            raise graph.fail(node, f"{tensor.name!r} has rank {len(tensor.dims)} > {MAX_RANK}")
    expected = broadcast_dims(a.dims, b.dims)
    if expected is None or expected != out.dims:
        raise graph.fail(
            node,
            f"out must have the broadcast dims of {list(a.dims)} and {list(b.dims)} "
            f"({list(expected) if expected else 'incompatible'}), got {list(out.dims)}",
            tensor=out.name,
        )

    # Half precision: the `_f16` slots, whose kernels are the `_f16` files.
    flat = graph.dtype_slot(node, f"{node.op}_flat", out.dtype)
    broadcast = graph.dtype_slot(node, f"{node.op}_broadcast", out.dtype)
    suffix = "_f16" if out.dtype == "float16" else ""
    static: dict[str, Value] = {"op_kind": OP_KINDS[node.op], "workgroup_size": WORKGROUP_SIZE}
    dispatch = graph.add_kernel(
        node,
        {flat: f"binary_flat{suffix}", broadcast: f"binary_broadcast{suffix}"},
        tensors={"out": out, "a": a, "b": b},
        static=static,
    )

    def resize() -> None:
        dims = broadcast_dims(a.cur_dims, b.cur_dims)
        if dims is None:
            raise InputError(
                node.name,
                "broadcast",
                f"webgpu: op {node.name!r}: live dims {list(a.cur_dims)} and "
                f"{list(b.cur_dims)} do not broadcast",
            )
        graph.set_cur_dims(out, dims)
        numel = math.prod(dims)
        workgroups = -(-numel // WORKGROUP_SIZE)
        if a.cur_dims == b.cur_dims:
            dispatch.set({"numel": numel, "workgroups": workgroups}, flat)
        else:
            values: dict[str, Value] = {
                "numel": numel,
                "out_sizes": (1,) * (MAX_RANK - len(dims)) + dims,
                "a_strides": _strides(a.cur_dims, dims),
                "b_strides": _strides(b.cur_dims, dims),
                "workgroups": workgroups,
            }
            dispatch.set(values, broadcast)

    graph.add_resize_hook(node, [a.name, b.name], resize)


def build_scalar(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the `<op>_scalar` dispatch of `node` (a with a float literal) and its hook."""
    scalar = float(graph.arg_scalar(node, "scalar"))
    if not abs(scalar) <= FLOAT32_MAX:
        raise graph.fail(node, f"the scalar {scalar} is not a finite float32")
    a = graph.arg_tensor(node, "a")
    out = graph.output(node, "out")
    if a.dtype != out.dtype or a.dtype not in FLOAT_DTYPES:
        raise graph.fail(
            node, f"a and out must be both float32 or both float16, got {[a.dtype, out.dtype]}"
        )
    for tensor in (a, out):
        if len(tensor.dims) > MAX_RANK:
            raise graph.fail(node, f"{tensor.name!r} has rank {len(tensor.dims)} > {MAX_RANK}")
    if out.dims != a.dims:
        raise graph.fail(
            node, f"out must have a's dims {list(a.dims)}, got {list(out.dims)}", tensor=out.name
        )
    # Half precision: the `_f16` slot (f16 a and out, the scalar an f32 params member).
    slot = graph.dtype_slot(node, f"{node.op}_scalar", out.dtype)
    suffix = "_f16" if out.dtype == "float16" else ""
    static: dict[str, Value] = {
        "op_kind": OP_KINDS[node.op],
        "scalar": scalar,
        "workgroup_size": WORKGROUP_SIZE,
    }
    dispatch = graph.add_kernel(
        node, {slot: f"binary_scalar{suffix}"}, tensors={"out": out, "a": a}, static=static
    )

    def resize() -> None:
        graph.set_cur_dims(out, a.cur_dims)
        numel = math.prod(a.cur_dims)
        dispatch.set({"numel": numel, "workgroups": -(-numel // WORKGROUP_SIZE)})

    graph.add_resize_hook(node, [a.name], resize)
