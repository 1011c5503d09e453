"""fused_sdpa on Vulkan (upstream's `fused_sdpa_impl` in `SDPA.cpp`, `et_vk.sdpa.default`).

Three dispatch nodes in graph order: `fused_sdpa_scores` (or `fused_sdpa_scores_masked` with
an attn_mask) into a private `[B*H, S_max, L_max]` scratch tensor, dense at the live
`[B*H, S, L]`; `fused_sdpa_softmax` in place; `fused_sdpa_av`. Shaders read B, H, S and D from
q's metadata UBO, L from k's (or v's), the mask's broadcast from its own metadata (a dim of
size 1 adds no offset); the scale is a specialization constant (`SCALE`, from the value
`scale`). The first node's resize function checks the live shapes and resizes out. Upstream
pads S and L to multiples of 4 for its tiled shaders; this design does not.
"""

from __future__ import annotations

import math

from graph_format import InputError, OpNode
from vulkan_ref.graph import ComputeGraph, DispatchNode
from vulkan_ref.ops import register

WORKGROUP = 64


def _mask_broadcasts(mask: tuple[int, ...], scores: tuple[int, ...]) -> bool:
    """Whether every mask dim is 1 or the scores' own ([B, H, S, L])."""
    return len(mask) == 4 and all(m in (1, s) for m, s in zip(mask, scores, strict=True))


def _check_build(graph: ComputeGraph, node: OpNode) -> None:
    """Check dtypes and maximum sizes at load."""
    q, k, v = (graph.tensor_arg(node, s) for s in ("q", "k", "v"))
    mask = graph.optional_tensor_arg(node, "attn_mask")
    out = graph.output(node, "out")
    for tensor in (q, k, v, *([] if mask is None else [mask]), out):
        if tensor.dtype != "float32":
            raise graph.fail(
                node, f"fused_sdpa is float32 only; {tensor.name!r} is not", tensor.name
            )
        if len(tensor.max_sizes) != 4:
            raise graph.fail(
                node, f"{tensor.name!r} {list(tensor.max_sizes)} is not 4-D", tensor.name
            )
    batch, heads, max_q, dim = q.max_sizes
    max_kv = k.max_sizes[2]
    if (k.max_sizes[0], k.max_sizes[1], k.max_sizes[3]) != (batch, heads, dim):
        raise graph.fail(node, "k does not share q's B, H and D", tensor=k.name)
    if v.max_sizes != k.max_sizes:
        raise graph.fail(node, f"v {list(v.max_sizes)} differs from k {list(k.max_sizes)}", v.name)
    if mask is not None and not _mask_broadcasts(mask.max_sizes, (batch, heads, max_q, max_kv)):
        raise graph.fail(
            node, f"attn_mask {list(mask.max_sizes)} cannot broadcast over the scores", mask.name
        )
    if out.max_sizes != q.max_sizes:
        raise graph.fail(node, f"out must be {list(q.max_sizes)}", tensor=out.name)


@register("fused_sdpa")
def add_fused_sdpa_node(graph: ComputeGraph, node: OpNode) -> None:
    """Add the three fused_sdpa dispatch nodes of `node`."""
    q, k, v = (graph.tensor_arg(node, s) for s in ("q", "k", "v"))
    mask = graph.optional_tensor_arg(node, "attn_mask")
    out = graph.output(node, "out")
    _check_build(graph, node)
    batch, heads, max_q, dim = q.max_sizes
    max_kv = k.max_sizes[2]
    has_scale = node.optional_arg("scale") is not None
    scale = float(graph.scalar_arg(node, "scale")) if has_scale else 1.0 / math.sqrt(dim)
    static: dict[str, int | float] = {
        "batch": batch,
        "heads": heads,
        "head_dim": dim,
        "scale": scale,
        "workgroup_size": WORKGROUP,
    }
    # The project's dense layout, unless a manifest sizes it (`scratch.scores`).
    scores = graph.create_scratch(node, "scores", "float32", (batch * heads, max_q, max_kv), static)

    def resize_fused_sdpa_node(g: ComputeGraph) -> None:
        qs, ks, vs = g.sizes_of(q), g.sizes_of(k), g.sizes_of(v)
        s, kv_len = qs[2], ks[2]
        if qs != (batch, heads, s, dim) or ks != (batch, heads, kv_len, dim) or vs != ks:
            raise InputError(
                node.name,
                "shape",
                f"vulkan: {node.name}: q {list(qs)}, k {list(ks)}, v {list(vs)} must be "
                f"[{batch}, {heads}, S, {dim}], [{batch}, {heads}, L, {dim}]",
            )
        if mask is not None and not _mask_broadcasts(g.sizes_of(mask), (batch, heads, s, kv_len)):
            raise InputError(
                node.name,
                "mask_shape",
                f"vulkan: {node.name}: attn_mask {list(g.sizes_of(mask))} does not broadcast "
                f"over the scores {[batch, heads, s, kv_len]}",
            )
        g.virtual_resize(out, qs)

    first = "fused_sdpa_scores" if mask is None else "fused_sdpa_scores_masked"
    slots = (first, "fused_sdpa_softmax", "fused_sdpa_av")

    def values(g: ComputeGraph, slot: str) -> dict[str, int | tuple[int, ...]]:
        _, _, s, _ = g.sizes_of(q)
        kv_len = g.sizes_of(k)[2]
        rows = batch * heads * s
        counts = {
            first: -(-rows * kv_len // WORKGROUP),
            "fused_sdpa_softmax": rows,
            "fused_sdpa_av": -(-rows * dim // WORKGROUP),
        }
        live: dict[str, int | tuple[int, ...]] = {
            "q_len": s,
            "kv_len": kv_len,
            "workgroups": counts[slot],
        }
        if slot == "fused_sdpa_scores_masked" and mask is not None:
            sizes = g.sizes_of(mask)
            live["mask_strides"] = tuple(
                0 if sizes[d] == 1 else math.prod(sizes[d + 1 :]) for d in range(4)
            )
        return live

    tensors = {"out": out, "q": q, "k": k, "v": v, "scores": scores}
    if mask is not None:
        tensors["attn_mask"] = mask
    args = (out.name, q.name, k.name, v.name, *([] if mask is None else [mask.name]))
    for slot in slots:
        graph.add_dispatch_node(
            DispatchNode(
                op=node.name,
                args=args,
                resize_fn=resize_fused_sdpa_node if slot == first else None,
                slots={slot: slot},
                tensors=tensors,
                static=static,
                values=values,
            )
        )
