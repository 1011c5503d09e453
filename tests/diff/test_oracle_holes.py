"""Every failure of a backend is a finding: errors on accepted steps, kernels that do not
build, folded grids under a lowered workgroup limit, and error findings that name their op.

Each test plants one bug (tests/plants.py) or lowers the workgroup limit, runs a fixed case
through the lockstep runner and asserts the finding's class, blame and op.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from graph_format import (
    GraphBuildError,
    GraphFormatError,
    InputError,
    ParityError,
    Runtime,
)
from harness.check.backends import open_runtime, open_runtimes
from harness.check.divergence import BugKey, Kind, Upstream
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import assert_parity
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from tests.diff.test_planted_bugs import add_case, assert_found, rms_norm_case
from tests.plants import (
    glsl_substitution,
    vulkan_pipelines_without_push_range,
    webgpu_after_hook,
    webgpu_toggling_hook,
    wgsl_substitution,
)
from vulkan_ref.graph import ComputeGraph
from vulkan_ref.instance import get_context
from webgpu_backend import WebGPURuntime
from webgpu_backend.graph import WebGPUGraph

pytestmark = pytest.mark.gpu

# ---------------------------------------------------------------------------- errors


def test_non_converging_propagation_is_an_asymmetry_at_its_op(runner: LockstepRunner) -> None:
    with webgpu_toggling_hook("add"):
        hits = assert_found(runner, add_case(), Kind.ERROR_ASYMMETRY, "webgpu")
    assert "PropagationError" in hits[0].message
    assert {(d.step, d.op, d.op_type) for d in hits} == {
        (0, "sum", "add"),
        (1, "sum", "add"),
        (2, "sum", "add"),
    }
    assert hits[0].bug_key() == BugKey("add", "error_asymmetry", "webgpu")


def _raise_at_step(monkeypatch: pytest.MonkeyPatch, cls: type, step: int, err: Exception) -> None:
    """Make `cls.execute` raise `err` on its `step`-th call for each loaded graph."""
    original = cls.execute
    calls: dict[int, int] = {}

    def execute(self: Any, inputs: Any, **kwargs: Any) -> Any:
        calls[id(self)] = calls.get(id(self), 0) + 1
        if calls[id(self)] == step + 1:
            raise err
        return original(self, inputs, **kwargs)

    monkeypatch.setattr(cls, "execute", execute)


@pytest.mark.parametrize(
    "err",
    [
        GraphBuildError("norm", "a build error at execute"),
        GraphFormatError("graph.json: a format error at execute"),
        ParityError("some other refusal"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_parity_error_on_an_accepted_step_is_an_asymmetry(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch, err: Exception
) -> None:
    _raise_at_step(monkeypatch, ComputeGraph, 1, err)
    hits = assert_found(runner, rms_norm_case(), Kind.ERROR_ASYMMETRY, "vulkan")
    assert [d.step for d in hits] == [1]
    assert type(err).__name__ in hits[0].message
    if isinstance(err, GraphBuildError):
        assert hits[0].op == "norm"


def test_exception_at_load_is_a_crash(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def load(self: WebGPURuntime, graph: Any) -> Any:
        raise RuntimeError("adapter went away")

    monkeypatch.setattr(WebGPURuntime, "load", load)
    hits = assert_found(runner, rms_norm_case(), Kind.CRASH, "webgpu")
    assert hits[0].step == -1 and "adapter went away" in hits[0].message


# ---------------------------------------------------------------------------- kernels


def test_wgsl_kernel_that_does_not_compile_is_a_build_error() -> None:
    with wgsl_substitution("rms_norm_vec4", "let row", "lett row") as runner:
        hits = assert_found(runner, rms_norm_case(), Kind.BUILD_ERROR, "webgpu")
    (hit,) = hits
    assert (hit.step, hit.op, hit.op_type) == (-1, "norm", "rms_norm")
    compiler = hit.details.compiler
    # naga's whole chain, with the line and column and the offending source line.
    assert "Caused by" in compiler and "lett row" in compiler
    assert re.search(r"wgsl:\d+:\d+", compiler)
    assert "parsing error" in hit.message and re.search(r"at wgsl:\d+:\d+", hit.message)
    assert hit.details.shader.endswith("rms_norm_vec4.wgsl")


def test_wgsl_kernel_that_does_not_validate_is_a_build_error() -> None:
    # Parses, but an f32 is stored into a u32: naga's validator refuses it.
    with wgsl_substitution("rms_norm_vec4", "let row = ", "let row: u32 = 1.5 + f32") as runner:
        (hit,) = assert_found(runner, rms_norm_case(), Kind.BUILD_ERROR, "webgpu")
    assert "Caused by" in hit.details.compiler


def test_glsl_kernel_that_does_not_compile_is_a_build_error() -> None:
    # The broken variant is not the one the case's sizes pick (width 64 runs rms_norm_vec4):
    # every variant is built at load, so it is found anyway.
    plant = ("rms_norm", "void main()", "void main() { undeclared = 1; }\nvoid m()")
    with glsl_substitution(*plant) as runner:
        result = runner.run(rms_norm_case())
    (hit,) = result.divergences
    assert (hit.kind, hit.blame, hit.step, hit.op) == (Kind.BUILD_ERROR, "vulkan", -1, "norm")
    assert re.search(r"rms_norm\.comp:\d+: error: 'undeclared'", hit.details.compiler)
    assert "undeclared" in hit.message


def test_vulkan_pipeline_that_does_not_validate_is_a_build_error() -> None:
    # The pipeline layout leaves out the push constant the shader reads: the validation
    # layer refuses the pipeline when it is created (at load), not at any dispatch.
    with vulkan_pipelines_without_push_range() as runner:
        result = runner.run(rms_norm_case())
    (hit,) = result.divergences
    assert (hit.kind, hit.blame, hit.step, hit.op) == (Kind.BUILD_ERROR, "vulkan", -1, "norm")
    assert "VUID-VkComputePipelineCreateInfo-layout" in hit.details.compiler


def test_a_second_validation_context_leaves_the_first_its_messages() -> None:
    # A benchmark's robust Vulkan context (a second instance with the validation layer) in
    # the same process: the pipeline the parity runtime's layer refuses is still found.
    get_context(validation=True, robust=True)
    test_vulkan_pipeline_that_does_not_validate_is_a_build_error()


# ---------------------------------------------------------------------------- workgroup limit


def _rows_case(max_rows: int, rows: list[int]) -> Case:
    """rms_norm over x[max_rows, 8]: one workgroup per row, so the count is the rows."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", "float32", [max_rows, 8])
    w = b.constant("w", rng.standard_normal(8).astype(np.float32))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    steps = [{"x": rng.standard_normal((r, 8)).astype(np.float32)} for r in rows]
    return Case(b.build(), steps, name="rows")


