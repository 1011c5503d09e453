"""Hypothesis strategies: graphs with random max dims, and live-shape sequences to run on them.

Sequences are biased toward the regimes where resize bugs live: live size 1, the max, values
just below and above workgroup multiples, growing, shrinking and repeating. Every strategy
returns a `Case`; values are drawn from a seeded numpy generator (cheap, and irrelevant to
shrinking), so Hypothesis shrinks shapes and step counts, not floats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from graph_format import Graph
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.model import q4

# Workgroup and tile sizes the kernels use; live sizes just around their multiples matter.
EDGE_MULTIPLES = (4, 8, 64)


def live_sizes(max_size: int) -> st.SearchStrategy[int]:
    """One live size in [1, max_size], biased toward 1, the max and multiples +-1."""
    edges = {1, max_size}
    for m in EDGE_MULTIPLES:
        for k in range(m, max_size + 2, m):
            for v in (k - 1, k, k + 1):
                if 1 <= v <= max_size:
                    edges.add(v)
    return st.one_of(
        st.sampled_from(sorted(edges)),
        st.integers(1, max_size),
    )


def live_sequences(
    max_size: int, *, min_steps: int = 1, max_steps: int = 6
) -> st.SearchStrategy[list[int]]:
    """A sequence of live sizes: grows, shrinks, repeats, hits 1 and the max.

    Shrinks toward short sequences of small sizes.
    """
    return st.lists(live_sizes(max_size), min_size=min_steps, max_size=max_steps)


def float_array(rng: np.random.Generator, dims: Sequence[int], scale: float = 1.0) -> np.ndarray:
    """Non-degenerate float32 data: normal with a random offset, so no row is constant."""
    data = rng.standard_normal(dims) * scale + rng.uniform(-0.5, 0.5)
    return data.astype(np.float32)


@dataclass(frozen=True)
class DynamicDim:
    """A dim of a graph input: its max and, per step, its live size."""

    max_size: int
    dynamic: bool


# ---------------------------------------------------------------------------- builders


def _seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**32 - 1)


@st.composite
def leading_dims(
    draw: st.DrawFn, *, min_rank: int = 1, max_rank: int = 3, max_size: int = 24
) -> list[DynamicDim]:
    """Leading (non-feature) dims of an activation: a batch-like and a sequence-like dim."""
    rank = draw(st.integers(min_rank, max_rank))
    dims = []
    for _ in range(rank):
        size = draw(st.integers(1, max_size))
        dims.append(DynamicDim(size, size > 1 and draw(st.booleans())))
    if not any(d.dynamic for d in dims) and dims[-1].max_size > 1:
        dims[-1] = DynamicDim(dims[-1].max_size, True)
    return dims


def row_widths() -> st.SearchStrategy[int]:
    """Feature widths: small odd ones, multiples of 4 (vec4 kernels) and a few larger."""
    return st.one_of(
        st.integers(1, 12),
        st.sampled_from([16, 30, 32, 60, 64, 96, 100, 128, 130, 256]),
    )


@st.composite
def step_dims(
    draw: st.DrawFn, leading: Sequence[DynamicDim], *, min_steps: int = 1, max_steps: int = 6
) -> list[tuple[int, ...]]:
    """Live leading dims per step; dynamic dims move independently, static ones stay at max."""
    n = draw(st.integers(min_steps, max_steps))
    per_dim = [
        draw(live_sequences(d.max_size, min_steps=n, max_steps=n))
        if d.dynamic
        else [d.max_size] * n
        for d in leading
    ]
    return [tuple(seq[i] for seq in per_dim) for i in range(n)]


@st.composite
def rms_norm_cases(draw: st.DrawFn) -> Case:
    """A single rms_norm over an input with dynamic leading dims."""
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims())
    width = draw(row_widths())
    eps = draw(st.sampled_from([1e-6, 1e-5]))
    b = GraphBuilder()
    x = b.input("x", "float32", [d.max_size for d in leading] + [width])
    w = b.constant("weight", float_array(rng, [width]))
    b.output(b.op("rms_norm", x=x, weight=w, eps=b.float(eps)))
    steps = [{"x": float_array(rng, [*lead, width])} for lead in draw(step_dims(leading))]
    return Case(b.build(), steps, name="rms_norm", meta={"seed": seed, "family": "rms_norm"})


# How an input of a binary op relates to the output on one dim.
_FOLLOW, _ONE, _EITHER = "follow", "one", "either"


@st.composite
def binary_cases(draw: st.DrawFn, op: str | None = None) -> Case:
    """add or mul of two inputs that broadcast against each other in varied patterns.

    Per output dim each input either follows the live size, is always 1 (broadcasts), or
    switches between 1 and the live size from step to step (so the kernel variant flips
    between flat and broadcast at run time). An input may also have fewer dims.
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    op = op or draw(st.sampled_from(["add", "mul"]))
    leading = draw(leading_dims(max_rank=3))
    width = draw(st.one_of(st.integers(1, 8), st.sampled_from([16, 33, 64])))
    out_dims = [*leading, DynamicDim(width, False)]
    # The first input has every dim; the second may have fewer (it aligns on the right).
    ranks = [len(out_dims), draw(st.integers(1, len(out_dims)))]
    modes = [
        [draw(st.sampled_from([_FOLLOW, _FOLLOW, _ONE, _EITHER])) for _ in range(rank)]
        for rank in ranks
    ]
    # Some input must reach each dim's max, or the output would not have the max dims.
    offset = len(out_dims) - ranks[1]
    for i in range(len(out_dims)):
        second = modes[1][i - offset] if i >= offset else _ONE
        if modes[0][i] == _ONE and second == _ONE:
            modes[0][i] = _FOLLOW
    b = GraphBuilder()
    names = []
    for k, dims_modes in enumerate(modes):
        offset = len(out_dims) - len(dims_modes)
        max_dims = [
            1 if m == _ONE else out_dims[offset + j].max_size for j, m in enumerate(dims_modes)
        ]
        names.append(b.input("ab"[k], "float32", max_dims))
    b.output(b.op(op, a=names[0], b=names[1], out_dims=[d.max_size for d in out_dims]))
    steps = []
    for lead in draw(step_dims(leading)):
        live_out = [*lead, width]
        step = {}
        for k, dims_modes in enumerate(modes):
            offset = len(out_dims) - len(dims_modes)
            live = []
            for j, m in enumerate(dims_modes):
                size = live_out[offset + j]
                if m == _ONE or (m == _EITHER and draw(st.booleans())):
                    size = 1
                live.append(size)
            step["ab"[k]] = float_array(rng, live)
        steps.append(step)
    return Case(b.build(), steps, name=op, meta={"seed": seed, "family": "binary"})


