"""apply_rotary_emb_pos on both backends: a generation session's positions (a prefill from a
cached context, then decode steps), with and without frequency factors, in f32 and f16.

Each runtime's outputs are checked against an independent expectation (each pair a complex
number turned by e^(i angle), the angle from the positions and theta in float64) within the
op's derived budget, and the lockstep runner finds nothing on the same case: the contract,
both backends and the float64 reference agree, bit for bit between the backends (the
kernels are declared `exact`). A one-line angle bug planted in one backend's kernel is found
and blamed on that backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import Runtime
from harness.check.divergence import Kind
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import assert_parity
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model.numerics import f16_store
from harness.ops.rotary_pos import MODEL
from tests.plants import glsl_substitution, wgsl_substitution

pytestmark = pytest.mark.gpu

DIM, BASE, SCALE = 12, 500000.0, 0.5
# A prefill of 5 tokens after 1000 cached ones, then two decode steps (batch 2, then 1).
SESSION = [(2, np.arange(1000, 1005)), (2, np.array([1005])), (1, np.array([1006]))]


def session_case(dtype: str, with_factors: bool) -> Case:
    """xq [2, 5, 3, D], xk [2, 5, 2, D] rotated at the session's positions."""
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    xq = b.input("xq", dtype, [2, 5, 3, DIM])
    xk = b.input("xk", dtype, [2, 5, 2, DIM])
    positions = b.input("positions", "int32", [5])
    factors = (
        b.constant("ff", np.linspace(1.0, 6.0, DIM // 2).astype(np.float32))
        if with_factors
        else None
    )
    outs = b.op(
        "apply_rotary_emb_pos",
        name="rope",
        xq=xq,
        xk=xk,
        positions=positions,
        theta_base=b.float(BASE),
        freq_scale=b.float(SCALE),
        freq_factors=factors,
        out_dims={"xq_out": [2, 5, 3, DIM], "xk_out": [2, 5, 2, DIM]},
    )
    b.output(*outs)
    steps = [
        {
            "xq": rng.standard_normal((batch, len(pos), 3, DIM)).astype(dtype),
            "xk": rng.standard_normal((batch, len(pos), 2, DIM)).astype(dtype),
            "positions": pos.astype(np.int32),
        }
        for batch, pos in SESSION
    ]
    return Case(b.build(), steps, name=f"rope_pos_{dtype}_{with_factors}")


def expected(x: np.ndarray, positions: np.ndarray, factors: np.ndarray | None) -> np.ndarray:
    """Pairs (2i, 2i+1) of x as complex numbers, times e^(i angle(s, i))."""
    i = np.arange(DIM // 2)
    theta = np.outer(positions, SCALE * np.power(BASE, -2.0 * i / DIM))
    if factors is not None:
        theta = theta / factors
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * theta[None, :, None, :])
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


@pytest.mark.parametrize("with_factors", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rope_positions_agrees(
    dtype: str, with_factors: bool, runner: LockstepRunner, runtimes: list[Runtime]
) -> None:
    case = session_case(dtype, with_factors)
    assert_parity(runner.run(case))
    factors = np.linspace(1.0, 6.0, DIM // 2).astype(np.float32) if with_factors else None
    for rt in runtimes:
        loaded = rt.load(case.graph)
        for step in case.steps:
            outputs = loaded.execute(step).outputs
            args = {name: np.asarray(v, np.float64) for name, v in step.items()}
            args |= {"theta_base": BASE, "freq_scale": SCALE}
            if factors is not None:
                args["freq_factors"] = factors.astype(np.float64)
            ref = MODEL.reference(None, args)  # type: ignore[arg-type]
            budget = MODEL.budget(None, args, ref)  # type: ignore[arg-type]
            for name in ("xq", "xk"):
                assert outputs[f"rope.{name}_out"].dtype == dtype
                got = outputs[f"rope.{name}_out"].astype(np.float64)
                want = expected(args[name], args["positions"], factors)
                bound = budget[f"{name}_out"]
                if dtype == "float16":
                    bound = f16_store(bound, want)
                assert np.all(np.abs(got - want) <= bound), (rt.name, name)


PLANTS = {
    # Each position one too far, in the WGSL kernel.
    "wgsl-position-off-by-one": (
        lambda: wgsl_substitution(
            "rotary_emb_pos", "reduced_angle(positions[s], i)", "reduced_angle(positions[s] + 1, i)"
        ),
        "webgpu",
    ),
    # theta's exponent i/D instead of 2i/D (the head dim where half of it belongs), in GLSL.
    "glsl-exponent-over-d": (
        lambda: glsl_substitution(
            "rotary_emb_pos", "float(2 * i) / float(head_dim)", "float(i) / float(head_dim)"
        ),
        "vulkan",
    ),
}


@pytest.mark.parametrize("plant", PLANTS)
def test_angle_bug_is_found_and_blamed(plant: str) -> None:
    """A one-line angle bug in one backend's kernel: a numeric divergence blamed on it."""
    make, blamed = PLANTS[plant]
    with make() as runner:
        result = runner.run(session_case("float32", with_factors=False))
    found = [d for d in result.divergences if d.kind is Kind.NUMERIC]
    assert found, result.divergences
    assert {d.blame for d in found} == {blamed}, found
