"""The public API on both backends: the documented example runs, and a check can fail."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from graph_format import Runtime
from harness import DivergenceFound, check_case, run_case, single_op_graph
from tests.plants import planted_runtimes

pytestmark = pytest.mark.gpu

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_documented_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/api.md holds one example"
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "api_example"})


def test_check_case_fails_on_a_planted_bug(runtimes: list[Runtime]) -> None:
    rng = np.random.default_rng(5)
    case = single_op_graph(
        "rms_norm",
        {
            "x": rng.standard_normal((4, 64)).astype(np.float32),
            "weight": rng.standard_normal(64).astype(np.float32),
            "eps": 1e-6,
        },
        constants={"weight"},
    )
    assert run_case(case, runtimes).ok
    plant = planted_runtimes(glsl=[("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd")])
    with plant as planted, pytest.raises(DivergenceFound) as info:
        check_case(case, planted)
    kinds = {(str(d.kind), d.blame) for d in info.value.result.divergences}
    assert ("numeric", "vulkan") in kinds


def test_single_op_graphs_of_update_cache_and_of_an_f16_output_run(
    runtimes: list[Runtime],
) -> None:
    """Issue 18: single_op_graph could build neither (no outputs; no output dtype)."""
    rng = np.random.default_rng(6)
    cache = rng.standard_normal((1, 8, 2, 4)).astype(np.float32)
    case = single_op_graph(
        "update_cache",
        {"value": rng.standard_normal((1, 3, 2, 4)).astype(np.float32), "cache": cache,
         "input_pos": 2},
        state={"cache"},
        symints={"input_pos"},
        max_dims={"value": [1, 8, 2, 4]},
    )  # fmt: skip
    case.steps.append({"value": np.ones((1, 1, 2, 4), np.float32), "input_pos": 7})
    check_case(case, runtimes)
    # An f16 embedding: its only float input is the float32 scales, so the output's dtype
    # must be asked for.
    embedding = single_op_graph(
        "embedding_q4gsw",
        {
            "weight": rng.integers(0, 256, (9, 16), dtype=np.uint8),
            "scales": rng.uniform(0.1, 1.0, (9, 2)).astype(np.float32),
            "group_size": 16,
            "indices": rng.integers(0, 9, (2, 3)),
        },
        constants={"weight", "scales"},
        out_dtype="float16",
    )
    assert embedding.graph.tensor(embedding.graph.outputs[0]).dtype == "float16"
    check_case(embedding, runtimes)
