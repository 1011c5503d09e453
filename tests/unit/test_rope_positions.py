"""apply_rotary_emb_pos's float64 reference and its derived budget (harness/ops/rotary_pos.py).

The reference is checked against an independent formulation (a complex rotation by
e^(i angle)) on hand-picked angles; the budget against f32 emulations of the two ways a
kernel computes the angles (the project's exp2 of the exponent, ggml's pow(theta_scale, i)),
which it must hold, and against the angle bugs it must not let through.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from graph_format.kernels import MANIFEST_NAME, parse_manifest
from harness.model.numerics import U32
from harness.ops.rotary_pos import MODEL, angle_error, angles

F32 = np.float32


def _args(
    positions: list[int], dim: int, base: float, scale: float, factors: np.ndarray | None
) -> dict[str, object]:
    rng = np.random.default_rng(7)
    seq = len(positions)
    args: dict[str, object] = {
        "xq": rng.standard_normal((2, seq, 3, dim)).astype(F32).astype(np.float64),
        "xk": rng.standard_normal((2, seq, 1, dim)).astype(F32).astype(np.float64),
        "positions": np.asarray(positions, np.float64),
        "theta_base": base,
        "freq_scale": scale,
    }
    if factors is not None:
        args["freq_factors"] = factors.astype(np.float64)
    return args


def _complex_rotation(x: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """x's pairs (2i, 2i+1) as complex numbers times e^(i theta[s, i])."""
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * theta[None, :, None, :])
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def test_angles_follow_the_formula() -> None:
    """Pair i of position p turns by p * scale * base^(-2i/D) / factor[i]: hand values."""
    got = angles(np.array([0, 3]), 4, 10000.0, 0.5, np.array([1.0, 4.0]))
    # D = 4: frequencies 1 and 10000^(-1/2) = 0.01; scaled by 0.5; the second divided by 4.
    np.testing.assert_allclose(got, [[0.0, 0.0], [1.5, 3 * 0.5 * 0.01 / 4]], rtol=1e-15)


