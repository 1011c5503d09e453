"""The float64 references and both backends against PyTorch's expected outputs (tests/golden).

A misreading of an op shared by the model and both backends would pass every parity check;
these outside values cannot share it. The reference must agree to float64 rounding, each
backend within the op's derived budget.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import Runtime, SymIntValue
from harness.check.reference import ReferenceEvaluator, op_args
from harness.model.numerics import compare
from harness.ops import MODELS, model_for
from tests.golden_cases import GoldenCase, golden_arrays, golden_cases, sdpa_steps, single_op_graph

SINGLE_OP = [c for c in golden_cases() if c.expected]
# Multi-step cases of one op: steps run in order on one graph, state carried between them.
SDPA_STEPS = [c for c in golden_cases() if c.op == "sdpa_with_kv_cache"]


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
    budgets = model.budget(node, args, outputs)
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
    graph, steps = sdpa_steps(case)
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
    graph, steps = sdpa_steps(case)
    node = graph.ops[0]
    model = model_for(node.op)
    arrays = golden_arrays()
    loaded = [rt.load(graph) for rt in runtimes]
    try:
        reference = ReferenceEvaluator(graph)
        for i, (inputs, raw) in enumerate(zip(steps, case.raw["steps"], strict=True)):
            values, _, symints = reference.step(inputs)
            expected = {"out": arrays[raw["expected"]["out"]]}
            # The reference updated its caches in place: the budget sees them as the op did.
            budgets = model.budget(node, op_args(graph, node, values, symints), expected)
            for rt, lg in zip(runtimes, loaded, strict=True):
                result = lg.execute(inputs, read=["k_cache", "v_cache"])
                cmp = compare(result.outputs[node.outputs["out"]], expected["out"], budgets["out"])
                assert cmp.ok, f"{rt.name} {case.id} step {i}: {cmp}"
                if i == len(steps) - 1:
                    for cache, key in case.raw["expected_final"].items():
                        np.testing.assert_array_equal(
                            result.tensors[cache], arrays[key], err_msg=f"{rt.name} {cache}"
                        )
    finally:
        for lg in loaded:
            lg.close()
