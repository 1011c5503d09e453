"""Non-finite values in inputs and masks (issue 20 item 4): every budget stays defined, an
expected non-finite output is compared by class, and `op_budget` never hands back NaN.

No device: the op models' references and budgets, the float64 evaluator, and `compare`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings

from harness import GraphBuilder, op_budget, op_budgets, single_op_graph
from harness.check.oracles import numeric_divergence
from harness.check.reference import ReferenceEvaluator
from harness.gen.case import Case
from harness.model import BudgetError
from harness.model.numerics import compare
from harness.ops import model_for
from harness.ops.fused_sdpa import causal_mask, fused_sdpa_cases
from tests.golden_cases import GoldenCase, golden_cases, sdpa_case, single_op_case

F32 = np.float32


@pytest.fixture(autouse=True)
def _numpy_warnings_are_errors() -> Iterator[None]:
    """A budget that needs 0 * inf or inf - inf on its way says so as a numpy warning: fail
    on it, so that a NaN that happens to be masked later is still seen."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        yield


def _attention(seq: int, kv_len: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal([1, 2, rows, 8]).astype(F32)
        for name, rows in (("q", seq), ("k", kv_len), ("v", kv_len))
    }


def _causal_case(seq: int = 5, kv_len: int = 9, seed: int = 0) -> Case:
    args: dict[str, object] = {
        **_attention(seq, kv_len, seed),
        "attn_mask": causal_mask(seq, kv_len)[None, None],
    }
    return single_op_graph("fused_sdpa", args)


def test_causal_mask_puts_neg_inf_above_the_shifted_diagonal() -> None:
    """Row s of S queries over L keys sees keys 0 .. s + L - S (ExecuTorch/HF's causal mask
    of the last S positions), and never a row without a key."""
    mask = causal_mask(3, 5)
    assert mask.dtype == F32
    assert (np.isneginf(mask) == (np.arange(5)[None, :] > np.arange(3)[:, None] + 2)).all()
    assert (mask[np.isfinite(mask)] == 0).all()
    assert np.isfinite(causal_mask(6, 2)).any(axis=-1).all()  # S > L: each row keeps key 0


def test_neg_inf_mask_budget_is_finite_and_as_tight_as_the_dropped_keys() -> None:
    """The issue's case: a -inf entry made the budget NaN (p * eps = 0 * inf). A -inf score
    is an exact 0 weight, so the bound is that of attention over the unmasked keys alone,
    up to the reduction lengths (gamma(L) over all L scores, the kernel's sum runs over
    them all): finite, and no looser than twice that."""
    case = _causal_case()
    budget = op_budget(case)
    out = budget.budget["out"]
    assert np.isfinite(out).all() and (out > 0).all()
    args = case.steps[0]
    for row in range(5):
        keep = row + 5  # keys 0 .. row + L - S
        alone = single_op_graph(
            "fused_sdpa",
            {
                "q": np.asarray(args["q"])[..., row : row + 1, :],
                "k": np.asarray(args["k"])[..., :keep, :],
                "v": np.asarray(args["v"])[..., :keep, :],
            },
        )
        unmasked = op_budget(alone).budget["out"][..., 0, :]
        assert (out[..., row, :] <= 2 * unmasked).all(), row
        assert (out[..., row, :] >= unmasked / 2).all(), row


def test_neg_inf_mask_budget_still_finds_a_masked_key_that_gets_weight() -> None:
    """A kernel that lets a masked key through with a small weight (the mask clamped to -8:
    weight ~e^-8) is far over the budget: the -inf rule does not loosen it."""
    case = _causal_case()
    budget = op_budget(case)
    step = dict(case.steps[0])
    clamped = np.maximum(np.asarray(step["attn_mask"]), -8.0).astype(F32)
    wrong = model_for("fused_sdpa").reference(
        case.graph.ops[0],
        {**{k: np.asarray(v, np.float64) for k, v in step.items()}, "attn_mask": clamped},
    )["out"]
    cmp = compare(wrong.astype(F32), budget.reference["out"], budget.budget["out"])
    assert not cmp.ok and cmp.utilization > 100, cmp


