"""view_copy and sym_size on WebGPU.

view_copy resolves its size list from live values (int literals and SymInts) in a hook on x
and on every SymInt of the list, never guessed from numel (upstream's heuristic,
docs/design.md §8.4, picks the leftmost dim that divides); one literal -1 is the size that
x's live numel leaves once the others are taken (refused when they do not divide it). One
slot: a bitwise 32-bit copy, one invocation per element (16-bit elements for float16:
`view_copy_f16`).

sym_size is a hook on x that sets its SymInt output with `set_symint`; consumers register
hooks on that SymInt, so the fixpoint re-runs them once it changes and nothing reads the dim
of a stale intermediate (upstream evaluates it before any tensor hook, docs/design.md §8.2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from graph_format import InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64
VIEW_DTYPES = ("float32", "int32", "float16")
INFERRED = -1  # the literal size that takes what the live numel leaves


@register("view_copy")
def build_view_copy(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the view_copy dispatch of `node` and its hook on x and the size list's SymInts."""
    x = graph.arg_tensor(node, "x")
    out = graph.output(node, "out")
    names = node.size_list("sizes")
    if x.dtype not in VIEW_DTYPES:
        raise graph.fail(node, f"x must be float32, int32 or float16, got {x.dtype}", tensor=x.name)
    if out.dtype != x.dtype:
        raise graph.fail(node, f"out must be {x.dtype} like x, got {out.dtype}", tensor=out.name)
    if len(names) != len(out.dims):
        raise graph.fail(
            node, f"{len(names)} sizes for out of rank {len(out.dims)}", tensor=out.name
        )
    inferred = _literal_sizes(graph, node, names, out)
    sizes = graph.int_list(node, "sizes")
    static: dict[str, Value] = {"workgroup_size": WORKGROUP_SIZE}
    # 32-bit elements (float32, int32): a word copy; float16: the `view_copy_f16` slot.
    slot = graph.dtype_slot(node, "view_copy", x.dtype)
    dispatch = graph.add_kernel(node, {slot: slot}, tensors={"out": out, "x": x}, static=static)

    def resize() -> None:
        dims = sizes()
        # A -1 takes what the others leave, when they are all sizes (>= 1); else the dims
        # check below refuses the list as it is.
        if inferred and min(dims[: inferred[0]] + dims[inferred[0] + 1 :], default=1) >= 1:
            d = inferred[0]
            others = math.prod(dims[:d] + dims[d + 1 :])
            if x.cur_numel % others:
                raise InputError(
                    node.name,
                    "numel",
                    f"webgpu: op {node.name!r}: no size at dim {d} makes {list(dims)} hold "
                    f"the {x.cur_numel} elements of {x.name!r} {list(x.cur_dims)}",
                )
            dims = (*dims[:d], x.cur_numel // others, *dims[d + 1 :])
        out.check_dims(dims)
        if math.prod(dims) != x.cur_numel:
            raise InputError(
                node.name,
                "numel",
                f"webgpu: op {node.name!r}: sizes {list(dims)} do not hold the "
                f"{x.cur_numel} elements of {x.name!r} {list(x.cur_dims)}",
            )
        graph.set_cur_dims(out, dims)
        numel = x.cur_numel
        dispatch.set({"numel": numel, "workgroups": -(-numel // WORKGROUP_SIZE)})

    triggers = [x.name, *(n for n in names if n in graph.symints)]
    graph.add_resize_hook(node, triggers, resize)


def _literal_sizes(
    graph: WebGPUGraph, node: OpNode, names: Sequence[str], out: WebGPUTensor
) -> list[int]:
    """Check the size list's literals at load: each in [1, out's dim], or one -1; returns
    the dim of the -1 (empty without one)."""
    inferred: list[int] = []  # the dim of the literal -1, if any
    for d, name in enumerate(names):
        if name not in graph.symints:
            size = int(graph.graph.scalar(name))
            if size == INFERRED:
                if inferred:
                    raise graph.fail(
                        node, f"dims {inferred[0]} and {d} are both -1: one may be", out.name
                    )
                inferred.append(d)
            elif not 1 <= size <= out.dims[d]:
                raise graph.fail(
                    node, f"literal size {size} of dim {d} is not in [1, {out.dims[d]}]", out.name
                )
    return inferred


@register("sym_size")
def build_sym_size(graph: WebGPUGraph, node: OpNode) -> None:
    """Register the hook that keeps `node`'s SymInt at x's live dim."""
    x = graph.arg_tensor(node, "x")
    dim = int(graph.arg_scalar(node, "dim"))
    rank = len(x.dims)
    if not -rank <= dim < rank:
        raise graph.fail(node, f"dim {dim} is outside the rank {rank} of {x.name!r}", x.name)
    name = node.outputs["out"]

    def resize() -> None:
        graph.set_symint(name, x.cur_dims[dim])

    graph.add_resize_hook(node, [x.name], resize)
