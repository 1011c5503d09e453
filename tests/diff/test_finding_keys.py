"""Every divergent key becomes a finding, and every finding names its op (issue 18 items 4, 5).

A case stands for one bug key (its primary divergence's: `harness.run.records.primary_bug`),
and Hypothesis shrinks by that key alone. A second bug that only ever shows beside the first
(here a WebGPU silu downstream of a Vulkan rms_norm, which is always first) was recorded but
never bundled: it is now a finding of its own, bundled as found (not shrunk), with its own
key in its bundle, so that its replay looks for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

import vulkan_ref.ops as vulkan_ops
import webgpu_backend.ops as webgpu_ops
from graph_format import OpNode
from harness.check.backends import open_runtimes
from harness.check.divergence import BugKey, Kind
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import Family
from harness.run import chunks
from harness.run.bundle import load_bundle, replay
from harness.run.chunks import ChunkRunner, RunConfig, Stop
from harness.run.plan import Chunk
from tests.chunk_support import RecordingSink
from tests.plants import (
    planted_shader_dirs,
    vulkan_node_patch,
    webgpu_after_hook,
)
from vulkan_ref.graph import ComputeGraph, DispatchNode
from webgpu_backend.graph import WebGPUGraph

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


def _run_chunk(
    out: Path,
    monkeypatch: pytest.MonkeyPatch,
    examples: int = 8,
    shader_dirs: Mapping[str, Path] | None = None,
) -> RecordingSink:
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
        shader_dirs=shader_dirs or {},
    )
    runner = ChunkRunner(config, Stop())
    sink = RecordingSink()
    runner.run_chunk(Chunk(family.name, 0, 0, examples), sink)
    return sink


@pytest.mark.slow  # a parity run that finds, shrinks and bundles two planted bugs
def test_a_key_that_only_shows_beside_another_is_a_finding_with_its_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = planted_shader_dirs(
        tmp_path / "planted", wgsl=[SILU_ONE_PERCENT_HIGH], glsl=[RMS_NORM_DROPS_WEIGHT]
    )
    out = tmp_path / "run"
    # The plant lives in the run's shader folders (--wgsl-dir, --glsl-dir).
    sink = _run_chunk(out, monkeypatch, shader_dirs=planted)
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
    bundle = load_bundle(out / beside.bundle)
    assert bundle.bug == beside.bug
    outcome = replay(bundle)  # on the bundle's copies of the planted shaders
    assert outcome.status == "still_failing" and outcome.expected == beside.bug


def test_a_key_beside_another_that_is_a_case_s_own_elsewhere_is_not_doubled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only the silu bug, the silu key is each case's own: one shrunk finding."""
    planted = planted_shader_dirs(tmp_path / "planted", wgsl=[SILU_ONE_PERCENT_HIGH])
    sink = _run_chunk(tmp_path / "run", monkeypatch, shader_dirs=planted)
    (record,) = sink.chunks
    assert [(f.bug.op_type if f.bug else None, f.shrunk) for f in record.findings] == [
        ("silu", True)
    ]
    assert all(isinstance(f.bug, BugKey) and f.beside is None for f in record.findings)


# ---------------------------------------------------------------------------- ops named


def _norm_case() -> Case:
    """rms_norm over 4, 2 then 3 live rows of width 8."""
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 8])
    w = b.constant("w", rng.uniform(0.5, 1.5, 8).astype(np.float32))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    steps = [{"x": rng.standard_normal((r, 8)).astype(np.float32)} for r in (4, 2, 3)]
    return Case(b.build(), steps, name="norm")


def _raise_at_two_rows(graph: WebGPUGraph, node: OpNode, _: object) -> None:
    if graph.arg_tensor(node, "x").cur_dims[0] == 2:
        raise StopIteration  # a bug in the hook's own code, no refusal


def _vulkan_raise_at_two_rows(graph: ComputeGraph, node: DispatchNode) -> None:
    resize, x = node.resize_fn, node.tensors["x"]
    assert resize is not None

    def planted(g: ComputeGraph) -> None:
        resize(g)
        if g.sizes_of(x)[0] == 2:
            raise StopIteration

    node.resize_fn = planted


PLANTED_HOOK_EXCEPTIONS = {
    "webgpu": lambda op: webgpu_after_hook(op, _raise_at_two_rows),
    "vulkan": lambda op: vulkan_node_patch(op, _vulkan_raise_at_two_rows),
}


@pytest.mark.parametrize("backend", ["webgpu", "vulkan"])
def test_an_exception_in_a_resize_hook_is_a_crash_of_its_op(
    runner: LockstepRunner, backend: str
) -> None:
    with PLANTED_HOOK_EXCEPTIONS[backend]("rms_norm"):
        result = runner.run(_norm_case())
    (crash,) = result.divergences  # the step after it runs as the contract says
    assert (crash.step, crash.kind, crash.blame, crash.op) == (1, Kind.CRASH, backend, "norm")
    assert crash.bug_key() == BugKey("rms_norm", "crash", backend)
    assert "StopIteration" in crash.message and crash.details.stage == "resize"