def _with_value(case: GoldenCase, slot: str, value: float) -> GoldenCase:
    array = np.array(case.args[slot])
    array.flat[array.size // 2] = value
    return dataclasses.replace(case, args={**case.args, slot: array})


def _single_op_goldens() -> list[GoldenCase]:
    """One golden case per op that builds as a single-op graph (sdpa_with_kv_cache's and
    the decoder's are sessions: `test_sdpa_budget_is_defined_with_a_non_finite_input`)."""
    seen: dict[str, GoldenCase] = {}
    for case in golden_cases():
        if case.op in seen:
            continue
        try:
            single_op_case(case)
        except (KeyError, ValueError):
            continue
        seen[case.op] = case
    return list(seen.values())


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_every_op_budget_is_defined_with_a_non_finite_input(value: float) -> None:
    """Each op (its PyTorch golden case) with one element of each float argument set to
    +-inf or NaN: the budget is finite everywhere, 0 where the reference is not finite
    (compared by class), and the reference compares as within it."""
    cases = _single_op_goldens()
    assert len(cases) >= 10, [c.id for c in cases]
    for golden in cases:
        for slot, arg in golden.args.items():
            if not (isinstance(arg, np.ndarray) and arg.dtype.kind == "f"):
                continue
            with warnings.catch_warnings():
                # The references themselves may compute inf - inf (a NaN output is expected).
                warnings.simplefilter("ignore", RuntimeWarning)
                got = op_budget(single_op_case(_with_value(golden, slot, value)))
            for out, ref in got.reference.items():
                bud = np.broadcast_to(got.budget[out], ref.shape)
                where = f"{golden.id}: {slot} = {value}, budget of {out}"
                assert np.isfinite(bud).all(), where
                assert (bud[~np.isfinite(ref)] == 0).all(), where
                assert compare(ref.astype(F32), ref, bud).ok, where


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan], ids=["inf", "-inf", "nan"])
def test_sdpa_budget_is_defined_with_a_non_finite_input(value: float) -> None:
    """sdpa_with_kv_cache's golden session with a non-finite q, k or v element at its
    first step (carried in the cache after it): every step's budget is defined."""
    (golden,) = (c for c in golden_cases() if c.op == "sdpa_with_kv_cache")
    session = sdpa_case(golden)
    for slot in ("q", "k", "v"):
        steps = [dict(step) for step in session.steps]
        array = np.array(steps[0][slot])
        array.flat[array.size // 2] = value
        steps[0][slot] = array
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            budgets = op_budgets(Case(session.graph, steps, name=session.name))
        for index, got in enumerate(budgets):
            ref, bud = got.reference["out"], got.budget["out"]
            where = f"{slot} = {value}, step {index}"
            assert np.isfinite(bud).all(), where
            assert (bud[~np.isfinite(ref)] == 0).all(), where


def test_op_budget_names_the_op_and_tensor_of_an_undefined_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model whose budget comes out NaN where the reference is finite is a model gap:
    op_budget raises, naming the op, its type and the tensor, instead of returning NaN."""
    model = model_for("silu")
    monkeypatch.setattr(
        model, "budget", lambda node, args, outputs: {"out": np.full(args["x"].shape, np.nan)}
    )
    case = single_op_graph("silu", {"x": np.ones((2, 4), F32)})
    with pytest.raises(BudgetError, match=r"op 'silu' \(silu\).*'out'.*NaN at 8 of 8"):
        op_budget(case)


def test_non_finite_outputs_compare_by_class() -> None:
    """One rule: where the reference is +inf, -inf or NaN the backend must give the same
    class (any NaN for NaN); finite where the reference is not, or the other way round, is
    a nan_inf finding whose message says which."""
    ref = np.array([np.inf, -np.inf, np.nan, 1.0])
    budget = np.array([0.0, 0.0, 0.0, 1e-6])
    assert compare(np.array([np.inf, -np.inf, -np.nan, 1.0], F32), ref, budget).ok
    other = "1 non-finite where the reference is finite or another"
    wrong_class = [
        ([1.0, -np.inf, np.nan, 1.0], "1 finite where the reference is non-finite"),
        ([-np.inf, -np.inf, np.nan, 1.0], other),  # -inf for +inf
        ([np.inf, -np.inf, np.nan, np.nan], other),  # NaN for a finite value
    ]
    for wrong, said in wrong_class:
        cmp = compare(np.array(wrong, F32), ref, budget)
        assert not cmp.ok and cmp.nan_mismatch == 1
        message = numeric_divergence(0, "webgpu", "op", "t", cmp, "op").message
        assert said in message, message


def test_end_to_end_bounds_carry_a_neg_inf_mask_made_upstream() -> None:
    """A mask made by ops (a causal and a padding mask, -inf in both, summed in two adds so
    that the second carries the first's error): the evaluator carries an error scale 0 at
    their -inf elements (compared by class, and -inf + 0 stays -inf in its probes) and the
    attention's end-to-end bound stays finite."""
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 2, 5, 8])
    k = b.input("k", "float32", [1, 2, 9, 8])
    v = b.input("v", "float32", [1, 2, 9, 8])
    causal = b.input("causal", "float32", [1, 1, 5, 9])
    padding = b.input("padding", "float32", [1, 1, 1, 9])
    scaled = b.op("add", name="shifted", a=causal, b=padding)
    mask = b.op("add", name="mask", a=scaled, b=padding)
    b.output(b.op("fused_sdpa", name="attention", q=q, k=k, v=v, attn_mask=mask))
    graph = b.build()
    pad = np.zeros((1, 1, 1, 9), F32)
    pad[..., 2] = -np.inf
    pad += np.random.default_rng(2).uniform(-1, 1, pad.shape).astype(F32)  # inexact sums
    inputs = {**_attention(5, 9, 1), "causal": causal_mask(5, 9)[None, None], "padding": pad}
    values, bounds, _ = ReferenceEvaluator(graph).step(inputs)
    for made in ("shifted.out", "mask.out"):
        assert (bounds[made][~np.isfinite(values[made])] == 0).all(), made
        assert np.isfinite(bounds[made]).all(), made
    out = "attention.out"
    assert np.isfinite(values[out]).all() and np.isfinite(bounds[out]).all()
    assert (bounds[out] > 0).all()


