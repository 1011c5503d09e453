"""Model of fused_sdpa(q, k, v, attn_mask?, scale?): attention without a cache or a causal
mask (upstream's `et_vk.sdpa`, `fused_sdpa_impl` in SDPA.cpp).

Shapes: q `[B, H, S, D]`, k and v `[B, H, L, D]`, out `[B, H, S, D]`; attn_mask, when given,
an additive float32 `[B|1, H|1, S|1, L|1]` (rank 4) that broadcasts over the scores
`[B, H, S, L]` as numpy broadcasts. Semantics: out = softmax(scale q k^T + attn_mask) v,
the softmax over L, `scale` 1/sqrt(D) when absent. S (q's rows) and L (k's and v's rows)
move independently; B, H and D stay at their max.

Live checks, in this order (`InputError`, subject the op): "shape" (q live must be
[B, H, S, D] and k, v live [B, H, L, D]), "mask_shape" (each live mask dim 1 or the scores'
live dim). A mask whose max dim is neither 1 nor the scores' max is refused at load.

Kernel design (both backends), three slots in this order, 64 invocations per workgroup:
1. `fused_sdpa_scores` (no mask) or `fused_sdpa_scores_masked`: one invocation per score of a
   dense live `[B*H, S, L]` scratch; count ceil(B*H*S*L / 64).
2. `fused_sdpa_softmax`: one workgroup per row (bh, s) over its L scores, in place (max, sum
   of exp(x - max), then exp(x - max) / sum); count B*H*S.
3. `fused_sdpa_av`: one invocation per output element; count ceil(B*H*S*D / 64).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import Dims, Graph, GraphBuildError, InputError, OpNode
from graph_format.kernels import Value
from harness.gen.blocks import float_array, live_sizes, seeds
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import GraphGen, generator
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    div_up,
    kernels,
    numel,
    optional_tensor,
    register,
    ro,
    rw,
    tensors,
)
from harness.model.numerics import SAFETY, ULP_DIVIDE, arithmetic, gamma
from harness.ops.sdpa import default_scale
from harness.ops.view import view_as

WORKGROUP = (64, 1, 1)
LONG_KV = 2048  # `kv_len>=2048`: softmax rows of 32 passes of the 64 lanes or more
LONG_KV_LENS = (2048, 2049, 4096)  # the fused_sdpa family's long cases' max L


def mask_fits(mask: Dims, scores: Dims) -> bool:
    """Whether a rank-4 mask broadcasts over scores `[B, H, S, L]`: each dim 1 or equal."""
    return len(mask) == 4 and all(m in (1, s) for m, s in zip(mask, scores, strict=True))


def causal_mask(seq: int, kv_len: int) -> np.ndarray:
    """The additive causal mask `[S, L]` of S queries that are the last S of L positions,
    as ExecuTorch and Hugging Face build it: 0 where query s may see key l (l <= s + L - S),
    -inf above that diagonal. Key 0 stays visible to every row (S > L would otherwise leave
    rows with no key, whose softmax is 0 / 0)."""
    rows = np.arange(seq)[:, None] + kv_len - seq
    hidden = np.arange(kv_len)[None, :] > np.maximum(rows, 0)
    return np.where(hidden, -np.inf, 0.0).astype(np.float32)


class FusedSdpaModel(OpModel):
    """Contract, reference and budget of fused_sdpa."""

    activations = ("q", "k", "v", "attn_mask")
    # A long key/value length (`regimes`): what a pr run must reach as well.
    pr_regimes = (f"kv_len>={LONG_KV}",)
    required_regimes = (
        "size=1",
        "size=max",
        "step=grow",
        "step=shrink",
        "mask=-inf",
        *pr_regimes,
    )
    kernels = kernels(
        KernelSpec(
            "fused_sdpa_scores",
            (rw("scores"), ro("q"), ro("k")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "fused_sdpa_scores_masked",
            (rw("scores"), ro("q"), ro("k"), ro("attn_mask")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "fused_sdpa_softmax",
            (rw("scores"),),
            exact=True,
            # No webgpu_ulps: exp may differ by 3 + 2|x| ULP between devices (WGSL).
        ),
        KernelSpec(
            "fused_sdpa_av",
            (rw("out"), ro("scores"), ro("v")),
            exact=True,
            webgpu_ulps=0,
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        q, k, v, out = tensors(node, graph, "q", "k", "v", "out")
        mask = optional_tensor(node, graph, "attn_mask")
        operands = (q, k, v, out) if mask is None else (q, k, v, mask, out)
        for t in operands:
            if t.dtype != "float32":
                raise GraphBuildError(node.name, "fused_sdpa is float32 only", tensor=t.name)
            if len(t.dims) != 4:
                raise GraphBuildError(node.name, "tensors must have rank 4", tensor=t.name)
        batch, heads, _, dim = q.dims
        if (k.dims[0], k.dims[1], k.dims[3]) != (batch, heads, dim):
            raise GraphBuildError(node.name, "k must be [B, H, L, D] of q's", tensor=k.name)
        if v.dims != k.dims:
            raise GraphBuildError(node.name, "v dims != k dims", tensor=v.name)
        if mask is not None and not mask_fits(mask.dims, (batch, heads, q.dims[2], k.dims[2])):
            raise GraphBuildError(
                node.name, "attn_mask must broadcast over [B, H, S, L]", tensor=mask.name
            )
        if out.dims != q.dims:
            raise GraphBuildError(node.name, "out dims != q dims", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        q, k, v = (live.of(node, s) for s in ("q", "k", "v"))
        batch, heads, _, dim = live.max_of(node, "q")
        seq, kv_len = q[2], k[2]
        if q != (batch, heads, seq, dim) or k != (batch, heads, kv_len, dim) or v != k:
            raise InputError(
                node.name,
                "shape",
                f"live q {list(q)}, k {list(k)}, v {list(v)} must be [{batch}, {heads}, S, "
                f"{dim}] and [{batch}, {heads}, L, {dim}]",
            )
        if node.optional_arg("attn_mask") is not None:
            mask = live.of(node, "attn_mask")
            if not mask_fits(mask, (batch, heads, seq, kv_len)):
                raise InputError(
                    node.name,
                    "mask_shape",
                    f"live attn_mask {list(mask)} does not broadcast over "
                    f"{[batch, heads, seq, kv_len]}",
                )
        live.set_output(node, "out", q)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        batch, heads, seq, dim = live.of(node, "q")
        scale = node.optional_arg("scale")
        values: dict[str, Value] = {
            "batch": batch,
            "heads": heads,
            "q_len": seq,
            "kv_len": live.of(node, "k")[2],
            "head_dim": dim,
            "scale": default_scale(dim) if scale is None else float(live.graph.scalar(scale)),
            "workgroup_size": WORKGROUP[0],
        }
        if slot == "fused_sdpa_scores_masked":
            mask = live.of(node, "attn_mask")
            values["mask_strides"] = tuple(
                0 if mask[d] == 1 else numel(mask[d + 1 :]) for d in range(4)
            )
        return values

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        batch, heads, seq, dim = live.of(node, "q")
        kv_len = live.of(node, "k")[2]
        rows = batch * heads * seq
        masked = node.optional_arg("attn_mask") is not None
        wg = WORKGROUP[0]
        counts = [
            (
                "fused_sdpa_scores_masked" if masked else "fused_sdpa_scores",
                div_up(rows * kv_len, wg),
            ),
            ("fused_sdpa_softmax", rows),
            ("fused_sdpa_av", div_up(rows * dim, wg)),
        ]
        return [(node.name, kernel, WORKGROUP, (count, 1, 1), True) for kernel, count in counts]

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """Coverage: S, the query rows (L moves on its own)."""
        return live.of(node, "q")[2]

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: "mask=-inf" where a mask given as a graph input or constant masks a
        score with -inf (exact 0 weights: docs/oracles.md, "Non-finite values"); a long
        key/value length L (the softmax's rows)."""
        out = {f"kv_len>={LONG_KV}"} if live.of(node, "k")[2] >= LONG_KV else set()
        name = node.optional_arg("attn_mask")
        if not isinstance(name, str):
            return out
        mask = live.host.get(name)
        constant = live.graph.tensor(name).constant
        if mask is None and constant is not None:
            mask = live.graph.constants[constant]
        return out | ({"mask=-inf"} if mask is not None and np.isneginf(mask).any() else set())

    @staticmethod
    def _scale(args: Args) -> float:
        scale = args.get("scale")
        return default_scale(args["q"].shape[-1]) if scale is None else float(scale)

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        # Indices count from the right: every tensor may carry the same leading probe axis.
        scores = np.einsum("...sd,...ld->...sl", args["q"], args["k"]) * self._scale(args)
        if args.get("attn_mask") is not None:
            scores = scores + args["attn_mask"]
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        return {"out": np.einsum("...sl,...ld->...sd", weights, args["v"])}

    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Per-element bound of out.

        With s_c the score of key row c (mask added) and x_c = s_c - max <= 0:
        - the kernel's score is a D-term dot product (gamma(D) times the sum of |q||k|
          terms), times the scale rounded to f32 and rounded (2u of |scale dot|), plus the
          mask and rounded (u|s_c|): delta_c;
        - exp(x_c) is off by delta_c + u|x_c| (the subtraction) + ulp_exp(x_c) EPS32,
          relatively: eps_c (a shift of all scores by the same error cancels in the softmax);
        - the normalizer is an L-term sum and a division: sigma = gamma(L) + 2.5 EPS32;
        - a normalized weight is then off by eps_c + sum_j p_j eps_j + sigma (relatively) and
          the weighted sum of values adds gamma(L) times sum_c p_c |v_c|;
        - weights or products below the normal range may flush to zero (TINY32 each, the
          normalizer is at least 1).
        u, EPS32 = 2u, TINY32 and exp's ULPs are those of the kernel's arithmetic
        (`arithmetic()`: f32, or f16 for `precision = "f16"`: u = 2^-11, tiny 2^-14, exp
        1 + 2|x| ULP, division accurate for a normalizer up to 2^14, which L <= 2^14 keeps).
        """
        a = arithmetic()
        q, k, v = args["q"], args["k"], np.abs(args["v"])
        scale = self._scale(args)
        kv_len, dim = k.shape[-2], q.shape[-1]
        product = np.einsum("...sd,...ld->...sl", q, k) * scale
        mask = args.get("attn_mask")
        scores = product if mask is None else product + mask
        delta = scale * gamma(dim) * np.einsum("...sd,...ld->...sl", np.abs(q), np.abs(k))
        delta = delta + 2 * a.u * np.abs(product) + (0 if mask is None else a.u * np.abs(scores))
        x = scores - scores.max(axis=-1, keepdims=True)
        p = np.exp(x)
        p /= p.sum(axis=-1, keepdims=True)
        eps = delta + a.u * np.abs(x) + a.ulp_exp(x) * a.eps
        # A -inf score (a -inf mask entry, as in causal masks) is an exact 0 weight: exp(-inf)
        # = 0 (IEEE 754, both APIs' exp on the devices tested), and its 0 * v_c adds nothing
        # for finite v_c. Its error term is 0, not 0 * inf, and it stays out of the max.
        eps = np.where(p > 0, eps, 0.0)
        eps_mean = (p * eps).sum(axis=-1, keepdims=True)
        sigma = gamma(kv_len) + ULP_DIVIDE * a.eps
        local = np.einsum("...sl,...ld->...sd", p * (eps + eps_mean + sigma + gamma(kv_len)), v)
        flushed = a.tiny * (
            2 * v.sum(axis=-2, keepdims=True) + kv_len * (np.abs(outputs["out"]) + 1)
        )
        return {"out": SAFETY * (local + flushed)}


MODEL = register("fused_sdpa", FusedSdpaModel())


# ---------------------------------------------------------------------------- cases


# attn_mask shapes relative to the scores [B, H, S, L]: which dims the mask follows (1: it
# broadcasts there). Upstream's op test uses [B, 1, 1, L].
MASK_PATTERNS = ((1, 0, 0, 1), (1, 1, 1, 1), (0, 0, 1, 1), (0, 0, 0, 1), (1, 0, 1, 0))


# How a case fills its mask: "uniform" values in [-2, 2]; "padding" 0 or -1e4 (a padding
# mask that stays finite); "-inf" 0 or -inf as ExecuTorch and Hugging Face build causal and
# padding masks (`causal_mask`), the non-finite path of the budgets (docs/oracles.md).
MASK_FILLS = ("uniform", "padding", "-inf")


def mask_values(
    rng: np.random.Generator, fill: str, dims: list[int], seq: int, kv_len: int
) -> np.ndarray:
    """One step's mask of `dims` (a broadcast of the scores [B, H, S, L]) filled as `fill`
    says (`MASK_FILLS`). A -inf fill masks keys causally where the mask follows S and L,
    and ~30% of the keys (padding) where it follows L, never key 0: every row keeps a key
    (a row of -inf alone has no softmax: 0 / 0, NaN in PyTorch too). A mask that does not
    follow L would mask whole rows, so it gets finite values there instead."""
    if fill == "uniform" or (fill == "-inf" and dims[3] == 1):
        return rng.uniform(-2.0, 2.0, dims).astype(np.float32)
    if fill == "padding":
        return np.where(rng.random(dims) < 0.3, -1e4, 0.0).astype(np.float32)
    hidden = rng.random(dims) < 0.3
    hidden[..., 0] = False
    values = np.where(hidden, -np.inf, 0.0).astype(np.float32)
    if dims[2] > 1:
        values = values + causal_mask(seq, kv_len)
    return values


@family("fused_sdpa", exercises={"fused_sdpa"})
@st.composite
def fused_sdpa_cases(draw: st.DrawFn) -> Case:
    """fused_sdpa with S and L moving independently step by step, with or without an
    additive mask of a broadcast pattern (`MASK_PATTERNS`) and values (`MASK_FILLS`,
    `mask_values`): in [-2, 2], 0 / -1e4 like a padding mask, or 0 / -inf as causal and
    padding masks are shipped; q scaled up now and then for a sharper softmax. A quarter of
    the cases have a long L (2048 to 4096), reached in their first step."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    # A quarter of the cases: a long L (`LONG_KV_LENS`, at its max in the first step) over
    # few heads and query rows.
    long = draw(st.integers(0, 3)) == 3  # the simplest draw (0) stays short
    batch, heads = draw(st.integers(1, 1 if long else 2)), draw(st.integers(1, 2 if long else 3))
    dim = draw(st.sampled_from([1, 4, 8, 16, 33]))
    max_q = draw(st.integers(1, 4 if long else 12))
    max_kv = draw(
        st.sampled_from(LONG_KV_LENS) if long else st.one_of(st.integers(1, 24), st.just(70))
    )
    pattern = draw(st.sampled_from([None, *MASK_PATTERNS]))
    fill = draw(st.sampled_from(MASK_FILLS))
    sharp = draw(st.sampled_from([1.0, 1.0, 4.0]))
    scale = draw(st.sampled_from([None, 0.3]))
    b = GraphBuilder()
    q = b.input("q", "float32", [batch, heads, max_q, dim])
    k = b.input("k", "float32", [batch, heads, max_kv, dim])
    v = b.input("v", "float32", [batch, heads, max_kv, dim])

    def mask_dims(seq: int, kv_len: int) -> list[int]:
        assert pattern is not None
        return [
            n if follows else 1
            for n, follows in zip((batch, heads, seq, kv_len), pattern, strict=True)
        ]

    mask = None if pattern is None else b.input("attn_mask", "float32", mask_dims(max_q, max_kv))
    b.output(
        b.op(
            "fused_sdpa",
            name="attention",
            q=q,
            k=k,
            v=v,
            attn_mask=mask,
            scale=None if scale is None else b.float(scale, "scale"),
        )
    )
    steps: list[StepInputs] = []
    for _ in range(draw(st.integers(1, 5))):
        seq = draw(live_sizes(max_q))
        kv_len = max_kv if long and not steps else draw(live_sizes(max_kv))
        step: StepInputs = {
            "q": float_array(rng, [batch, heads, seq, dim], sharp),
            "k": float_array(rng, [batch, heads, kv_len, dim]),
            "v": float_array(rng, [batch, heads, kv_len, dim]),
        }
        if pattern is not None:
            step["attn_mask"] = mask_values(rng, fill, mask_dims(seq, kv_len), seq, kv_len)
        steps.append(step)
    return Case(b.build(), steps, name="fused_sdpa", meta={"seed": seed, "family": "fused_sdpa"})


