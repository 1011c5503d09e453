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
from harness.gen.builder import GraphBuilder
from harness.model import q4

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
    # the gpu preset on every device: --shapes alone must also drop its GEMV-only extra shape
    args = ["--preset", "gpu", "--shapes", "64x24", "--m", "1,5", "--repeats", "2"]
    args += ["--warmup", "1", "--ceiling-mib", "1", "--cold-mib", "0", "--burn-passes", "0"]
    args += ["--group-size", "32"]
    assert main([*args, "--json", str(out_json), "--markdown", str(out_md)]) == 0
    result = json.loads(out_json.read_text())
    # fp32 at every M, then the f16 GEMV (M = 1) over the same weights, in the same run
    assert [(r["m"], r["kernel"], r["dtype"]) for r in result["rows"]] == [
        (1, "q4gsw_gemv", "float32"),
        (5, "q4gsw_gemm", "float32"),
        (1, "q4gsw_gemv_f16", "float16"),
    ]
    for row in result["rows"]:
        assert set(row["median_us"]) == {"webgpu", "vulkan"}
        # f16 outputs: the backends may round an f32 result to f16 neighbours (2^-10 apart)
        limit = 1e-5 if row["dtype"] == "float32" else 2e-3
        assert row["backend_diff"] is not None and row["backend_diff"] < limit
        assert 0 <= max(row["utilization"].values()) < 1  # within the derived budget
    table = out_md.read_text()
    assert "| 64×24 | 1 | q4gsw_gemv |" in table and "| 64×24 | 1 | q4gsw_gemv_f16 |" in table


def test_back_to_back_timing_is_valid(vulkan: Runtime) -> None:
    """Back-to-back batches: one positive span per call on both APIs, no validation message."""
    from benchmarks.timing import vulkan_time_graph, webgpu_time_graph
    from webgpu_backend import WebGPURuntime
    from webgpu_backend.device import get_timing_device

    ctx = vulkan.context  # type: ignore[attr-defined]
    rt = WebGPURuntime(get_timing_device())
    x = np.ones((1, 64), np.float32)
    for time_graph, runtime in ((webgpu_time_graph, rt), (vulkan_time_graph, vulkan)):
        graphs = [runtime.load(_graph()) for _ in range(3)]
        try:
            ctx.drain_messages()
            (timing,) = time_graph(graphs, {"x": x}, repeats=3, warmup=1, batch=3)
            assert (timing.op, timing.kernel) == ("lin", "q4gsw_gemv")
            assert len(timing.times_ns) == 3 and min(timing.times_ns) > 0
            assert ctx.drain_messages() == []
        finally:
            for g in graphs:
                g.close()


def test_benchmark_back_to_back_table(tmp_path: Path, runtimes: list[Runtime]) -> None:
    from benchmarks.linear_q4gsw import main

    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    args = ["--shapes", "64x24", "--m", "1", "--gemv-shapes", "128x64", "--repeats", "2"]
    args += ["--warmup", "1", "--ceiling-mib", "1", "--cold-mib", "0", "--group-size", "32"]
    args += ["--back-to-back", "--batch", "3", "--validation"]
    args += ["--backends", "webgpu,vulkan,vulkan_robust"]
    assert main([*args, "--json", str(out_json), "--markdown", str(out_md)]) == 0
    result = json.loads(out_json.read_text())
    assert [(r["k"], r["n"], r["m"], r["dtype"]) for r in result["rows"]] == [
        (64, 24, 1, "float32"),
        (64, 24, 1, "float16"),
        (128, 64, 1, "float32"),
        (128, 64, 1, "float16"),
    ]
    names = {"webgpu", "vulkan", "vulkan_robust"}
    for row in result["rows"]:
        assert row["batch"] == 3
        for name in names:
            assert row["b2b_us"][name] > 0 and row["b2b_read_same"][name] > 0
        limit = 1e-5 if row["dtype"] == "float32" else 2e-3
        assert row["backend_diff"] is not None and row["backend_diff"] < limit
    assert set(result["ceiling_b2b_gbps"]) == names
    # the robust device really has robust buffer access (lavapipe and NVIDIA offer both)
    assert result["adapters"]["vulkan"]["robustness"] == "off"
    assert "robustBufferAccess" in result["adapters"]["vulkan_robust"]["robustness"]
    table = out_md.read_text()
    assert "| 128×64 | 0.0 | b2b ×3 |" in table and "| 128×64 f16 | 0.0 | b2b ×3 |" in table


@pytest.mark.parametrize("group_size", [128, 192])
def test_every_kept_gemv_variant_is_correct(
    tmp_path: Path, runtimes: list[Runtime], group_size: int
) -> None:
    """The sweep builds each variant in benchmarks/shaders/gemv on both APIs, times it both
    ways, and its outputs pass the reference check: docs/benchmarks.md's tables stay
    reproducible, and a variant that stopped compiling or went wrong fails here.

    K = 4992 (624 words) runs unchecked full steps and a partial last step of up to two
    words at 64 lanes; K = 384 only a partial one; group size 192 (24 words) does not divide
    the lanes, so the scale index advances the unaligned way; N = 5 leaves an odd column."""
    from benchmarks.gemv_sweep import VARIANT_DIR, main

    stems = sorted({p.stem for p in VARIANT_DIR.glob("*.wgsl")})
    assert stems == sorted({p.stem for p in VARIANT_DIR.glob("*.comp")})  # both APIs each
    out_json = tmp_path / "sweep.json"
    args = ["--variants", ";".join(stems), "--shapes", "384x64,4992x5", "--repeats", "1"]
    args += ["--group-size", str(group_size)]
    args += ["--warmup", "0", "--cold-mib", "0", "--ceiling-mib", "1", "--burn-passes", "0"]
    args += ["--back-to-back", "--min-copies", "2", "--json", str(out_json)]
    assert main(args) == 0
    rows = [r for r in json.loads(out_json.read_text())["rows"] if r["variant"] != "read"]
    assert [r["variant"] for r in rows] == stems * 2
    for row in rows:
        for name in ("webgpu", "vulkan"):
            assert 0 <= row[name]["err_budget"] < 1, (row["variant"], name)
            assert row[name]["b2b_us"] > 0
        assert row["backend_diff"] is not None and row["backend_diff"] < 1e-5
