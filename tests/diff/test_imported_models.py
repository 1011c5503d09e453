"""Imported ExecuTorch models on both backends: each committed model's graph loads on
WebGPU and Vulkan and runs its prefill step in lockstep with every oracle, without a
divergence; each backend's output agrees with PyTorch's eager output within twice the
end-to-end bound (each of the two is a float32 implementation within it of the exact
value). The FFN block runs its whole golden schedule. (Whole sessions through `--model`
are the model family's, issue 27 item 4.)

The Llama exports need the four ops of branch pte-ops (select_as_symint, sym_add,
slice_copy, select_copy): their tests skip, saying so, until those exist.
"""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import Runtime
from harness.check.lockstep import LockstepRunner
from harness.check.reference import ReferenceEvaluator
from harness.check.verdict import assert_parity
from harness.gen.case import Case
from harness.importer import import_pte
from harness.model.numerics import compare
from tests.importer_support import IMPORTABLE, MODELS_DIR, golden_steps, goldens, model_params

pytestmark = pytest.mark.gpu


def imported_case(name: str) -> tuple[Case, list[np.ndarray]]:
    """The model's graph with its golden steps (the FFN's whole schedule, a Llama's prefill
    only), and the eager outputs of those steps."""
    graph = import_pte(MODELS_DIR / f"{name}.pte").graph
    steps = golden_steps(name, graph.inputs)
    if name != "ffn_block":
        steps = steps[:1]
    arrays = goldens(name)
    expected = [arrays[f"step{i}.out"] for i in range(len(steps))]
    return Case(graph, list(steps), name=f"imported {name}"), expected


@pytest.mark.parametrize("name", model_params(IMPORTABLE))
def test_an_imported_model_runs_in_lockstep(name: str, runner: LockstepRunner) -> None:
    case, _ = imported_case(name)
    result = runner.run(case)
    assert not result.unavailable, result.unavailable
    assert_parity(result)
    assert len(result.steps) == len(case.steps)


@pytest.mark.parametrize("name", model_params(("ffn_block", "llama_rope", "llama_hf_rope_gqa")))
def test_each_backend_agrees_with_pytorch_eager(name: str, runtimes: list[Runtime]) -> None:
    case, expected = imported_case(name)
    (out,) = case.graph.outputs
    for runtime in runtimes:
        reference = ReferenceEvaluator(case.graph)
        loaded = runtime.load(case.graph)
        try:
            for index, (step, want) in enumerate(zip(case.steps, expected, strict=True)):
                _, bounds, _ = reference.step(step)
                got = loaded.execute(step).outputs[out]
                # Both are float32 implementations, each within the bound of the exact
                # value: they differ by at most twice it.
                cmp = compare(got, want, 2 * bounds[out])
                assert cmp.ok, f"{runtime.name} step {index}: {cmp}"
        finally:
            loaded.close()
