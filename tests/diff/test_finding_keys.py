"""Every divergent key becomes a finding, and every finding names its op (issue 18 items 4, 5).

A case stands for one bug key (its primary divergence's: `harness.run.records.primary_bug`),
and Hypothesis shrinks by that key alone. A second bug that only ever shows beside the first
(here a WebGPU silu downstream of a Vulkan rms_norm, which is always first) was recorded but
never bundled: it is now a finding of its own, bundled as found (not shrunk), with its own
key in its bundle, so that its replay looks for it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from graph_format import Runtime
from harness.check.divergence import BugKey
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.gen.families import Family
from harness.run import chunks
from harness.run.bundle import load_bundle, replay
from harness.run.chunks import ChunkRunner, ChunkTally, RunConfig, Stop
from harness.run.plan import Chunk
from harness.run.records import CaseRecord, ChunkRecord
from tests.plants import glsl_substitution, wgsl_substitution

pytestmark = pytest.mark.gpu

# The Vulkan rms_norm drops its weight; the WebGPU silu (and sigmoid) is 1 % high.
RMS_NORM_DROPS_WEIGHT = ("rms_norm_vec4", "* rstd * t_weight[i]", "* rstd")
SILU_ONE_PERCENT_HIGH = (
    "unary_activation",
    "out[i] = numerator / (1.0 + exp(-v));",
    "out[i] = numerator / (1.0 + exp(-v)) * 1.01;",
)


@st.composite
def _norm_then_silu(draw: st.DrawFn) -> Case:
    """rms_norm (width 8: the vec4 kernel) then silu, on 1-4 rows of random data."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rows = draw(st.integers(1, 4))
    b = GraphBuilder()
    x = b.input("x", "float32", [rows, 8])
    w = b.constant("w", rng.uniform(0.5, 1.5, 8).astype(np.float32))
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    b.output(b.op("silu", name="act", x=h))
    data = rng.standard_normal((rows, 8)).astype(np.float32)
    return Case(b.build(), [{"x": data}], name="norm_then_silu")


class _Sink:
    """Collects what a chunk hands its sink."""

    def __init__(self) -> None:
        self.cases: list[CaseRecord] = []
        self.chunks: list[ChunkRecord] = []
        self.errors: list[str] = []

    def case(self, record: CaseRecord) -> None:
        self.cases.append(record)

    def chunk(self, record: ChunkRecord, tally: ChunkTally) -> None:
        self.chunks.append(record)

    def error(self, text: str) -> None:
        self.errors.append(text)

    def log(self, line: str) -> None:
        pass


def _run_chunk(out: Path, monkeypatch: pytest.MonkeyPatch, examples: int = 8) -> _Sink:
    family = Family("norm_then_silu", _norm_then_silu, frozenset({"rms_norm", "silu"}))
    monkeypatch.setattr(chunks, "FAMILIES", {**chunks.FAMILIES, family.name: family})
    config = RunConfig(
        families=[family.name],
        profile="quick",
        seed=0,
        max_examples=examples,
        chunk_examples=examples,
        out=out,
        repeats=1,
    )
    runner = ChunkRunner(config, Stop())
    sink = _Sink()
    runner.run_chunk(Chunk(family.name, 0, 0, examples), sink)
    return sink


def test_a_key_that_only_shows_beside_another_is_a_finding_with_its_bundle(
    runtimes: list[Runtime], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with glsl_substitution(*RMS_NORM_DROPS_WEIGHT), wgsl_substitution(*SILU_ONE_PERCENT_HIGH):
        sink = _run_chunk(tmp_path, monkeypatch)
        assert not sink.errors
        # Every divergent case shows both bugs, the Vulkan rms_norm first.
        keys = {d.bug for r in sink.cases for d in r.divergences}
        ops = {(k.op_type, k.kind, k.blame) for k in keys}
        assert ops == {("rms_norm", "numeric", "vulkan"), ("silu", "numeric", "webgpu")}
        assert {r.bug.op_type for r in sink.cases if r.bug is not None} == {"rms_norm"}

        (record,) = sink.chunks
        by_op = {f.bug.op_type: f for f in record.findings if f.bug is not None}
        assert set(by_op) == {"rms_norm", "silu"}, record.findings
        primary, beside = by_op["rms_norm"], by_op["silu"]
        assert primary.shrunk and primary.beside is None
        # Found beside the rms_norm key, bundled as found: its case was shrunk by the other.
        assert not beside.shrunk and beside.beside == primary.bug
        assert beside.bug in keys and beside.bundle is not None
        bundle = load_bundle(tmp_path / beside.bundle)
        assert bundle.bug == beside.bug
        outcome = replay(bundle, runtimes=runtimes)
        assert outcome.status == "still_failing" and outcome.expected == beside.bug


def test_a_key_beside_another_that_is_a_case_s_own_elsewhere_is_not_doubled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only the silu bug, the silu key is each case's own: one shrunk finding."""
    with wgsl_substitution(*SILU_ONE_PERCENT_HIGH):
        sink = _run_chunk(tmp_path, monkeypatch)
    (record,) = sink.chunks
    assert [(f.bug.op_type if f.bug else None, f.shrunk) for f in record.findings] == [
        ("silu", True)
    ]
    assert all(isinstance(f.bug, BugKey) and f.beside is None for f in record.findings)
