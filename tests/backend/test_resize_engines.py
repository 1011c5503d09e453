"""Each runtime's resize engine on its own: explicit resizes, propagation, and what happens
when propagation cannot settle."""

from __future__ import annotations

import numpy as np
import pytest

from graph_format import InputError, PropagationError, ResizeError, Runtime
from harness.gen.builder import GraphBuilder
from webgpu_backend import WebGPURuntime
from webgpu_backend.graph import WebGPUGraph

pytestmark = pytest.mark.gpu


def _graph():  # x[2, 8, 16] -> rms_norm -> add with x
    b = GraphBuilder()
    x = b.input("x", "float32", [2, 8, 16])
    w = b.constant("w", np.linspace(0.5, 1.5, 16, dtype=np.float32))
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    b.output(b.op("add", name="residual", a=x, b=h))
    return b.build()


def test_webgpu_resize_input_then_propagate(webgpu: Runtime) -> None:
    assert isinstance(webgpu, WebGPURuntime)
    graph = webgpu.load(_graph())
    try:
        graph.resize_input("x", (1, 3, 16))
        graph.propagate_resize()
        dims = graph.cur_dims()
        assert dims["norm.out"] == (1, 3, 16) and dims["residual.out"] == (1, 3, 16)
        assert [d.count for d in graph.dispatches] == [3, 1]  # rows; ceil(48 / 64)
        # Marked dirty only on change: the same dims again run no hook.
        graph.resize_input("x", (1, 3, 16))
        assert not graph._dirty
        with pytest.raises(InputError, match="not a tensor input"):
            graph.resize_input("norm.out", (1, 3, 16))
        with pytest.raises(ResizeError, match="exceeds its max 8"):
            graph.resize_input("x", (1, 9, 16))
    finally:
        graph.close()


def test_webgpu_propagation_that_never_settles_is_an_error(webgpu: Runtime) -> None:
    graph = webgpu.load(_graph())
    assert isinstance(graph, WebGPUGraph)
    try:
        graph.execute({"x": np.ones((2, 8, 16), np.float32) + np.arange(16, dtype=np.float32)})
        before = graph.cur_dims()
        out = graph.tensors["residual.out"]
        x = graph.tensors["x"]
        # A broken hook: every time x is dirty it flips the output, which dirties x again.
        flip = {"n": 0}

        def oscillate() -> None:
            flip["n"] += 1
            graph.set_cur_dims(out, (1, 1 + flip["n"] % 2, 16))
            graph.set_cur_dims(x, (1, 1 + flip["n"] % 2, 16))

        graph.add_resize_hook(graph.graph.ops[0], ["x", "residual.out"], oscillate)
        with pytest.raises(PropagationError, match="did not converge"):
            graph.execute({"x": np.ones((1, 4, 16), np.float32) + np.arange(16, dtype=np.float32)})
        assert graph.cur_dims() == before  # restored
        assert flip["n"] <= len(graph._hooks) + 1
    finally:
        graph.close()


def test_vulkan_resize_runs_nodes_in_order(vulkan: Runtime) -> None:
    graph = vulkan.load(_graph())
    try:
        result = graph.execute(
            {"x": np.ones((1, 5, 16), np.float32) * np.arange(16, dtype=np.float32)}
        )
        assert result.cur_dims["residual.out"] == (1, 5, 16)
        assert [d.logical_count for d in result.dispatches] == [(5, 1, 1), (2, 1, 1)]
    finally:
        graph.close()


def _sdpa_graph():  # q [1, 4, 2, 8] over a 16-row cache, input_pos a SymInt input
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 4, 2, 8])
    k, v = b.input("k", "float32", [1, 4, 2, 8]), b.input("v", "float32", [1, 4, 2, 8])
    caches = {n: b.state(n, "float32", [1, 16, 2, 8]) for n in ("k_cache", "v_cache")}
    pos = b.symint_input("input_pos")
    b.output(b.op("sdpa_with_kv_cache", name="attn", q=q, k=k, v=v, input_pos=pos, **caches))
    return b.build()


def _symint_value(graph: object, name: str) -> int:
    value = graph.symints[name]  # type: ignore[attr-defined]
    return int(getattr(value, "value", value))  # vulkan_ref keeps SymInt objects


@pytest.mark.parametrize("backend", ["webgpu", "vulkan"])
def test_symint_past_int32_is_refused_and_changes_nothing(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """input_pos = 2**31 is the op's cache_overflow (as the contract says), never a raw
    OverflowError from packing the uniform, and the graph keeps its state for the next step."""
    runtime: Runtime = request.getfixturevalue(backend)
    rng = np.random.default_rng(3)
    step = {n: rng.standard_normal((1, 2, 2, 8)).astype(np.float32) for n in ("q", "k", "v")}
    graph = runtime.load(_sdpa_graph())
    try:
        first = graph.execute({**step, "input_pos": 5})
        with pytest.raises(InputError) as refused:
            graph.execute({**step, "input_pos": 2**31})
        assert (refused.value.subject, refused.value.reason) == ("attn", "cache_overflow")
        assert _symint_value(graph, "input_pos") == 5
        if backend == "vulkan":  # the uniform the kernels read still holds 5
            ubo = graph.symints["input_pos"].ubo  # type: ignore[attr-defined]
            assert int.from_bytes(ubo.read(0, 4), "little", signed=True) == 5
        again = graph.execute({**step, "input_pos": 5})
        assert again.cur_dims == first.cur_dims
        np.testing.assert_array_equal(again.outputs["attn.out"], first.outputs["attn.out"])
    finally:
        graph.close()
