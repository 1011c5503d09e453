"""The float64 references and both backends against PyTorch's expected outputs (tests/golden).

A misreading of an op shared by the model and both backends would pass every parity check;
these outside values cannot share it. The reference must agree to float64 rounding, each
backend within the op's derived budget.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import Runtime, SymIntValue
from harness.numerics import compare
from harness.ops import MODELS, model_for
from harness.reference import ReferenceEvaluator
from tests.golden_cases import GoldenCase, golden_cases, single_op_graph

SINGLE_OP = [c for c in golden_cases() if c.expected]


def _needs_model(case: GoldenCase) -> None:
    if case.op not in MODELS:
        pytest.skip(f"op {case.op!r} has no model yet")


@pytest.mark.parametrize("case", SINGLE_OP, ids=lambda c: c.id)
def test_reference_matches_pytorch(case: GoldenCase) -> None:
    _needs_model(case)
    graph, inputs = single_op_graph(case)
    values, _, _ = ReferenceEvaluator(graph).step(inputs)
    node = graph.ops[0]
    for slot, expected in case.expected.items():
        np.testing.assert_allclose(
            values[node.outputs[slot]],
            expected,
            rtol=1e-10,
            atol=1e-12 * np.abs(expected).max(),
            err_msg=f"{case.id}: reference {slot}",
        )


@pytest.mark.gpu
@pytest.mark.parametrize("case", SINGLE_OP, ids=lambda c: c.id)
def test_backends_match_pytorch(case: GoldenCase, runtimes: list[Runtime]) -> None:
    _needs_model(case)
    graph, inputs = single_op_graph(case)
    node = graph.ops[0]
    model = model_for(node.op)
    values, _, symints = ReferenceEvaluator(graph).step(inputs)
    args = {
        slot: values[a]
        if isinstance(a, str) and a in values
        else (
            symints[a]
            if isinstance(a, str) and isinstance(graph.values[a], SymIntValue)
            else graph.scalar(a)
            if isinstance(a, str)
            else a
        )
        for slot, a in node.args.items()
    }
    outputs = {slot: case.expected[slot] for slot in case.expected}
    budgets = model.budget(node, args, {}, outputs)
    for rt in runtimes:
        loaded = rt.load(graph)
        try:
            result = loaded.execute(inputs)
        finally:
            loaded.close()
        for slot, expected in case.expected.items():
            cmp = compare(result.outputs[node.outputs[slot]], expected, budgets[slot])
            assert cmp.ok, f"{rt.name} {case.id} {slot}: {cmp}"
