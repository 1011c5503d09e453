"""Half precision on the devices: both lavapipe devices offer f16 (the WebGPU device with
`shader-f16`, the Vulkan one with shaderFloat16 and 16-bit storage), each backend picks a
slot's f16 variant by dtype and refuses one its op lacks, and a device without f16 refuses a
float16 graph as unavailable, which the lockstep runner reports as such: no divergence, no
failed run, and fp32 graphs still run there."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from graph_format import SLOTS, FeatureUnavailable, GraphBuildError, Runtime
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case

pytestmark = pytest.mark.gpu


def _rms_norm_case(dtype: str) -> Case:
    b = GraphBuilder()
    x = b.input("x", dtype, [3, 8])
    w = b.constant("w", np.linspace(0.5, 1.5, 8).astype(dtype))
    b.output(b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6)))
    x_data = np.random.default_rng(0).standard_normal((3, 8)).astype(dtype)
    return Case(b.build(), [{"x": x_data}], name=f"rms_norm_{dtype}")


def _device_of(runtime: Runtime) -> object:
    """The object holding the runtime's device facts (`f16_unavailable`)."""
    return runtime.device if runtime.name == "webgpu" else runtime.context  # type: ignore[attr-defined]


def test_lavapipe_offers_half_precision_on_both_devices(runtimes: list[Runtime]) -> None:
    for runtime in runtimes:
        assert runtime.info()["shader_f16"] is True, runtime.name
        assert _device_of(runtime).f16_unavailable == ""  # type: ignore[attr-defined]


def test_each_backend_picks_a_slot_s_f16_variant_by_dtype(
    runtimes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    case = _rms_norm_case("float32")
    node = case.graph.ops[0]
    declared = dataclasses.replace(SLOTS["rms_norm"], name="rms_norm_f16")
    for runtime in runtimes:
        loaded = runtime.load(case.graph)
        try:
            hook = loaded.dtype_slot  # type: ignore[attr-defined]
            assert hook(node, "rms_norm", "float32") == "rms_norm"
            assert hook(node, "rms_norm", "int32") == "rms_norm"
            with monkeypatch.context() as patch:
                patch.setitem(SLOTS, "rms_norm_f16", declared)
                assert hook(node, "rms_norm", "float16") == "rms_norm_f16"
                # A slot of another op is not this op's variant.
                patch.setitem(SLOTS, "add_flat_f16", SLOTS["add_flat"])
                with pytest.raises(GraphBuildError, match="add_flat_f16"):
                    hook(node, "add_flat", "float16")
            with monkeypatch.context() as patch:
                patch.delitem(SLOTS, "rms_norm_f16", raising=False)
                with pytest.raises(GraphBuildError, match=r"no float16 kernel .*'rms_norm_f16'"):
                    hook(node, "rms_norm", "float16")
        finally:
            loaded.close()


@pytest.mark.parametrize("missing", ["webgpu", "vulkan"])
def test_a_device_without_f16_makes_f16_cases_unavailable_not_failed(
    runtimes: list[Runtime], missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = next(r for r in runtimes if r.name == missing)
    reason = "the device does not support shaderFloat16"
    monkeypatch.setattr(_device_of(runtime), "f16_unavailable", reason)
    half = _rms_norm_case("float16")
    with pytest.raises(FeatureUnavailable) as info:
        runtime.load(half.graph)
    assert str(info.value) == f"{missing}: f16 unavailable: {reason}"
    runner = LockstepRunner(runtimes)
    result = runner.run(half)
    assert result.unavailable == f"{missing}: f16 unavailable: {reason}"
    assert result.ok and not result.steps
    assert runner.adapters[missing]["shader_f16"] is False
    # fp32 graphs run on that device as before.
    full = runner.run(_rms_norm_case("float32"))
    assert full.ok and not full.unavailable and len(full.steps) == 1