@st.composite
def dag_cases(draw: st.DrawFn) -> Case:
    """Small DAGs where add/mul join branches of different depth.

    For example `x + rms_norm(rms_norm(x))` or `rms_norm(x) * rms_norm(rms_norm(rms_norm(x)))`:
    the join's inputs are produced at different depths, which is where a propagation that
    reads a stale co-input goes wrong.
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims(min_rank=2, max_rank=3, max_size=16))
    width = draw(st.sampled_from([8, 12, 30, 64]))
    b = GraphBuilder()
    x = b.input("x", "float32", [d.max_size for d in leading] + [width])
    eps = b.float(1e-6, "eps")

    def branch(depth: int) -> str:
        value = x
        for _ in range(depth):
            w = b.constant(b.fresh("w"), float_array(rng, [width]))
            value = b.op("rms_norm", x=value, weight=w, eps=eps)
        return value

    joins = draw(st.integers(1, 3))
    current = branch(draw(st.integers(0, 3)))
    for _ in range(joins):
        other = branch(draw(st.integers(0, 3)))
        if other == current:
            other = branch(1)
        current = b.op(draw(st.sampled_from(["add", "mul"])), a=current, b=other)
    b.output(current)
    steps = [{"x": float_array(rng, [*lead, width])} for lead in draw(step_dims(leading))]
    return Case(b.build(), steps, name="dag", meta={"seed": seed, "family": "dag"})


# How the live M of a linear evolves from step to step: every leading dim at 1 (M = 1, the
# GEMV route), every one at its max, or each drawn on its own.
_ONES, _MAX, _ANY = "ones", "max", "any"


@st.composite
def q4gsw_shapes(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(N, K, group_size, groups) of a valid q4gsw weight, biased to the edges.

    K with a padded tail (K % 8 != 0) and group sizes that are not multiples of 8 make the
    GEMV ineligible; group_size = K gives one group; N not a multiple of 4 pads the scales;
    now and then the scales carry one group more than K needs (the format allows it).
    """
    k = draw(st.one_of(st.sampled_from([8, 16, 32, 64, 128, 256, 520]), st.integers(1, 100)))
    group_size = draw(
        st.one_of(
            st.sampled_from([8, 16, 32, 64]).filter(lambda gs: gs <= max(k, 8)),
            st.just(k),
            st.integers(1, k),
        )
    )
    n = draw(st.one_of(st.integers(1, 24), st.sampled_from([32, 40, 64, 130, 257])))
    groups = q4.num_groups(k, group_size) + draw(st.sampled_from([0, 0, 0, 1]))
    return n, k, group_size, groups


