"""Pooled memory keeps every guarantee of a fresh build (webgpu_backend/pool.py,
vulkan_ref/pool.py): a write past a tensor's allocation lands in a guard and is a
`canary_write`; a stale read is still found on reused memory; state tensors start at zero
and constants are the new graph's, even where the previous graph's data sat; building and
closing graphs in a loop does not grow the pool; the validation layer stays on and quiet.

Each test runs on fresh runtimes (fresh pools), so that which memory is reused is known.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager

import numpy as np
import pytest

from graph_format import Graph, LoadedGraph, Runtime
from harness.check.backends import open_runtime, open_runtimes
from harness.check.divergence import CanaryDetails, Kind
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from tests.diff.test_planted_bugs import READ_PAST_END, add_case, find
from tests.plants import planted_runtimes
from vulkan_ref.instance import validation_requested

pytestmark = pytest.mark.gpu

BACKENDS = ("webgpu", "vulkan")

# add_case's output "sum.out" is [4, 16] float32: 64 elements, a 256-byte allocation. At the
# full live size (the first step) the planted kernels also write elements 64..67, just past
# the allocation; at smaller live sizes they write nothing extra.
WRITE_PAST_ALLOCATION = {
    "webgpu": (
        "binary_flat",
        "    if (op_kind == 0u) {",
        "    if (params.numel == 64u && i < 4u) {\n        out[64u + i] = 1.0;\n    }\n"
        "    if (op_kind == 0u) {",
    ),
    "vulkan": (
        "binary_flat",
        "  t_out[i] = OP_KIND == 0",
        "  if (out_meta.numel == 64u && i < 4u) {\n    t_out[64u + i] = 1.0;\n  }\n"
        "  t_out[i] = OP_KIND == 0",
    ),
}
# The last live element copies b's element one past its live end (see test_planted_bugs).
READ_PAST_LIVE_END = {
    "webgpu": ("binary_flat", "a[i] + b[i]", READ_PAST_END),
    "vulkan": (
        "binary_flat",
        "t_a[i] + t_b[i]",
        "(i + 1u == out_meta.numel ? t_b[i + 1u] : t_a[i] + t_b[i])",
    ),
}


def plant(
    backend: str, plants: dict[str, tuple[str, str, str]]
) -> AbstractContextManager[list[Runtime]]:
    """Fresh runtimes (fresh pools) with the shader substitution of `plants[backend]` in
    that backend's shader language (a planted copy of its shader folder)."""
    swaps = [plants[backend]]
    return planted_runtimes(**({"wgsl": swaps} if backend == "webgpu" else {"glsl": swaps}))


def pool_stats(runtime: Runtime) -> dict[str, int]:
    """The runtime's pool counters (`allocations`: device allocations over its life)."""
    stats: dict[str, int] = runtime.pool.stats()  # type: ignore[attr-defined]
    return stats


def placement(graph: LoadedGraph, tensor: str) -> tuple[int, int]:
    """(serial of the pooled block, offset in it) of a tensor of a loaded graph."""
    value = graph.tensors[tensor]  # type: ignore[attr-defined]
    slot = getattr(value, "slot", None) or value.buffer  # webgpu: .slot, vulkan: .buffer
    return slot.block.serial, slot.offset


@pytest.fixture
def fresh_runner() -> Iterator[LockstepRunner]:
    """A lockstep runner over new runtimes, so each test knows what its pools hold."""
    yield LockstepRunner(open_runtimes())


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_past_the_allocation_is_caught(backend: str) -> None:
    # Without guards inside the binding, lavapipe (and wgpu everywhere) drops this write.
    with plant(backend, WRITE_PAST_ALLOCATION) as runtimes:
        fresh_runner = LockstepRunner(runtimes)
        fresh_runner.run(add_case())  # the case then runs again on reused memory
        before = pool_stats(fresh_runner.runtimes[BACKENDS.index(backend)])
        result = fresh_runner.run(add_case())
        after = pool_stats(fresh_runner.runtimes[BACKENDS.index(backend)])
    hits = find(result.divergences, Kind.CANARY_WRITE, backend)
    assert hits, [(str(d.kind), d.blame, d.message) for d in result.divergences]
    assert [(d.step, d.tensor, d.op) for d in hits] == [(0, "sum.out", "sum")]
    assert hits[0].details == CanaryDetails(4, past_allocation=True)
    assert "past the allocation of 'sum.out'" in hits[0].message
    # The guard was re-poisoned: the next steps (which write nothing extra) are clean.
    assert all(d.step == 0 for d in result.divergences), result.divergences
    assert after["allocations"] == before["allocations"]  # same pooled memory


