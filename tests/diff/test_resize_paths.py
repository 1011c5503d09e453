"""Resize paths that upstream gets wrong (docs/design.md §8), and bad input on both backends.

- A join of branches of different depth whose live size changes between two values > 1
  (upstream WebGPU's fixpoint validates add/mul against a stale co-input and throws).
- A first call at a size other than the max or 1.
- Both backends name the tensor, dim, value and limit of a rejected step (invalid steps in
  every family's sequences: tests/diff/test_rejections.py).
- Counts above 65535 workgroups, folded into a 2-D grid.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import ResizeError, Runtime
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import assert_parity
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case

pytestmark = pytest.mark.gpu


def residual_after_deep_branch(sizes: list[int]) -> Case:
    """x + rms_norm(rms_norm(rms_norm(x))) with x [1, S, 32], S taking `sizes`."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", "float32", [1, 8, 32])
    h = x
    for i in range(3):
        w = b.constant(f"w{i}", rng.standard_normal(32).astype(np.float32))
        h = b.op("rms_norm", x=h, weight=w, eps=b.float(1e-6))
    b.output(b.op("add", name="residual", a=x, b=h))
    steps = [{"x": rng.standard_normal((1, s, 32)).astype(np.float32)} for s in sizes]
    return Case(b.build(), steps, name=f"residual {sizes}")


@pytest.mark.parametrize("sizes", [[8, 5, 3], [4, 6, 2, 7], [3, 3, 8, 1, 5]])
def test_join_after_deep_branch_follows_every_size(
    runner: LockstepRunner, sizes: list[int]
) -> None:
    assert_parity(runner.run(residual_after_deep_branch(sizes)))


def test_rejection_names_tensor_dim_value_and_limit(runtimes: list[Runtime]) -> None:
    case = residual_after_deep_branch([8])
    for rt in runtimes:
        graph = rt.load(case.graph)
        try:
            with pytest.raises(ResizeError) as info:
                graph.execute({"x": np.zeros((1, 9, 32), np.float32)})
            err = info.value
            assert (err.tensor, err.dim, err.value, err.limit, err.reason) == (
                "x",
                1,
                9,
                8,
                "above_max",
            )
            assert "'x'" in str(err) and "9" in str(err) and "8" in str(err)
            with pytest.raises(ResizeError, match="rank"):
                graph.execute({"x": np.zeros((9, 32), np.float32)})
            with pytest.raises(ResizeError, match=">= 1"):
                graph.execute({"x": np.zeros((1, 0, 32), np.float32)})
        finally:
            graph.close()


@pytest.mark.slow  # 70,001 rows through both backends and the reference
def test_counts_above_the_dimension_limit_fold(runner: LockstepRunner) -> None:
    rng = np.random.default_rng(4)
    rows = 70_001  # rms_norm: one workgroup per row; 64 * 65535 < numel for the add
    b = GraphBuilder()
    x = b.input("x", "float32", [rows, 64])
    w = b.constant("w", rng.standard_normal(64).astype(np.float32))
    h = b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6))
    b.output(b.op("add", a=x, b=h))
    steps = [{"x": rng.standard_normal((n, 64)).astype(np.float32)} for n in (rows, 65_536, 9)]
    result = runner.run(Case(b.build(), steps, name="fold"))
    assert_parity(result)
    grids = [d["grid"] for d in result.steps[0].backends["webgpu"].dispatches]
    assert all(g[1] > 1 for g in grids), f"counts above 65535 must fold: {grids}"


def test_rejected_first_step_then_max_shape(runner: LockstepRunner) -> None:
    # Nothing has run yet: a rejection must not lose the pending "size everything" state.
    case = residual_after_deep_branch([8, 2])
    case.steps.insert(0, {"x": np.ones((1, 8, 16), np.float32)})  # refused while propagating
    assert_parity(runner.run(case))
