"""The statistical tier's bound (harness.model.numerics, docs/oracles.md "The statistical
tier"): Higham and Mary's probabilistic gamma_tilde beside the worst case, and the two tiers
of one derivation (`harness.model.local_budgets`)."""

from __future__ import annotations

import numpy as np
import pytest

from harness import single_op_graph
from harness.model import local_budget, local_budgets
from harness.model.numerics import (
    LAMBDA,
    RIGOROUS,
    SHORTEST_TIGHTER_SUM,
    STATISTICAL,
    U32,
    error_model,
    gamma,
    gamma_tilde,
    gamma_worst,
)
from harness.ops import model_for


@pytest.mark.parametrize("n", [1, 2, 64, 81, 82, 2048, 8192, 1 << 20])
def test_gamma_tilde_grows_like_sqrt_n_and_never_passes_the_worst_case(n: int) -> None:
    assert gamma_tilde(n) <= gamma_worst(n)
    if n >= SHORTEST_TIGHTER_SUM:
        assert gamma_tilde(n) < gamma_worst(n)
        # lambda sqrt(n) u to first order (the exp adds second-order terms only).
        assert gamma_tilde(n) == pytest.approx(LAMBDA * np.sqrt(n) * U32, rel=1e-3)
    else:  # no tighter than the worst case but for second-order terms
        assert gamma_tilde(n) == pytest.approx(gamma_worst(n), rel=1e-5)


def test_gamma_follows_the_error_model_in_force_and_restores_it() -> None:
    assert gamma(8192) == gamma_worst(8192)
    with error_model(STATISTICAL):
        assert gamma(8192) == gamma_tilde(8192)
        with error_model(RIGOROUS):
            assert gamma(8192) == gamma_worst(8192)
        assert gamma(8192) == gamma_tilde(8192)
    assert gamma(8192) == gamma_worst(8192)


def _rms_norm(width: int) -> tuple[object, ...]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, width)).astype(np.float32)
    weight = rng.standard_normal(width).astype(np.float32)
    case = single_op_graph("rms_norm", {"x": x, "weight": weight, "eps": 1e-5})
    graph = case.graph
    node = graph.ops[0]
    args = {"x": x.astype(np.float64), "weight": weight.astype(np.float64), "eps": 1e-5}
    return graph, node, args, model_for(node.op).reference(node, args)


def test_a_short_reduction_has_one_tier_and_a_long_one_a_tighter_second() -> None:
    graph, node, args, outs = _rms_norm(64)
    short = local_budgets(graph, node, args, outs)  # type: ignore[arg-type]
    assert not short.tiered and short.statistical is short.hard

    graph, node, args, outs = _rms_norm(8192)
    long = local_budgets(graph, node, args, outs)  # type: ignore[arg-type]
    assert long.tiered
    hard, tight = long.hard["out"], long.statistical["out"]
    assert np.all(tight <= hard) and np.all(tight < hard / 5)
    # The hard tier is `local_budget`'s, whatever model is in force around it.
    with error_model(STATISTICAL):
        again = local_budget(graph, node, args, outs)  # type: ignore[arg-type]
    np.testing.assert_array_equal(again["out"], hard)
