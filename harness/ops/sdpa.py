"""Model of sdpa_with_kv_cache(q, k, v, k_cache, v_cache, input_pos, scale?).

Shapes: q `[1, S, Hq, D]`, k and v `[1, S, Hkv, D]`, caches `[1, C, Hkv, D]` (state
tensors), out `[1, S, Hq, D]`; Hq a multiple of Hkv, query head h reads kv head h // (Hq/Hkv).
Semantics: rows input_pos ... input_pos+S-1 of the caches take k and v; with ctx =
input_pos + S, token s attends causally to cache rows c <= input_pos + s, scores scaled by
`scale` (1/sqrt(D) when absent), softmax, weighted sum of the value rows.

Live checks, in this order (`InputError`, subject the op): "shape" (q live must be
[1, S, Hq, D] and k, v live [1, S, Hkv, D], only S moves), "input_pos" (negative),
"cache_overflow" (input_pos + S > C). They run before anything is dispatched, so a rejected
step leaves the caches as they were.

Kernel design (both backends), six slots in this order, 64 invocations per workgroup each:
1. `sdpa_update_cache`: one invocation per element of k (S*Hkv*D), writing k and v into
   both caches; count ceil(S*Hkv*D / 64). Always runs.
Materialized route, taken when S > 1 (zero counts otherwise):
2. `sdpa_qk`: one invocation per score (h, s, c) of a dense live `[Hq, S, ctx]` scratch;
   count ceil(Hq*S*ctx / 64); causally masked scores are never written nor read.
3. `sdpa_softmax`: one workgroup per row (h, s) over its pos+s+1 scores, in place (max,
   sum of exp(x - max), then exp(x - max) / sum); count Hq*S.
4. `sdpa_av`: one invocation per output element; count ceil(S*Hq*D / 64).
Split-K "flash decoding" route, taken when S == 1:
5. `sdpa_fd_split`: one workgroup per (head, split) of SPLIT = 64 cache rows, lane t owning
   row split*64 + t: local max m, l = sum exp(x - m), o = sum exp(x - m) v; partials in
   scratch; count Hq * ceil(ctx / 64).
6. `sdpa_fd_reduce`: one workgroup per head: M = max m_i, w_i = exp(m_i - M),
   out = sum w_i o_i / sum w_i l_i; count Hq.

Half precision (q, k, v, both caches and out float16 together): every slot but the softmax
is its `_f16` variant, which loads f16 (the caches are written in f16, exactly: a copy),
computes in f32 exactly as its f32 twin, keeps the scores and the split partials in f32
(`sdpa_softmax` serves both precisions) and rounds out once to f16. Budget: the f32 one from
the f16 inputs and caches, plus the f16 store of out (`harness.model.local_budget`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import (
    FLOAT_DTYPES,
    Graph,
    GraphBuildError,
    InputError,
    OpNode,
    TensorValue,
    dtype_slot,
)
from graph_format.kernels import Value
from harness.gen.blocks import (
    family_dtype,
    float_array,
    kv_steps,
    seeds,
)
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import GraphGen, PoolTensor, Sym, generator
from harness.gen.half import half_precision
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    div_up,
    kernels,
    op_dtype,
    register,
    ro,
    rw,
    tensors,
    uniform_float_dtype,
)
from harness.model.numerics import SAFETY, ULP_DIVIDE, arithmetic, gamma
from harness.ops.view import view_as

WORKGROUP = (64, 1, 1)
SPLIT = 64  # cache rows per split of the decode route (= the workgroup size)
LONG_CONTEXT = 2048  # `context>=2048`: a decode step over 32 splits or more
# The long caches of the sdpa family's long cases and the decode contexts it draws in them:
# 32 and 64 splits exactly, one row short of them and one row into the next split.
LONG_CACHES = (2049, 4096, 4100)
LONG_CONTEXTS = (2047, 2048, 2049, 4095, 4096, 4097)


def default_scale(head_dim: int) -> float:
    """1/sqrt(D), the scale when the graph gives none."""
    return 1.0 / math.sqrt(head_dim)


class SdpaModel(OpModel):
    """Contract, reference and budget of sdpa_with_kv_cache."""

    # S = 1 (the decode route) and the max, the cache's start and end, contexts around the
    # decode route's splits (`regimes`).
    activations = ("q", "k", "v")
    dtypes = FLOAT_DTYPES
    # A decode step (the split-K route) at a long context: what a pr run must reach as well.
    pr_regimes = (f"context>={LONG_CONTEXT}",)
    required_regimes = (
        "size=1",
        "size=max",
        "step=grow",
        "step=shrink",
        "pos=0",
        "context=cache_end",
        "seq>cache/2",
        *(f"context%{SPLIT}={r}" for r in ("-1", "0", "+1")),
        *pr_regimes,
    )
    kernels = kernels(
        KernelSpec(
            "sdpa_update_cache",
            (rw("k_cache"), rw("v_cache"), ro("k"), ro("v")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "sdpa_qk",
            (rw("scores"), ro("q"), ro("k_cache")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "sdpa_softmax",
            (rw("scores"),),
            exact=True,
            # No webgpu_ulps: exp may differ by 3 + 2|x| ULP between devices (WGSL).
        ),
        KernelSpec(
            "sdpa_av",
            (rw("out"), ro("scores"), ro("v_cache")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "sdpa_fd_split",
            (rw("part_o"), rw("part_ml"), ro("q"), ro("k_cache"), ro("v_cache")),
            exact=True,
            # No webgpu_ulps: exp may differ by 3 + 2|x| ULP between devices (WGSL).
        ),
        KernelSpec(
            "sdpa_fd_reduce",
            (rw("out"), ro("part_o"), ro("part_ml")),
            exact=True,
            webgpu_ulps=0,
        ),
        # Half precision: q, k, v, the caches and out in f16; scores and partials stay f32.
        KernelSpec(
            "sdpa_update_cache_f16",
            (rw("k_cache", "f16"), rw("v_cache", "f16"), ro("k", "f16"), ro("v", "f16")),
            exact=True,
        ),
        KernelSpec(
            "sdpa_qk_f16",
            (rw("scores"), ro("q", "f16"), ro("k_cache", "f16")),
            exact=True,
        ),
        KernelSpec(
            "sdpa_av_f16",
            (rw("out", "f16"), ro("scores"), ro("v_cache", "f16")),
            exact=True,
        ),
        KernelSpec(
            "sdpa_fd_split_f16",
            (
                rw("part_o"),
                rw("part_ml"),
                ro("q", "f16"),
                ro("k_cache", "f16"),
                ro("v_cache", "f16"),
            ),
            exact=True,
        ),
        KernelSpec(
            "sdpa_fd_reduce_f16",
            (rw("out", "f16"), ro("part_o"), ro("part_ml")),
            exact=True,
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        q, k, v, kc, vc, out = tensors(node, graph, "q", "k", "v", "k_cache", "v_cache", "out")
        uniform_float_dtype(node, graph, "q", "k", "v", "k_cache", "v_cache", "out")
        for t in (q, k, v, kc, vc):
            if len(t.dims) != 4 or t.dims[0] != 1:
                raise GraphBuildError(node.name, "inputs must be [1, ., ., .]", tensor=t.name)
        for t in (kc, vc):
            if not t.state:
                raise GraphBuildError(node.name, "caches must be state tensors", tensor=t.name)
        _check_dims(node, q, k, v, kc, vc, out)

    def resize(self, node: OpNode, live: LiveState) -> None:
        q, k, v = (live.of(node, s) for s in ("q", "k", "v"))
        _, _, hq, dim = live.max_of(node, "q")
        _, cache_rows, hkv, _ = live.max_of(node, "k_cache")
        seq = q[1]
        if q != (1, seq, hq, dim) or k != (1, seq, hkv, dim) or v != k:
            raise InputError(
                node.name,
                "shape",
                f"live q {list(q)}, k {list(k)}, v {list(v)} must be [1, S, {hq}, {dim}] and "
                f"[1, S, {hkv}, {dim}]",
            )
        pos = live.int_arg(node, "input_pos")
        if pos < 0:
            raise InputError(node.name, "input_pos", f"input_pos {pos} is negative")
        if pos + seq > cache_rows:
            raise InputError(
                node.name,
                "cache_overflow",
                f"input_pos {pos} + S {seq} exceeds the cache's {cache_rows} rows",
            )
        live.set_output(node, "out", q)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        _, seq, q_heads, dim = live.of(node, "q")
        pos = live.int_arg(node, "input_pos")
        scale = node.optional_arg("scale")
        return {
            "seq": seq,
            "input_pos": pos,
            "context": pos + seq,
            "q_heads": q_heads,
            "kv_heads": live.of(node, "k")[2],
            "head_dim": dim,
            "num_splits": div_up(pos + seq, SPLIT),
            "max_seq": live.max_of(node, "q")[1],
            "cache_rows": live.max_of(node, "k_cache")[1],
            "scale": default_scale(dim) if scale is None else float(live.graph.scalar(scale)),
            "workgroup_size": WORKGROUP[0],
        }

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        _, seq, hq, dim = live.of(node, "q")
        hkv = live.of(node, "k")[2]
        ctx = live.int_arg(node, "input_pos") + seq
        decode = seq == 1
        wg = WORKGROUP[0]
        counts = [
            ("sdpa_update_cache", div_up(seq * hkv * dim, wg), True),
            ("sdpa_qk", div_up(hq * seq * ctx, wg), not decode),
            ("sdpa_softmax", hq * seq, not decode),
            ("sdpa_av", div_up(seq * hq * dim, wg), not decode),
            ("sdpa_fd_split", hq * div_up(ctx, SPLIT), decode),
            ("sdpa_fd_reduce", hq, decode),
        ]
        dtype = op_dtype(live.graph, node)
        return [
            (
                node.name,
                kernel if kernel == "sdpa_softmax" else dtype_slot(kernel, dtype),
                WORKGROUP,
                (count, 1, 1) if ran else (0, 0, 0),
                ran,
            )
            for kernel, count, ran in counts
        ]

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """Coverage: S, the size the route and the dispatch counts hinge on."""
        return live.of(node, "q")[1]

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: where the context sits in the cache and against the 64-row splits, and
        a decode step at a long context."""
        seq = live.of(node, "q")[1]
        cache_rows = live.max_of(node, "k_cache")[1]
        context = live.int_arg(node, "input_pos") + seq
        tags = {
            f"context%{SPLIT}={r}"
            for r, m in (("0", 0), ("+1", 1), ("-1", SPLIT - 1))
            if context >= SPLIT - 1 and context % SPLIT == m
        }
        if context - seq == 0:
            tags.add("pos=0")
        if context == cache_rows:
            tags.add("context=cache_end")
        if 2 * seq > cache_rows:
            tags.add("seq>cache/2")
        if seq == 1 and context >= LONG_CONTEXT:
            tags.add(f"context>={LONG_CONTEXT}")
        return tags

    @staticmethod
    def _geometry(args: Args) -> tuple[int, int, int, int, int, float]:
        """(pos, S, Hq, D, group, scale) of a call (dims from the right: the reference's
        arguments may carry leading probe axes)."""
        q, k = args["q"], args["k"]
        seq, hq, dim = q.shape[-3:]
        scale = args.get("scale")
        scale = default_scale(dim) if scale is None else float(scale)
        return int(args["input_pos"]), seq, hq, dim, hq // k.shape[-2], scale

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        # Every index counts from the right: q, k, v and the caches may carry the same
        # leading probe axis (the evaluator's probes; `probe_reference`).
        pos, seq, _, _, group, scale = self._geometry(args)
        kc, vc = args["k_cache"], args["v_cache"]
        kc[..., 0, pos : pos + seq, :, :] = args["k"][..., 0, :, :, :]
        vc[..., 0, pos : pos + seq, :, :] = args["v"][..., 0, :, :, :]
        ctx = pos + seq
        keys = np.repeat(kc[..., 0, :ctx, :, :], group, axis=-2)  # [ctx, Hq, D]
        values = np.repeat(vc[..., 0, :ctx, :, :], group, axis=-2)
        scores = np.einsum("...shd,...chd->...hsc", args["q"][..., 0, :, :, :], keys) * scale
        masked = np.arange(ctx)[None, :] > (pos + np.arange(seq))[:, None]  # [S, ctx]
        scores = np.where(masked, -np.inf, scores)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        return {"out": _visible_sum(weights, values, pos)[..., None, :, :, :]}

    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Per-element bound of out, and the caches' bounds after the update.

        With x_c = s_c - max <= 0 the score of cache row c after the max subtraction:
        - a score is a D-term dot product (gamma(D) times the sum of |q||k| terms), times
          the scale, itself rounded to float32: delta_c = scale gamma(D) sum|q||k| + 2u|s_c|;
        - exp(x_c) has (3 + 2|x_c|) ULP; the decode route takes two exps whose arguments
          add up to x_c (exp(s - m_split) exp(m_split - M)) and two subtractions, so each
          unnormalized weight is off by eps_c = delta_c + 2u|x_c| + (6 + 2|x_c|) EPS32,
          relatively;
        - the normalizer is a sum of n = pos+s+1 weights, in the decode route a sum of at
          most 64 within each of ns = ceil(ctx/64) splits, then weighted partial sums, and a
          division (2.5 ULP): sigma = gamma(n + ns + 2) + 2.5 EPS32 covers both routes;
        - a normalized weight is then off by eps_c + sum_j p_j eps_j + sigma (relatively) and
          the weighted sum of values adds gamma(n + ns + 2) times sum_c p_c |v_c|;
        - weights or products below the normal range may flush to zero (TINY32 each, the
          normalizer is at least 1).
        The caches are copies: exact.
        u, EPS32 = 2u, TINY32 and exp's ULPs (3 + 2|x| in f32: 6 + 2|x| for the two exps) are
        those of the kernel's arithmetic (`arithmetic()`: f32, or f16 for `precision =
        "f16"`: u = 2^-11, tiny 2^-14, exp 1 + 2|x| ULP).
        """
        a = arithmetic()
        pos, seq, _, dim, group, scale = self._geometry(args)
        ctx = pos + seq
        kc, vc = args["k_cache"], args["v_cache"]  # already updated by the reference
        keys = np.repeat(kc[0, :ctx], group, axis=1)
        values = np.abs(np.repeat(vc[0, :ctx], group, axis=1))
        q = args["q"][0]

        scores = np.einsum("shd,chd->hsc", q, keys) * scale
        valid = (np.arange(ctx)[None, :] <= (pos + np.arange(seq))[:, None])[None]  # [1,S,ctx]
        delta = scale * gamma(dim) * np.einsum("shd,chd->hsc", np.abs(q), np.abs(keys))
        delta += 2 * a.u * np.abs(scores)
        top = np.where(valid, scores, -np.inf).max(axis=-1, keepdims=True)
        x = np.where(valid, scores - top, 0.0)
        p = np.where(valid, np.exp(x), 0.0)
        p /= p.sum(axis=-1, keepdims=True)

        n = (pos + np.arange(seq) + 1)[None, :, None].astype(np.float64)  # terms per row
        splits = div_up(ctx, SPLIT)
        sigma = gamma(n + splits + 2) + ULP_DIVIDE * a.eps
        eps = delta + 2 * a.u * np.abs(x) + (2 * a.exp_ulp_base + 2 * np.abs(x)) * a.eps
        # A key of weight 0 (masked, or a -inf score: exp gives an exact 0) adds no error:
        # 0, not 0 * eps, where a non-finite cache row makes eps non-finite.
        eps = np.where(p > 0, eps, 0.0)
        eps_mean = (p * eps).sum(axis=-1, keepdims=True)
        local = _visible_sum(p * (eps + eps_mean + 2 * sigma), values, pos)
        flushed = a.tiny * (
            2 * _visible_sum(np.broadcast_to(valid, p.shape).astype(np.float64), values, pos)
            + np.transpose(n, (1, 0, 2)) * (np.abs(outputs["out"][0]) + 1)
        )
        out = SAFETY * (local + flushed)
        return {"out": out[None], "k_cache": np.zeros(kc.shape), "v_cache": np.zeros(vc.shape)}


def _visible_sum(weights: np.ndarray, values: np.ndarray, pos: int) -> np.ndarray:
    """sum over c of weights[..., h, s, c] values[..., c, h, d] -> [..., s, h, d], over the
    keys query s sees (c <= pos + s) alone: the kernels never read a causally masked
    cache row, so a non-finite value there must not make the sum NaN (0 * inf). One einsum
    when every value is finite; a row at a time (S is small) otherwise."""
    if np.isfinite(values).all():
        summed: np.ndarray = np.einsum("...hsc,...chd->...shd", weights, values)
        return summed
    rows = [
        np.einsum(
            "...hc,...chd->...hd", weights[..., s, : pos + s + 1], values[..., : pos + s + 1, :, :]
        )
        for s in range(weights.shape[-2])
    ]
    return np.stack(rows, axis=-3)


MODEL = register("sdpa_with_kv_cache", SdpaModel())


# ---------------------------------------------------------------------------- cases


@family("sdpa", exercises={"sdpa_with_kv_cache"})
@st.composite
def sdpa_cases(draw: st.DrawFn) -> Case:
    """sdpa_with_kv_cache over a KV-cache session (prefill, decode, chunks, reset, overflow).

    Grouped-query heads (Hq = group * Hkv), head dims of any size, caches from a few rows to
    past two 64-row splits; q scaled up now and then for a sharper softmax. A quarter of the
    cases have a long cache (`LONG_CACHES`) and decode at a long context first.
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    # A quarter of the cases: a long cache (up to 4096 rows), decoded at contexts around the
    # multiples of 2048 (32 and 64 splits of the decode route, +-1 row): few heads, small D.
    long = draw(st.integers(0, 3)) == 3  # the simplest draw (0) stays short
    kv_heads, group = draw(st.integers(1, 2 if long else 3)), draw(st.integers(1, 2 if long else 3))
    dim = draw(st.sampled_from([1, 4, 8, 16] if long else [1, 3, 4, 8, 16, 33, 64, 72]))
    if long:
        cache_rows = draw(st.sampled_from(LONG_CACHES))
    else:
        cache_rows = draw(st.one_of(st.integers(1, 40), st.sampled_from([63, 64, 65, 129, 140])))
    max_seq = draw(st.integers(1, min(cache_rows, 8 if long else 24)))
    sharp = draw(st.sampled_from([1.0, 1.0, 4.0]))
    b = GraphBuilder()
    q = b.input("q", "float32", [1, max_seq, kv_heads * group, dim])
    k = b.input("k", "float32", [1, max_seq, kv_heads, dim])
    v = b.input("v", "float32", [1, max_seq, kv_heads, dim])
    pos = b.symint_input("input_pos")
    cache = [1, cache_rows, kv_heads, dim]
    scale = draw(st.sampled_from([None, 0.3]))
    b.output(
        b.op(
            "sdpa_with_kv_cache",
            name="sdpa",
            q=q,
            k=k,
            v=v,
            k_cache=b.state("k_cache", "float32", cache),
            v_cache=b.state("v_cache", "float32", cache),
            input_pos=pos,
            scale=None if scale is None else b.float(scale, "scale"),
        )
    )
    schedule = draw(kv_steps(cache_rows, max_seq))
    # A decode step at a long context first, whatever the session does next (nearly always:
    # the shrinker may drop it, as its draw's simplest value does).
    if long and draw(st.integers(0, 7)) != 0:
        context = draw(st.sampled_from([c for c in LONG_CONTEXTS if c <= cache_rows]))
        schedule.insert(0, (1, context - 1))
    steps: list[StepInputs] = [
        {
            "q": float_array(rng, [1, seq, kv_heads * group, dim], sharp),
            "k": float_array(rng, [1, seq, kv_heads, dim]),
            "v": float_array(rng, [1, seq, kv_heads, dim]),
            "input_pos": position,
        }
        for seq, position in schedule
    ]
    case = Case(b.build(), steps, name="sdpa", meta={"seed": seed, "family": "sdpa"})
    # Last: the shape draws stay where they were; f16 data are the f32 data rounded.
    return half_precision(case) if draw(family_dtype("sdpa")) == "float16" else case


# ---------------------------------------------------------------------------- random graphs


@generator("sdpa_with_kv_cache")
def gen_sdpa_with_kv_cache(g: GraphGen) -> bool:
    """Attention over a KV cache. q, k and v are head views `[1, S, H, D]` (`view_as`) of
    pool tensors `[S, W]` whose first dim is a symbol S (the live sequence length); k and v
    share a head count that divides q's; the caches are state tensors `[1, C, Hkv, D]` with C
    at least S's max; `input_pos` is a SymInt graph input fed every step as a KV-cache
    session feeds it (the next chunk, a reset to 0, a chunk reaching the cache's end, any
    position), always within the cache for the live S."""
    candidates = g.sequence_rows()
    if not candidates:
        return False
    q_src = g.pick(candidates)
    seq, width = q_src.dims
    assert isinstance(seq, Sym) and isinstance(width, int)
    dim = g.draw(st.sampled_from([d for d in range(1, min(width, 32) + 1) if width % d == 0]))
    q_heads = width // dim

    def kv_heads(t: PoolTensor) -> int:
        width = t.dims[1]
        assert isinstance(width, int)
        return width // dim if width % dim == 0 and q_heads % (width // dim) == 0 else 0

    kv_sources = [t for t in candidates if t.dims[0] == seq and kv_heads(t)]
    k_src = g.pick(kv_sources)
    v_src = g.pick([t for t in kv_sources if t.dims == k_src.dims])
    heads = kv_heads(k_src)
    q, k, v = (
        view_as(g, src, (1, seq, h, dim))
        for src, h in ((q_src, q_heads), (k_src, heads), (v_src, heads))
    )
    rows = seq.max + g.draw(st.integers(0, 8))
    b = g.builder
    cache = [1, rows, heads, dim]
    input_pos = b.symint_input(b.fresh("input_pos"))
    session = {"next": 0}  # where the session's next chunk starts

    def position(values: dict[str, int]) -> StepInputs:
        live = values[seq.name]
        kind = g.draw(st.sampled_from(["next", "next", "reset", "end", "any"]))
        if kind == "next" and session["next"] + live <= rows:
            pos = session["next"]
        elif kind == "end":
            pos = rows - live
        elif kind == "any":
            pos = g.draw(st.integers(0, rows - live))
        else:
            pos = 0
        session["next"] = pos + live
        return {input_pos: pos}

    g.step_inputs.append(position)
    scale = g.draw(st.sampled_from([None, 0.3]))
    out = b.op(
        "sdpa_with_kv_cache",
        q=q.name,
        k=k.name,
        v=v.name,
        k_cache=b.state(b.fresh("k_cache"), "float32", cache),
        v_cache=b.state(b.fresh("v_cache"), "float32", cache),
        input_pos=input_pos,
        scale=None if scale is None else b.float(scale),
    )
    g.produced(out, q.dims, [q, k, v])
    return True


def _check_dims(
    node: OpNode,
    q: TensorValue,
    k: TensorValue,
    v: TensorValue,
    kc: TensorValue,
    vc: TensorValue,
    out: TensorValue,
) -> None:
    """The cached sdpa's dims agree: k and v share q's S and D, the caches k's heads and D,
    Hq is a multiple of Hkv, and out is q's shape."""
    if v.dims != k.dims:
        raise GraphBuildError(node.name, "v dims != k dims", tensor=v.name)
    if k.dims[1] != q.dims[1] or k.dims[3] != q.dims[3]:
        raise GraphBuildError(node.name, "k must share q's S and D", tensor=k.name)
    if kc.dims[2:] != k.dims[2:]:
        raise GraphBuildError(node.name, "k_cache must be [1, C, Hkv, D]", tensor=kc.name)
    if vc.dims != kc.dims:
        raise GraphBuildError(node.name, "v_cache dims != k_cache dims", tensor=vc.name)
    if q.dims[2] % k.dims[2]:
        raise GraphBuildError(node.name, "Hq must be a multiple of Hkv", tensor=q.name)
    if out.dims != q.dims:
        raise GraphBuildError(node.name, "out dims != q dims", tensor=out.name)