def _neg_inf_masks(case: Case) -> list[np.ndarray]:
    return [
        mask
        for step in case.steps
        if isinstance(mask := step.get("attn_mask"), np.ndarray) and np.isneginf(mask).any()
    ]


def test_fused_sdpa_family_draws_neg_inf_masks() -> None:
    """The family reaches -inf masks (causal where the mask follows S and L), so pr runs
    take the non-finite path."""
    case = find(fused_sdpa_cases(), lambda c: any(m.shape[2] > 1 for m in _neg_inf_masks(c)))
    assert _neg_inf_masks(case)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=fused_sdpa_cases())
def test_fused_sdpa_family_masks_keep_a_key_and_a_finite_budget(case: Case) -> None:
    """No -inf mask of the family leaves a row without a key (its softmax would be 0 / 0),
    and each step's budget is finite: the rows' outputs are finite and budgeted."""
    for mask in _neg_inf_masks(case):
        assert mask.shape[3] > 1 and np.isfinite(mask).any(axis=-1).all()
    for got in op_budgets(case):
        assert np.isfinite(got.reference["out"]).all()
        assert np.isfinite(got.budget["out"]).all()


def test_op_budget_within_judges_non_finite_values_by_class() -> None:
    """`OpBudget.within` follows the harness's rule: inf where the reference is inf is
    within, -inf or a finite value there is not."""
    a = np.array([[np.inf, 1.0, np.nan]], F32)
    got = op_budget(single_op_graph("add", {"a": a, "b": np.ones((1, 3), F32)}))
    assert got.within("out", np.array([[np.inf, 2.0, np.nan]], F32))
    assert not got.within("out", np.array([[-np.inf, 2.0, np.nan]], F32))
    assert not got.within("out", np.array([[3e38, 2.0, np.nan]], F32))