# ---------------------------------------------------------------------------- random graphs


@generator("fused_sdpa")
def gen_fused_sdpa(g: GraphGen) -> bool:
    """Attention of q over k and v, head views `[1, H, S, D]` and `[1, H, L, D]` (`view_as`)
    of pool tensors `[S, H*D]` and `[L, H*D]` (S and L symbols, the same or different), no
    mask, or an additive constant mask `[1, 1, 1, L]` when L is static (`mask_values`: -inf
    padding keys among its fills)."""
    candidates = [t for t in g.pool if len(t.dims) == 2 and isinstance(t.dims[1], int)]
    if not candidates:
        return False
    q_src = g.pick(candidates)
    width = q_src.dims[1]
    assert isinstance(width, int)
    kv_sources = [t for t in candidates if t.dims[1] == width]
    k_src = g.pick(kv_sources)
    v_src = g.pick([t for t in kv_sources if t.dims == k_src.dims])
    dim = g.draw(st.sampled_from([d for d in range(1, min(width, 32) + 1) if width % d == 0]))
    heads = width // dim
    q_rows, kv_rows = q_src.dims[0], k_src.dims[0]
    q, k, v = (
        view_as(g, src, (1, heads, rows, dim))
        for src, rows in ((q_src, q_rows), (k_src, kv_rows), (v_src, kv_rows))
    )
    b = g.builder
    mask = None
    if isinstance(kv_rows, int) and g.draw(st.booleans()):
        fill = g.draw(st.sampled_from(MASK_FILLS))
        values = mask_values(g.rng, fill, [1, 1, 1, kv_rows], 1, kv_rows)
        mask = b.constant(b.fresh("attn_mask"), values)
    out = b.op("fused_sdpa", q=q.name, k=k.name, v=v.name, attn_mask=mask)
    g.produced(out, q.dims, [q, k, v])
    return True
