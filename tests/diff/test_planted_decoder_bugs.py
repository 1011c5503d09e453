"""The oracles catch the decoder ops' typical bugs, classify them and blame the right side.

Each test plants one bug for its duration only (tests/plants.py: shader text substitution, a
wrapped hook or builder method), runs a fixed case through the lockstep runner and asserts
the divergence class and blame. The same cases run clean without the plant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from graph_format import InputError, OpNode
from harness.check.contract import ContractModel
from harness.check.divergence import Kind
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from tests.plants import glsl_substitution, webgpu_after_hook, wgsl_substitution
from webgpu_backend.graph import WebGPUGraph

pytestmark = pytest.mark.gpu

CACHE_ROWS = 16


def kv_session(sessions: list[tuple[int, int]], *, seed: int = 5) -> Case:
    """sdpa_with_kv_cache (Hq 4, Hkv 2, D 8, 16 cache rows) over (S, input_pos) steps."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 6, 4, 8])
    k = b.input("k", "float32", [1, 6, 2, 8])
    v = b.input("v", "float32", [1, 6, 2, 8])
    cache = [1, CACHE_ROWS, 2, 8]
    b.output(
        b.op(
            "sdpa_with_kv_cache",
            name="sdpa",
            q=q,
            k=k,
            v=v,
            k_cache=b.state("k_cache", "float32", cache),
            v_cache=b.state("v_cache", "float32", cache),
            input_pos=b.symint_input("input_pos"),
        )
    )
    steps: list[StepInputs] = [
        {
            "q": rng.standard_normal((1, s, 4, 8)).astype(np.float32),
            "k": rng.standard_normal((1, s, 2, 8)).astype(np.float32),
            "v": rng.standard_normal((1, s, 2, 8)).astype(np.float32),
            "input_pos": pos,
        }
        for s, pos in sessions
    ]
    return Case(b.build(), steps, name=f"kv session {sessions}")


# Prefill, decode, decode, a prefill chunk, a step past the cache's end (refused), a reset.
SESSION = [(5, 0), (1, 5), (1, 6), (3, 7), (6, 12), (4, 0)]
# The same shape of session starting at row 2, for plants that write one row early.
LATE_SESSION = [(5, 2), (1, 7), (1, 8), (3, 9)]


def embedding_case() -> Case:
    """Token ids [1, S] into a 20-token q4 table; the third step holds an id past the end."""
    rng = np.random.default_rng(6)
    b = GraphBuilder()
    weight = b.constant("weight", rng.integers(0, 256, (20, 16), dtype=np.uint8))
    scales = b.constant("scales", rng.uniform(0.1, 1.0, (20, 2)).astype(np.float32))
    ids = b.input("tokens", "int32", [1, 8])
    b.output(
        b.op(
            "embedding_q4gsw",
            name="embed",
            weight=weight,
            scales=scales,
            group_size=b.int(16),
            indices=ids,
            out_dims=[1, 8, 32],
        )
    )
    steps: list[StepInputs] = [
        {"tokens": np.array([[3, 19, 0, 7, 7]], np.int64)},
        {"tokens": np.array([[1]], np.int64)},
        {"tokens": np.array([[4, 20, 2]], np.int64)},
        {"tokens": np.array([[5, 6]], np.int64)},
    ]
    return Case(b.build(), steps, name="embedding")


def view_of_intermediate_case() -> Case:
    """x [1, S, 32] -> rms_norm -> view to [1, s, 4, 8] with s = sym_size(rms_norm out, 1)."""
    rng = np.random.default_rng(7)
    b = GraphBuilder()
    x = b.input("x", "float32", [1, 8, 32])
    h = b.op(
        "rms_norm",
        name="norm",
        x=x,
        weight=b.constant("w", np.ones(32, np.float32)),
        eps=b.float(1e-6),
    )
    seq = b.op("sym_size", name="seq", x=h, dim=b.int(1))
    b.output(
        b.op(
            "view_copy",
            name="heads",
            x=h,
            sizes=[b.int(1, "one"), seq, b.int(4, "h"), b.int(8, "d")],
            out_dims=[1, 8, 4, 8],
        )
    )
    steps: list[StepInputs] = [
        {"x": rng.standard_normal((1, s, 32)).astype(np.float32)} for s in (8, 5, 1, 3)
    ]
    return Case(b.build(), steps, name="view of an intermediate")


