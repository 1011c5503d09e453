"""Kernels that compute in f16 (issue 21 item 4; docs/oracles.md "Kernels that compute in
f16"), without a device: the f16 arithmetic's constants on the error model, budgets derived
in it (checked against numpy's own f16 arithmetic), which ops a manifest's `precision`
puts in it, and the manifest key's errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graph_format import Graph, OpNode
from graph_format.kernels import KernelManifestError, parse_manifest
from harness import op_budget, single_op_graph
from harness.model import kernel_arithmetic, local_budget, local_budgets, model_for
from harness.model.numerics import (
    F16,
    F32,
    RIGOROUS,
    STATISTICAL,
    arithmetic,
    error_model,
    gamma,
    gamma_tilde,
    gamma_worst,
)


def test_the_f16_arithmetic_s_constants_are_binary16_s_and_the_spec_s() -> None:
    info = np.finfo(np.float16)
    assert F16.u == float(info.eps) / 2 == 2.0**-11
    assert F16.eps == float(info.eps)
    assert F16.tiny == float(info.tiny) == 2.0**-14
    assert F16.largest == float(info.max) == 65504.0
    # WGSL's f16 accuracy table (the Vulkan precision table for 16-bit): division within
    # [2^-14, 2^14], exp 1 + 2|x| ULP, sin/cos 2^-7 absolute.
    assert (F16.divisor_limit, F16.ulp_exp(3.0), F16.sin_cos_absolute) == (2.0**14, 7.0, 2.0**-7)
    assert (F32.u, F32.tiny, F32.divisor_limit, F32.ulp_exp(3.0)) == (
        2.0**-24,
        2.0**-126,
        2.0**126,
        9.0,
    )
    assert float(np.float16(F16.exact_int + 1)) != F16.exact_int + 1  # 2049 is not an f16


def test_gamma_follows_the_arithmetic_of_the_model_in_force() -> None:
    assert arithmetic() is F32
    with error_model(RIGOROUS.computing_in(F16)):
        assert arithmetic() is F16
        assert gamma(64) == pytest.approx(64 * 2.0**-11 / (1 - 64 * 2.0**-11))
        # No worst-case bound for an f16 sum of 2048 terms or more (n u >= 1).
        assert gamma(2048) == np.inf
    with error_model(STATISTICAL.computing_in(F16)):
        assert gamma(1024) == gamma_tilde(1024, u=F16.u) < gamma_worst(1024, u=F16.u)
    assert gamma(64) == gamma_worst(64, u=F32.u)


def _silu(x: np.ndarray) -> tuple[Graph, OpNode, dict[str, np.ndarray], dict[str, np.ndarray]]:
    case = single_op_graph("silu", {"x": x.astype(np.float16)})
    graph, node = case.graph, case.graph.ops[0]
    args = {"x": x.astype(np.float16).astype(np.float64)}
    return graph, node, args, model_for("silu").reference(node, args)


def _every_f16(low: float, high: float) -> np.ndarray:
    """Every finite f16 value in [low, high]."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    every = every[np.isfinite(every)]
    return every[(every >= low) & (every <= high)]


def test_an_f16_silu_computed_in_f16_is_within_the_f16_arithmetic_budget_only() -> None:
    """numpy's f16 arithmetic (each operation rounded to f16, exp overflowing to inf past
    65504: the result is -0 below x ~ -11.09) over every f16 in [-24, 24]: within the budget
    derived for f16 arithmetic everywhere, and far over the f32-arithmetic one (the issue's
    700x), near where exp overflows."""
    x = _every_f16(-24.0, 24.0)
    graph, node, args, outs = _silu(x)
    with np.errstate(over="ignore"):
        computed = (x / (np.float16(1) + np.exp(-x))).astype(np.float64)
    assert np.any((computed == 0) & (x < -11.1))  # the overflow this is about
    error = np.abs(computed - outs["out"])
    f16 = local_budget(graph, node, args, outs, F16)["out"]
    assert np.all(error <= f16), float(np.max(error / f16))
    f32 = local_budget(graph, node, args, outs)["out"]
    assert np.max(error / f32) > 100
    assert np.all(f16 >= f32)


def test_where_the_f16_division_is_specified_a_flush_to_zero_is_still_a_finding() -> None:
    """The |r| allowance starts where 1 + exp(-x) passes 2^14 (x < -9.70): at x = -8 a
    kernel returning 0 is over the f16 budget; at x = -12 it is within."""
    x = np.array([-8.0, -12.0])
    graph, node, args, outs = _silu(x)
    budget = local_budget(graph, node, args, outs, F16)["out"]
    over = np.abs(outs["out"]) / budget
    assert over[0] > 10 and over[1] < 1


def test_a_long_f16_reduction_gets_a_statistical_tier_in_f16_too() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 1024)).astype(np.float16)
    w = rng.standard_normal(1024).astype(np.float16)
    case = single_op_graph("rms_norm", {"x": x, "weight": w, "eps": 1e-5})
    graph, node = case.graph, case.graph.ops[0]
    args = {"x": x.astype(np.float64), "weight": w.astype(np.float64), "eps": 1e-5}
    outs = model_for("rms_norm").reference(node, args)
    f32 = local_budgets(graph, node, args, outs)
    f16 = local_budgets(graph, node, args, outs, F16)
    assert f16.tiered and np.all(f16.statistical["out"] < f16.hard["out"])
    # Computing in f16 costs more than storing in f16 after f32 arithmetic.
    assert np.all(f16.hard["out"] > 2 * f32.hard["out"])