@pytest.mark.parametrize("backend", BACKENDS)
def test_guard_damage_is_reported_per_step_in_the_step_result(backend: str) -> None:
    rng = np.random.default_rng(5)
    with plant(backend, WRITE_PAST_ALLOCATION) as runtimes:
        graph = runtimes[BACKENDS.index(backend)].load(add_case().graph)
        try:
            full = {n: rng.standard_normal((4, 16)).astype(np.float32) for n in ("a", "b")}
            half = {n: rng.standard_normal((2, 16)).astype(np.float32) for n in ("a", "b")}
            assert graph.execute(full).guard_writes == {"sum.out": 4}
            assert graph.execute(half).guard_writes == {}  # re-poisoned, not written again
            assert graph.execute(full).guard_writes == {"sum.out": 4}
        finally:
            graph.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_stale_read_is_caught_on_reused_memory(backend: str) -> None:
    with plant(backend, READ_PAST_LIVE_END) as runtimes:
        fresh_runner = LockstepRunner(runtimes)
        fresh_runner.run(add_case())  # the case then runs again on reused memory
        before = pool_stats(fresh_runner.runtimes[BACKENDS.index(backend)])
        result = fresh_runner.run(add_case())
        after = pool_stats(fresh_runner.runtimes[BACKENDS.index(backend)])
    hits = find(result.divergences, Kind.STALE_READ, backend)
    assert hits, [(str(d.kind), d.blame, d.message) for d in result.divergences]
    assert hits[0].tensor == "sum.out"
    assert hits[0].details.origins[0][0] == "b"
    assert after == before


def _sdpa_graph() -> Graph:
    """q [1, 4, 2, 8] over a 16-row KV cache (state), input_pos a SymInt input."""
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 4, 2, 8])
    k, v = b.input("k", "float32", [1, 4, 2, 8]), b.input("v", "float32", [1, 4, 2, 8])
    caches = {n: b.state(n, "float32", [1, 16, 2, 8]) for n in ("k_cache", "v_cache")}
    pos = b.symint_input("input_pos")
    b.output(b.op("sdpa_with_kv_cache", name="attn", q=q, k=k, v=v, input_pos=pos, **caches))
    return b.build()


def _attention_step(rng: np.random.Generator, rows: int, position: int) -> dict[str, object]:
    step: dict[str, object] = {
        n: rng.standard_normal((1, rows, 2, 8)).astype(np.float32) for n in ("q", "k", "v")
    }
    step["input_pos"] = position
    return step


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_starts_at_zero_on_memory_a_previous_case_wrote(backend: str) -> None:
    runtime = open_runtime(backend)
    rng = np.random.default_rng(6)
    states = ["k_cache", "v_cache"]
    first = runtime.load(_sdpa_graph())
    try:
        written = first.execute(_attention_step(rng, 4, 8), read=states)  # type: ignore[arg-type]
        assert all(np.abs(written.tensors[s][0, 8:12]).min() > 0 for s in states)
        where = {s: placement(first, s) for s in states}
    finally:
        first.close()
    allocations = pool_stats(runtime)["allocations"]
    second = runtime.load(_sdpa_graph())
    try:
        assert {s: placement(second, s) for s in states} == where  # the same memory
        result = second.execute(_attention_step(rng, 1, 0), read=states)  # type: ignore[arg-type]
        for s in states:
            assert np.abs(result.tensors[s][0, 0]).min() > 0  # this step's row
            np.testing.assert_array_equal(result.tensors[s][0, 1:], 0, err_msg=s)
        assert not result.validation_messages
    finally:
        second.close()
    assert pool_stats(runtime)["allocations"] == allocations


@pytest.mark.parametrize("backend", BACKENDS)
def test_reused_memory_reads_as_a_fresh_allocation(backend: str) -> None:
    """Bytes no kernel wrote read zero, as in a new WebGPU buffer, not the last case's data."""
    runtime = open_runtime(backend)
    rng = np.random.default_rng(9)
    graph = runtime.load(add_case().graph)
    try:
        full = {n: rng.standard_normal((4, 16)).astype(np.float32) + 5 for n in ("a", "b")}
        assert np.abs(graph.execute(full).outputs["sum.out"]).min() > 0
        where = placement(graph, "sum.out")
    finally:
        graph.close()
    graph = runtime.load(add_case().graph)
    try:
        assert placement(graph, "sum.out") == where
        half = {n: rng.standard_normal((2, 16)).astype(np.float32) for n in ("a", "b")}
        raw = graph.execute(half, read_raw=["sum.out"]).raw["sum.out"]  # no slack fill
        np.testing.assert_array_equal(raw[2 * 16 * 4 :], 0)  # never written in this case
    finally:
        graph.close()


def _norm_graph(weight: np.ndarray) -> Graph:
    """x[2, 8, 16] -> rms_norm with `weight` -> + x."""
    b = GraphBuilder()
    x = b.input("x", "float32", [2, 8, 16])
    w = b.constant("w", weight)
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    b.output(b.op("add", name="residual", a=x, b=h))
    return b.build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_constants_are_the_new_graphs_on_reused_memory(backend: str) -> None:
    runtime = open_runtime(backend)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    placements = []
    for weight in (np.full(16, 3.0, np.float32), np.linspace(-1, 1, 16, dtype=np.float32)):
        graph = runtime.load(_norm_graph(weight))
        try:
            out = graph.execute({"x": x}).outputs["residual.out"]
            placements.append(placement(graph, "w"))
        finally:
            graph.close()
        x64 = x.astype(np.float64)
        rms = np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(out, x64 / rms * weight + x64, rtol=1e-5, atol=1e-5)
    assert placements[0] == placements[1]  # the second weight sat where the first had