def summary(result: Any) -> list[tuple[str, str, str | None, str]]:
    """(kind, blame, tensor, message) of every divergence, for assertion messages."""
    return [(str(d.kind), d.blame, d.tensor, d.message) for d in result.divergences]


@pytest.mark.parametrize(
    "make",
    [
        lambda: kv_session(SESSION),
        lambda: kv_session(LATE_SESSION),
        embedding_case,
        view_of_intermediate_case,
    ],
    ids=["session", "late_session", "embedding", "view"],
)
def test_cases_are_clean(runner: LockstepRunner, make: Callable[[], Case]) -> None:
    result = runner.run(make())
    assert result.ok, summary(result)


def test_refused_overflow_keeps_the_caches(runner: LockstepRunner) -> None:
    # Step 4 runs past the cache's end: both refuse it, and step 5 (a reset) is checked
    # against the caches as they were before step 4 (per-op check of the cache state).
    case = kv_session(SESSION)
    model = ContractModel(case.graph)
    for step in case.steps[:4]:
        model.step(step)
    refused = model.try_step(case.steps[4])
    assert isinstance(refused, InputError) and refused.key() == ("sdpa", "cache_overflow")
    result = runner.run(case)
    assert all(b.error for b in result.steps[4].backends.values())
    assert result.ok, summary(result)


@pytest.mark.parametrize(
    ("backend", "session", "plant"),
    [
        (
            "vulkan",
            SESSION,
            lambda: glsl_substitution(
                "sdpa_update_cache", "uint(input_pos) + s;", "uint(input_pos) + s + 1;"
            ),
        ),
        (
            "webgpu",
            LATE_SESSION,
            lambda: wgsl_substitution(
                "sdpa_update_cache", "params.input_pos + s;", "params.input_pos + s - 1u;"
            ),
        ),
    ],
    ids=["vulkan_row_plus_1", "webgpu_row_minus_1"],
)
def test_kv_write_at_the_wrong_position_is_caught(
    backend: str, session: list[tuple[int, int]], plant: Any
) -> None:
    with plant() as runner:
        result = runner.run(kv_session(session))
    found = summary(result)
    assert result.divergences, "the planted cache write went unnoticed"
    assert {d.blame for d in result.divergences} == {backend}, found
    caches = [
        d
        for d in result.divergences
        if d.kind == Kind.NUMERIC and d.tensor in ("k_cache", "v_cache")
    ]
    assert caches, found
    # Found at the first step, on the op that writes the caches.
    assert caches[0].step == 0 and caches[0].op == "sdpa", found


@contextmanager
def stale_input_pos_in_webgpu_sdpa_hook() -> Iterator[None]:
    """The WebGPU sdpa hook reads the input_pos of the step before (as a hook that cached
    the value instead of reading the SymInt would)."""
    original = WebGPUGraph.int_or_symint

    def int_or_symint(self: WebGPUGraph, node: OpNode, slot: str) -> Callable[[], int]:
        read = original(self, node, slot)
        if node.op != "sdpa_with_kv_cache" or slot != "input_pos":
            return read
        seen = [read()]

        def previous() -> int:
            if read() != seen[-1]:
                seen.append(read())
            return seen[-2] if len(seen) > 1 else seen[-1]

        return previous

    WebGPUGraph.int_or_symint = int_or_symint  # type: ignore[method-assign]
    try:
        yield
    finally:
        WebGPUGraph.int_or_symint = original  # type: ignore[method-assign]


