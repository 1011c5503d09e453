"""Each runtime owns its caches: two runtimes in one process share only the device (no
pipeline, compiled kernel or kernel source), and closing a runtime frees what it cached."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graph_format import Graph, Runtime
from harness.check.backends import open_runtime
from harness.gen.builder import GraphBuilder
from tests.plants import planted_shader_dirs

pytestmark = pytest.mark.gpu

BACKENDS = ("webgpu", "vulkan")


def _add_graph() -> Graph:
    b = GraphBuilder()
    b.output(
        b.op("add", name="sum", a=b.input("a", "float32", [4]), b=b.input("b", "float32", [4]))
    )
    return b.build()


def _run(runtime: Runtime) -> np.ndarray:
    """a + b of [1, 2, 3, 4] and ones, on `runtime` (the graph closed after)."""
    graph = runtime.load(_add_graph())
    try:
        a = np.arange(1, 5, dtype=np.float32)
        return graph.execute({"a": a, "b": np.ones(4, np.float32)}).outputs["sum.out"]
    finally:
        graph.close()


def _pipelines(runtime: Runtime) -> int:
    return len(runtime.pipelines)  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_runtimes_share_no_pipeline(backend: str) -> None:
    first, second = open_runtime(backend), open_runtime(backend)
    try:
        _run(first)
        assert _pipelines(first) > 0
        assert _pipelines(second) == 0  # nothing of the first runtime's reaches the second
        _run(second)
        assert _pipelines(second) == _pipelines(first)
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_closing_a_runtime_frees_what_it_cached_and_no_other_runtime_s(backend: str) -> None:
    closed, kept = open_runtime(backend), open_runtime(backend)
    try:
        _run(closed)
        _run(kept)
        closed.close()
        closed.close()  # idempotent
        assert _pipelines(closed) == 0
        assert _pipelines(kept) > 0
        np.testing.assert_array_equal(_run(kept), [2, 3, 4, 5])
    finally:
        kept.close()


def test_a_runtime_reads_its_own_shader_folder(tmp_path: Path) -> None:
    """A runtime built from a changed copy of wgsl/ and one built from the repo's, side by
    side: each runs its own kernel (sources are cached per runtime, not per process)."""
    planted = planted_shader_dirs(tmp_path, wgsl=[("binary_flat", "a[i] + b[i]", "a[i] - b[i]")])
    shipped, changed = open_runtime("webgpu"), open_runtime("webgpu", planted["webgpu"])
    try:
        np.testing.assert_array_equal(_run(shipped), [2, 3, 4, 5])
        np.testing.assert_array_equal(_run(changed), [0, 1, 2, 3])
        np.testing.assert_array_equal(_run(shipped), [2, 3, 4, 5])
    finally:
        shipped.close()
        changed.close()
