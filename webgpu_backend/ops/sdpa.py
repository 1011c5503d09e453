"""sdpa_with_kv_cache on WebGPU: cache update, then a materialized or a split-K decode route.

Six dispatch slots, each reading the same values, are all recorded at load:
`sdpa_update_cache`; the materialized route `sdpa_qk` -> `sdpa_softmax` -> `sdpa_av` (scores
in a private `[Hq, S, C]` scratch, dense at the live `[Hq, S, ctx]`); the decode route
`sdpa_fd_split` -> `sdpa_fd_reduce` (partials per 64-row split of the context). The hook picks
the route from the live S (decode when S == 1) by giving the other route's slots a zero count.

The hook follows q, k, v and the input_pos SymInt, and reads only their live values: it never
validates a new input_pos against a stale S (upstream's SymInt phase does, docs/design.md §8.2).
`input_pos + S` past the cache is refused before anything is dispatched, so the caches keep
their contents (upstream Vulkan drops such writes silently, docs/design.md §8.8).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from graph_format import FLOAT_DTYPES, InputError, OpNode
from graph_format.kernels import KernelRequirementError, Value, masked_columns_unwritten
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.nodes import Dispatch, ScratchBuffer
from webgpu_backend.ops import register
from webgpu_backend.tensor import WebGPUTensor

WORKGROUP_SIZE = 64
SPLIT_ROWS = 64  # cache rows per split of the decode route: one per lane of sdpa_fd_split


def _check_kinds(
    graph: WebGPUGraph, node: OpNode, inputs: tuple[WebGPUTensor, ...], out: WebGPUTensor
) -> None:
    """Dtypes, ranks and state of (q, k, v, k_cache, v_cache) and out."""
    q, *_, k_cache, v_cache = inputs
    # All float32 or all float16 (the `_f16` slots), as q's type says.
    dtype = q.dtype if q.dtype in FLOAT_DTYPES else "float32"
    for tensor in (*inputs, out):
        if tensor.dtype != dtype:
            raise graph.fail(
                node, f"{tensor.name!r} must be {dtype}, got {tensor.dtype}", tensor=tensor.name
            )
    for tensor in inputs:
        if len(tensor.dims) != 4 or tensor.dims[0] != 1:
            raise graph.fail(
                node, f"{tensor.name!r} must be [1, ., ., .], got {list(tensor.dims)}", tensor.name
            )
    for tensor in (k_cache, v_cache):
        if not tensor.is_state:
            raise graph.fail(node, f"cache {tensor.name!r} must be a state tensor", tensor.name)


def _check_build(graph: WebGPUGraph, node: OpNode) -> None:
    q, k, v = (graph.arg_tensor(node, s) for s in ("q", "k", "v"))
    k_cache, v_cache = graph.arg_tensor(node, "k_cache"), graph.arg_tensor(node, "v_cache")
    out = graph.output(node, "out")
    _check_kinds(graph, node, (q, k, v, k_cache, v_cache), out)
    if v.dims != k.dims:
        raise graph.fail(node, f"v {list(v.dims)} must have k's dims {list(k.dims)}", v.name)
    if k.dims[1] != q.dims[1] or k.dims[3] != q.dims[3]:
        raise graph.fail(node, f"k {list(k.dims)} must share S and D with q {list(q.dims)}", k.name)
    if k_cache.dims[2:] != k.dims[2:]:
        raise graph.fail(
            node,
            f"k_cache must be [1, C, {k.dims[2]}, {k.dims[3]}], got {list(k_cache.dims)}",
            k_cache.name,
        )
    if v_cache.dims != k_cache.dims:
        raise graph.fail(node, f"v_cache must be {list(k_cache.dims)}", tensor=v_cache.name)
    if q.dims[2] % k.dims[2]:
        raise graph.fail(
            node, f"{q.dims[2]} query heads are not a multiple of {k.dims[2]} kv heads", q.name
        )
    if out.dims != q.dims:
        raise graph.fail(node, f"out must be {list(q.dims)}", tensor=out.name)


@register("sdpa_with_kv_cache")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the six sdpa slots of `node`, its scratch buffers and its hook."""
    _check_build(graph, node)
    q, k, v = (graph.arg_tensor(node, s) for s in ("q", "k", "v"))
    k_cache, v_cache = graph.arg_tensor(node, "k_cache"), graph.arg_tensor(node, "v_cache")
    out = graph.output(node, "out")
    input_pos = graph.int_or_symint(node, "input_pos")
    _, max_seq, q_heads, dim = q.dims
    kv_heads, cache_rows = k.dims[2], k_cache.dims[1]
    scale_name = node.optional_arg("scale")
    scale = (
        float(graph.graph.scalar(scale_name)) if scale_name is not None else 1.0 / math.sqrt(dim)
    )
    max_splits = -(-cache_rows // SPLIT_ROWS)
    static: dict[str, Value] = {
        "q_heads": q_heads,
        "kv_heads": kv_heads,
        "head_dim": dim,
        "max_seq": max_seq,
        "cache_rows": cache_rows,
        "scale": scale,
        "workgroup_size": WORKGROUP_SIZE,
    }
    # The project's dense layouts, unless a manifest sizes the role (`scratch.<role>`).
    scores = graph.create_scratch(node, "scores", 4 * q_heads * max_seq * cache_rows, static)
    part_o = graph.create_scratch(node, "part_o", 4 * q_heads * max_splits * dim, static)
    part_ml = graph.create_scratch(node, "part_ml", 4 * q_heads * max_splits * 2, static)
    buffers: dict[str, WebGPUTensor | ScratchBuffer] = {
        "q": q,
        "k": k,
        "v": v,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "out": out,
        "scores": scores,
        "part_o": part_o,
        "part_ml": part_ml,
    }

    def slot(name: str) -> Dispatch:
        # In half precision every slot but the softmax, which works on the f32 scores in
        # both precisions, is its `_f16` variant.
        if name != "sdpa_softmax":
            name = graph.dtype_slot(node, name, q.dtype)
        return graph.add_kernel(node, {name: name}, tensors=buffers, static=static)

    _check_softmax(graph, node, q.dtype)
    names = ("sdpa_update_cache", "sdpa_qk", "sdpa_softmax", "sdpa_av")
    dispatches = {name: slot(name) for name in (*names, "sdpa_fd_split", "sdpa_fd_reduce")}
    resize = _resize_fn(
        graph, node, (q, k, v, out), input_pos, (q_heads, kv_heads, dim), cache_rows, dispatches
    )
    triggers = [q.name, k.name, v.name]
    pos_name = node.arg("input_pos")
    if pos_name in graph.symints:
        triggers.append(pos_name)
    graph.add_resize_hook(node, triggers, resize)


def _check_softmax(graph: WebGPUGraph, node: OpNode, dtype: str) -> None:
    """A manifest's softmax must not read what the qk kernel leaves unwritten."""
    qk_slot = graph.dtype_slot(node, "sdpa_qk", dtype)
    qk_entry, softmax_entry = (graph.catalog.entry(s, s) for s in (qk_slot, "sdpa_softmax"))
    unwritten = masked_columns_unwritten(qk_entry, softmax_entry)
    if unwritten is not None:  # a manifest's softmax reading what this qk leaves unwritten
        raise KernelRequirementError(node.name, "sdpa_softmax", unwritten, softmax_entry.source)


def _resize_fn(
    graph: WebGPUGraph,
    node: OpNode,
    tensors: tuple[WebGPUTensor, WebGPUTensor, WebGPUTensor, WebGPUTensor],
    input_pos: Callable[[], int],
    heads: tuple[int, int, int],
    cache_rows: int,
    dispatches: Mapping[str, Dispatch],
) -> Callable[[], None]:
    """The resize hook of an sdpa node of (q, k, v, out), with (query heads, kv heads, head
    dim), the cache's rows and its six dispatches by slot (the float32 names)."""
    q, k, v, out = tensors
    q_heads, kv_heads, dim = heads

    def fail(reason: str, message: str) -> InputError:
        return InputError(node.name, reason, f"webgpu: op {node.name!r}: {message}")

    def resize() -> None:
        qd, kd, vd = q.cur_dims, k.cur_dims, v.cur_dims
        seq = qd[1]
        if qd != (1, seq, q_heads, dim) or kd != (1, seq, kv_heads, dim) or vd != kd:
            raise fail(
                "shape",
                f"live q {list(qd)}, k {list(kd)}, v {list(vd)} must be [1, S, {q_heads}, "
                f"{dim}] and [1, S, {kv_heads}, {dim}]",
            )
        pos = input_pos()
        if pos < 0:
            raise fail("input_pos", f"input_pos {pos} is negative")
        if pos + seq > cache_rows:
            raise fail(
                "cache_overflow",
                f"input_pos {pos} + S {seq} exceeds the {cache_rows} rows of the KV cache",
            )
        context = pos + seq
        splits = -(-context // SPLIT_ROWS)
        values: dict[str, Value] = {
            "seq": seq,
            "input_pos": pos,
            "context": context,
            "num_splits": splits,
        }
        counts = _workgroups(seq, context, splits, heads)
        for name, dispatch in dispatches.items():
            dispatch.set({**values, "workgroups": counts[name]})
        graph.set_cur_dims(out, qd)

    return resize


def _workgroups(seq: int, context: int, splits: int, heads: tuple[int, int, int]) -> dict[str, int]:
    """Each slot's count: the update always, one route's kernels per step."""
    q_heads, kv_heads, dim = heads
    wg = WORKGROUP_SIZE
    decode = seq == 1
    return {
        "sdpa_update_cache": -(-seq * kv_heads * dim // wg),
        "sdpa_qk": 0 if decode else -(-q_heads * seq * context // wg),
        "sdpa_softmax": 0 if decode else q_heads * seq,
        "sdpa_av": 0 if decode else -(-seq * q_heads * dim // wg),
        "sdpa_fd_split": q_heads * splits if decode else 0,
        "sdpa_fd_reduce": q_heads if decode else 0,
    }
