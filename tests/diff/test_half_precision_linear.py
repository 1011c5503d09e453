"""Half precision in linear_q4gsw on the lavapipe devices: the f16 GEMM and GEMV (f16
activations, bias and output, f32 scales and f32 accumulation) agree with the model in
lockstep across M = 1 <-> M > 1 routes, and a planted f16-only bug (the f16 GEMV
accumulating in f16 where its contract says f32) is found, blamed and keyed as an f16 bug."""

from __future__ import annotations

from contextlib import AbstractContextManager

import numpy as np
import pytest

from harness.check.divergence import BugKey
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model import q4
from tests.plants import shader_substitutions, wgsl_substitution

pytestmark = pytest.mark.gpu


def _linear_case(
    dtype: str, rows: list[int], *, k: int = 64, n: int = 13, group_size: int = 32, scale=1.0
) -> Case:
    """One linear_q4gsw (with a bias) whose live M takes `rows` in turn."""
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", dtype, [max(rows), k])
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group_size)
    bias = b.constant("bias", rng.standard_normal(n).astype(dtype))
    b.output(
        b.op(
            "linear_q4gsw",
            name="lin",
            out_dims=[max(rows), n],
            x=x,
            weight=b.constant("weight", packed),
            scales=b.constant("scales", scales),
            group_size=b.int(group_size, "group_size"),
            bias=bias,
        )
    )
    steps = [{"x": (rng.standard_normal((m, k)) * scale).astype(dtype)} for m in rows]
    return Case(b.build(), steps, name=f"linear_q4gsw_{dtype}")


def test_f16_gemm_and_gemv_agree_across_routes(runner: LockstepRunner) -> None:
    result = runner.run(_linear_case("float16", [1, 5, 1, 3]))
    assert result.ok, result.divergences
    ran = {d["kernel"] for step in result.steps for d in step.expected_dispatches if d["ran"]}
    assert ran == {"q4gsw_gemv_f16", "q4gsw_gemm_f16"}


# The planted f16-only bug: q4gsw_gemv_f16 keeping its lane accumulators in f16 (each word's
# scaled dot is rounded to f16 and added in f16), where its contract says f32. Planted on
# the Vulkan side.
F16_ACCUMULATION = (
    ("    vec2 acc = vec2(0);", "    f16vec2 acc = f16vec2(0);"),
    *(
        (
            f"acc = fma(pair_dot({a}, {b}, {i}), t_scales[sr.x], acc);",
            f"acc = f16vec2(fma(pair_dot({a}, {b}, {i}), t_scales[sr.x], vec2(acc)));",
        )
        for a, b, i in (
            ("a0", "b0", "i0"),
            ("a1", "b1", "i1"),
            ("a2", "b2", "i2"),
            ("a3", "b3", "i3"),
        )
    ),
    (
        "acc = fma(dots, t_scales[sr.x], acc);",
        "acc = f16vec2(fma(dots, t_scales[sr.x], vec2(acc)));",
    ),
    ("partial[lane] = acc;", "partial[lane] = vec2(acc);"),
)


def _f16_accumulating_gemv() -> AbstractContextManager[LockstepRunner]:
    swaps = [("q4gsw_gemv_f16", old, new) for old, new in F16_ACCUMULATION]
    return shader_substitutions(glsl=swaps)


def _swamping_gemv_case(dtype: str) -> Case:
    """One GEMV row (K = 16384: 2048 weight words, 32 a lane; N = 8; every weight 7/7.5, ones
    quantized) where each lane's first word dots to 8 * 80 * 14/15 = 597 and its 31 later
    words to 0.187 each: an f32 accumulator keeps them; an f16 one, whose spacing at 597 is
    0.5, rounds each 597 + 0.187 back to 597 and loses 31 * 0.187 a lane, about 370 of an
    output of 38600, past the budget (about 113: the f32 bound gamma(K + 2) sum|x||w| plus the
    f16 store's 2 u16 |y|). Words 0-63 (k < 512) are the lanes' first words."""
    k, n, group_size = 16384, 8, 64
    b = GraphBuilder()
    x = b.input("x", dtype, [1, k])
    packed, scales = q4.quantize(np.ones((n, k)), group_size)
    b.output(
        b.op(
            "linear_q4gsw",
            name="lin",
            out_dims=[1, n],
            x=x,
            weight=b.constant("weight", packed),
            scales=b.constant("scales", scales),
            group_size=b.int(group_size, "group_size"),
        )
    )
    x_data = np.where(np.arange(k) < 512, 80.0, 0.025).reshape(1, k).astype(dtype)
    return Case(b.build(), [{"x": x_data}], name=f"linear_q4gsw_{dtype}")


