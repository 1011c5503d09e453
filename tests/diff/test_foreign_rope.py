"""A position rope from another code base's style through a manifest (issue 21 item 1):
tests/data/kernels/rope_norm holds a ggml-style rope_norm in WGSL and in GLSL (its own names,
the positions and frequency factors bound as the slot's `positions` and `freq_factors`
roles, theta_base, freq_scale and head_dim as its params / push constants, q and k in two
dispatches, theta_scale^i frequencies and no range reduction), replacing the slot
`rotary_emb_pos` on both backends with no adapter.

- The rope_pos family runs through it on both runtimes without a divergence (the budget
  holds ggml's way of computing the angles as well as the project's);
- a one-line angle bug planted in a copy of either kernel is found and blamed on the backend
  whose kernel carries it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from graph_format import Runtime
from graph_format.kernels import load_manifest
from harness.check.divergence import Kind
from harness.check.lockstep import LockstepRunner
from harness.gen.case import Case
from harness.ops.rotary_pos import rope_pos_cases
from tests.diff.test_rope_positions import session_case
from vulkan_ref import VulkanRuntime
from webgpu_backend import WebGPURuntime

pytestmark = pytest.mark.gpu

ROPE_NORM = Path(__file__).resolve().parents[1] / "data" / "kernels" / "rope_norm"
FIXTURES = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _runner(folder: Path, vulkan: Runtime) -> LockstepRunner:
    """Both runtimes running the folder's kernels (the Vulkan one on the suite's context)."""
    manifest = load_manifest(folder)
    assert isinstance(vulkan, VulkanRuntime)
    return LockstepRunner(
        [WebGPURuntime(manifest=manifest), VulkanRuntime(vulkan.context, manifest=manifest)]
    )


@pytest.fixture(scope="module")
def rope_norm(vulkan: Runtime) -> LockstepRunner:
    return _runner(ROPE_NORM, vulkan)


@FIXTURES
@given(case=rope_pos_cases())
def test_rope_pos_family_runs_through_the_manifest(case: Case, rope_norm: LockstepRunner) -> None:
    result = rope_norm.run(case)
    assert result.ok, result.divergences


PLANTS = {
    # Each position one too far, in the WGSL kernel.
    "wgsl-position-off-by-one": (
        "rope_norm.wgsl",
        "f32(src1[token])",
        "f32(src1[token] + 1)",
        "webgpu",
    ),
    # theta_scale raised to i0 instead of i0 / 2 (frequencies of the doubled pair index).
    "glsl-exponent-doubled": (
        "rope_norm.comp",
        "pow(theta_scale, float(i0 / 2))",
        "pow(theta_scale, float(i0))",
        "vulkan",
    ),
}


@pytest.mark.parametrize("plant", PLANTS)
def test_planted_angle_bug_is_found_and_blamed(plant: str, vulkan: Runtime, tmp_path: Path) -> None:
    name, old, new, blamed = PLANTS[plant]
    folder = tmp_path / "rope_norm"
    shutil.copytree(ROPE_NORM, folder)
    source = (folder / name).read_text()
    assert source.count(old) == 1, f"{name}: the planted substitution no longer applies"
    (folder / name).write_text(source.replace(old, new))
    result = _runner(folder, vulkan).run(session_case("float32", with_factors=True))
    found = [d for d in result.divergences if d.kind is Kind.NUMERIC]
    assert found, result.divergences
    assert {d.blame for d in found} == {blamed}, found