def test_stale_input_pos_in_a_hook_is_caught(runner: LockstepRunner) -> None:
    with stale_input_pos_in_webgpu_sdpa_hook():
        result = runner.run(kv_session(SESSION))
    found = summary(result)
    assert result.divergences, "the stale input_pos went unnoticed"
    assert {d.blame for d in result.divergences} == {"webgpu"}, found
    # Step 1 (decode at 5) writes its k and v at row 0, the previous step's position.
    first = min(d.step for d in result.divergences)
    assert first == 1, found
    kinds = {d.kind for d in result.divergences if d.step == 1}
    assert Kind.NUMERIC in kinds, found
    assert any(d.tensor in ("k_cache", "v_cache") for d in result.divergences if d.step == 1)


def test_token_id_check_missing_on_one_backend_is_caught(
    runner: LockstepRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without its host check, WebGPU accepts the out-of-vocabulary id of step 2.
    monkeypatch.setattr(WebGPUGraph, "add_input_check", lambda self, node, tensor, fn: None)
    result = runner.run(embedding_case())
    found = summary(result)
    asymmetry = [d for d in result.divergences if d.kind == Kind.ERROR_ASYMMETRY]
    assert asymmetry and asymmetry[0].blame == "webgpu" and asymmetry[0].step == 2, found


def test_sym_size_reading_a_stale_intermediate_is_caught(runner: LockstepRunner) -> None:
    # Upstream WebGPU evaluates sym_size in a SymInt phase before any tensor hook
    # (docs/design.md §8.2). Planted: the sym_size hook fires on the graph input instead of its own
    # (intermediate) x and runs before every other hook, so it reads the rms_norm output's
    # dims before the rms_norm hook has updated them.
    original = WebGPUGraph.add_resize_hook

    def add_resize_hook(self: WebGPUGraph, node: OpNode, triggers: Any, fn: Any) -> None:
        if node.op != "sym_size":
            return original(self, node, triggers, fn)
        original(self, node, list(self.graph.inputs), fn)
        self._hooks.insert(0, self._hooks.pop())

    WebGPUGraph.add_resize_hook = add_resize_hook  # type: ignore[method-assign]
    try:
        result = runner.run(view_of_intermediate_case())
    finally:
        WebGPUGraph.add_resize_hook = original  # type: ignore[method-assign]
    found = summary(result)
    assert result.divergences, "the stale sym_size went unnoticed"
    assert {d.blame for d in result.divergences} == {"webgpu"}, found
    # Step 1 (S 8 -> 5): the view gets the stale S = 8 for 5 rows and refuses the step.
    first = [d for d in result.divergences if d.step == min(x.step for x in result.divergences)]
    assert first[0].step == 1 and first[0].kind == Kind.ERROR_ASYMMETRY, found


def test_wrong_sym_size_value_is_caught(runner: LockstepRunner) -> None:
    # A sym_size nothing consumes: only the SymInt oracle can see its value. Planted: the
    # WebGPU hook reports x's max dim instead of its live one.
    rng = np.random.default_rng(8)
    b = GraphBuilder()
    x = b.input("x", "float32", [1, 8, 16])
    b.op("sym_size", name="seq", x=x, dim=b.int(1))
    b.output(b.op("sigmoid", name="act", x=x))
    case = Case(
        b.build(),
        [{"x": rng.standard_normal((1, s, 16)).astype(np.float32)} for s in (8, 3)],
        name="unused sym_size",
    )
    assert runner.run(case).ok

    def max_dim(graph: WebGPUGraph, node: OpNode, dispatches: list[Any]) -> None:
        graph.symints[node.outputs["out"]] = graph.arg_tensor(node, "x").dims[1]

    with webgpu_after_hook("sym_size", max_dim):
        result = runner.run(case)
    found = summary(result)
    assert [(d.step, d.kind, d.blame, d.tensor) for d in result.divergences] == [
        (1, Kind.CUR_DIMS, "webgpu", "seq.out")
    ], found