@st.composite
def linear_q4gsw_cases(draw: st.DrawFn) -> Case:
    """One linear_q4gsw whose live M moves between 1 (GEMV) and larger values (GEMM).

    x has 1 to 3 leading dims (M = their product, all of them); per step the leading dims
    are all 1, all at their max, or drawn independently, so sequences cross 1 <-> M > 1 in
    both directions, stay at 1, jump to the max and repeat.
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    n, k, group_size, groups = draw(q4gsw_shapes())
    rank = draw(st.integers(1, 3))
    # Outer dims stay small, so that max M = their product stays <= 528 (lavapipe is slow);
    # the innermost crosses the GEMM's 4-row tiles (and 64-invocation workgroups of tiles).
    lead_max = [draw(st.integers(1, 4)) for _ in range(rank - 1)]
    lead_max.append(draw(st.one_of(st.integers(1, 6), st.sampled_from([8, 9, 17, 33]))))
    b = GraphBuilder()
    x = b.input("x", "float32", [*lead_max, k])
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group_size, groups=groups)
    args = {
        "x": x,
        "weight": b.constant("weight", packed),
        "scales": b.constant("scales", scales),
        "group_size": b.int(group_size, "group_size"),
    }
    if draw(st.booleans()):
        args["bias"] = b.constant("bias", float_array(rng, [n]))
    b.output(b.op("linear_q4gsw", out_dims=[*lead_max, n], **args))
    modes = draw(st.lists(st.sampled_from([_ONES, _MAX, _ANY]), min_size=1, max_size=6))
    steps = []
    for mode in modes:
        if mode == _ONES:
            lead = [1] * rank
        elif mode == _MAX:
            lead = list(lead_max)
        else:
            lead = [draw(live_sizes(size)) for size in lead_max]
        steps.append({"x": float_array(rng, [*lead, k])})
    meta = {"seed": seed, "family": "linear_q4gsw", "modes": modes}
    return Case(b.build(), steps, name="linear_q4gsw", meta=meta)


def decoders() -> st.SearchStrategy[Case]:
    """Tiny Llama decoders over KV-cache sessions (harness/families/decoder.py)."""
    from harness.families.decoder import decoder_cases  # decoder builds on this module

    return decoder_cases()


def random_graphs() -> st.SearchStrategy[Case]:
    """Random DAGs over every op with a generator (harness/gen/graphgen.py)."""
    from harness.gen.graphgen import random_graph_cases  # graphgen builds on this module

    return random_graph_cases()


# ---------------------------------------------------------------------------- decoder ops


@st.composite
def unary_cases(draw: st.DrawFn, op: str) -> Case:
    """sigmoid or silu over dynamic leading dims; magnitudes up to ~60 exercise exp's error."""
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims())
    width = draw(row_widths())
    scale = draw(st.sampled_from([1.0, 4.0, 16.0]))
    b = GraphBuilder()
    x = b.input("x", "float32", [d.max_size for d in leading] + [width])
    b.output(b.op(op, name=op, x=x))
    steps = [{"x": float_array(rng, [*lead, width], scale)} for lead in draw(step_dims(leading))]
    return Case(b.build(), steps, name=op, meta={"seed": seed, "family": op})


