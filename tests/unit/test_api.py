"""The public API without a device: lazy names, single-op graphs, state with initial data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# --- issue 18: the public API's gaps ------------------------------------------------------


def test_single_op_graph_builds_an_op_without_outputs() -> None:
    """update_cache writes its state cache in place: the cache is the graph's output."""
    cache = np.zeros((1, 8, 2, 4), np.float32)
    value = np.ones((1, 3, 2, 4), np.float32)
    case = single_op_graph(
        "update_cache",
        {"value": value, "cache": cache, "input_pos": 2},
        state={"cache"},
        symints={"input_pos"},
        max_dims={"value": [1, 8, 2, 4]},
    )
    assert case.graph.outputs == ("cache",)
    assert case.graph.tensor("cache").state
    budget = op_budget(case)
    assert budget.reference == {}  # no output slot: nothing of its own to budget
    with pytest.raises(ValueError, match="update_cache has no outputs: name the tensor"):
        single_op_graph("update_cache", {"value": value, "cache": cache, "input_pos": 2})


def test_single_op_graph_sets_the_output_dtype() -> None:
    x = np.ones((2, 8), np.float32)
    case = single_op_graph("silu", {"x": x}, out_dtype="float16")
    node = case.graph.ops[0]
    assert case.graph.tensor(node.outputs["out"]).dtype == "float16"
    assert case.graph.tensor("x").dtype == "float32"


def test_op_budgets_evaluates_every_step_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """`op_budget(case, step)` replays steps 0..step; looping it over n steps replays n²/2.
    `op_budgets` gives every step's in one pass, equal to `op_budget`'s."""
    from harness import op_budgets
    from harness.check.reference import ReferenceEvaluator

    rng = np.random.default_rng(4)
    case = single_op_graph(
        "rms_norm",
        {"x": rng.standard_normal((3, 16)).astype(np.float32), "weight": np.ones(16, np.float32)}
        | {"eps": 1e-6},
        constants={"weight"},
        max_dims={"x": [6, 16]},
    )
    case.steps += [{"x": rng.standard_normal((n, 16)).astype(np.float32)} for n in (1, 6, 2, 5)]
    steps_run = 0
    step = ReferenceEvaluator.step

    def counted(self: ReferenceEvaluator, inputs: Any) -> Any:
        nonlocal steps_run
        steps_run += 1
        return step(self, inputs)

    monkeypatch.setattr(ReferenceEvaluator, "step", counted)
    budgets = op_budgets(case)
    assert steps_run == len(case.steps) == len(budgets) == 5
    for i, got in enumerate(budgets):
        want = op_budget(case, i)
        np.testing.assert_array_equal(got.reference["out"], want.reference["out"])
        np.testing.assert_array_equal(got.budget["out"], want.budget["out"])


def test_the_decoder_builder_and_the_f16_conversion_are_public() -> None:
    from harness import DecoderConfig, DecoderWeights, decoder_case, half_precision

    for item in (DecoderConfig, DecoderWeights, decoder_case, half_precision):
        assert item.__doc__ and item.__module__.startswith("harness.")
    config = DecoderConfig(
        vocab=16, hidden=32, n_heads=2, n_kv_heads=1, head_dim=16, ffn=32, layers=1,
        max_seq=8, group_size=16,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    case = decoder_case(config, DecoderWeights.random(config, rng), [(0, 3), (3, 1)], rng)
    half = half_precision(case)
    dtypes = {t.name: t.dtype for t in half.graph.tensors()}
    # q4gsw scales stay float32 by default (the ops take them so); the rest is float16.
    assert {n for n, d in dtypes.items() if d == "float32"} == {
        n for n in dtypes if n.endswith(".scales")
    }
    assert "float16" in dtypes.values() and half.meta["dtype"] == "float16"
