"""The public API without a device: lazy names, single-op graphs, state with initial data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from harness import Case, GraphBuilder, op_budget, single_op_graph

ROOT = Path(__file__).resolve().parents[2]


def _imported_after(code: str) -> list[str]:
    """Which of Hypothesis and the backends a fresh interpreter has imported after `code`."""
    code += (
        "\nimport json, sys\nprint(json.dumps(sorted(m for m in ('hypothesis', 'wgpu', 'vulkan',"
        " 'webgpu_backend', 'vulkan_ref') if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    imported: list[str] = json.loads(out.stdout)
    return imported


def test_importing_the_harness_pulls_in_neither_hypothesis_nor_a_backend() -> None:
    # The package, the op-model framework and the graph-building names need neither.
    assert (
        _imported_after(
            "import harness, harness.model, harness.gen.builder, harness.gen.case\n"
            "harness.GraphBuilder, harness.Case"
        )
        == []
    )


def test_op_level_api_names_pull_in_no_backend() -> None:
    # The op registry (harness.ops) brings Hypothesis: each op module registers its case
    # family there (the layered architecture). No backend until a runtime is opened.
    assert _imported_after(
        "import harness, harness.ops, harness.run.records\n"
        "harness.single_op_graph, harness.op_budget, harness.run_case, harness.check_case"
    ) == ["hypothesis"]


def test_every_public_name_resolves() -> None:
    assert sorted(harness.__all__) == sorted(harness._EXPORTS)
    for name in harness.__all__:
        assert getattr(harness, name) is not None
    assert set(harness.__all__) <= set(dir(harness))
    with pytest.raises(AttributeError, match="no_such_thing"):
        harness.no_such_thing  # noqa: B018


def test_single_op_graph_takes_max_dims_and_derives_output_dims() -> None:
    xq = np.ones((1, 3, 4, 8), np.float32)
    xk = np.ones((1, 3, 2, 8), np.float32)
    cos, sin = np.ones((3, 4), np.float32), np.zeros((3, 4), np.float32)
    case = single_op_graph(
        "apply_rotary_emb",
        {"xq": xq, "xk": xk, "freqs_cos": cos, "freqs_sin": sin},
        max_dims={"xq": [1, 6, 4, 8], "xk": [1, 6, 2, 8], "freqs_cos": [6, 4], "freqs_sin": [6, 4]},
    )
    graph = case.graph
    node = graph.ops[0]
    assert graph.tensor(node.outputs["xq_out"]).dims == (1, 6, 4, 8)
    assert graph.tensor(node.outputs["xk_out"]).dims == (1, 6, 2, 8)  # not xq's dims
    assert graph.inputs == ("xq", "xk", "freqs_cos", "freqs_sin")
    assert [s["xq"].shape for s in case.steps] == [(1, 3, 4, 8)]  # type: ignore[union-attr]


def test_single_op_graph_roles_and_errors() -> None:
    tokens = np.array([[1, 2]], np.int64)  # int64 host ids: an int32 tensor in the graph
    case = single_op_graph(
        "embedding_q4gsw",
        {
            "weight": np.zeros((4, 8), np.uint8),
            "scales": np.ones((4, 1), np.float32),
            "group_size": 16,
            "indices": tokens,
        },
        constants={"weight", "scales"},
    )
    assert case.graph.tensor("indices").dtype == "int32"
    assert case.graph.tensor("weight").constant == "weight"
    assert case.steps[0]["indices"] is tokens
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="no argument slots \\['y'\\]"):
        single_op_graph("silu", {"x": x, "y": x})
    with pytest.raises(ValueError, match="'weight' is missing"):
        single_op_graph("rms_norm", {"x": x, "eps": 1e-6})
    with pytest.raises(ValueError, match="unknown op"):
        single_op_graph("conv2d", {"x": x})
    with pytest.raises(ValueError, match="constants names slots without a value"):
        single_op_graph("silu", {"x": x}, constants={"w"})


def test_state_takes_initial_data(tmp_path: Path) -> None:
    prefix = np.arange(2 * 3, dtype=np.float32).reshape(2, 3)
    b = GraphBuilder()
    x = b.input("x", "float32", [2, 3])
    cache = b.state("cache", "float32", [2, 3], initial=prefix)
    b.output(b.op("add", a=x, b=cache))
    graph = b.build()
    tensor = graph.tensor("cache")
    assert tensor.state and tensor.constant == "cache"
    np.testing.assert_array_equal(graph.initial_data(tensor), prefix)
    loaded = Case.load(Case(graph, [{"x": prefix}]).save(tmp_path / "case")).graph
    np.testing.assert_array_equal(loaded.initial_data(loaded.tensor("cache")), prefix)
    plain = GraphBuilder()
    plain.state("zeros", "float32", [2])
    assert "constant" not in plain.to_json()["values"][0]
    with pytest.raises(ValueError, match=r"initial data must be float32\[2, 3\], got float64"):
        GraphBuilder().state("cache", "float32", [2, 3], initial=prefix.astype(np.float64))


def test_op_budget_is_the_reference_and_its_budget() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    case = single_op_graph("silu", {"x": x})
    budget = op_budget(case)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(budget.reference["out"], x64 / (1 + np.exp(-x64)), rtol=1e-12)
    assert budget.budget["out"].shape == x.shape and np.all(budget.budget["out"] > 0)
    assert budget.within("out", budget.reference["out"].astype(np.float32))
    assert not budget.within("out", budget.reference["out"] + 2 * budget.budget["out"])