@pytest.fixture(scope="module")
def limited(runtimes: list[Runtime]) -> LockstepRunner:
    """Both runtimes under a limit of 4 workgroups per grid dimension."""
    return LockstepRunner(open_runtimes(max_workgroups_per_dim=4))


def test_lowered_limit_folds_and_refuses_alike(limited: LockstepRunner) -> None:
    # 7 and 16 rows fold into 2-D grids, 3 does not, 17 and 32 fit no 4 x 4 grid.
    result = limited.run(_rows_case(32, [7, 17, 3, 32, 16]))
    assert_parity(result)  # the contract predicts the refusals; the graph stays usable
    refused = [s.index for s in result.steps if s.expected_error]
    assert refused == [1, 3]
    for index in refused:
        step = result.steps[index]
        assert "more than a 4 x 4 grid holds" in (step.expected_error or "")
        for backend in step.backends.values():
            assert (backend.error or "").startswith("InputError")
    grids = {
        s.index: {n: b.dispatches[0]["grid"] for n, b in s.backends.items()}
        for s in result.steps
        if not s.expected_error
    }
    assert grids == {
        0: {"webgpu": [3, 3, 1], "vulkan": [4, 2, 1]},
        2: {"webgpu": [3, 1, 1], "vulkan": [3, 1, 1]},
        4: {"webgpu": [4, 4, 1], "vulkan": [4, 4, 1]},
    }
    cells = result.coverage.to_json()["rms_norm"]
    assert all("fold" in cells[b]["regimes"] for b in ("webgpu", "vulkan"))