def test_an_op_computes_in_f16_where_a_kernel_of_its_f16_slots_says_so() -> None:
    half = single_op_graph("silu", {"x": np.ones((2, 4), np.float16)}).graph
    single = single_op_graph("silu", {"x": np.ones((2, 4), np.float32)}).graph
    declared = {"silu_f16": "f16"}.get
    assert kernel_arithmetic(half, half.ops[0], declared) is F16
    assert kernel_arithmetic(half, half.ops[0], lambda slot: None) is F32
    assert kernel_arithmetic(single, single.ops[0], declared) is F32  # an f32 graph


HEAD = 'format = "parity-kernels/1"\n'


def test_a_manifest_section_declares_its_precision(tmp_path: Path) -> None:
    text = HEAD + '[webgpu.silu_f16]\nfile = "a.wgsl"\nprecision = "f16"\n'
    text += '[vulkan.silu_f16]\nglsl = "a.comp"\n'
    manifest = parse_manifest(text, tmp_path / "kernels.toml", check_files=False)
    webgpu, vulkan = manifest.entry("webgpu", "silu_f16"), manifest.entry("vulkan", "silu_f16")
    assert webgpu is not None and vulkan is not None
    assert (webgpu.precision, vulkan.precision) == ("f16", "f32")
    again = parse_manifest(
        HEAD + '[webgpu.silu_f16]\nfile = "a.wgsl"\nprecision = "f16"\n',
        tmp_path / "kernels.toml",
        check_files=False,
    )
    assert again.to_doc()["webgpu"]["silu_f16"]["precision"] == "f16"


@pytest.mark.parametrize(
    ("section", "what"),
    [
        (
            '[webgpu.silu_f16]\nfile = "a.wgsl"\nprecision = "half"\n',
            "webgpu.silu_f16.precision: expected 'f32' or 'f16' (the arithmetic the kernel "
            "computes in), got string 'half'",
        ),
        (
            '[vulkan.silu_f16]\nglsl = "a.comp"\nprecision = 16\n',
            "vulkan.silu_f16.precision: expected 'f32' or 'f16'",
        ),
        (
            '[webgpu.rms_norm]\nfile = "a.wgsl"\nprecision = "f16"\n',
            "webgpu.rms_norm.precision: precision = 'f16' is for a kernel of an f16 slot (of "
            "rms_norm: rms_norm_f16); slot rms_norm loads and stores f32",
        ),
    ],
)
def test_a_bad_precision_is_one_line_naming_file_and_key(
    tmp_path: Path, section: str, what: str
) -> None:
    path = tmp_path / "kernels.toml"
    with pytest.raises(KernelManifestError) as info:
        parse_manifest(HEAD + section, path, check_files=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {what}"), message


def test_the_api_gives_an_op_s_budget_in_either_arithmetic() -> None:
    case = single_op_graph("silu", {"x": np.linspace(-12, 12, 64).astype(np.float16)})
    f32, f16 = op_budget(case), op_budget(case, precision="f16")
    assert np.all(f16.budget["out"] >= f32.budget["out"])
    assert np.any(f16.budget["out"] > 10 * f32.budget["out"])
    with pytest.raises(ValueError, match="precision 'half': expected one of 'f32', 'f16'"):
        op_budget(case, precision="half")


def _within_f16(op: str, inputs: dict[str, np.ndarray], computed: np.ndarray) -> float:
    """The utilization of `computed` (numpy's f16 arithmetic) under the op's f16 budget."""
    floats = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    case = single_op_graph(op, inputs)
    graph, node = case.graph, case.graph.ops[0]
    args = {**inputs, **{k: v.astype(np.float64) for k, v in floats.items()}}
    outs = model_for(op).reference(node, args)
    budget = local_budget(graph, node, args, outs, F16)["out"]
    return float(np.max(np.abs(computed.astype(np.float64) - outs["out"]) / budget))


def test_numpy_s_f16_arithmetic_stays_within_other_ops_f16_budgets() -> None:
    """One derivation serves both arithmetics: rms_norm summed in f16 in order, silu_mul and
    add each rounded to f16 at every operation, are within their f16-arithmetic budgets."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 1000)).astype(np.float16)
    w = rng.standard_normal(1000).astype(np.float16)
    total = np.zeros(16, np.float16)
    for i in range(x.shape[1]):
        total = (total + x[:, i] * x[:, i]).astype(np.float16)
    rstd = np.float16(1) / np.sqrt(total / np.float16(x.shape[1]) + np.float16(1e-5))
    normed = (x * rstd[:, None]).astype(np.float16) * w
    assert _within_f16("rms_norm", {"x": x, "weight": w, "eps": 1e-5}, normed) <= 1.0

    g = (rng.standard_normal(20000) * 8).astype(np.float16)
    up = rng.standard_normal(20000).astype(np.float16)
    with np.errstate(over="ignore"):
        fused = (g / (np.float16(1) + np.exp(-g))) * up
    assert _within_f16("silu_mul", {"gate": g, "up": up}, fused) <= 1.0

    a, b = (rng.standard_normal((2, 5000)) * 4).astype(np.float16)
    assert _within_f16("add", {"a": a, "b": b}, a + b) <= 1.0
