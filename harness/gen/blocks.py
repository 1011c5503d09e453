"""Hypothesis building blocks for cases: live sizes and sequences, shapes, data, sessions.

Sequences are biased toward the regimes where resize bugs live: live size 1, the max, values
just below and above workgroup multiples, growing, shrinking and repeating. Values are drawn
from a seeded numpy generator (`seeds()`: cheap, and irrelevant to shrinking), so Hypothesis
shrinks shapes and step counts, not floats. Each op's case family (in its module of
`harness/ops/`) and the multi-op families (`harness/families/`) are built from these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from graph_format import DTYPES, FLOAT_DTYPES
from harness.gen.case import Case
from harness.gen.families import REGISTERED
from harness.model import model_dtypes

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


def float_array(
    rng: np.random.Generator, dims: Sequence[int], scale: float = 1.0, dtype: str = "float32"
) -> np.ndarray:
    """Non-degenerate float data of `dtype` (float32 or float16): normal with a random
    offset, so no row is constant. float16 data are exact f16 values (rounded once here), so
    the reference reads what the kernels read; the same draws as float32 (the same rng
    calls), so a case's f16 data are its f32 data rounded."""
    data = rng.standard_normal(dims) * scale + rng.uniform(-0.5, 0.5)
    return data.astype(DTYPES[dtype])


# The share of cases drawn in half precision, in every family whose ops all take float16
# (`case_dtypes`): a quarter, so fp32 coverage keeps three quarters of every budget.
F16_SHARE = 0.25


def family_dtypes(ops: Iterable[str]) -> tuple[str, ...]:
    """The float dtypes a family of these ops draws: float16 too when every op takes it (its
    model's `dtypes`; ops without kernels, such as sym_size, take any)."""
    if all("float16" in model_dtypes(op) for op in ops):
        return FLOAT_DTYPES
    return ("float32",)


def case_dtypes(ops: Iterable[str]) -> st.SearchStrategy[str]:
    """A case's float dtype: float16 for `F16_SHARE` of the cases when every op of `ops`
    takes it (the last of four integer values, so shrinking goes toward float32; Hypothesis
    favours bounds, so the share seen varies: 20 % over 60 examples of each f16 family, 8
    to 45 % per family), else float32 without drawing anything, so that the cases of a
    family whose ops have no f16 kernels are the ones they were before half precision
    existed. Families draw it last, after every shape, so their shape draws stay put."""
    if family_dtypes(ops) == ("float32",):
        return st.just("float32")
    ways = round(1 / F16_SHARE)
    return st.integers(0, ways - 1).map(lambda k: "float16" if k == ways - 1 else "float32")


def family_dtype(family: str) -> st.SearchStrategy[str]:
    """`case_dtypes` over the ops the registered family `family` exercises: what a family's
    strategy draws first, then builds its inputs, constants and step data in (and records
    in its case's `meta["dtype"]`)."""
    return case_dtypes(REGISTERED[family].exercises)


@dataclass(frozen=True)
class DynamicDim:
    """A dim of a graph input: its max and, per step, its live size."""

    max_size: int
    dynamic: bool


def seeds() -> st.SearchStrategy[int]:
    """Seeds of a case's numpy generator (the data; shapes come from Hypothesis)."""
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


def head_dims() -> st.SearchStrategy[int]:
    """Even head dims: tiny, not multiples of 4 or 8, and typical ones."""
    return st.sampled_from([2, 4, 6, 8, 10, 16, 30, 32, 64])


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
    dims = list(np.shape(step[name]))
    if kind == "narrow":
        dims[-1] = max(1, max_dims[-1] - draw(st.integers(1, 3)))
        dtype = graph.tensor(name).dtype
        rng = np.random.default_rng(draw(seeds()))
        # Valid data of the input's own type: only the shape is under test here.
        step[name] = (
            float_array(rng, dims, dtype=dtype) if dtype in FLOAT_DTYPES else np.zeros(dims, dtype)
        )
        return step
    if kind == "rank":
        dims = [*dims, 1] if draw(st.booleans()) or len(dims) == 1 else dims[1:]
    else:
        d = draw(st.integers(0, len(dims) - 1))
        dims[d] = 0 if kind == "zero" else max_dims[d] + draw(st.integers(1, 3))
    step[name] = np.zeros(dims, graph.tensor(name).dtype)
    return step
