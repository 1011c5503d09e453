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

from harness import q4
from harness.builder import GraphBuilder
from harness.case import Case

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


FAMILIES: dict[str, Callable[[], st.SearchStrategy[Case]]] = {
    "rms_norm": rms_norm_cases,
    "add": lambda: binary_cases("add"),
    "mul": lambda: binary_cases("mul"),
    "dag": dag_cases,
    "linear_q4gsw": linear_q4gsw_cases,
}


def cases(families: Sequence[str] | None = None) -> st.SearchStrategy[Case]:
    """Cases from the named families (all of them by default)."""
    names = list(families or FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown case families {unknown}; known: {sorted(FAMILIES)}")
    return st.one_of([FAMILIES[n]() for n in names])


@st.composite
def invalid_steps(draw: st.DrawFn, case: Case) -> dict[str, np.ndarray | int]:
    """A step that both backends must refuse: a rank change, a dim < 1 or above its max."""
    graph = case.graph
    tensor_inputs = [
        n for n in graph.inputs if n in case.steps[0] and isinstance(case.steps[0][n], np.ndarray)
    ]
    name = draw(st.sampled_from(tensor_inputs))
    max_dims = list(graph.tensor(name).dims)
    step = dict(case.steps[0])
    kind = draw(st.sampled_from(["rank", "zero", "above"]))
    dims = list(step[name].shape)  # type: ignore[union-attr]
    if kind == "rank":
        dims = [*dims, 1] if draw(st.booleans()) or len(dims) == 1 else dims[1:]
    else:
        d = draw(st.integers(0, len(dims) - 1))
        dims[d] = 0 if kind == "zero" else max_dims[d] + draw(st.integers(1, 3))
    step[name] = np.zeros(dims, graph.tensor(name).dtype)
    return step
