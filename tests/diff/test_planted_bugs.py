"""Each oracle catches the bug class it exists for, classifies it and blames the right side.

Every test plants one bug (tests/plants.py: shader text substitution, a wrapped hook or node,
a wrong contract model) in one place for the duration of the test, runs a fixed case through
the lockstep runner and asserts the divergence class and blame. The same cases run clean
without the plant (`test_cases_are_clean`), so every finding is the plant's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from graph_format import OpNode
from harness import ops as harness_ops
from harness.check.divergence import Divergence, Kind
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from tests.plants import (
    glsl_substitution,
    push_too_much,
    vulkan_node_patch,
    webgpu_after_hook,
    webgpu_without_set_cur_dims,
    wgsl_substitution,
)
from vulkan_ref.graph import ComputeGraph, DispatchNode
from webgpu_backend.graph import Dispatch, WebGPUGraph

pytestmark = pytest.mark.gpu


def rms_norm_case() -> Case:
    """x[2, 8, 64] -> rms_norm, at full, smaller and in-between live sizes."""
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", "float32", [2, 8, 64])
    w = b.constant("w", rng.standard_normal(64).astype(np.float32))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    steps = [
        {"x": rng.standard_normal(s).astype(np.float32)}
        for s in [(2, 8, 64), (1, 3, 64), (2, 5, 64)]
    ]
    return Case(b.build(), steps, name="rms_norm")


def add_case() -> Case:
    """a[4, 16] + b[4, 16]: equal live shapes, then a broadcast, all below the max."""
    rng = np.random.default_rng(2)
    b = GraphBuilder()
    a = b.input("a", "float32", [4, 16])
    c = b.input("b", "float32", [4, 16])
    b.output(b.op("add", name="sum", a=a, b=c))

    def step(sa: tuple[int, int], sb: tuple[int, int]) -> dict[str, np.ndarray]:
        return {
            "a": rng.standard_normal(sa).astype(np.float32),
            "b": rng.standard_normal(sb).astype(np.float32),
        }

    steps = [step((4, 16), (4, 16)), step((2, 16), (2, 16)), step((3, 16), (1, 16))]
    return Case(b.build(), steps, name="add")


def find(result_divergences: list[Divergence], kind: Kind, blame: str) -> list[Divergence]:
    """The divergences of one class blamed on one side."""
    return [d for d in result_divergences if d.kind == kind and d.blame == blame]


def assert_found(runner: LockstepRunner, case: Case, kind: Kind, blame: str) -> list[Divergence]:
    """Run the case and require at least one divergence of `kind` blamed on `blame`."""
    result = runner.run(case)
    hits = find(result.divergences, kind, blame)
    summary = [(str(d.kind), d.blame, d.message) for d in result.divergences]
    assert hits, f"expected {kind} blamed on {blame}, got {summary}"
    return hits


@pytest.mark.parametrize("make", [rms_norm_case, add_case])
def test_cases_are_clean(runner: LockstepRunner, make: Any) -> None:
    result = runner.run(make())
    assert result.ok, [d.message for d in result.divergences]


def test_dispatch_count_left_at_max_is_caught(runner: LockstepRunner) -> None:
    def keep_max(graph: WebGPUGraph, node: OpNode, dispatches: list[Dispatch]) -> None:
        x = graph.arg_tensor(node, "x")
        dispatches[0].count = int(np.prod(x.dims[:-1]))

    with webgpu_after_hook("rms_norm", keep_max):
        hits = assert_found(runner, rms_norm_case(), Kind.DISPATCH, "webgpu")
    assert hits[0].op == "norm" and hits[0].step == 1


def test_over_dispatch_without_a_guard_writes_into_the_slack() -> None:
    # With the row guard gone, the workgroups past the live rows normalize the slack of x.
    def keep_max(graph: WebGPUGraph, node: OpNode, dispatches: list[Dispatch]) -> None:
        dispatches[0].count = int(np.prod(graph.arg_tensor(node, "x").dims[:-1]))

    guard = "if (row >= params.num_rows) {\n        return;\n    }"
    planted = wgsl_substitution("rms_norm_vec4", guard, "")
    with planted as runner, webgpu_after_hook("rms_norm", keep_max):
        hits = assert_found(runner, rms_norm_case(), Kind.CANARY_WRITE, "webgpu")
    assert hits[0].tensor == "norm.out"
    assert hits[0].details.first_element == 3 * 64  # the first row past the live ones


def test_output_cur_dims_not_updated_is_caught(runner: LockstepRunner) -> None:
    with webgpu_without_set_cur_dims("rms_norm"):
        hits = assert_found(runner, rms_norm_case(), Kind.CUR_DIMS, "webgpu")
    assert hits[0].tensor == "norm.out"
    assert hits[0].details.expected == [1, 3, 64]


def test_wrong_vulkan_math_is_caught() -> None:
    # The vec4 kernel forgets the weight.
    with glsl_substitution("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd") as runner:
        hits = assert_found(runner, rms_norm_case(), Kind.NUMERIC, "vulkan")
    assert hits[0].op == "norm"
    assert hits[0].factor is not None and hits[0].factor > 1e3


def test_wrong_vulkan_resize_is_caught(runner: LockstepRunner) -> None:
    def first_input_sizes(graph: ComputeGraph, node: DispatchNode) -> None:
        out, a = node.tensors["out"], node.tensors["a"]
        node.resize_fn = lambda g: g.virtual_resize(out, g.sizes_of(a))  # type: ignore[arg-type]

    case = add_case()
    case.steps[2] = {"a": case.steps[2]["b"], "b": case.steps[2]["a"]}  # a is the broadcast one
    with vulkan_node_patch("add", first_input_sizes):
        hits = assert_found(runner, case, Kind.CUR_DIMS, "vulkan")
    assert hits[0].step == 2 and hits[0].tensor == "sum.out"


def test_wrong_contract_model_is_blamed_on_the_model(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = harness_ops.MODELS["rms_norm"]

    class OffByOne:
        kernels = real.kernels

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def dispatches(self, node: OpNode, live: Any) -> Any:
            return [
                (op, k, wg, (c[0] + 1, *c[1:]), ran)
                for op, k, wg, c, ran in real.dispatches(node, live)
            ]

    monkeypatch.setitem(harness_ops.MODELS, "rms_norm", OffByOne())
    assert_found(runner, rms_norm_case(), Kind.DISPATCH, "model")


def test_write_past_the_live_end_is_caught() -> None:
    plant = ("binary_flat", "if (i >= params.numel)", "if (i > params.numel)")
    with wgsl_substitution(*plant) as runner:
        hits = assert_found(runner, add_case(), Kind.CANARY_WRITE, "webgpu")
    assert hits[0].tensor == "sum.out" and hits[0].details.first_element == 32


# The last live element copies b's element one past its live end: poison from b's slack. A
# copy keeps the poison's tag on every device (arithmetic on it would turn it into a
# canonical NaN on NVIDIA, found by the numeric oracle instead).
READ_PAST_END = "select(a[i] + b[i], b[i + 1u], i + 1u == params.numel)"


def test_stale_read_is_caught() -> None:
    with wgsl_substitution("binary_flat", "a[i] + b[i]", READ_PAST_END) as runner:
        hits = assert_found(runner, add_case(), Kind.STALE_READ, "webgpu")
    assert hits[0].tensor == "sum.out"
    assert hits[0].details.origins[0][0] == "b"


def test_validation_message_is_caught(runner: LockstepRunner) -> None:
    with vulkan_node_patch("rms_norm", push_too_much, bound=True):
        hits = assert_found(runner, rms_norm_case(), Kind.VALIDATION, "vulkan")
    assert "push" in hits[0].message.lower()


def test_accepting_a_bad_step_is_caught(runner: LockstepRunner) -> None:
    def skip_width_check(graph: ComputeGraph, node: DispatchNode) -> None:
        out, x = node.tensors["out"], node.tensors["x"]
        node.resize_fn = lambda g: g.virtual_resize(out, g.sizes_of(x))  # type: ignore[arg-type]

    case = rms_norm_case()
    case.steps.append({"x": np.ones((1, 2, 32), np.float32)})  # width must stay 64
    with vulkan_node_patch("rms_norm", skip_width_check):
        hits = assert_found(runner, case, Kind.ERROR_ASYMMETRY, "vulkan")
    assert hits[0].step == 3


def test_rejection_that_changes_state_is_caught(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WebGPUGraph, "_restore", lambda self, snap: None)
    case = rms_norm_case()
    case.steps.append({"x": np.ones((1, 2, 32), np.float32)})
    hits = assert_found(runner, case, Kind.STATE_AFTER_REJECT, "webgpu")
    assert "x" in hits[0].details.tensors


def test_crash_is_caught(runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: ComputeGraph, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(ComputeGraph, "execute", boom)
    assert_found(runner, rms_norm_case(), Kind.CRASH, "vulkan")


def test_wasteful_physical_grid_is_caught(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WebGPUGraph, "fold_grid", staticmethod(lambda count, limit: (count, 2, 1)))
    assert_found(runner, rms_norm_case(), Kind.PHYSICAL_GRID, "webgpu")


def test_coverage_records_regimes_and_variants(runner: LockstepRunner) -> None:
    cells = runner.run(rms_norm_case()).coverage.to_json()["rms_norm"]
    for backend in ("webgpu", "vulkan"):
        assert cells[backend]["variants"] == ["rms_norm_vec4"]
        # rows: 16 (the max) -> 3 -> 10
        assert {"size=max", "size=mid", "step=first", "step=shrink", "step=grow"} <= set(
            cells[backend]["regimes"]
        )