@pytest.mark.parametrize("with_factors", [False, True])
def test_reference_is_a_complex_rotation(with_factors: bool) -> None:
    positions, dim, base, scale = [0, 1, 17, 4095], 10, 500000.0, 0.25
    factors = np.linspace(1.0, 8.0, dim // 2) if with_factors else None
    args = _args(positions, dim, base, scale, factors)
    out = MODEL.reference(None, args)  # type: ignore[arg-type]
    i = np.arange(dim // 2)
    theta = np.outer(positions, scale / base ** (2 * i / dim))
    if factors is not None:
        theta = theta / factors
    for name in ("xq", "xk"):
        want = _complex_rotation(args[name], theta)  # type: ignore[arg-type]
        np.testing.assert_allclose(out[f"{name}_out"], want, rtol=1e-12, atol=1e-12)


def _kernel_f32(
    positions: np.ndarray, dim: int, base: float, scale: float, factors: np.ndarray | None
) -> np.ndarray:
    """The project kernels' angle computation in f32 (numpy's f32 log2/exp2 are correctly
    rounded to within an ULP), reduced into [-pi, pi] as they reduce it."""
    i = np.arange(dim // 2, dtype=F32)
    exponent = (F32(2) * i) / F32(dim)
    freq = F32(scale) * np.exp2(-(exponent * np.log2(F32(base))))
    if factors is not None:
        freq = freq / factors.astype(F32)
    angle = positions.astype(F32)[:, None] * freq[None, :]
    turns = np.round(angle * F32(1 / (2 * math.pi)))
    reduced: np.ndarray = np.clip(angle - turns * F32(2 * math.pi), F32(-3.1415925), F32(3.1415925))
    return reduced


def _ggml_f32(
    positions: np.ndarray, dim: int, base: float, scale: float, factors: np.ndarray | None
) -> np.ndarray:
    """ggml's: theta_scale = base^(-2/D) in f32, pow(theta_scale, i), no reduction."""
    theta_scale = np.power(F32(base), F32(-2.0) / F32(dim))
    freq = F32(scale) * np.power(theta_scale, np.arange(dim // 2, dtype=F32))
    if factors is not None:
        freq = freq / factors.astype(F32)
    angle: np.ndarray = positions.astype(F32)[:, None] * freq[None, :]
    return angle


CONFIGS = [
    (64, 10000.0, 1.0, None),
    (128, 500000.0, 0.25, np.linspace(1.0, 8.0, 64)),
    (6, 100.0, 0.5, None),
]


@pytest.mark.parametrize(("dim", "base", "scale", "factors"), CONFIGS)
@pytest.mark.parametrize("compute", [_kernel_f32, _ggml_f32])
def test_f32_angles_stay_within_the_bound(
    dim: int, base: float, scale: float, factors: np.ndarray | None, compute: object
) -> None:
    """Both formulations in f32, at positions of a long session, stay within `angle_error`
    (cos and sin of the f32 angle against those of the exact one; no SAFETY: the bound before
    it must hold already). Nor is it vacuous: under 0.01 radian up to position 4096."""
    positions = np.array([0, 1, 2, 100, 1000, 4095, 4096, 65535])
    exact = angles(positions, dim, base, scale, factors)
    got = compute(positions, dim, base, scale, factors).astype(np.float64)  # type: ignore[operator]
    bound = angle_error(positions, dim, base, scale, factors)
    for f in (np.cos, np.sin):
        err = np.abs(f(got) - f(exact))
        assert np.all(err <= bound), float((err / bound).max())
    assert bound[positions <= 4096].max() < 0.01


def test_the_bound_grows_with_the_angle() -> None:
    """At position 0 only the angle-independent terms remain (sin and cos's 2^-11 and the
    reduction's); the bound grows with |position| and by at least u per radian."""
    positions = np.array([0, 10, 1000, -1000])
    bound = angle_error(positions, 16, 10000.0, 1.0, None)
    assert np.all(bound[0] < 2.0**-11 + 8 * U32 * math.pi)
    assert np.all(bound[1] < bound[2])
    np.testing.assert_array_equal(bound[2], bound[3])
    theta = angles(positions, 16, 10000.0, 1.0, None)
    assert np.all(bound[2] - bound[0] >= U32 * np.abs(theta[2]))


@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(lambda p, d: (p + 1, d), id="position-off-by-one"),
        pytest.param(lambda p, d: (p, 2 * d), id="exponent-over-d-not-d/2"),
    ],
)
def test_budget_catches_angle_bugs(bug: object) -> None:
    """The outputs of a kernel with an angle bug (each position one too far; the exponent
    i/D instead of 2i/D, i.e. theta's head dim doubled) lie outside the op's budget, while
    the right angles in f32 lie within it."""
    positions, dim, base, scale = [3, 4, 5, 6, 7, 8], 16, 10000.0, 1.0
    args = _args(positions, dim, base, scale, None)
    ref = MODEL.reference(None, args)  # type: ignore[arg-type]
    budget = MODEL.budget(None, args, ref)  # type: ignore[arg-type]

    def utilization(theta: np.ndarray) -> float:
        worst = 0.0
        for name in ("xq", "xk"):
            got = _complex_rotation(args[name], theta)  # type: ignore[arg-type]
            worst = max(
                worst, float((np.abs(got - ref[f"{name}_out"]) / budget[f"{name}_out"]).max())
            )
        return worst

    right = _kernel_f32(np.array(positions), dim, base, scale, None).astype(np.float64)
    assert utilization(right) <= 1.0
    wrong_positions, wrong_dim = bug(np.array(positions), dim)  # type: ignore[operator]
    i = np.arange(dim // 2)
    wrong = np.outer(wrong_positions, scale * base ** (-2.0 * i / wrong_dim))
    assert utilization(wrong) > 10.0


def test_the_docs_example_is_the_tested_manifest() -> None:
    """docs/bring-your-own-kernels.md's position-rope manifest is tests/data/kernels/rope_norm's
    (which tests/diff/test_foreign_rope.py runs), less its header comment, and parses."""
    root = Path(__file__).parents[2]
    page = (root / "docs" / "bring-your-own-kernels.md").read_text()
    marker = "# tests/data/kernels/rope_norm/kernels.toml (its header comment aside)\n"
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", page, re.S) if b.startswith(marker)]
    text = (root / "tests" / "data" / "kernels" / "rope_norm" / MANIFEST_NAME).read_text()
    body = text[text.index("format = ") :]
    assert block[len(marker) :] == body
    manifest = parse_manifest(body, Path("rope_norm") / MANIFEST_NAME, check_files=False)
    assert manifest.slots("webgpu") == manifest.slots("vulkan") == ("rotary_emb_pos",)
