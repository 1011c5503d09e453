"""Without a device: the fold plan of the pr profile, the contract's grid limit, required
fold coverage, and what error findings say (their op, an upstream origin, compiler text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from graph_format import (
    Graph,
    GraphBuildError,
    InputError,
    KernelBuildError,
    PropagationError,
    ResizeError,
)
from harness.check.contract import ContractModel, ModelStep
from harness.check.divergence import Upstream
from harness.check.oracles import compiler_headline, error_op, upstream_origin
from harness.gen.builder import GraphBuilder
from harness.run.chunks import describe
from harness.run.commands import finding_commands
from harness.run.plan import Shard, make_plan, shard_of
from harness.run.records import Budgets, CaseRecord, RunMeta
from harness.run.session import RunConfig, RunSession
from tests.unit.test_report import _case, _run_meta, _summarize, _typed

# ---------------------------------------------------------------------------- plan


def test_pr_runs_every_second_chunk_of_each_family_under_its_fold_limit(tmp_path: Path) -> None:
    session = RunSession(
        RunConfig(
            families=["rms_norm", "add"],
            profile="pr",
            seed=0,
            max_examples=60,
            chunk_examples=15,
            out=tmp_path,
        )
    )
    limits = [(c.id, c.max_workgroups_per_dim) for c in session.plan]
    # The families interleave chunk by chunk (a time budget gives each its share).
    assert limits == [
        ("rms_norm/0", None),
        ("add/0", None),
        ("rms_norm/1", 4),
        ("add/1", 4),
        ("rms_norm/2", None),
        ("add/2", None),
        ("rms_norm/3", 4),
        ("add/3", 4),
    ]
    # Shards take the limits with the chunks: the plan alone decides them.
    shards = [shard_of(session.plan, Shard(i, 3)) for i in (1, 2, 3)]
    assert sorted((c.id, c.max_workgroups_per_dim) for s in shards for c in s) == sorted(limits)


def test_an_explicit_limit_applies_to_every_chunk() -> None:
    plan = make_plan(["view"], 1, 6, 2, max_workgroups_per_dim=3, fold_every=2, fold_limit=4)
    assert [c.max_workgroups_per_dim for c in plan] == [3, 3, 3]
    assert [c.max_workgroups_per_dim for c in make_plan(["view"], 1, 6, 2)] == [None] * 3


# ---------------------------------------------------------------------------- contract


def _rows_graph() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [32, 8])
    w = b.constant("w", np.ones(8, np.float32))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    return b.build()


def _rows(n: int) -> dict[str, Any]:
    return {"x": np.ones((n, 8), np.float32)}


def test_contract_refuses_a_count_no_grid_within_the_limit_holds() -> None:
    model = ContractModel(_rows_graph(), max_workgroups_per_dim=4)
    assert isinstance(model.try_step(_rows(16)), ModelStep)  # a 4 x 4 grid
    refused = model.try_step(_rows(17))
    assert isinstance(refused, InputError) and refused.key() == ("norm", "grid_limit")
    assert model.state.dims["x"] == (16, 8)  # a refused step changes nothing
    assert isinstance(ContractModel(_rows_graph()).try_step(_rows(32)), ModelStep)


# ---------------------------------------------------------------------------- coverage


def test_pr_requires_a_fold_of_ops_whose_family_ran_a_chunk_under_a_lowered_limit() -> None:
    chunks = [
        {"record": "chunk", "chunk": c, "status": "complete", "duration_s": 1, "findings": []}
        for c in ("rms_norm/0", "rms_norm/1")
    ]
    unfolded = {
        "rms_norm": {b: {"regimes": ["size=1"], "variants": []} for b in ("webgpu", "vulkan")}
    }
    records = [
        _case("rms_norm/0", "a", [], coverage=unfolded),
        _case("rms_norm/1", "b", [], coverage=unfolded, max_workgroups_per_dim=4),
        *chunks,
    ]
    # No chunk of the plan under a lowered limit: no fold required.
    plain_meta = _run_meta(["rms_norm/0", "rms_norm/1"])
    assert _summarize([plain_meta], [records])[0]["coverage_missing"] == []
    meta = _run_meta(["rms_norm/0", "rms_norm/1"])
    meta["plan"][1]["max_workgroups_per_dim"] = 4
    summary = _summarize([meta], [records])[0]
    missing = sorted(tuple(cell) for cell in summary["coverage_missing"])
    assert missing == [("rms_norm", "vulkan", "fold"), ("rms_norm", "webgpu", "fold")]
    assert summary["exit_status"] == 4
    assert summary["verdict"] == "required coverage short: rms_norm fold"
    folded = {"rms_norm": {b: {"regimes": ["fold"], "variants": []} for b in ("webgpu", "vulkan")}}
    records[1] = _case("rms_norm/1", "b", [], coverage=folded, max_workgroups_per_dim=4)
    assert _summarize([meta], [records])[0]["exit_status"] == 0


# ---------------------------------------------------------------------------- error findings


def _view_graph() -> Graph:
    """x -> rms_norm (norm) -> sym_size (rows) -> view_copy (view) of norm's output."""
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 6])
    h = b.op(
        "rms_norm",
        name="norm",
        x=x,
        weight=b.constant("w", np.ones(6, np.float32)),
        eps=b.float(1e-6),
    )
    rows = b.op("sym_size", name="rows", x=h, dim=b.int(0, "dim"))
    b.output(b.op("view_copy", name="view", x=h, sizes=[rows, b.int(6, "width")], out_dims=[4, 6]))
    return b.build()


