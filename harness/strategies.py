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


def random_graphs() -> st.SearchStrategy[Case]:
    """Random DAGs over every op with a generator (harness/graphgen.py)."""
    from harness.graphgen import random_graph_cases  # graphgen builds on this module

    return random_graph_cases()


FAMILIES: dict[str, Callable[[], st.SearchStrategy[Case]]] = {
    "rms_norm": rms_norm_cases,
    "add": lambda: binary_cases("add"),
    "mul": lambda: binary_cases("mul"),
    "dag": dag_cases,
    "random": random_graphs,
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
        step[name] = float_array(np.random.default_rng(draw(_seeds())), dims)
        return step
    if kind == "rank":
        dims = [*dims, 1] if draw(st.booleans()) or len(dims) == 1 else dims[1:]
    else:
        d = draw(st.integers(0, len(dims) - 1))
        dims[d] = 0 if kind == "zero" else max_dims[d] + draw(st.integers(1, 3))
    step[name] = np.zeros(dims, graph.tensor(name).dtype)
    return step
