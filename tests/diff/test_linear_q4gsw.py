"""linear_q4gsw on both backends in lockstep: generated shapes and M sequences, fixed sequences
across the GEMM/GEMV routes, run-time rejections, and planted resize bugs the oracle must catch.

The planted bugs live here (monkeypatched into a backend for one test), never in shipped code.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import Graph
from harness.check.divergence import Divergence, Kind
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.check.verdict import assert_parity
from harness.gen.blocks import float_array
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model import q4
from tests.plants import wgsl_substitution

pytestmark = pytest.mark.gpu


def _linear_graph(
    lead_max: list[int], n: int, k: int, group_size: int, *, bias: bool, seed: int = 0
) -> Graph:
    rng = np.random.default_rng(seed)
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group_size)
    b = GraphBuilder()
    x = b.input("x", "float32", [*lead_max, k])
    args = {
        "x": x,
        "weight": b.constant("weight", packed),
        "scales": b.constant("scales", scales),
        "group_size": b.int(group_size, "group_size"),
    }
    if bias:
        args["bias"] = b.constant("bias", float_array(rng, [n]))
    b.output(b.op("linear_q4gsw", name="lin", out_dims=[*lead_max, n], **args))
    return b.build()


def _steps(leads: list[list[int]], k: int, seed: int = 1) -> list[dict[str, np.ndarray | int]]:
    rng = np.random.default_rng(seed)
    return [{"x": float_array(rng, [*lead, k])} for lead in leads]


def _ran(result: CaseResult, backend: str) -> list[list[str]]:
    """Per step, the kernels that ran on `backend`."""
    return [
        [d["kernel"] for d in step.backends[backend].dispatches if d["ran"]]
        for step in result.steps
    ]


@pytest.mark.parametrize(
    ("lead_max", "n", "k", "group_size", "bias"),
    [
        ([1, 6], 13, 64, 32, True),  # N odd: the GEMV's last pair has one column
        ([2, 3, 5], 40, 256, 64, False),  # M over three leading dims; 4 words per lane step
        ([7], 9, 520, 40, True),  # group_size % 32 != 0: scale groups change inside a step
    ],
)
def test_m_1_s_1_on_one_graph(
    runner: LockstepRunner, lead_max: list[int], n: int, k: int, group_size: int, bias: bool
) -> None:
    graph = _linear_graph(lead_max, n, k, group_size, bias=bias)
    ones = [1] * len(lead_max)
    leads = [ones, lead_max, ones, [1] * (len(lead_max) - 1) + [3], ones, ones, lead_max]
    result = runner.run(Case(graph, _steps(leads, k), name="m_1_s_1"))
    assert_parity(result)
    for backend in ("webgpu", "vulkan"):
        assert _ran(result, backend) == [
            ["q4gsw_gemv"],
            ["q4gsw_gemm"],
            ["q4gsw_gemv"],
            ["q4gsw_gemm"],
            ["q4gsw_gemv"],
            ["q4gsw_gemv"],
            ["q4gsw_gemm"],
        ], backend
    # Every step logs both slots; the one not taken is skipped with a zero count.
    skipped = [d for d in result.steps[0].backends["vulkan"].dispatches if not d["ran"]]
    assert skipped == [
        {
            "op": "lin",
            "kernel": "q4gsw_gemm",
            "wg": [64, 1, 1],
            "count": [0, 0, 0],
            "ran": False,
            "grid": [0, 0, 0],
        }
    ]


def test_gemv_ineligible_runs_gemm_at_m_1(runner: LockstepRunner) -> None:
    graph = _linear_graph([4], 6, 60, 20, bias=True)  # K % 8 != 0: no GEMV is built
    result = runner.run(Case(graph, _steps([[1], [4], [1]], 60), name="no_gemv"))
    assert_parity(result)
    assert _ran(result, "webgpu") == [["q4gsw_gemm"]] * 3
    assert [len(s.expected_dispatches) for s in result.steps] == [1, 1, 1]


def test_gemv_grid_strides_past_the_cap(runner: LockstepRunner) -> None:
    # 2 * 8192 + 6 columns: the capped grid's workgroups take a second pair, some none.
    n = 2 * 8192 + 6
    graph = _linear_graph([2], n, 16, 8, bias=True)
    result = runner.run(Case(graph, _steps([[1], [2], [1]], 16), name="gemv_cap"))
    assert_parity(result)
    gemv = [d for d in result.steps[0].backends["webgpu"].dispatches if d["ran"]]
    assert gemv[0]["kernel"] == "q4gsw_gemv" and gemv[0]["count"] == [8192, 1, 1]


def test_kernels_tolerate_folded_grids(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vulkan_ref.instance import VulkanContext
    from webgpu_backend.device import get_device

    # Pretend both devices allow 8 workgroups per dimension: every count above folds into a
    # 2-D grid whose last row may be partly waste, which the kernels must skip (and the
    # GEMV must not count in its grid stride).
    monkeypatch.setattr(get_device(), "max_workgroups_per_dim", 8)
    monkeypatch.setattr(VulkanContext, "max_workgroup_count", property(lambda _: (8, 65535, 1)))
    graph = _linear_graph([65], 125, 64, 32, bias=True)  # GEMM 17x32 tiles: 9 workgroups
    result = runner.run(Case(graph, _steps([[65], [1], [61]], 64), name="folded"))
    assert_parity(result)
    grids = {
        name: [d["grid"] for d in b.dispatches if d["ran"]]
        for name, b in result.steps[0].backends.items()
    }
    assert grids == {"webgpu": [[3, 3, 1]], "vulkan": [[8, 2, 1]]}
    gemv = [d for d in result.steps[1].backends["webgpu"].dispatches if d["ran"]]
    assert gemv[0]["count"] == [63, 1, 1] and gemv[0]["grid"] == [8, 8, 1]


def test_changed_k_is_refused_alike(runner: LockstepRunner) -> None:
    graph = _linear_graph([4, 8], 8, 64, 32, bias=False)
    steps = [*_steps([[2, 3]], 64), {"x": np.ones((2, 3, 32), np.float32)}, *_steps([[1, 1]], 64)]
    result = runner.run(Case(graph, steps, name="k_changed"))
    assert_parity(result)  # all three reject step 1 with the same key and keep the graph usable
    assert (result.steps[1].expected_error or "").startswith("InputError")
    for backend in ("webgpu", "vulkan"):
        assert "InputError" in (result.steps[1].backends[backend].error or "")


# ---------------------------------------------------------------------------- planted bugs


def _planted_case() -> Case:
    # Max M = 2 * 64 = 128 (two GEMM workgroups of 4x4 tiles for N = 12); the live M runs
    # 1, 40, 128, 3, 1: the GEMV, then GEMM counts of 1, 2 and 1 workgroups, then the GEMV.
    graph = _linear_graph([2, 64], 12, 64, 32, bias=True)
    leads = [[1, 1], [1, 40], [2, 64], [1, 3], [1, 1]]
    return Case(graph, _steps(leads, 64), name="planted")


def _found(result: CaseResult, kind: Kind, blame: str) -> list[Divergence]:
    return [d for d in result.divergences if d.kind == kind and d.blame == blame]


def test_detects_gemv_routed_at_m_above_1(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webgpu_backend.ops import linear_q4gsw as webgpu_linear

    # The bug: the hook takes the GEMV whenever it was built, whatever the live M.
    monkeypatch.setattr(webgpu_linear, "choose_route", lambda m, has_gemv: "gemv")
    result = runner.run(_planted_case())
    dispatch = _found(result, Kind.DISPATCH, "webgpu")
    assert [d.step for d in dispatch] == [1, 2, 3], result.divergences
    assert all(d.op == "lin" for d in dispatch)
    # The GEMV writes row 0 only: the other live rows keep the step's slack poison or stale
    # values, which the canary and numeric oracles name on the same backend.
    numeric = [d for d in result.divergences if d.kind in (Kind.STALE_READ, Kind.NUMERIC)]
    assert numeric and all(d.blame == "webgpu" for d in numeric)
    assert not [d for d in result.divergences if d.blame not in ("webgpu",)]


def test_detects_gemm_count_left_at_max_m(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webgpu_backend.ops import linear_q4gsw as webgpu_linear

    build_time = webgpu_linear.gemm_workgroups
    # The bug: the GEMM's workgroup count is baked from the max M (128 rows) at build. It
    # shows wherever the live M needs fewer workgroups (steps 1 and 3), not at the max.
    monkeypatch.setattr(webgpu_linear, "gemm_workgroups", lambda m, n: build_time(128, n))
    result = runner.run(_planted_case())
    dispatch = _found(result, Kind.DISPATCH, "webgpu")
    assert [d.step for d in dispatch] == [1, 3], result.divergences
    assert "x(2, 1, 1)" in dispatch[0].message and "x(1, 1, 1)" in dispatch[0].message
    assert "q4gsw_gemm" in dispatch[0].message
    assert not [d for d in result.divergences if d.blame != "webgpu"]


def test_detects_vulkan_gemv_not_gated_on_m(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vulkan_ref.graph import DispatchNode

    original = DispatchNode.trigger_resize

    def ungated(self: DispatchNode, graph: object) -> bool:
        # The bug: the GEMV node keeps its M == 1 count at every M.
        changed = original(self, graph)
        if self.slot == "q4gsw_gemv" and self.state.counts == ((0, 0, 0),):
            self.state = self.state._replace(counts=((6, 1, 1),))
        return changed

    monkeypatch.setattr(DispatchNode, "trigger_resize", ungated)
    result = runner.run(_planted_case())
    dispatch = _found(result, Kind.DISPATCH, "vulkan")
    assert [d.step for d in dispatch] == [1, 2, 3], result.divergences
    assert not [d for d in result.divergences if d.blame != "vulkan"]


def test_detects_gemv_nibble_offset_by_numerics() -> None:
    # The bug: nibble 0 of every word decodes as (nibble - 7) instead of (nibble - 8).
    with wgsl_substitution("q4gsw_gemv", "8388616.0", "8388615.0") as runner:
        result = runner.run(_planted_case())
    numeric = _found(result, Kind.NUMERIC, "webgpu")
    assert {d.step for d in numeric} == {0, 4}, result.divergences  # the M == 1 steps
    assert all((d.factor or 0) > 10 for d in numeric)  # far outside the budget, not marginal
    assert not [d for d in result.divergences if d.kind != Kind.NUMERIC]
