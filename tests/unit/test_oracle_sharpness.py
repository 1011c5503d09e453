"""The bug models of `benchmarks.oracle_sharpness` change the float64 reference as they say
(no device: the reference evaluator on the benchmark's own cases, at small sizes).

Each model is checked against the bug written out directly (a key left out of the softmax,
a mean over another count, eps gone) and for which elements it changes: one wrong weight
code one output, one wrong f16 weight one column. The planting rounds as a bug before a
kernel's last rounding would."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import oracle_sharpness as bench
from graph_format import OpNode
from harness.check.oracles import ulp_distance
from harness.check.reference import OpEvaluation, ReferenceEvaluator
from harness.model import q4


def evaluated(op: str, dtype: str, size: int) -> OpEvaluation:
    """The benchmark's case of `op` at `size`, its first step evaluated in float64."""
    case = bench.build_case(op, dtype, size, seed=3)
    evaluator = ReferenceEvaluator(case.graph)
    evaluator.step(case.steps[0])
    return evaluator.evaluations[case.graph.ops[0].name]


def node_of(op: str, dtype: str = "float32", size: int = 64) -> OpNode:
    """The op of the benchmark's case."""
    return bench.build_case(op, dtype, size, seed=3).graph.ops[0]


def test_a_dropped_key_leaves_exactly_that_row_out_of_the_softmax() -> None:
    e = evaluated("sdpa_with_kv_cache", "float32", 96)
    node = node_of("sdpa_with_kv_cache", size=96)
    args = e.args
    cache_before = args["k_cache"].copy()
    q = args["q"][0, 0]  # [Hq, D]
    keys, values = args["k_cache"][0].copy(), args["v_cache"][0].copy()
    pos = int(args["input_pos"])
    keys[pos], values[pos] = args["k"][0, 0], args["v"][0, 0]  # the step's own row
    group = q.shape[0] // keys.shape[1]
    keys, values = np.repeat(keys, group, axis=1), np.repeat(values, group, axis=1)

    def attend(rows: np.ndarray) -> np.ndarray:
        scores = np.einsum("hd,chd->hc", q, keys[rows]) / np.sqrt(q.shape[-1])
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out: np.ndarray = np.einsum("hc,chd->hd", p / p.sum(axis=-1, keepdims=True), values[rows])
        return out

    everything = np.arange(pos + 1)
    np.testing.assert_allclose(e.outputs["out"][0, 0], attend(everything), rtol=1e-12)
    for row in (0, 17, pos - 1):
        buggy = bench.dropped_key(node, args, row)[0, 0]
        np.testing.assert_allclose(buggy, attend(np.delete(everything, row)), rtol=1e-12)
        assert (buggy != e.outputs["out"][0, 0]).all()  # every head reads every row
    assert np.array_equal(args["k_cache"], cache_before)  # the state left as it was
    with pytest.raises(ValueError, match="before input_pos"):
        bench.dropped_key(node, args, pos)  # the step's own row is written, not dropped


def test_the_key_quantiles_run_from_the_lightest_row_to_the_heaviest() -> None:
    args = evaluated("sdpa_with_kv_cache", "float32", 96).args
    node = node_of("sdpa_with_kv_cache", size=96)
    ref = bench.reference_out(node, args)
    moved = [np.abs(bench.dropped_key_at(node, args, q) - ref).max() for q in bench.KEY_QUANTILES]
    assert moved[0] < moved[-1]  # the heaviest key's absence moves the output more
    rows = {bench.key_at_quantile(args, q) for q in (0.0, 0.5, 1.0)}
    assert len(rows) == 3 and all(0 <= r < int(args["input_pos"]) for r in rows)