def test_error_findings_name_the_op_the_error_is_about() -> None:
    graph = _view_graph()
    assert error_op(graph, InputError("view", "numel", "")) == "view"
    assert error_op(graph, ResizeError("norm.out", 0, 9, 4, "above_max")) == "norm"
    assert error_op(graph, ResizeError("x", 0, 9, 4, "above_max")) == "norm"  # first reader
    assert error_op(graph, PropagationError("", ops=["view", "rows"])) == "rows"
    assert error_op(graph, PropagationError("", values=["view.out"])) == "view"
    assert error_op(graph, GraphBuildError("norm", "")) == "norm"
    assert error_op(graph, KernelBuildError("webgpu", "k", "k.wgsl", "", op="view")) == "view"
    assert error_op(graph, RuntimeError("boom")) is None


def test_a_wrong_upstream_value_is_traced_to_the_op_that_produced_it() -> None:
    graph = _view_graph()
    expected = ContractModel(graph).step({"x": np.ones((2, 6), np.float32)})
    right = {**expected.cur_dims, **expected.symints}
    assert upstream_origin(graph, expected, right, "view") is None
    stale_sym = {**right, "rows.out": 4}
    assert upstream_origin(graph, expected, stale_sym, "view") == Upstream(
        "rows", "sym_size", "rows.out", 2, 4
    )
    # The SymInt is wrong because norm's output was: the chain ends at norm.
    stale_norm = {**stale_sym, "norm.out": (4, 6)}
    origin = upstream_origin(graph, expected, stale_norm, "view")
    assert origin is not None and (origin.op, origin.value) == ("norm", "norm.out")


NAGA = """Validation Error

Caused by:
  In wgpuDeviceCreateShaderModule, label = 'rms_norm'

Shader 'rms_norm' parsing error: expected assignment or increment/decrement, found "row"
   ┌─ wgsl:26:10
   │
26 │     lett row = wid.x + wid.y * nwg.x;
   │          ^^^ expected assignment or increment/decrement
"""
GLSLC = """glslc exited 1:
/tmp/glsl/rms_norm.comp:19: error: 'undeclared' : undeclared identifier
1 error generated."""


def test_compiler_headline_quotes_the_line_that_says_what_is_wrong() -> None:
    assert compiler_headline(NAGA) == (
        "Shader 'rms_norm' parsing error: expected assignment or increment/decrement, "
        'found "row" (at wgsl:26:10)'
    )
    assert compiler_headline(GLSLC) == (
        "/tmp/glsl/rms_norm.comp:19: error: 'undeclared' : undeclared identifier"
    )


def test_chunk_errors_keep_the_whole_text() -> None:
    err = KernelBuildError("webgpu", "rms_norm", "wgsl/rms_norm.wgsl", NAGA, op="norm")
    text = describe(err)
    assert text.startswith("KernelBuildError: webgpu: kernel 'rms_norm'")
    assert "Caused by" in text and "wgsl:26:10" in text and "lett row" in text


def test_a_chunk_rerun_command_keeps_the_run_s_workgroup_limit() -> None:
    run = RunMeta(profile="quick", seed=2, budgets=Budgets(4, 2))
    record = _typed([_case("view/0", "a", [])])[0]
    assert isinstance(record, CaseRecord)
    rerun = finding_commands("bundles/b", run, Path("run"), record.family)[-1]
    assert "--max-workgroups-per-dim" not in rerun
    run.max_workgroups_per_dim = 3
    limited = finding_commands("bundles/b", run, Path("run"), record.family)[-1]
    assert "--max-workgroups-per-dim 3 " in limited
