"""view_copy and sym_size on Vulkan (docs/design.md §4.2; upstream's `View.cpp`, `SymIntOps.cpp`).

view_copy's resize function resolves the size list from live Int and SymInt values (upstream's
`extract_int_or_symint_list`), fills a literal -1 with what x's live numel leaves (upstream's
`compute_out_sizes`, which also fills a second -1 and truncates a remainder: both refused
here) and refuses a list whose product is not x's live numel; the
dispatch copies numel 32-bit words. sym_size is an `ExecuteNode` whose resize function sets
its SymInt from x's live size: in the single ordered pass it always runs after x's producer
and before any consumer, so it is never stale.
"""

from __future__ import annotations

import math

from graph_format import InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode, ExecuteNode
from vulkan_ref.ops import register
from vulkan_ref.ops.activation import elementwise_values
from vulkan_ref.tensor import VTensor

WORKGROUP = 64
VIEW_DTYPES = ("float32", "int32", "float16")
INFER_SIZE = -1


def _check_build(
    graph: ComputeGraph, node: OpNode, x: VTensor, out: VTensor, names: tuple[str, ...]
) -> list[int]:
    """Refuse a dtype view_copy does not copy, a size list that does not match out's rank,
    more than one -1 or an int literal outside out's dim; returns the dims holding -1."""
    if x.dtype not in VIEW_DTYPES:
        raise graph.fail(node, f"view_copy copies float32, int32 or float16, not {x.dtype}", x.name)
    if out.dtype != x.dtype:
        raise graph.fail(node, f"out is {out.dtype} but x is {x.dtype}", tensor=out.name)
    if len(names) != len(out.max_sizes):
        raise graph.fail(
            node,
            f"the size list has {len(names)} entries, out has rank {len(out.max_sizes)}",
            out.name,
        )
    infer_dims = [
        d
        for d, name in enumerate(names)
        if name not in graph.symints and int(graph.graph.scalar(name)) == INFER_SIZE
    ]
    if len(infer_dims) > 1:
        raise graph.fail(node, f"the sizes hold -1 at dims {infer_dims}; at most one", out.name)
    for d, name in enumerate(names):
        if name not in graph.symints and d not in infer_dims:
            size = int(graph.graph.scalar(name))
            if not 1 <= size <= out.max_sizes[d]:
                raise graph.fail(
                    node, f"size {size} at dim {d} outside [1, {out.max_sizes[d]}]", out.name
                )
    return infer_dims


@register("view_copy")
def add_view_copy_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the view_copy dispatch node of `node`."""
    x = graph.tensor_arg(node, "x")
    out = graph.output(node, "out")
    names = node.size_list("sizes")
    infer_dims = _check_build(graph, node, x, out, names)

    # 32-bit elements: a word copy; float16: the `view_copy_f16` slot.
    slot = graph.dtype_slot(node, "view_copy", x.dtype)

    def resize_view_node(g: ComputeGraph) -> None:
        sizes = g.extract_int_or_symint_list(node, "sizes")
        for d in infer_dims:
            if any(size < 1 for i, size in enumerate(sizes) if i != d):
                break  # a nonpositive SymInt: nothing to infer from, validate refuses it
            rest = math.prod(sizes) // INFER_SIZE  # the product of the others
            if x.numel % rest:
                raise InputError(
                    node.name,
                    "numel",
                    f"vulkan: {node.name}: {x.name!r} has {x.numel} live elements, not a "
                    f"multiple of {rest}, the product of the sizes {list(sizes)} but the -1",
                )
            sizes = (*sizes[:d], x.numel // rest, *sizes[d + 1 :])
        out.validate(sizes)
        if math.prod(sizes) != x.numel:
            raise InputError(
                node.name,
                "numel",
                f"vulkan: {node.name}: {x.name!r} has {x.numel} live elements, the sizes "
                f"{list(sizes)} hold {math.prod(sizes)}",
            )
        g.virtual_resize(out, sizes)

    graph.add_dispatch_node(
        DispatchNode(
            op=node.name,
            args=(out.name, x.name, *(n for n in names if n in graph.symints)),
            resize_fn=resize_view_node,
            slots={slot: slot},
            tensors={"out": out, "x": x},
            static={"workgroup_size": WORKGROUP},
            values=elementwise_values(out, WORKGROUP),
        )
    )


@register("sym_size")
def add_sym_size_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the node that keeps `node`'s SymInt at x's live size."""
    x = graph.tensor_arg(node, "x")
    dim = int(graph.scalar_arg(node, "dim"))
    rank = len(x.max_sizes)
    if not -rank <= dim < rank:
        raise graph.fail(node, f"dim {dim} does not index the {rank} dims of {x.name!r}", x.name)
    name = node.outputs["out"]

    def resize_sym_size_node(g: ComputeGraph) -> None:
        g.set_symint(name, g.sizes_of(x)[dim])

    graph.add_node(ExecuteNode(op=node.name, args=(x.name,), resize_fn=resize_sym_size_node))
