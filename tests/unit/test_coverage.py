"""Coverage regimes: tags of live sizes and transitions, and required cells."""

from __future__ import annotations

import numpy as np

from harness.check.coverage import (
    MULTIPLES,
    WORKGROUP_STEPS,
    Coverage,
    is_half_precision_cell,
    max_state,
    missing_cells,
    op_regimes,
    size_regimes,
    transition,
    workgroups_regimes,
)
from harness.gen.builder import GraphBuilder
from harness.model import LiveState, model_dtypes, q4, workgroups_regime
from harness.ops import MODELS
from harness.run.profiles import PROFILES


def test_size_regimes_name_the_edges() -> None:
    assert size_regimes(1, 16) == {"size=1"}
    assert size_regimes(16, 16) == {"size=max", "size%4=0", "size%8=0"}
    assert size_regimes(63, 100) == {"size=mid", "size%4=-1", "size%8=-1", "size%64=-1"}
    assert size_regimes(65, 100) == {"size=mid", "size%4=+1", "size%8=+1", "size%64=+1"}
    assert size_regimes(2, 100) == {"size=mid"}


def test_transitions() -> None:
    assert [transition(None, 3), transition(3, 4), transition(4, 2), transition(2, 2)] == [
        "step=first",
        "step=grow",
        "step=shrink",
        "step=same",
    ]


def test_missing_cells_are_per_backend() -> None:
    cov = Coverage()
    cov.add("rms_norm", "webgpu", ["size=1"], ["rms_norm_vec4"])
    cov.add("rms_norm", "vulkan", ["size=1", "size=max"], ["rms_norm_vec4"])
    required = {"rms_norm": ("size=1", "size=max", "rms_norm_vec4"), "add": ("add_flat",)}
    assert missing_cells(cov, required, ["webgpu", "vulkan"]) == [
        ("rms_norm", "webgpu", "size=max"),
        ("add", "webgpu", "add_flat"),
        ("add", "vulkan", "add_flat"),
    ]
    merged = Coverage()
    merged.merge(cov.to_json())
    assert merged.to_json() == cov.to_json()


# Tags that `op_regimes` gives any op from its regime size; an op's own `regimes` adds more.
GENERIC_TAGS = {
    "size=1",
    "size=max",
    "size=mid",
    *(f"size%{m}={r}" for m in MULTIPLES for r in ("-1", "0", "+1")),
    *(f"step={t}" for t in ("first", "grow", "shrink", "same")),
}


def test_nightly_requires_every_ops_declared_regimes_and_kernels() -> None:
    """The nightly profile's cells come from the op models: every registered op (a new one
    too) with its declared regimes and every kernel variant, `dtype=float16` for an op with
    f16 kernels, and nothing else."""
    required = PROFILES["nightly"].required_coverage
    assert sorted(required) == sorted(MODELS)
    for op, model in MODELS.items():
        half = ("dtype=float16",) if "float16" in model_dtypes(op) and model.kernels else ()
        assert required[op] == (*model.required_regimes, *model.kernels, *half), op
        # A regime only the op's own `regimes` can name needs that method (no typo'd tag).
        # `<variant>:workgroups>=N` comes from the dispatches, for any op's own variants.
        spans = {workgroups_regime(k, n) for k in model.kernels for n in WORKGROUP_STEPS}
        own = set(model.required_regimes) - GENERIC_TAGS - spans
        assert not own or hasattr(model, "regimes"), f"{op}: no model tags {sorted(own)}"
        assert "size=1" in model.required_regimes, f"{op}: live size 1 is every op's edge"


def test_fold_is_not_required_of_foreign_kernels_that_declare_no_fold() -> None:
    """A manifest kernel with `fold = false` has no folded path: over the limit it is refused
    (the dispatch oracle checks that), so `fold` is not required of an op on a backend where
    every variant that ran is such a kernel; a project or folding kernel beside it still needs
    it, and so does the other backend."""
    coverage = Coverage()
    coverage.add("rms_norm", "webgpu", ["size=1"], ["rms_norm"], ["rms_norm"], ["rms_norm"])
    coverage.add("rms_norm", "vulkan", ["size=1"], ["rms_norm"])
    required = {"rms_norm": ["fold"]}
    assert missing_cells(coverage, required, ["webgpu", "vulkan"]) == [
        ("rms_norm", "vulkan", "fold")
    ]
    coverage.add("rms_norm", "webgpu", ["size=1"], ["rms_norm_vec4"])  # a project kernel ran
    assert ("rms_norm", "webgpu", "fold") in missing_cells(coverage, required, ["webgpu"])
    # The JSON form (summaries merge it) keeps the mark.
    again = Coverage()
    again.merge(Coverage(coverage.to_json()).to_json())
    assert again.to_json()["rms_norm"]["webgpu"]["unfolding"] == ["rms_norm"]


