"""What the exact tier holds a pair of backends to (`harness.check.oracles.exact_tolerance`),
from the kernels' declarations in the op models, and that every project kernel declares
it (docs/oracles.md "Exact equality")."""

from __future__ import annotations

import numpy as np

from graph_format import SIGNATURES
from harness.check.oracles import NOT_CLOSE, exact_tolerance, same_device, ulp_distance
from harness.ops import model_for

LAVAPIPE = {"adapter": "llvmpipe (LLVM 15.0.6, 256 bits)"}
ADAPTERS = {
    "webgpu": LAVAPIPE,
    "webgpu-dawn": {"adapter": "llvmpipe-llvm-15-0-6-256-bits-"},
    "webgpu-chrome": {"adapter": "google swiftshader"},
    "vulkan": LAVAPIPE,
}


def tolerance(
    op: str,
    kernels: tuple[str, ...],
    a: str,
    b: str,
    replaced: dict[str, dict[str, bool]] | None = None,
) -> int | None:
    """The tolerance of `op` running `kernels` on backends a and b (`ADAPTERS`)."""
    return exact_tolerance(op, kernels, (a, b), ADAPTERS, replaced or {})


def test_one_device_is_held_to_bit_identity() -> None:
    assert same_device(ADAPTERS["webgpu"], ADAPTERS["webgpu-dawn"])
    assert tolerance("rms_norm", ("rms_norm_vec4",), "webgpu", "vulkan") == 0
    assert tolerance("rms_norm", ("rms_norm_f16",), "webgpu-dawn", "vulkan") == 0
    assert tolerance("sigmoid", ("sigmoid",), "webgpu", "webgpu-dawn") == 0


def test_implementations_on_other_devices_get_the_measured_ulps() -> None:
    assert tolerance("rms_norm", ("rms_norm_vec4",), "webgpu", "webgpu-chrome") == 0
    # exp: no count declared, nothing compared; f16: never measured there.
    assert tolerance("sigmoid", ("sigmoid",), "webgpu", "webgpu-chrome") is None
    assert tolerance("rms_norm", ("rms_norm_f16",), "webgpu", "webgpu-chrome") is None
    # Vulkan and WebGPU on other devices do not run the same shader: nothing declared.
    assert tolerance("rms_norm", ("rms_norm_vec4",), "webgpu-chrome", "vulkan") is None


def test_a_foreign_kernel_promises_nothing_unless_its_manifest_says_so() -> None:
    silent, exact = {"webgpu": {"mul_flat": False}}, {"webgpu": {"mul_flat": True}}
    assert tolerance("mul", ("mul_flat",), "webgpu", "vulkan", silent) is None
    assert tolerance("mul", ("mul_broadcast",), "webgpu", "vulkan", silent) == 0
    assert tolerance("mul", ("mul_flat",), "webgpu", "vulkan", exact) == 0
    # Both backends replace the slot: both entries must say so.
    both = {"webgpu": {"mul_flat": True}, "vulkan": {"mul_flat": False}}
    assert tolerance("mul", ("mul_flat",), "webgpu", "vulkan", both) is None
    assert tolerance("mul", ("mul_flat",), "vulkan", "webgpu", both) is None
    # Across devices a foreign kernel declares no ULP count.
    assert tolerance("mul", ("mul_flat",), "webgpu", "webgpu-chrome", exact) is None


# Project kernels measured to round apart between WGSL and GLSL on some device (the position
# rope's on an H200: docs/oracles.md "Exact equality"): the budgets alone judge them.
NOT_EXACT = {"rotary_emb_pos", "rotary_emb_pos_f16"}


def test_every_project_kernel_is_declared_exact_but_those_measured_apart() -> None:
    for op in SIGNATURES:
        for spec in model_for(op).kernels.values():
            assert spec.exact == (spec.name not in NOT_EXACT), (
                f"{op}: kernel {spec.name} declares exact = {spec.exact}"
            )


def test_ulp_distance_counts_floats_between() -> None:
    one = np.float32(1.0)
    a = np.array([1.0, -0.0, np.nan, 1.0, -1.0], np.float32)
    b = np.array([np.nextafter(one, np.float32(2)), 0.0, np.nan, np.nan, 1.0], np.float32)
    assert ulp_distance(a, b).tolist() == [1, 0, 0, NOT_CLOSE, 2 * 0x3F800000]
    half = np.array([1.0], np.float16)
    assert ulp_distance(half, np.nextafter(half, np.float16(0))).tolist() == [1]
    assert ulp_distance(np.array([3], np.int32), np.array([4], np.int32)).tolist() == [NOT_CLOSE]
