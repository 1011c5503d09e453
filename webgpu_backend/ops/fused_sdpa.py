"""fused_sdpa on WebGPU (upstream's `et_vk.sdpa`): scores, softmax, weighted sum of values.

Three dispatch slots, recorded at load: `fused_sdpa_scores` (or `fused_sdpa_scores_masked`
when the graph passes an attn_mask) into a private `[B*H, S, L]` scratch, dense at the live
`[B*H, S, L]`; `fused_sdpa_softmax` over each row in place; `fused_sdpa_av`. The hook follows
q, k, v and the mask: S and L move independently; the mask is read through strides along
[B, H, S, L] that are 0 where its live dim is 1 (it broadcasts).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from graph_format import InputError, OpNode
from graph_format.kernels import Value
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.nodes import Dispatch, ScratchBuffer
from webgpu_backend.ops import register
from webgpu_backend.tensor import Dims, WebGPUTensor

WORKGROUP_SIZE = 64


def _broadcasts_over(mask: Dims, scores: Dims) -> bool:
    return len(mask) == 4 and all(m == 1 or m == s for m, s in zip(mask, scores, strict=True))


def _mask_strides(mask: Dims) -> tuple[int, ...]:
    """Element strides of a dense mask of live dims `mask`, 0 along its dims of size 1."""
    strides = []
    for d in range(4):
        strides.append(0 if mask[d] == 1 else math.prod(mask[d + 1 :]))
    return tuple(strides)


def _check_build(graph: WebGPUGraph, node: OpNode) -> None:
    """Check dtypes and dims at load."""
    q, k, v = (graph.arg_tensor(node, s) for s in ("q", "k", "v"))
    mask = graph.optional_tensor(node, "attn_mask")
    out = graph.output(node, "out")
    operands = [q, k, v, out] if mask is None else [q, k, v, mask, out]
    for tensor in operands:
        if tensor.dtype != "float32":
            raise graph.fail(
                node, f"{tensor.name!r} must be float32, got {tensor.dtype}", tensor.name
            )
        if len(tensor.dims) != 4:
            raise graph.fail(
                node, f"{tensor.name!r} must have rank 4, got {list(tensor.dims)}", tensor.name
            )
    batch, heads, max_q, dim = q.dims
    max_kv = k.dims[2]
    if (k.dims[0], k.dims[1], k.dims[3]) != (batch, heads, dim):
        raise graph.fail(
            node, f"k must be [{batch}, {heads}, L, {dim}], got {list(k.dims)}", k.name
        )
    if v.dims != k.dims:
        raise graph.fail(node, f"v {list(v.dims)} must have k's dims {list(k.dims)}", v.name)
    if mask is not None and not _broadcasts_over(mask.dims, (batch, heads, max_q, max_kv)):
        raise graph.fail(
            node,
            f"attn_mask {list(mask.dims)} does not broadcast over {[batch, heads, max_q, max_kv]}",
            mask.name,
        )
    if out.dims != q.dims:
        raise graph.fail(node, f"out must be {list(q.dims)}", tensor=out.name)


@register("fused_sdpa")
def build(graph: WebGPUGraph, node: OpNode) -> None:
    """Record the three fused_sdpa slots of `node`, its scratch buffer and its hook."""
    q, k, v = (graph.arg_tensor(node, s) for s in ("q", "k", "v"))
    mask = graph.optional_tensor(node, "attn_mask")
    out = graph.output(node, "out")
    _check_build(graph, node)
    batch, heads, max_q, dim = q.dims
    max_kv = k.dims[2]
    scale_name = node.optional_arg("scale")
    scale = float(graph.graph.scalar(scale_name)) if scale_name is not None else 1 / math.sqrt(dim)
    static: dict[str, Value] = {
        "batch": batch,
        "heads": heads,
        "head_dim": dim,
        "scale": scale,
        "workgroup_size": WORKGROUP_SIZE,
    }
    # The project's dense layout, unless a manifest sizes it (`scratch.scores`).
    scores = graph.create_scratch(node, "scores", 4 * batch * heads * max_q * max_kv, static)
    buffers: dict[str, WebGPUTensor | ScratchBuffer] = {
        "q": q,
        "k": k,
        "v": v,
        "out": out,
        "scores": scores,
    }
    if mask is not None:
        buffers["attn_mask"] = mask
    first = "fused_sdpa_scores_masked" if mask is not None else "fused_sdpa_scores"
    score = graph.add_kernel(node, {first: first}, tensors=buffers, static=static)
    softmax = graph.add_kernel(
        node, {"fused_sdpa_softmax": "fused_sdpa_softmax"}, tensors=buffers, static=static
    )
    weighted = graph.add_kernel(
        node, {"fused_sdpa_av": "fused_sdpa_av"}, tensors=buffers, static=static
    )

    resize = _resize_fn(graph, node, (q, k, v, mask, out), (score, softmax, weighted))
    triggers = [q.name, k.name, v.name, *([] if mask is None else [mask.name])]
    graph.add_resize_hook(node, triggers, resize)


def _resize_fn(
    graph: WebGPUGraph,
    node: OpNode,
    tensors: tuple[WebGPUTensor, WebGPUTensor, WebGPUTensor, WebGPUTensor | None, WebGPUTensor],
    dispatches: tuple[Dispatch, Dispatch, Dispatch],
) -> Callable[[], None]:
    """The resize hook of a fused_sdpa node of (q, k, v, attn_mask, out) and its scores,
    softmax and weighted-sum dispatches: live shapes checked, counts, out's dims."""
    q, k, v, mask, out = tensors
    score, softmax, weighted = dispatches
    batch, heads, _, dim = q.dims

    def fail(reason: str, message: str) -> InputError:
        return InputError(node.name, reason, f"webgpu: op {node.name!r}: {message}")

    def resize() -> None:
        qd, kd, vd = q.cur_dims, k.cur_dims, v.cur_dims
        seq, kv_len = qd[2], kd[2]
        if qd != (batch, heads, seq, dim) or kd != (batch, heads, kv_len, dim) or vd != kd:
            raise fail(
                "shape",
                f"live q {list(qd)}, k {list(kd)}, v {list(vd)} must be [{batch}, {heads}, S, "
                f"{dim}] and [{batch}, {heads}, L, {dim}]",
            )
        values: dict[str, Value] = {"q_len": seq, "kv_len": kv_len}
        first_values = dict(values)
        if mask is not None:
            if not _broadcasts_over(mask.cur_dims, (batch, heads, seq, kv_len)):
                raise fail(
                    "mask_shape",
                    f"live attn_mask {list(mask.cur_dims)} does not broadcast over the scores "
                    f"{[batch, heads, seq, kv_len]}",
                )
            first_values["mask_strides"] = _mask_strides(mask.cur_dims)
        rows = batch * heads * seq
        wg = WORKGROUP_SIZE
        score.set({**first_values, "workgroups": -(-rows * kv_len // wg)})
        softmax.set({**values, "workgroups": rows})
        weighted.set({**values, "workgroups": -(-rows * dim // wg)})
        graph.set_cur_dims(out, qd)

    return resize