def _linear_regimes(k: int, group_size: int, m: int) -> set[str]:
    """The coverage tags of a linear_q4gsw of width K at live M (N = 4)."""
    b = GraphBuilder()
    x = b.input("x", "float32", [2, k])
    packed, scales = q4.quantize(np.ones((4, k)), group_size)
    b.output(
        b.op(
            "linear_q4gsw",
            out_dims=[2, 4],
            x=x,
            weight=b.constant("weight", packed),
            scales=b.constant("scales", scales),
            group_size=b.int(group_size, "group_size"),
        )
    )
    graph = b.build()
    (node,) = graph.ops
    live = LiveState(graph, {t.name: t.dims for t in graph.tensors()}, {})
    live.dims["x"] = (m, k)
    return op_regimes(node, live, max_state(graph), None)[1]


def test_the_gemv_main_loop_cell_is_the_step_that_runs_it() -> None:
    """`gemv_main_loop`: the GEMV route (M = 1, K and the group size whole words) with more
    than 3 x 64 words per row (K > 1536), as wgsl/q4gsw_gemv.wgsl's `full_end` decides."""
    assert "gemv_main_loop" not in _linear_regimes(1536, 32, 1)
    assert "gemv_main_loop" in _linear_regimes(1544, 32, 1)
    assert "gemv_main_loop" in _linear_regimes(8192, 24, 1)
    assert "gemv_main_loop" not in _linear_regimes(8192, 32, 2)  # the GEMM
    assert "gemv_main_loop" not in _linear_regimes(2044, 4, 1)  # no GEMV built
    assert "K>=2048" in _linear_regimes(2048, 32, 2)
    assert "K>=2048" not in _linear_regimes(2040, 32, 1)
    assert "gemv_main_loop" in PROFILES["pr"].required_coverage["linear_q4gsw"]


def test_workgroup_spans_are_tags_of_the_kernel_variant_that_ran() -> None:
    """`<variant>:workgroups>=N` from a dispatch's own workgroup count (a foreign kernel's
    size, not the project's); f16 variants' tags are half-precision cells."""
    assert workgroups_regimes("mul_flat", 1) == set()
    assert workgroups_regimes("mul_flat", 3) == {"mul_flat:workgroups>=2"}
    assert workgroups_regimes("mul_flat", 4) == {"mul_flat:workgroups>=2", "mul_flat:workgroups>=4"}
    assert is_half_precision_cell("mul_flat_f16:workgroups>=4")
    assert not is_half_precision_cell("mul_flat:workgroups>=4")
    assert "mul_flat:workgroups>=4" in PROFILES["pr"].required_coverage["mul"]


def test_an_f16_variant_without_the_suffix_is_not_required_of_a_device_without_f16() -> None:
    # q4gsw_gemm_f16acc binds f16 tensors; its name does not end in _f16. A run with a device
    # without f16 (Dawn on an NVIDIA driver) left it "required" and exited 4 (seen on an H200).
    from harness.check.coverage import available_cells, is_half_precision_cell

    assert is_half_precision_cell("q4gsw_gemm_f16acc")
    assert is_half_precision_cell("q4gsw_gemm_f16acc:workgroups>=2")
    assert not is_half_precision_cell("q4gsw_gemm")
    required = {"linear_q4gsw": ("q4gsw_gemm", "q4gsw_gemm_f16acc")}
    adapters = {"webgpu": {"shader_f16": True}, "webgpu-dawn": {"shader_f16": False}}
    assert available_cells(required, adapters) == {"linear_q4gsw": ("q4gsw_gemm",)}