@pytest.mark.parametrize("backend", ["webgpu", "vulkan"])
def test_an_exception_while_an_op_builds_is_a_crash_of_its_op_at_load(
    runner: LockstepRunner, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = webgpu_ops.OP_BUILDERS if backend == "webgpu" else vulkan_ops.OP_IMPLS

    def broken(graph: object, node: OpNode) -> None:
        raise KeyError("weight")

    monkeypatch.setitem(registry, "rms_norm", broken)
    result = runner.run(_norm_case())
    (crash,) = result.divergences
    assert (crash.step, crash.kind, crash.blame, crash.op) == (-1, Kind.CRASH, backend, "norm")
    assert crash.bug_key() == BugKey("rms_norm", "crash", backend)


def _cache_case() -> Case:
    """update_cache of 2 rows a step into a cache of 8 rows (starting from data), listed as
    the graph's output: rows a step did not write differ from then on."""
    rng = np.random.default_rng(2)
    b = GraphBuilder()
    value = b.input("value", "float32", [1, 2, 1, 4])
    dims = [1, 8, 1, 4]
    cache = b.state("cache", "float32", dims, initial=rng.standard_normal(dims).astype("f4"))
    b.op("update_cache", name="update", value=value, cache=cache, input_pos=b.symint_input("pos"))
    b.output(cache)
    steps: list[StepInputs] = [
        {"value": rng.standard_normal((1, 2, 1, 4)).astype(np.float32), "pos": pos}
        for pos in (0, 2, 4)
    ]
    return Case(b.build(), steps, name="cache")


def _raise_at_position_two(graph: WebGPUGraph, node: OpNode, _: object) -> None:
    if graph.symints["pos"] == 2:
        raise StopIteration


def test_cache_rows_a_crash_left_unwritten_are_named_by_the_op_that_writes_the_cache(
    runner: LockstepRunner,
) -> None:
    with webgpu_after_hook("update_cache", _raise_at_position_two):
        result = runner.run(_cache_case())
    keys = [(d.step, d.bug_key()) for d in result.divergences]
    assert keys[0] == (1, BugKey("update_cache", "crash", "webgpu"))
    # Step 2 ran; its cache lacks the rows step 1 did not write (the end-to-end check).
    assert {(step, key.op_type, key.kind) for step, key in keys[1:]} == {
        (2, "update_cache", "numeric")
    }


def _viewed_norm_case() -> Case:
    """x [R, 8] (R up to 16) viewed as [R, 2, 4] (R a sym_size), then rms_norm over its
    2R rows of 4: one workgroup a row, which a limit of 4 per dimension folds up to 16."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", "float32", [16, 8])
    rows = b.op("sym_size", name="rows", x=x, dim=b.int(0, "dim"))
    sizes = [rows, b.int(2, "two"), b.int(4, "four")]
    v = b.op("view_copy", name="view", x=x, sizes=sizes, out_dims=[16, 2, 4])
    w = b.constant("w", rng.uniform(0.5, 1.5, 4).astype(np.float32))
    b.output(b.op("rms_norm", name="norm", x=v, weight=w, eps=b.float(1e-6)))
    return Case(b.build(), [{"x": rng.standard_normal((4, 8)).astype(np.float32)}], name="viewed")


def _view_at_max(graph: ComputeGraph, node: DispatchNode) -> None:
    """Vulkan's view_copy leaves its output at its max dims (a wrong live value)."""
    resize, out = node.resize_fn, node.tensors["out"]
    assert resize is not None

    def planted(g: ComputeGraph) -> None:
        resize(g)
        g.virtual_resize(out, out.max_sizes)

    node.resize_fn = planted


def test_a_refusal_downstream_under_a_grid_limit_counts_as_its_producer_s_bug(
    runner: LockstepRunner,
) -> None:
    """At the device's limit the wrong view is a view_copy cur_dims bug; under a limit of
    4 the rms_norm it feeds refuses the 32 rows it then sees (a grid no 4 x 4 holds). That
    refusal names where the wrong value came from, and counts under the same key."""
    limited = LockstepRunner(open_runtimes(max_workgroups_per_dim=4))
    with vulkan_node_patch("view_copy", _view_at_max):
        full = runner.run(_viewed_norm_case()).primary()
        under = limited.run(_viewed_norm_case())
    assert full is not None and full.bug_key() == BugKey("view_copy", "cur_dims", "vulkan")
    refusal = under.primary()
    assert refusal is not None and refusal.kind == Kind.ERROR_ASYMMETRY
    assert (refusal.op, refusal.details.upstream.op) == ("norm", "view")
    assert refusal.bug_key() == full.bug_key()
    assert {d.bug_key() for d in under.divergences} == {full.bug_key()}
