"""The opt-in GPU timing paths of both runtimes and the linear_q4gsw benchmark, end to end.

Timing values on lavapipe are noise; these tests check the plumbing: the dispatches that ran
are the ones timed, every repetition yields a positive span, the Vulkan query-pool path is
silent under the validation layer, and the benchmark produces its table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graph_format import Graph, Runtime
from harness import q4
from harness.builder import GraphBuilder

pytestmark = pytest.mark.gpu


def _graph() -> Graph:
    rng = np.random.default_rng(0)
    packed, scales = q4.quantize(rng.standard_normal((12, 64)), 32)
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 64])
    out = b.op(
        "linear_q4gsw",
        name="lin",
        out_dims=[4, 12],
        x=x,
        weight=b.constant("weight", packed),
        scales=b.constant("scales", scales),
        group_size=b.int(32),
    )
    b.output(out)
    return b.build()


def test_webgpu_time_graph() -> None:
    from webgpu_backend import WebGPURuntime
    from webgpu_backend.device import get_timing_device
    from webgpu_backend.profiling import time_graph

    rt = WebGPURuntime(get_timing_device())
    graphs = [rt.load(_graph()) for _ in range(2)]
    try:
        for m, kernel in ((1, "q4gsw_gemv"), (3, "q4gsw_gemm")):
            x = np.ones((m, 64), np.float32)
            (timing,) = time_graph(graphs, {"x": x}, repeats=4, warmup=1)
            assert (timing.op, timing.kernel) == ("lin", kernel)
            assert len(timing.times_ns) == 4 and min(timing.times_ns) > 0
    finally:
        for g in graphs:
            g.close()


def test_vulkan_time_graph_is_valid(vulkan: Runtime) -> None:
    from vulkan_ref.profiling import time_graph

    ctx = vulkan.context  # type: ignore[attr-defined]
    graphs = [vulkan.load(_graph()) for _ in range(2)]
    try:
        ctx.drain_messages()
        for m, kernel in ((1, "q4gsw_gemv"), (4, "q4gsw_gemm")):
            x = np.ones((m, 64), np.float32)
            (timing,) = time_graph(graphs, {"x": x}, repeats=4, warmup=1)
            assert (timing.op, timing.kernel) == ("lin", kernel)
            assert len(timing.times_ns) == 4 and min(timing.times_ns) > 0
        assert ctx.drain_messages() == []
    finally:
        for g in graphs:
            g.close()


def test_benchmark_runs_end_to_end(tmp_path: Path, runtimes: list[Runtime]) -> None:
    from benchmarks.linear_q4gsw import main

    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    args = ["--shapes", "64x24", "--m", "1,5", "--repeats", "2", "--warmup", "1"]
    args += ["--ceiling-mib", "1", "--cold-mib", "0", "--group-size", "32"]
    assert main([*args, "--json", str(out_json), "--markdown", str(out_md)]) == 0
    result = json.loads(out_json.read_text())
    assert [(r["m"], r["kernel"]) for r in result["rows"]] == [(1, "q4gsw_gemv"), (5, "q4gsw_gemm")]
    for row in result["rows"]:
        assert set(row["median_us"]) == {"webgpu", "vulkan"}
        assert row["backend_diff"] is not None and row["backend_diff"] < 1e-5
        assert 0 <= max(row["utilization"].values()) < 1  # within the derived budget
    assert "| 64×24 | 1 | q4gsw_gemv |" in out_md.read_text()