@pytest.mark.parametrize("offset", bench.CODE_OFFSETS)
def test_a_wrong_code_moves_one_output_by_its_scale_times_its_activation(offset: int) -> None:
    e = evaluated("linear_q4gsw", "float32", 256)
    node = node_of("linear_q4gsw", size=256)
    args = e.args
    change = bench.wrong_code(node, args, offset) - e.outputs["out"]
    assert np.flatnonzero(change).tolist() == [bench.LINEAR_N // 2]
    k = bench.nearest_one(args["x"][0])
    code = q4.unpack(args["weight"].astype(np.uint8), 256)[bench.LINEAR_N // 2, k]
    step = offset if code + offset <= q4.QMAX else -offset
    scale = args["scales"][k // bench.LINEAR_GROUP, bench.LINEAR_N // 2]
    assert change[0, bench.LINEAR_N // 2] == pytest.approx(step * scale * args["x"][0, k])


@pytest.mark.parametrize("offset", [1, -1, 4, -4])
def test_a_wrong_count_divides_the_sum_of_squares_by_it(offset: int) -> None:
    e = evaluated("rms_norm", "float32", 64)
    node = node_of("rms_norm")
    x, w, eps = e.args["x"], e.args["weight"], e.args["eps"]
    want = x * w / np.sqrt((x * x).sum(axis=-1, keepdims=True) / (64 + offset) + eps)
    np.testing.assert_allclose(bench.wrong_count(node, e.args, offset), want, rtol=1e-13)
    assert np.array_equal(bench.wrong_count(node, e.args, 0), e.outputs["out"])


def test_no_eps_is_the_norm_without_it() -> None:
    e = evaluated("rms_norm", "float32", 64)
    x, w = e.args["x"], e.args["weight"]
    want = x * w / np.sqrt((x * x).mean(axis=-1, keepdims=True))
    np.testing.assert_allclose(bench.no_eps(node_of("rms_norm"), e.args, 0), want, rtol=1e-13)


@pytest.mark.parametrize("count", [1, 3, 64])
def test_an_f16_weight_off_by_ulps_moves_one_column(count: int) -> None:
    e = evaluated("rms_norm", "float16", 64)
    w = e.args["weight"]
    i = bench.nearest_one(w)
    moved = bench.ulps_away(w, i, count, "float16")
    assert ulp_distance(moved.astype(np.float16), w.astype(np.float16)).tolist() == [
        count if j == i else 0 for j in range(64)
    ]
    change = bench.weight_ulps(node_of("rms_norm", "float16"), e.args, count) - e.outputs["out"]
    assert sorted({int(c) for c in np.nonzero(change)[1]}) == [i]
    assert (np.abs(change[:, i]) > 0).all() and (
        np.sign(change[:, i]) == np.sign(e.outputs["out"][:, i])
    ).all()


def test_an_f16_activation_off_by_ulps_moves_every_output_by_its_weights() -> None:
    e = evaluated("linear_q4gsw", "float16", 256)
    node = node_of("linear_q4gsw", "float16", 256)
    x = e.args["x"]
    k = bench.nearest_one(x[0])
    moved = bench.ulps_away(x, k, 2, "float16")
    w = q4.dequantize(e.args["weight"].astype(np.uint8), e.args["scales"], bench.LINEAR_GROUP, 256)
    want = (moved[0, k] - x[0, k]) * w[:, k]
    np.testing.assert_allclose(bench.x_ulps(node, e.args, 2) - e.outputs["out"], [want], atol=1e-12)


def test_planting_rounds_as_a_bug_before_the_last_rounding() -> None:
    rng = np.random.default_rng(1)
    reference = rng.standard_normal(4096)
    real = reference.astype(np.float16)
    # Unchanged where the bug changes nothing, whatever the kernel's own rounding did.
    assert np.array_equal(bench.rounded_shift(real, reference, reference), real)
    other = np.nextafter(real, np.float16(np.inf))  # a kernel that rounded otherwise
    assert np.array_equal(bench.rounded_shift(other, reference, reference), other)
    # A change of a tenth of an ULP moves the elements within it of a rounding boundary,
    # by one ULP, and no others; the ones a kernel rounded otherwise stay.
    spacing = np.abs(np.nextafter(real, np.float16(np.inf)).astype(np.float64) - real)
    buggy = reference + 0.1 * spacing
    planted = bench.rounded_shift(real, reference, buggy)
    distance = ulp_distance(planted, real)
    assert set(distance.tolist()) == {0, 1}
    assert np.array_equal(distance == 1, buggy.astype(np.float16) != real)
    assert 0.05 < np.mean(distance) < 0.15  # about a tenth of the elements
    assert np.array_equal(bench.rounded_shift(other, reference, buggy), other)
    # A change of many ULPs moves every element by it: to the rounding of the moved value.
    far = reference + 10 * spacing
    assert np.array_equal(bench.rounded_shift(real, reference, far), far.astype(np.float16))


def test_an_output_element_off_by_ulps_is_that_element_alone() -> None:
    real = np.linspace(-2, 2, 17).astype(np.float16)
    moved = bench.ulps_away(real, 5, 4, "float16")
    assert ulp_distance(moved, real).tolist() == [4 if i == 5 else 0 for i in range(17)]
    assert abs(float(moved[5])) > abs(float(real[5]))  # away from zero