def _rows_graph(rows: int) -> Graph:
    """x[rows, 64] -> rms_norm -> * x."""
    b = GraphBuilder()
    x = b.input("x", "float32", [rows, 64])
    w = b.constant("w", np.linspace(0.5, 1.5, 64, dtype=np.float32))
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    b.output(b.op("mul", name="scaled", a=h, b=x))
    return b.build()


@pytest.mark.parametrize("backend", BACKENDS)
def test_building_graphs_in_a_loop_does_not_grow_the_pool(backend: str) -> None:
    runtime = open_runtime(backend)
    rng = np.random.default_rng(8)
    sizes = [1, 7, 33, 300, 5, 2000, 64]

    def build_all() -> None:
        for rows in sizes:
            graph = runtime.load(_rows_graph(rows))
            try:
                result = graph.execute({"x": rng.standard_normal((rows, 64)).astype(np.float32)})
                assert not result.validation_messages and not result.guard_writes
            finally:
                graph.close()

    build_all()  # the pool grows to what these graphs need
    grown = pool_stats(runtime)
    for _ in range(3):
        build_all()
    stats = pool_stats(runtime)
    assert stats["allocations"] == grown["allocations"], (grown, stats)
    assert stats["blocks"] == grown["blocks"] and stats["blocks_in_use"] == 0
    # Far fewer device allocations than the graphs' buffers (4 tensors + UBOs/params each).
    assert grown["allocations"] <= 8, grown


@pytest.mark.parametrize("backend", BACKENDS)
def test_recycled_descriptors_bind_the_new_graphs_buffers(backend: str) -> None:
    """With a cache far smaller than the graphs built, descriptor sets are rewritten for the
    next graph (Vulkan) and bind groups made anew (WebGPU); outputs stay right and Vulkan
    allocates no more sets once the cache is full."""
    runtime = open_runtime(backend)
    pool = runtime.pool  # type: ignore[attr-defined]
    if backend == "vulkan":
        pool.descriptors.capacity = 2
    else:
        pool.bind_group_capacity = 2
    rng = np.random.default_rng(10)
    allocated = []
    for _ in range(3):
        for rows in (3, 9, 17, 40, 2, 100):
            graph = runtime.load(_rows_graph(rows))
            try:
                x = rng.standard_normal((rows, 64)).astype(np.float32)
                out = graph.execute({"x": x}).outputs["scaled.out"]
            finally:
                graph.close()
            x64 = x.astype(np.float64)
            norm = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + 1e-6)
            weight = np.linspace(0.5, 1.5, 64)
            np.testing.assert_allclose(out, norm * weight * x64, rtol=1e-5, atol=1e-5)
        if backend == "vulkan":
            allocated.append(pool.descriptors.sets_allocated)
    if backend == "vulkan":
        assert allocated[0] == allocated[-1], allocated


@pytest.mark.parametrize("backend", BACKENDS)
def test_free_memory_beyond_the_retention_limit_is_given_back(backend: str) -> None:
    runtime = open_runtime(backend)
    pool = runtime.pool  # type: ignore[attr-defined]
    pool.retain_bytes = 1 << 20
    graph = runtime.load(_rows_graph(20000))  # two 5 MB tensors: a block above the limit
    graph.close()
    stats = pool_stats(runtime)
    assert stats["free_bytes"] <= pool.retain_bytes, stats
    assert stats["blocks_in_use"] == 0


def test_pooled_decoder_cases_are_clean_with_validation_on(fresh_runner: LockstepRunner) -> None:
    from tests.diff.test_decoder import golden_decoder

    vulkan = fresh_runner.runtimes[BACKENDS.index("vulkan")]
    assert vulkan.context.validation == validation_requested()  # type: ignore[attr-defined]
    case, _ = golden_decoder()
    for _ in range(2):  # the second run binds the same pooled ranges as the first
        result = fresh_runner.run(case)
        assert result.ok, [d.message for d in result.divergences]
    descriptors = vulkan.pool.descriptors  # type: ignore[attr-defined]
    assert descriptors.hits > 0  # the second build reused the first's descriptor sets
    assert fresh_runner.runtimes[0].pool.bind_group_hits > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_pool_goes_with_its_runtime(backend: str) -> None:
    runtime = open_runtime(backend)
    graph = runtime.load(_rows_graph(16))
    graph.execute({"x": np.ones((16, 64), np.float32)})
    graph.close()
    pool = weakref.ref(runtime.pool)  # type: ignore[attr-defined]
    held = pool_stats(runtime)
    assert held["blocks"] > 0
    finalizer = getattr(runtime.pool, "_finalizer", None)  # type: ignore[attr-defined]
    del runtime, graph
    gc.collect()
    assert pool() is None  # nothing but the runtime and its graphs keeps a pool alive
    if finalizer is not None:  # Vulkan frees its blocks in the finalizer, which has run
        assert not finalizer.alive
