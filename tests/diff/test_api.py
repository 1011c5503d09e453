"""The public API on both backends: the documented example runs, and a check can fail."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from graph_format import Runtime
from harness import DivergenceFound, check_case, run_case, single_op_graph
from tests.plants import glsl_substitution

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
    plant = glsl_substitution("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd")
    with plant, pytest.raises(DivergenceFound) as info:
        check_case(case, runtimes)
    kinds = {(str(d.kind), d.blame) for d in info.value.result.divergences}
    assert ("numeric", "vulkan") in kinds