@st.composite
def silu_mul_cases(draw: st.DrawFn) -> Case:
    """The fused silu(gate) * up; now and then a step whose up has another live shape."""
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims())
    width = draw(row_widths())
    scale = draw(st.sampled_from([1.0, 4.0, 16.0]))
    b = GraphBuilder()
    dims = [d.max_size for d in leading] + [width]
    gate, up = b.input("gate", "float32", dims), b.input("up", "float32", dims)
    b.output(b.op("silu_mul", name="silu_mul", gate=gate, up=up))
    steps = []
    for lead in draw(step_dims(leading)):
        live = [*lead, width]
        up_live = list(live)
        if draw(st.integers(0, 9)) == 0 and live[-1] > 1:
            up_live[-1] -= 1  # refused by both: gate and up must match
        steps.append({"gate": float_array(rng, live, scale), "up": float_array(rng, up_live)})
    return Case(b.build(), steps, name="silu_mul", meta={"seed": seed, "family": "silu_mul"})


@st.composite
def embedding_cases(draw: st.DrawFn) -> Case:
    """embedding_q4gsw on token ids of dynamic shape (int32 or int64 host data).

    Now and then a step holds an id outside the vocabulary, which both backends must refuse
    on the host.
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    vocab = draw(st.integers(1, 70))
    dim = draw(st.sampled_from([2, 6, 8, 10, 30, 32, 64, 96]))
    group = draw(st.sampled_from([g for g in range(1, dim + 1) if dim % g == 0]))
    leading = draw(leading_dims(max_rank=3))
    b = GraphBuilder()
    weight = b.constant("weight", rng.integers(0, 256, (vocab, dim // 2), dtype=np.uint8))
    scales = rng.uniform(0.01, 1.0, (vocab, dim // group)) * rng.choice([-1.0, 1.0])
    s = b.constant("scales", scales.astype(np.float32))
    ids = b.input("indices", "int32", [d.max_size for d in leading])
    b.output(
        b.op(
            "embedding_q4gsw",
            name="embedding",
            weight=weight,
            scales=s,
            group_size=b.int(group, "group_size"),
            indices=ids,
            out_dims=[d.max_size for d in leading] + [dim],
        )
    )
    steps = []
    for lead in draw(step_dims(leading)):
        host = rng.integers(0, vocab, lead).astype(draw(st.sampled_from([np.int32, np.int64])))
        if draw(st.integers(0, 9)) == 0:
            host.flat[draw(st.integers(0, host.size - 1))] = draw(st.sampled_from([-1, vocab]))
        steps.append({"indices": host})
    return Case(b.build(), steps, name="embedding", meta={"seed": seed, "family": "embedding"})


def head_dims() -> st.SearchStrategy[int]:
    """Even head dims: tiny, not multiples of 4 or 8, and typical ones."""
    return st.sampled_from([2, 4, 6, 8, 10, 16, 30, 32, 64])


def rope_tables(
    rng: np.random.Generator, positions: np.ndarray, dim: int, theta: float = 10000.0
) -> np.ndarray:
    """Rotation angles pos * theta^(-2i/dim), i < dim/2, one row per position.

    The positions get a random fractional phase: at position 0 the true tables are constant
    (cos 1, sin 0), which would make the case degenerate (harness/check/oracles.py); the kernels'
    job is the same for any angle.
    """
    freqs = theta ** (-np.arange(0, dim, 2) / dim)
    return np.outer(positions + rng.uniform(0.25, 0.75), freqs)


@st.composite
def rope_cases(draw: st.DrawFn) -> Case:
    """apply_rotary_emb with dynamic batch and S, different q and k head counts, freqs [S, D/2]
    fed per step (as a decoder slices them by position)."""
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    batch, max_seq = draw(st.integers(1, 2)), draw(st.integers(1, 24))
    q_heads, k_heads, dim = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(head_dims())
    leading = [DynamicDim(batch, batch > 1), DynamicDim(max_seq, max_seq > 1)]
    b = GraphBuilder()
    xq = b.input("xq", "float32", [batch, max_seq, q_heads, dim])
    xk = b.input("xk", "float32", [batch, max_seq, k_heads, dim])
    cos = b.input("freqs_cos", "float32", [max_seq, dim // 2])
    sin = b.input("freqs_sin", "float32", [max_seq, dim // 2])
    outs = b.op(
        "apply_rotary_emb",
        name="rope",
        xq=xq,
        xk=xk,
        freqs_cos=cos,
        freqs_sin=sin,
        out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
    )
    b.output(*outs)
    steps = []
    for bsz, seq in draw(step_dims(leading)):
        angles = rope_tables(rng, draw(st.integers(0, 200)) + np.arange(seq), dim)
        steps.append(
            {
                "xq": float_array(rng, [bsz, seq, q_heads, dim]),
                "xk": float_array(rng, [bsz, seq, k_heads, dim]),
                "freqs_cos": np.cos(angles).astype(np.float32),
                "freqs_sin": np.sin(angles).astype(np.float32),
            }
        )
    return Case(b.build(), steps, name="rope", meta={"seed": seed, "family": "rope"})


@st.composite
def rope_hf_cases(draw: st.DrawFn) -> Case:
    """apply_rotary_emb_hf on full-width constant tables, start_pos a SymInt input (or an int).

    The tables' halves differ (random values), so a kernel reading the first half's columns
    for the second half is caught. Positions reach the table's end, and now and then run
    past it (refused by both).
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    max_seq = draw(st.integers(1, 20))
    rows = max_seq + draw(st.integers(0, 40))
    q_heads, k_heads, dim = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(head_dims())
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, max_seq, q_heads, dim])
    xk = b.input("xk", "float32", [1, max_seq, k_heads, dim])
    angles = rng.uniform(-np.pi, np.pi, (rows, dim))
    cos = b.constant("cos", np.cos(angles).astype(np.float32))
    sin = b.constant("sin", np.sin(angles).astype(np.float32))
    symbolic = draw(st.booleans()) or rows == max_seq
    fixed = draw(st.integers(0, rows - max_seq))
    start = b.symint_input("start_pos") if symbolic else b.int(fixed, "start_pos")
    outs = b.op(
        "apply_rotary_emb_hf",
        name="rope_hf",
        xq=xq,
        xk=xk,
        cos=cos,
        sin=sin,
        start_pos=start,
        out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
    )
    b.output(*outs)
    steps: list[StepInputs] = []
    for seq in draw(live_sequences(max_seq)):
        step: StepInputs = {
            "xq": float_array(rng, [1, seq, q_heads, dim]),
            "xk": float_array(rng, [1, seq, k_heads, dim]),
        }
        if symbolic:
            kind = draw(st.sampled_from(["any", "zero", "end", "past"]))
            step["start_pos"] = {
                "any": draw(st.integers(0, rows - seq)),
                "zero": 0,
                "end": rows - seq,
                "past": rows - seq + 1,
            }[kind]
        steps.append(step)
    return Case(b.build(), steps, name="rope_hf", meta={"seed": seed, "family": "rope_hf"})


