"""sdpa_with_kv_cache on Vulkan (docs/design.md §7; upstream's `SDPA.cpp`), with the cache update.

Six dispatch nodes in graph order, all built at load and self-gating by their count (0 skips):
`sdpa_update_cache`; the materialized route `sdpa_qk` -> `sdpa_softmax` -> `sdpa_av` for
S > 1; the split-K decode route `sdpa_fd_split` -> `sdpa_fd_reduce` for S == 1. Shaders
read S, Hq and D from q's metadata UBO, Hkv from the cache's, and input_pos from the SymInt's
UBO (a constant UBO for an int literal); the scale is a specialization constant (`SCALE`,
from the value `scale`).

The first node's resize function checks the live shapes and `input_pos + S <= C` and
resizes out; it raises before anything is recorded, so a refused step leaves the caches as
they were (upstream drops out-of-range cache writes silently instead, docs/design.md §8.8).
Scores `[Hq, S_max, C]` and the decode partials are private scratch tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from graph_format import FLOAT_DTYPES, InputError, OpNode, dtype_slot
from graph_format.kernels import KernelRequirementError, masked_columns_unwritten
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.nodes import SymInt
from vulkan_ref.ops import register
from vulkan_ref.tensor import VTensor

WORKGROUP = 64
SPLIT_ROWS = 64  # cache rows per split of the decode route: sdpa_fd_split's local size
# The dispatch nodes in graph order (each slot's GLSL is glsl/<slot>.comp); the first
# resizes out.
HALF_SUFFIX = dtype_slot("", "float16")  # "_f16"
SLOTS = (
    "sdpa_update_cache",
    "sdpa_qk",
    "sdpa_softmax",
    "sdpa_av",
    "sdpa_fd_split",
    "sdpa_fd_reduce",
)


def _check_kinds(
    graph: ComputeGraph, node: OpNode, inputs: tuple[VTensor, ...], out: VTensor
) -> None:
    """Dtypes, ranks and state of (q, k, v, k_cache, v_cache) and out."""
    q, *_, k_cache, v_cache = inputs
    # All float32 or all float16 (the `_f16` slots), as q's type says.
    dtype = q.dtype if q.dtype in FLOAT_DTYPES else "float32"
    for tensor in (*inputs, out):
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"sdpa takes all {dtype}; {tensor.name!r} is {tensor.dtype}", tensor.name
            )
    for tensor in inputs:
        if len(tensor.max_sizes) != 4 or tensor.max_sizes[0] != 1:
            raise graph.fail(
                node, f"{tensor.name!r} {list(tensor.max_sizes)} must be [1, ., ., .]", tensor.name
            )
    for tensor in (k_cache, v_cache):
        if not tensor.is_state:
            raise graph.fail(node, f"{tensor.name!r} must be a state tensor", tensor=tensor.name)


def _check_build(graph: ComputeGraph, node: OpNode) -> None:
    q, k, v = (graph.tensor_arg(node, s) for s in ("q", "k", "v"))
    k_cache, v_cache = graph.tensor_arg(node, "k_cache"), graph.tensor_arg(node, "v_cache")
    out = graph.output(node, "out")
    _check_kinds(graph, node, (q, k, v, k_cache, v_cache), out)
    if v.max_sizes != k.max_sizes:
        raise graph.fail(node, f"v {list(v.max_sizes)} differs from k {list(k.max_sizes)}", v.name)
    if k.max_sizes[1] != q.max_sizes[1] or k.max_sizes[3] != q.max_sizes[3]:
        raise graph.fail(node, "k and q differ in S or D", tensor=k.name)
    if k_cache.max_sizes[2:] != k.max_sizes[2:]:
        raise graph.fail(
            node, f"k_cache {list(k_cache.max_sizes)} does not hold k's heads and D", k_cache.name
        )
    if v_cache.max_sizes != k_cache.max_sizes:
        raise graph.fail(node, "v_cache and k_cache differ in size", tensor=v_cache.name)
    if q.max_sizes[2] % k.max_sizes[2]:
        raise graph.fail(node, "the query heads are not a multiple of the kv heads", q.name)
    if out.max_sizes != q.max_sizes:
        raise graph.fail(node, f"out must be {list(q.max_sizes)}", tensor=out.name)


@register("sdpa_with_kv_cache")
def add_sdpa_with_kv_cache_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the six sdpa dispatch nodes of `node`."""
    _check_build(graph, node)
    q, k, v = (graph.tensor_arg(node, s) for s in ("q", "k", "v"))
    k_cache, v_cache = graph.tensor_arg(node, "k_cache"), graph.tensor_arg(node, "v_cache")
    out = graph.output(node, "out")
    _, max_seq, q_heads, dim = q.max_sizes
    kv_heads, cache_rows = k.max_sizes[2], k_cache.max_sizes[1]
    input_pos = graph.symint_arg(node, "input_pos")
    pos_ubo = graph.int_ubo(node, "input_pos")
    has_scale = node.optional_arg("scale") is not None
    scale = float(graph.scalar_arg(node, "scale")) if has_scale else 1.0 / math.sqrt(dim)
    max_splits = -(-cache_rows // SPLIT_ROWS)
    static = {
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "head_dim": dim,
        "max_seq": max_seq,
        "cache_rows": cache_rows,
        "scale": scale,
        "workgroup_size": WORKGROUP,
    }
    # The project's dense layouts, unless a manifest sizes the role (`scratch.<role>`).
    scores = graph.create_scratch(node, "scores", "float32", (q_heads, max_seq, cache_rows), static)
    part_o = graph.create_scratch(node, "part_o", "float32", (q_heads, max_splits, dim), static)
    part_ml = graph.create_scratch(node, "part_ml", "float32", (q_heads, max_splits, 2), static)

    def pos() -> int:
        return input_pos.value if isinstance(input_pos, SymInt) else input_pos

    def seq(g: ComputeGraph) -> int:
        return g.sizes_of(q)[1]

    resize_sdpa_node = _resize_fn(
        node.name, (q, k, v, out), pos, (q_heads, kv_heads, dim), cache_rows
    )

    symint_args = (input_pos.name,) if isinstance(input_pos, SymInt) else ()
    args = (out.name, q.name, k.name, v.name, k_cache.name, v_cache.name, *symint_args)
    tensors = {
        "out": out,
        "q": q,
        "k": k,
        "v": v,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "scores": scores,
        "part_o": part_o,
        "part_ml": part_ml,
    }

    def values(g: ComputeGraph, slot: str) -> dict[str, int]:
        s, start = seq(g), pos()
        context = start + s
        return {
            "seq": s,
            "input_pos": start,
            "context": context,
            "num_splits": -(-context // SPLIT_ROWS),
            "workgroups": _workgroups(slot, s, context, q_heads, kv_heads, dim),
        }

    _check_softmax(graph, node, q.dtype)
    for slot in SLOTS:
        # In half precision every slot but the softmax, which works on the f32 scores in
        # both precisions, is its `_f16` variant.
        if slot != "sdpa_softmax":
            slot = graph.dtype_slot(node, slot, q.dtype)
        graph.add_dispatch_node(
            DispatchNode(
                op=node.name,
                args=args,
                resize_fn=resize_sdpa_node if slot.startswith(SLOTS[0]) else None,
                slots={slot: slot},
                tensors=tensors,
                static=static,
                values=values,
                uniforms={"input_pos": pos_ubo},
            )
        )


def _resize_fn(
    op: str,
    tensors: tuple[VTensor, VTensor, VTensor, VTensor],
    pos: Callable[[], int],
    heads: tuple[int, int, int],
    cache_rows: int,
) -> Callable[[ComputeGraph], None]:
    """The resize function of an sdpa node named `op` of (q, k, v, out), with (query heads,
    kv heads, head dim) and the cache's rows."""
    q, k, v, out = tensors
    q_heads, kv_heads, dim = heads

    def resize_sdpa_node(g: ComputeGraph) -> None:
        qs, ks, vs = g.sizes_of(q), g.sizes_of(k), g.sizes_of(v)
        s = qs[1]
        if qs != (1, s, q_heads, dim) or ks != (1, s, kv_heads, dim) or vs != ks:
            raise InputError(
                op,
                "shape",
                f"vulkan: {op}: q {list(qs)}, k {list(ks)}, v {list(vs)} must be "
                f"[1, S, {q_heads}, {dim}], [1, S, {kv_heads}, {dim}]",
            )
        if pos() < 0:
            raise InputError(op, "input_pos", f"vulkan: {op}: input_pos {pos()} < 0")
        if pos() + s > cache_rows:
            raise InputError(
                op,
                "cache_overflow",
                f"vulkan: {op}: rows {pos()}..{pos() + s - 1} do not fit the "
                f"{cache_rows}-row cache",
            )
        g.virtual_resize(out, qs)

    return resize_sdpa_node


def _workgroups(slot: str, s: int, context: int, q_heads: int, kv_heads: int, dim: int) -> int:
    """The slot's count: the update always, one route's kernels per step."""
    slot = slot.removesuffix(HALF_SUFFIX)
    wg = WORKGROUP
    if slot == "sdpa_update_cache":
        return -(-s * kv_heads * dim // wg)
    if s == 1:  # decode: the split-K route
        if slot == "sdpa_fd_split":
            return q_heads * -(-context // SPLIT_ROWS)
        return q_heads if slot == "sdpa_fd_reduce" else 0
    if slot == "sdpa_qk":  # prefill: the materialized route
        return -(-q_heads * s * context // wg)
    if slot == "sdpa_softmax":
        return q_heads * s
    return -(-s * q_heads * dim // wg) if slot == "sdpa_av" else 0


def _check_softmax(graph: ComputeGraph, node: OpNode, dtype: str) -> None:
    """A manifest's softmax must not read what the qk kernel leaves unwritten."""
    qk_slot = graph.dtype_slot(node, "sdpa_qk", dtype)
    qk_entry, softmax_entry = (graph.kernel_entry(s, s) for s in (qk_slot, "sdpa_softmax"))
    unwritten = masked_columns_unwritten(qk_entry, softmax_entry)
    if unwritten is not None:  # a manifest's softmax reading what this qk leaves unwritten
        raise KernelRequirementError(node.name, "sdpa_softmax", unwritten, softmax_entry.source)