def test_an_f16_gemv_accumulating_in_f16_is_found_and_blamed(runner: LockstepRunner) -> None:
    assert runner.run(_swamping_gemv_case("float16")).ok  # f32 accumulation keeps the tail
    with _f16_accumulating_gemv() as planted:
        result = planted.run(_swamping_gemv_case("float16"))
        assert planted.run(_swamping_gemv_case("float32")).ok  # only the f16 kernel changed
    device = str(result.adapters.get("vulkan", {}).get("adapter", ""))
    if not result.divergences and "llvmpipe" not in device:
        # Measured on an NVIDIA H100 (driver 580.159.04, 2026-11-26): the planted kernel's
        # outputs stayed within the budget there, as if its driver kept the loop-carried f16
        # accumulator wider than f16; the plant is a lavapipe check (CI's device).
        pytest.xfail(f"the f16 accumulation is not observable on {device}")
    assert result.divergences
    keys = {d.bug_key() for d in result.divergences}
    # About 3x the budget: the band of utilizations 1-10.
    assert keys == {BugKey("linear_q4gsw", "numeric", "vulkan", "x1", "float16")}, keys


def _accumulating_case(bits: int | None, rows: list[int], k: int = 3000) -> Case:
    """A linear of K = 3000 (beyond the 2048 where an unblocked f16 sum has no bound) with
    accumulate_bits = `bits` over f16 x, whose live M takes `rows` in turn."""
    case = _linear_case("float16", rows, k=k, n=9, group_size=40)
    if bits is None:
        return case
    b = GraphBuilder()
    rng = np.random.default_rng(1)
    x = b.input("x", "float16", [max(rows), k])
    packed, scales = q4.quantize(rng.standard_normal((9, k)), 40)
    b.output(
        b.op(
            "linear_q4gsw",
            name="lin",
            out_dims=[max(rows), 9],
            x=x,
            weight=b.constant("weight", packed),
            scales=b.constant("scales", scales),
            group_size=b.int(40, "group_size"),
            bias=b.constant("bias", rng.standard_normal(9).astype(np.float16)),
            accumulate_bits=b.int(bits, "accumulate_bits"),
        )
    )
    return Case(b.build(), case.steps, name=f"linear_q4gsw_f16acc{bits}")


def test_the_f16_accumulating_gemm_agrees_within_its_blocked_bound(
    runner: LockstepRunner,
) -> None:
    result = runner.run(_accumulating_case(16, [5, 1, 3]))
    assert result.ok, result.divergences
    ran = {d["kernel"] for step in result.steps for d in step.expected_dispatches if d["ran"]}
    # The GEMV route (M = 1) keeps f32 accumulation, and its own (tighter) budget.
    assert ran == {"q4gsw_gemm_f16acc", "q4gsw_gemv_f16"}


def test_f16_accumulation_is_refused_without_f16_x(runner: LockstepRunner) -> None:
    """accumulate_bits must be 32, or 16 with float16 x: both backends and the contract
    refuse the rest at load with the same key."""
    for bits, dtype in ((16, "float32"), (8, "float16")):
        b = GraphBuilder()
        x = b.input("x", dtype, [2, 16])
        packed, scales = q4.quantize(np.ones((4, 16)), 8)
        b.output(
            b.op(
                "linear_q4gsw",
                name="lin",
                out_dims=[2, 4],
                x=x,
                weight=b.constant("weight", packed),
                scales=b.constant("scales", scales),
                group_size=b.int(8, "group_size"),
                accumulate_bits=b.int(bits, "accumulate_bits"),
            )
        )
        steps = [{"x": np.ones((2, 16), dtype)}]
        result = runner.run(Case(b.build(), steps, name="refused"))
        assert result.ok, result.divergences  # refused alike: an agreed load error
        assert result.steps == [] or all(s.expected_error for s in result.steps)


def test_the_budget_catches_an_unblocked_f16_sum(runner: LockstepRunner) -> None:
    """The blocked bound sees the kernel drop its blocks (one f16 sum over all of K, as
    upstream's f16acc kernel): K = 30000 terms of 2 * 14/15 (x = 2, weights ones quantized)
    sum to 56000, but an unblocked f16 sum stops growing at 4096, where the f16 spacing (4)
    swallows each term. Planted on WebGPU, found there."""
    k = 30000
    b = GraphBuilder()
    x = b.input("x", "float16", [4, k])
    packed, scales = q4.quantize(np.ones((8, k)), 32)
    b.output(
        b.op(
            "linear_q4gsw",
            name="lin",
            out_dims=[4, 8],
            x=x,
            weight=b.constant("weight", packed),
            scales=b.constant("scales", scales),
            group_size=b.int(32, "group_size"),
            accumulate_bits=b.int(16, "accumulate_bits"),
        )
    )
    case = Case(b.build(), [{"x": np.full((4, k), 2.0, np.float16)}], name="f16acc_long")
    assert runner.run(case).ok
    with wgsl_substitution(
        "q4gsw_gemm_f16acc",
        "if (word % BLOCK_WORDS == BLOCK_WORDS - 1u || word + 1u == params.k_words) {",
        "if (word + 1u == params.k_words) {",
    ) as planted:
        result = planted.run(case)
    assert result.divergences
    assert {(d.op_type, d.blame, d.dtype) for d in result.divergences} == {
        ("linear_q4gsw", "webgpu", "float16")
    }