@st.composite
def view_cases(draw: st.DrawFn) -> Case:
    """view_copy between [1, S, H*D] and [1, S, H, D] with sizes from SymInts.

    The SymInt is a sym_size of an intermediate (an rms_norm output, so upstream WebGPU would
    read its stale dim), or a SymInt graph input that now and then disagrees with the live
    numel (refused by both); the view back to [1, S, H*D] takes a sym_size of the view.
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    max_seq, heads, dim = draw(st.integers(1, 24)), draw(st.integers(1, 4)), draw(head_dims())
    from_input = draw(st.booleans())
    b = GraphBuilder()
    x = b.input("x", "float32", [1, max_seq, heads * dim])
    n = b.symint_input("n") if from_input else None
    w = b.constant("w", float_array(rng, [heads * dim]))
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    seq = n or b.op("sym_size", name="seq", x=h, dim=b.int(-2, "dim"))
    one = b.int(1, "one")
    split = b.op(
        "view_copy",
        name="split_heads",
        x=h,
        sizes=[one, seq, b.int(heads, "heads"), b.int(dim, "head_dim")],
        out_dims=[1, max_seq, heads, dim],
    )
    back_seq = b.op("sym_size", name="split_seq", x=split, dim=b.int(1, "seq_dim"))
    merged = b.op(
        "view_copy",
        name="merge_heads",
        x=split,
        sizes=[one, back_seq, b.int(heads * dim, "width")],
        out_dims=[1, max_seq, heads * dim],
    )
    b.output(split, merged)
    steps: list[StepInputs] = []
    for s in draw(live_sequences(max_seq)):
        step: StepInputs = {"x": float_array(rng, [1, s, heads * dim])}
        if n is not None:
            wrong = draw(st.integers(0, 9)) == 0
            step["n"] = s % max_seq + 1 if wrong and max_seq > 1 else s
        steps.append(step)
    return Case(b.build(), steps, name="view", meta={"seed": seed, "family": "view"})


@st.composite
def kv_steps(draw: st.DrawFn, cache_rows: int, max_seq: int) -> list[tuple[int, int]]:
    """(S, input_pos) per step of a KV-cache session.

    Biased to where cache and route bugs live: prefills (often longer than half the cache)
    followed by decode steps at the next position, S = 1 and S at the max, contexts just
    around multiples of the decode route's 64-row splits, context reaching the cache's end,
    a reset to position 0, and now and then a step past the end (refused by both backends,
    which must keep the caches as they were).
    """
    steps: list[tuple[int, int]] = []
    position = 0
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(
            st.sampled_from(["next", "next", "decode", "decode", "reset", "end", "split", "past"])
        )
        seq = 1 if kind == "decode" else draw(live_sizes(max_seq))
        if kind == "next" and position == cache_rows:
            kind = "reset"  # a full cache: start over (decode and "past" still overflow)
        if kind == "next":
            pos, seq = position, min(seq, cache_rows - position)  # a chunk that fits
        elif kind == "decode":
            pos = position
        elif kind == "reset":
            pos = 0
        elif kind == "end":
            pos = cache_rows - seq
        elif kind == "split":
            # Contexts of 63..65 or 127..129 rows; the end of a smaller cache otherwise.
            context = draw(st.sampled_from([63, 64, 65, 127, 128, 129]))
            pos = min(context, cache_rows) - seq
        else:
            pos = cache_rows - seq + 1
        pos = max(pos, 0)
        steps.append((seq, pos))
        if pos + seq <= cache_rows:
            position = pos + seq
    return steps


@st.composite
def sdpa_cases(draw: st.DrawFn) -> Case:
    """sdpa_with_kv_cache over a KV-cache session (prefill, decode, chunks, reset, overflow).

    Grouped-query heads (Hq = group * Hkv), head dims of any size, caches from a few rows to
    past two 64-row splits; q scaled up now and then for a sharper softmax.
    """
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    kv_heads, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dim = draw(st.sampled_from([1, 3, 4, 8, 16, 33, 64, 72]))
    cache_rows = draw(st.one_of(st.integers(1, 40), st.sampled_from([63, 64, 65, 129, 140])))
    max_seq = draw(st.integers(1, min(cache_rows, 24)))
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
    steps: list[StepInputs] = [
        {
            "q": float_array(rng, [1, seq, kv_heads * group, dim], sharp),
            "k": float_array(rng, [1, seq, kv_heads, dim]),
            "v": float_array(rng, [1, seq, kv_heads, dim]),
            "input_pos": position,
        }
        for seq, position in draw(kv_steps(cache_rows, max_seq))
    ]
    return Case(b.build(), steps, name="sdpa", meta={"seed": seed, "family": "sdpa"})


def attention_block(
    rng: np.random.Generator,
    *,
    q_heads: int,
    kv_heads: int,
    dim: int,
    cache_rows: int,
    max_seq: int,
) -> Graph:
    """A decoder's attention block without the linears, wired as the decoder graph wires it.

    Inputs xq [1, S, Hq*D], xk and xv [1, S, Hkv*D], freqs_cos / freqs_sin [S, D/2] and the
    SymInt input_pos. q = view(rms_norm(xq), [1, s, Hq, D]) with s = sym_size of the
    rms_norm output (an intermediate); k and v are viewed with the same s; Llama rope; sdpa
    with the KV cache; the result viewed back to [1, S, Hq*D] with a sym_size of sdpa's
    output. v is shallower than q and k, so on WebGPU the sdpa hook sees stale co-inputs
    mid-propagation and must still converge to the live values.
    """
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, max_seq, q_heads * dim])
    xk = b.input("xk", "float32", [1, max_seq, kv_heads * dim])
    xv = b.input("xv", "float32", [1, max_seq, kv_heads * dim])
    cos = b.input("freqs_cos", "float32", [max_seq, dim // 2])
    sin = b.input("freqs_sin", "float32", [max_seq, dim // 2])
    pos = b.symint_input("input_pos")
    w = b.constant("q_norm", float_array(rng, [q_heads * dim]))
    hq = b.op("rms_norm", name="q_norm", x=xq, weight=w, eps=b.float(1e-6))
    seq = b.op("sym_size", name="seq", x=hq, dim=b.int(1, "seq_dim"))
    one, head_dim = b.int(1, "one"), b.int(dim, "head_dim")

    def heads(name: str, x: str, n: int) -> str:
        return b.op(
            "view_copy",
            name=name,
            x=x,
            sizes=[one, seq, b.int(n, f"{name}_heads"), head_dim],
            out_dims=[1, max_seq, n, dim],
        )

    q4 = heads("q_heads", hq, q_heads)
    k4 = heads("k_heads", xk, kv_heads)
    v4 = heads("v_heads", xv, kv_heads)
    qr, kr = b.op(
        "apply_rotary_emb",
        name="rope",
        xq=q4,
        xk=k4,
        freqs_cos=cos,
        freqs_sin=sin,
        out_dims={"xq_out": b.dims(q4), "xk_out": b.dims(k4)},
    )
    cache = [1, cache_rows, kv_heads, dim]
    attn = b.op(
        "sdpa_with_kv_cache",
        name="sdpa",
        q=qr,
        k=kr,
        v=v4,
        k_cache=b.state("k_cache", "float32", cache),
        v_cache=b.state("v_cache", "float32", cache),
        input_pos=pos,
    )
    out_seq = b.op("sym_size", name="out_seq", x=attn, dim=b.int(1, "out_seq_dim"))
    b.output(
        b.op(
            "view_copy",
            name="merge_heads",
            x=attn,
            sizes=[one, out_seq, b.int(q_heads * dim, "width")],
            out_dims=[1, max_seq, q_heads * dim],
        )
    )
    return b.build()


def attention_step(rng: np.random.Generator, graph: Graph, seq: int, position: int) -> StepInputs:
    """Inputs of one `attention_block` step: S tokens at `position`, freqs sliced to match."""
    q_width, kv_width = graph.tensor("xq").dims[2], graph.tensor("xk").dims[2]
    dim = 2 * graph.tensor("freqs_cos").dims[1]
    angles = rope_tables(rng, position + np.arange(seq), dim)
    return {
        "xq": float_array(rng, [1, seq, q_width]),
        "xk": float_array(rng, [1, seq, kv_width]),
        "xv": float_array(rng, [1, seq, kv_width]),
        "freqs_cos": np.cos(angles).astype(np.float32),
        "freqs_sin": np.sin(angles).astype(np.float32),
        "input_pos": position,
    }


@st.composite
def attention_cases(draw: st.DrawFn) -> Case:
    """`attention_block` over a KV-cache session (`kv_steps`)."""
    seed = draw(_seeds())
    rng = np.random.default_rng(seed)
    kv_heads, group, dim = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(head_dims())
    cache_rows = draw(st.one_of(st.integers(2, 32), st.sampled_from([64, 70])))
    max_seq = draw(st.integers(1, min(cache_rows, 16)))
    graph = attention_block(
        rng,
        q_heads=kv_heads * group,
        kv_heads=kv_heads,
        dim=dim,
        cache_rows=cache_rows,
        max_seq=max_seq,
    )
    steps = [attention_step(rng, graph, s, p) for s, p in draw(kv_steps(cache_rows, max_seq))]
    return Case(graph, steps, name="attention", meta={"seed": seed, "family": "attention"})


@dataclass(frozen=True)
class Family:
    """A case family: how to make its strategy, and every op type its cases may contain.

    `ops` is what `parity run --ops` resolves an op to a family with (`family_for_op`);
    tests/unit/test_strategies.py draws cases of each family and checks it holds.
    """

    make: Callable[[], st.SearchStrategy[Case]]
    ops: frozenset[str]

    def __call__(self) -> st.SearchStrategy[Case]:
        return self.make()


def _family(make: Callable[[], st.SearchStrategy[Case]], *ops: str) -> Family:
    return Family(make, frozenset(ops))


_LLAMA_OPS = (
    "embedding_q4gsw",
    "rms_norm",
    "linear_q4gsw",
    "apply_rotary_emb",
    "sdpa_with_kv_cache",
    "view_copy",
    "sym_size",
    "add",
    "silu_mul",
)
_ATTENTION_OPS = ("rms_norm", "apply_rotary_emb", "sdpa_with_kv_cache", "view_copy", "sym_size")
_RANDOM_GRAPH_OPS = (
    "add",
    "mul",
    "rms_norm",
    "sigmoid",
    "silu",
    "silu_mul",
    "linear_q4gsw",
    "view_copy",
    "sym_size",
)

FAMILIES: dict[str, Family] = {
    "rms_norm": _family(rms_norm_cases, "rms_norm"),
    "add": _family(lambda: binary_cases("add"), "add"),
    "mul": _family(lambda: binary_cases("mul"), "mul"),
    "dag": _family(dag_cases, "add", "mul", "rms_norm"),
    "random": _family(random_graphs, *_RANDOM_GRAPH_OPS),
    "decoder": _family(decoders, *_LLAMA_OPS),
    "sigmoid": _family(lambda: unary_cases("sigmoid"), "sigmoid"),
    "silu": _family(lambda: unary_cases("silu"), "silu"),
    "silu_mul": _family(silu_mul_cases, "silu_mul"),
    "embedding": _family(embedding_cases, "embedding_q4gsw"),
    "rope": _family(rope_cases, "apply_rotary_emb"),
    "rope_hf": _family(rope_hf_cases, "apply_rotary_emb_hf"),
    "view": _family(view_cases, "view_copy", "sym_size", "rms_norm"),
    "sdpa": _family(sdpa_cases, "sdpa_with_kv_cache"),
    "attention": _family(attention_cases, *_ATTENTION_OPS),
    "linear_q4gsw": _family(linear_q4gsw_cases, "linear_q4gsw"),
}


def family_for_op(op: str) -> str | None:
    """The family `--ops OP` runs: the op's own, else the most focused one that exercises it.

    Most focused: the fewest op types among the families whose cases contain `op` (so
    view_copy runs `view`, not `decoder`); None when no family exercises it.
    """
    if op in FAMILIES:
        return op
    holders = sorted((len(f.ops), name) for name, f in FAMILIES.items() if op in f.ops)
    return holders[0][1] if holders else None


def cases(families: Sequence[str] | None = None) -> st.SearchStrategy[Case]:
    """Cases from the named families (all of them by default)."""
    names = list(families or FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown case families {unknown}; known: {sorted(FAMILIES)}")
    return st.one_of([FAMILIES[n]() for n in names])


@st.composite
def invalid_steps(draw: st.DrawFn, case: Case) -> dict[str, np.ndarray | int]:
    """A step that both backends must treat alike, usually by refusing it.

    A rank change, a dim < 1 or above its max (refused before anything changes), or a last
    dim narrowed below its max, which an op may refuse while propagating (rms_norm's width)
    or accept (a broadcast): the contract model says which.
    """
    graph = case.graph
    tensor_inputs = [
        n for n in graph.inputs if n in case.steps[0] and isinstance(case.steps[0][n], np.ndarray)
    ]
    name = draw(st.sampled_from(tensor_inputs))
    max_dims = list(graph.tensor(name).dims)
    step = dict(case.steps[0])
    kind = draw(st.sampled_from(["rank", "zero", "above", "narrow"]))
    dims = list(step[name].shape)  # type: ignore[union-attr]
    if kind == "narrow":
        dims[-1] = max(1, max_dims[-1] - draw(st.integers(1, 3)))
        dtype = graph.tensor(name).dtype
        rng = np.random.default_rng(draw(_seeds()))
        # Valid data of the input's own type: only the shape is under test here.
        step[name] = float_array(rng, dims) if dtype == "float32" else np.zeros(dims, dtype)
        return step
    if kind == "rank":
        dims = [*dims, 1] if draw(st.booleans()) or len(dims) == 1 else dims[1:]
    else:
        d = draw(st.integers(0, len(dims) - 1))
        dims[d] = 0 if kind == "zero" else max_dims[d] + draw(st.integers(1, 3))
    step[name] = np.zeros(dims, graph.tensor(name).dtype)
    return step
