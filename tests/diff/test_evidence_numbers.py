"""A bundle's evidence judges each backend as the oracle did (issue 21, item 7): the failure
page showed, for the backend not blamed, 3.57x and 5.26e4x over budget beside the oracle's
verdict of 0.442, because the evidence took the op's float32 budget (`OpModel.budget`)
where the oracle, on an f16 graph, judges by the f16 one (`local_budget`). The page's
numbers come from the evidence arrays through `harness.model.numerics.compare`, the
oracle's rule, so they must give back the oracle's utilization for every backend."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager

import numpy as np
import pytest

from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model.numerics import compare
from harness.run.evidence import capture_evidence
from harness.run.records import divergence_record
from tests.plants import shader_substitutions

pytestmark = pytest.mark.gpu

# rms_norm_f16 summing its squares in f16 on Vulkan (tests/diff/test_half_precision.py).
F16_ACCUMULATION = (
    ("float acc = 0.0;", "float16_t acc = float16_t(0.0);"),
    ("acc += v * v;", "acc += float16_t(v * v);"),
    ("shared float partial[", "shared float16_t partial["),
)


def _planted() -> AbstractContextManager[LockstepRunner]:
    return shader_substitutions(glsl=[("rms_norm_f16", old, new) for old, new in F16_ACCUMULATION])


def _case() -> Case:
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.input("x", "float16", [6, 256])
    w = b.constant("w", rng.standard_normal(256).astype("float16"))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    steps = [{"x": ((rng.standard_normal((6, 256)) + 0.5) * 24).astype("float16")}]
    return Case(b.build(), steps, name="rms_norm_f16")


def test_evidence_gives_every_backend_the_oracle_s_utilization() -> None:
    case = _case()
    with _planted() as runner:
        result = runner.run(case)
        records = [divergence_record(d, case) for d in result.divergences]
        evidence = capture_evidence(runner.runtimes, case, records)
    assert {(r.blame, r.kind) for r in records} >= {("vulkan", "numeric")}, records
    (tensor,) = {r.tensor for r in records if r.kind == "numeric"}
    step = result.steps[0]
    for backend, seen in step.backends.items():
        verdict = seen.utilization[f"norm:{tensor}"]
        base = f"s0/{tensor}/{backend}"
        judged = compare(
            evidence.arrays[f"{base}/actual"],
            evidence.arrays[f"{base}/reference"],
            evidence.arrays[f"{base}/budget"],
        )
        assert math.isclose(judged.utilization, verdict, rel_tol=1e-9), (backend, verdict)
    assert step.backends["webgpu"].utilization[f"norm:{tensor}"] <= 1.0
    (element,) = evidence.elements
    assert element.worst_on == "vulkan"
    assert element.backends["webgpu"].utilization <= 1.0  # not over where it passed