def test_the_grid_check_uses_the_lowered_limit(
    limited: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A WebGPU that ignores the lowered limit dispatches 7 workgroups in one row.
    monkeypatch.setattr(WebGPUGraph, "fold_grid", staticmethod(lambda count, limit: (count, 1, 1)))
    result = limited.run(_rows_case(32, [7]))
    hits = [d for d in result.divergences if d.kind == Kind.PHYSICAL_GRID]
    assert [(d.blame, d.op) for d in hits] == [("webgpu", "norm")]
    assert "limit 4/dim" in hits[0].message


@pytest.mark.parametrize("backend", ["webgpu", "vulkan"])
def test_a_limit_above_the_device_is_refused(backend: str) -> None:
    device = int(open_runtime(backend).info()["max_workgroups_per_dim"])
    with pytest.raises(ValueError, match=f"allows 1 to {device}"):
        open_runtime(backend, max_workgroups_per_dim=device + 1)
    assert open_runtime(backend, max_workgroups_per_dim=4).info()["max_workgroups_per_dim"] == 4


def test_grid_limit_refusal_names_the_op_and_restores_the_graph(runtimes: list[Runtime]) -> None:
    case = _rows_case(32, [5, 20])
    for backend in ("webgpu", "vulkan"):
        loaded = open_runtime(backend, max_workgroups_per_dim=4).load(case.graph)
        try:
            loaded.execute(case.steps[0])
            before = loaded.cur_dims()
            with pytest.raises(InputError) as info:
                loaded.execute(case.steps[1])
            assert info.value.key() == ("norm", "grid_limit")
            assert loaded.cur_dims() == before
        finally:
            loaded.close()


# ---------------------------------------------------------------------------- ops of error findings


def _view_case() -> Case:
    """x[4, 6] -> rms_norm -> view_copy to [sym_size(h, 0), 6]: the view reads a SymInt."""
    rng = np.random.default_rng(4)
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 6])
    w = b.constant("w", rng.standard_normal(6).astype(np.float32))
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    rows = b.op("sym_size", name="rows", x=h, dim=b.int(0, "dim"))
    b.output(b.op("view_copy", name="view", x=h, sizes=[rows, b.int(6, "width")], out_dims=[4, 6]))
    steps = [{"x": rng.standard_normal((r, 6)).astype(np.float32)} for r in (4, 2, 3)]
    return Case(b.build(), steps, name="view")


@pytest.fixture
def stale_sym_size() -> Iterator[None]:
    """WebGPU's sym_size reads its tensor's max dims instead of its live ones."""

    def stale(graph: WebGPUGraph, node: Any, _: Any) -> None:
        x = graph.arg_tensor(node, "x")
        graph.set_symint(node.outputs["out"], x.dims[int(graph.arg_scalar(node, "dim"))])

    with webgpu_after_hook("sym_size", stale):
        yield


def test_refusal_of_a_wrong_upstream_value_points_at_its_producer(
    runner: LockstepRunner, stale_sym_size: None
) -> None:
    result = runner.run(_view_case())
    hits = [d for d in result.divergences if d.kind == Kind.ERROR_ASYMMETRY]
    assert [(d.step, d.blame, d.op, d.op_type) for d in hits] == [
        (1, "webgpu", "view", "view_copy"),
        (2, "webgpu", "view", "view_copy"),
    ]
    assert hits[0].details.upstream == Upstream("rows", "sym_size", "rows.out", 2, 4)
    first = result.first_divergence()
    assert first is not None
    assert (first.step, first.op, first.op_type, first.refused_by) == (
        1,
        "rows",
        "sym_size",
        "view",
    )


def test_a_refusal_of_its_own_names_no_upstream(runner: LockstepRunner) -> None:
    def refuse(graph: WebGPUGraph, node: Any, _: Any) -> None:
        if graph.symints["rows.out"] == 2:  # right inputs, a wrong refusal
            raise InputError(node.name, "numel", "webgpu: planted refusal")

    with webgpu_after_hook("view_copy", refuse):
        result = runner.run(_view_case())
    (hit,) = [d for d in result.divergences if d.kind == Kind.ERROR_ASYMMETRY]
    assert (hit.op, hit.op_type) == ("view", "view_copy") and hit.details.upstream is None
    first = result.first_divergence()
    assert first is not None and first.op == "view" and first.refused_by is None
