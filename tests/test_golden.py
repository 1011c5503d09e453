"""The float64 references and both backends against PyTorch's expected outputs (tests/golden).

A misreading of an op shared by the model and both backends would pass every parity check;
these outside values cannot share it. The reference must agree to float64 rounding, each
backend within the op's derived budget.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import Runtime
from harness import ReferenceEvaluator, op_budget
from harness.model.numerics import compare
from harness.ops import MODELS
from tests.golden_cases import GoldenCase, golden_arrays, golden_cases, sdpa_case, single_op_case

SINGLE_OP = [c for c in golden_cases() if c.expected]
# Multi-step cases of one op: steps run in order on one graph, state carried between them.
SDPA_STEPS = [c for c in golden_cases() if c.op == "sdpa_with_kv_cache"]


def _needs_model(case: GoldenCase) -> None:
    if case.op not in MODELS:
        pytest.skip(f"op {case.op!r} has no model yet")


@pytest.mark.parametrize("case", SINGLE_OP, ids=lambda c: c.id)
def test_reference_matches_pytorch(case: GoldenCase) -> None:
    _needs_model(case)
    one_op = single_op_case(case)
    graph = one_op.graph
    values, _, _ = ReferenceEvaluator(graph).step(one_op.steps[0])
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
    one_op = single_op_case(case)
    graph, inputs = one_op.graph, one_op.steps[0]
    node = graph.ops[0]
    # The op's budget at the reference's inputs, for PyTorch's outputs.
    budgets = op_budget(one_op, outputs=case.expected).budget
    for rt in runtimes:
        loaded = rt.load(graph)
        try:
            result = loaded.execute(inputs)
        finally:
            loaded.close()
        for slot, expected in case.expected.items():
            cmp = compare(result.outputs[node.outputs[slot]], expected, budgets[slot])
            assert cmp.ok, f"{rt.name} {case.id} {slot}: {cmp}"


@pytest.mark.parametrize("case", SDPA_STEPS, ids=lambda c: c.id)
def test_sdpa_reference_steps_match_pytorch(case: GoldenCase) -> None:
    one_op = sdpa_case(case)
    graph, steps = one_op.graph, one_op.steps
    reference = ReferenceEvaluator(graph)
    out = graph.ops[0].outputs["out"]
    arrays = golden_arrays()
    for i, (inputs, raw) in enumerate(zip(steps, case.raw["steps"], strict=True)):
        values, _, _ = reference.step(inputs)
        expected = arrays[raw["expected"]["out"]]
        np.testing.assert_allclose(
            values[out], expected, rtol=1e-10, atol=1e-12, err_msg=f"{case.id} step {i}"
        )
    for cache, key in case.raw["expected_final"].items():
        np.testing.assert_array_equal(reference.state[cache], arrays[key], err_msg=cache)


@pytest.mark.gpu
@pytest.mark.parametrize("case", SDPA_STEPS, ids=lambda c: c.id)
def test_sdpa_backends_steps_match_pytorch(case: GoldenCase, runtimes: list[Runtime]) -> None:
    one_op = sdpa_case(case)
    graph, steps = one_op.graph, one_op.steps
    node = graph.ops[0]
    arrays = golden_arrays()
    loaded = [rt.load(graph) for rt in runtimes]
    try:
        for i, (inputs, raw) in enumerate(zip(steps, case.raw["steps"], strict=True)):
            expected = {"out": arrays[raw["expected"]["out"]]}
            # The reference updated its caches in place: the budget sees them as the op did.
            budget = op_budget(one_op, i, outputs=expected).budget["out"]
            for rt, lg in zip(runtimes, loaded, strict=True):
                result = lg.execute(inputs, read=["k_cache", "v_cache"])
                cmp = compare(result.outputs[node.outputs["out"]], expected["out"], budget)
                assert cmp.ok, f"{rt.name} {case.id} step {i}: {cmp}"
                if i == len(steps) - 1:
                    for cache, key in case.raw["expected_final"].items():
                        np.testing.assert_array_equal(
                            result.tensors[cache], arrays[key], err_msg=f"{rt.name} {cache}"
                        )
    finally:
        for lg in loaded:
            lg.close()
