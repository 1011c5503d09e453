"""The `dag` family: small DAGs where add/mul join rms_norm branches of different depth."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from harness.gen.blocks import family_dtype, float_array, leading_dims, seeds, step_dims
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family


@family("dag", exercises={"add", "mul", "rms_norm"})
@st.composite
def dag_cases(draw: st.DrawFn) -> Case:
    """Small DAGs where add/mul join branches of different depth.

    For example `x + rms_norm(rms_norm(x))` or `rms_norm(x) * rms_norm(rms_norm(rms_norm(x)))`:
    the join's inputs are produced at different depths, which is where a propagation that
    reads a stale co-input goes wrong.
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims(min_rank=2, max_rank=3, max_size=16))
    width = draw(st.sampled_from([8, 12, 30, 64]))
    joins = draw(st.integers(1, 3))
    first_depth = draw(st.integers(0, 3))
    plan = [(draw(st.integers(0, 3)), draw(st.sampled_from(["add", "mul"]))) for _ in range(joins)]
    lives = draw(step_dims(leading))
    dtype = draw(family_dtype("dag"))  # last: the shape draws stay where they were
    b = GraphBuilder()
    x = b.input("x", dtype, [d.max_size for d in leading] + [width])
    eps = b.float(1e-6, "eps")

    def branch(depth: int) -> str:
        value = x
        for _ in range(depth):
            w = b.constant(b.fresh("w"), float_array(rng, [width], dtype=dtype))
            value = b.op("rms_norm", x=value, weight=w, eps=eps)
        return value

    current = branch(first_depth)
    for depth, op in plan:
        other = branch(depth)
        if other == current:
            other = branch(1)
        current = b.op(op, a=current, b=other)
    b.output(current)
    steps: list[StepInputs] = [
        {"x": float_array(rng, [*lead, width], dtype=dtype)} for lead in lives
    ]
    return Case(b.build(), steps, name="dag", meta={"seed": seed, "family": "dag", "dtype": dtype})
