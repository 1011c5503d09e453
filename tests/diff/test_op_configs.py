"""The op configurations upstream tests that graph format 1 could not express at first
(issue 14 item 6), each checked against a hand-made expectation on both backends.

- add/mul with a float scalar operand (`x + 3.0`);
- view_copy with one `-1` size, inferred from the live numel;
- embedding_q4gsw's `is_linear_weight = 0` nibble layout (the even element in the high
  nibble), against a hand-packed table;
- `sdpa`, upstream's `et_vk.sdpa`: non-causal attention with an additive mask and different
  query and key lengths, against a numpy softmax;
- the standalone `update_cache`.

The generic suites (test_parity.py, test_rejections.py, the architecture and shader tests)
pick these up through the ops' families and models; what is here pins each configuration's
meaning, which a generic oracle shared by the contract and both backends could not.
`CONFIG_BAD_GRAPHS` are the load-time refusals the contract predicts, as in
test_rejections.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from graph_format import Graph, GraphBuildError, Runtime
from harness.check.contract import ContractModel, expected_build_error
from harness.check.divergence import Kind
from harness.check.lockstep import LockstepRunner, error_key
from harness.check.verdict import assert_parity
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from tests.plants import glsl_substitution, vulkan_node_patch, wgsl_substitution
from vulkan_ref.graph import ComputeGraph, DispatchNode

pytestmark = pytest.mark.gpu

F32 = np.float32


def _f32(*dims: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(dims).astype(F32)


def _run(rt: Runtime, graph: Graph, steps: list[dict[str, np.ndarray | int]]) -> list[dict]:
    """Each step's graph outputs on one runtime."""
    loaded = rt.load(graph)
    return [loaded.execute(step).outputs for step in steps]


# ---------------------------------------------------------------------------- scalar operands


@pytest.mark.parametrize(("op", "scalar"), [("add", 3.0), ("add", 0.1), ("mul", -1234.56)])
def test_scalar_operand(op: str, scalar: float, runtimes: list[Runtime]) -> None:
    """`x + 3.0` and `x * s`: the f32 result of x with the scalar rounded to f32, at two live
    shapes (the kernel follows the live numel)."""
    b = GraphBuilder()
    x = b.input("x", "float32", [3, 40])
    b.output(b.op(op, name="op", a=x, scalar=b.float(scalar, "s")))
    graph = b.build()
    steps = [{"x": _f32(3, 40)}, {"x": _f32(2, 7, seed=1)}]
    s = F32(scalar)
    for rt in runtimes:
        for step, outputs in zip(steps, _run(rt, graph, steps), strict=True):
            expected = step["x"] + s if op == "add" else step["x"] * s
            np.testing.assert_array_equal(outputs["op.out"], expected, err_msg=rt.name)


@pytest.mark.parametrize(("op", "scalar"), [("add", 3.0), ("add", 0.1), ("mul", -1234.56)])
def test_scalar_operand_in_half_precision(
    op: str, scalar: float, runtimes: list[Runtime], runner: LockstepRunner
) -> None:
    """`x + 3.0` with x float16 (PyTorch's half tensor with a Python float): the f32 result of
    x with the scalar rounded to f32, rounded once to f16 (WGSL lets a conversion pick either
    neighbour: within one f16 ULP), and clean under every oracle."""
    b = GraphBuilder()
    x = b.input("x", "float16", [3, 40])
    b.output(b.op(op, name="op", a=x, scalar=b.float(scalar, "s")))
    graph = b.build()
    steps = [{"x": _f32(3, 40).astype(np.float16)}, {"x": _f32(2, 7, seed=1).astype(np.float16)}]
    s = F32(scalar)
    for rt in runtimes:
        for step, outputs in zip(steps, _run(rt, graph, steps), strict=True):
            x32 = step["x"].astype(F32)
            exact = x32 + s if op == "add" else x32 * s
            assert outputs["op.out"].dtype == np.float16
            np.testing.assert_allclose(outputs["op.out"], exact, rtol=2.0**-10, err_msg=rt.name)
    assert_parity(runner.run(Case(graph, steps, name=f"{op}_scalar_f16")))


# ---------------------------------------------------------------------------- interleaved rope


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_interleaved_rope_width_not_a_multiple_of_4(dtype: str, runner: LockstepRunner) -> None:
    """apply_rotary_emb_interleaved with C = 14 (C % 4 == 2; upstream's WebGPU op takes any
    even C): each (real, imag) pair turned by its token's (cos, sin), at two live shapes."""
    b = GraphBuilder()
    x = b.input("x", dtype, [2, 5, 14])
    freqs = b.input("freqs_cis", dtype, [5, 14])
    b.output(b.op("apply_rotary_emb_interleaved", name="rope", x=x, freqs_cis=freqs))
    graph = b.build()
    steps = [
        {"x": _f32(2, 5, 14).astype(dtype), "freqs_cis": _f32(5, 14, seed=2).astype(dtype)},
        {"x": _f32(1, 3, 14, seed=3).astype(dtype), "freqs_cis": _f32(3, 14).astype(dtype)},
    ]
    result = runner.run(Case(graph, steps, name="rope_interleaved_c14"))
    assert_parity(result)
    for rt in runner.runtimes:
        for step, outputs in zip(steps, _run(rt, graph, steps), strict=True):
            xs, fs = step["x"].astype(np.float64), step["freqs_cis"].astype(np.float64)
            r, i, c, s = xs[..., 0::2], xs[..., 1::2], fs[None, :, 0::2], fs[None, :, 1::2]
            want = np.stack([r * c - i * s, r * s + i * c], axis=-1).reshape(xs.shape)
            got = outputs["rope.out"].astype(np.float64)
            # f32 arithmetic: within a few f32 ULPs of the exact value; f16: one f16 rounding.
            tol = 2.0**-10 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=rt.name)


# ---------------------------------------------------------------------------- view_copy -1


def _view_infer(sizes: list[int], out_dims: list[int]) -> Graph:
    """view_copy of x [1, 8, 64] to literal `sizes` (one may be -1)."""
    b = GraphBuilder()
    x = b.input("x", "float32", [1, 8, 64])
    b.output(
        b.op("view_copy", name="view", x=x, sizes=[b.int(v) for v in sizes], out_dims=out_dims)
    )
    return b.build()


@pytest.mark.parametrize(
    ("sizes", "out_dims"), [([-1, 16], [32, 16]), ([2, -1, 8], [2, 32, 8]), ([1, -1], [1, 512])]
)
def test_view_infers_minus_one(
    sizes: list[int], out_dims: list[int], runtimes: list[Runtime]
) -> None:
    """A -1 takes what the live numel leaves, step by step (S = 8, then 2, then 6)."""
    graph = _view_infer(sizes, out_dims)
    steps = [{"x": _f32(1, s, 64, seed=s)} for s in (8, 2, 6)]
    for rt in runtimes:
        for step, outputs in zip(steps, _run(rt, graph, steps), strict=True):
            expected = step["x"].reshape(sizes)  # numpy's -1 is the same inference
            assert outputs["view.out"].shape == expected.shape, rt.name
            np.testing.assert_array_equal(outputs["view.out"], expected, err_msg=rt.name)


def test_view_minus_one_not_dividing_is_refused_alike(runner: LockstepRunner) -> None:
    """[-1, 48] holds S * 64 elements for S = 3 but not for S = 1: both backends refuse that
    step as the contract does ("numel"), and the step after it runs."""
    graph = _view_infer([-1, 48], [11, 48])
    good, bad = {"x": _f32(1, 3, 64)}, {"x": _f32(1, 1, 64)}
    result = runner.run(Case(graph, [good, bad, good], name="view_infer_numel"))
    model = ContractModel(graph)
    model.step(good)
    assert error_key(model.try_step(bad)) == ("InputError", "view", "numel")
    refused = result.steps[1]
    assert refused.expected_error is not None
    assert all(b.error for b in refused.backends.values()), refused.backends
    assert_parity(result)


# ---------------------------------------------------------------------------- embedding nibbles

# Two rows of D = 4 packed by hand as upstream packs is_linear_weight = 0,
# byte = (even + 8) << 4 | (odd + 8): row 0 holds [1, -2, 3, -8], row 1 [7, 0, -1, 5].
HAND_PACKED = np.array([[0x96, 0xB0], [0xF8, 0x7D]], np.uint8)
HAND_SCALES = np.array([[0.5, 2.0], [1.0, -0.25]], F32)  # group_size 2
# The dequantized rows in each nibble order (the low-nibble reading of the same bytes:
# row 0 [-2, 1, -8, 3], row 1 [0, 7, 5, -1]).
HAND_ROWS = {
    0: np.array([[0.5, -1.0, 6.0, -16.0], [7.0, 0.0, 0.25, -1.25]], F32),
    1: np.array([[-1.0, 0.5, -16.0, 6.0], [0.0, 7.0, -1.25, 0.25]], F32),
}


def _embedding_graph(layout: int | None) -> Graph:
    b = GraphBuilder()
    ids = b.input("ids", "int32", [1, 3])
    b.output(
        b.op(
            "embedding_q4gsw",
            name="emb",
            weight=b.constant("weight", HAND_PACKED),
            scales=b.constant("scales", HAND_SCALES),
            group_size=b.int(2),
            indices=ids,
            is_linear_weight=None if layout is None else b.int(layout, "layout"),
            out_dims=[1, 3, 4],
        )
    )
    return b.build()


@pytest.mark.parametrize("layout", [0, 1, None])
def test_embedding_nibble_layout(layout: int | None, runtimes: list[Runtime]) -> None:
    """The hand-packed table read in the order is_linear_weight names (1 when left out)."""
    graph = _embedding_graph(layout)
    ids = np.array([[1, 0, 1]], np.int32)
    expected = HAND_ROWS[1 if layout is None else layout][ids]
    for rt in runtimes:
        (outputs,) = _run(rt, graph, [{"ids": ids}])
        np.testing.assert_array_equal(outputs["emb.out"], expected, err_msg=rt.name)


# ---------------------------------------------------------------------------- update_cache


def _update_cache_graph(*, state: bool = True, cache_heads: int = 2) -> Graph:
    """value [1, 4, 2, 3] written into a cache [1, 6, H, 3] that starts as 0 .. 35."""
    b = GraphBuilder()
    value = b.input("value", "float32", [1, 4, 2, 3])
    dims = [1, 6, cache_heads, 3]
    initial = np.arange(np.prod(dims), dtype=F32).reshape(dims)
    cache = b.state("cache", "float32", dims, initial) if state else b.constant("cache", initial)
    b.op("update_cache", name="update", value=value, cache=cache, input_pos=b.symint_input("pos"))
    b.output(cache if state else b.op("silu", x=value))  # a constant is no graph output
    return b.build()


def test_update_cache_writes_rows_at_input_pos(runtimes: list[Runtime]) -> None:
    """Rows pos .. pos + S - 1 take value's rows, the others keep what they held, step after
    step (S = 3 at 2, then S = 1 at 0, then S = 4 reaching the end)."""
    graph = _update_cache_graph()
    steps: list[dict[str, np.ndarray | int]] = [
        {"value": -_f32(1, 3, 2, 3, seed=1), "pos": 2},
        {"value": -_f32(1, 1, 2, 3, seed=2), "pos": 0},
        {"value": -_f32(1, 4, 2, 3, seed=3), "pos": 2},
    ]
    expected = np.arange(36, dtype=F32).reshape(1, 6, 2, 3)
    for rt in runtimes:
        cache = expected.copy()
        for step, outputs in zip(steps, _run(rt, graph, steps), strict=True):
            value, pos = step["value"], int(step["pos"])
            assert isinstance(value, np.ndarray)
            cache[0, pos : pos + value.shape[1]] = value[0]
            np.testing.assert_array_equal(outputs["cache"], cache, err_msg=rt.name)


def test_update_cache_past_the_end_is_refused_alike(runner: LockstepRunner) -> None:
    """input_pos + S past the cache: both backends refuse the step as the contract does
    ("cache_overflow") and the cache keeps its rows (the step after it is checked)."""
    graph = _update_cache_graph()
    good = {"value": _f32(1, 2, 2, 3), "pos": 1}
    bad = {"value": _f32(1, 3, 2, 3), "pos": 4}
    model = ContractModel(graph)
    model.step(good)
    assert error_key(model.try_step(bad)) == ("InputError", "update", "cache_overflow")
    result = runner.run(Case(graph, [good, bad, good], name="update_cache_overflow"))
    assert all(b.error for b in result.steps[1].backends.values()), result.steps[1].backends
    assert_parity(result)


# ---------------------------------------------------------------------------- fused_sdpa


def _fused_sdpa_graph(mask_dims: list[int] | None, *, k_heads: int = 2) -> Graph:
    """fused_sdpa of q [1, 2, 6, 8] over k, v [1, H, 10, 8] with an optional attn_mask input."""
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 2, 6, 8])
    k = b.input("k", "float32", [1, k_heads, 10, 8])
    v = b.input("v", "float32", [1, k_heads, 10, 8])
    mask = None if mask_dims is None else b.input("mask", "float32", mask_dims)
    b.output(b.op("fused_sdpa", name="attn", q=q, k=k, v=v, attn_mask=mask))
    return b.build()


def _numpy_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None
) -> np.ndarray:
    """softmax(q k^T / sqrt(D) + mask) v in float64, as upstream's op test computes it."""
    scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def _attention_step(seq: int, kv_len: int, mask_dims: list[int] | None, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    step = {
        name: rng.standard_normal(dims).astype(F32)
        for name, dims in (
            ("q", [1, 2, seq, 8]),
            ("k", [1, 2, kv_len, 8]),
            ("v", [1, 2, kv_len, 8]),
        )
    }
    if mask_dims is not None:
        step["mask"] = rng.uniform(-2, 2, mask_dims).astype(F32)
    return step


@pytest.mark.parametrize("mask", [None, "keys", "full"])
def test_fused_sdpa_mask_and_lengths(mask: str | None, runtimes: list[Runtime]) -> None:
    """Non-causal attention with an additive mask, S != L, both moving between steps: the
    numpy softmax of upstream's test (within float32 rounding of it)."""

    def dims(seq: int, kv_len: int) -> list[int] | None:
        return {None: None, "keys": [1, 1, 1, kv_len], "full": [1, 2, seq, kv_len]}[mask]

    graph = _fused_sdpa_graph(dims(6, 10))
    steps = [
        _attention_step(s, n, dims(s, n), seed)
        for seed, (s, n) in enumerate([(6, 10), (3, 7), (1, 10)])
    ]
    for rt in runtimes:
        for step, outputs in zip(steps, _run(rt, graph, steps), strict=True):
            expected = _numpy_attention(step["q"], step["k"], step["v"], step.get("mask"))
            np.testing.assert_allclose(
                outputs["attn.out"], expected, rtol=1e-5, atol=1e-6, err_msg=rt.name
            )


def test_fused_sdpa_masked_key_drops_out(runtimes: list[Runtime]) -> None:
    """A key row whose mask is -1e4 for every query gets no weight: the output is the
    attention over the other keys alone."""
    graph = _fused_sdpa_graph([1, 1, 1, 10])
    step = _attention_step(4, 9, [1, 1, 1, 9], seed=7)
    step["mask"] = np.zeros((1, 1, 1, 9), F32)
    step["mask"][..., 3] = -1e4
    keep = [c for c in range(9) if c != 3]
    expected = _numpy_attention(step["q"], step["k"][..., keep, :], step["v"][..., keep, :], None)
    for rt in runtimes:
        (outputs,) = _run(rt, graph, [step])
        np.testing.assert_allclose(
            outputs["attn.out"], expected, rtol=1e-5, atol=1e-6, err_msg=rt.name
        )


def test_fused_sdpa_mask_not_following_is_refused_alike(runner: LockstepRunner) -> None:
    """A live mask [1, 1, 1, 7] under L = 9: both backends refuse it as the contract does."""
    graph = _fused_sdpa_graph([1, 1, 1, 10])
    good = _attention_step(2, 7, [1, 1, 1, 7], seed=1)
    bad = {**_attention_step(2, 9, [1, 1, 1, 9], seed=2), "mask": np.zeros((1, 1, 1, 7), F32)}
    model = ContractModel(graph)
    model.step(good)
    assert error_key(model.try_step(bad)) == ("InputError", "attn", "mask_shape")
    result = runner.run(Case(graph, [good, bad, good], name="fused_sdpa_mask_shape"))
    assert all(b.error for b in result.steps[1].backends.values()), result.steps[1].backends
    assert_parity(result)


# ---------------------------------------------------------------------------- planted bugs


def _kinds_blamed(runner: LockstepRunner, case: Case, blame: str) -> set[Kind]:
    """The divergence classes of a run blamed on one side."""
    return {d.kind for d in runner.run(case).divergences if d.blame == blame}


def _fused_sdpa_case() -> Case:
    """S and L apart and moving: (6, 10), (3, 7), (1, 10), with a mask over the keys."""
    graph = _fused_sdpa_graph([1, 1, 1, 10])
    steps = [
        _attention_step(s, n, [1, 1, 1, n], seed)
        for seed, (s, n) in enumerate([(6, 10), (3, 7), (1, 10)])
    ]
    return Case(graph, steps, name="fused_sdpa")


def test_planted_config_cases_are_clean(runner: LockstepRunner) -> None:
    for case in (_fused_sdpa_case(), Case(_update_cache_graph(), _UPDATE_STEPS, name="update")):
        result = runner.run(case)
        assert result.ok, [d.message for d in result.divergences]


def test_softmax_over_the_query_length_is_caught() -> None:
    """The Vulkan softmax normalizes over S columns instead of L: the bug of a kernel that
    was only ever run with equal query and key lengths (the kv-cache attention's)."""
    with glsl_substitution(
        "fused_sdpa_softmax", "const uint n = k_meta.sizes.y;", "const uint n = q_meta.sizes.y;"
    ) as runner:
        kinds = _kinds_blamed(runner, _fused_sdpa_case(), "vulkan")
    assert kinds & {Kind.NUMERIC, Kind.NAN_INF, Kind.STALE_READ}, kinds


def test_mask_read_without_its_broadcast_is_caught() -> None:
    """WebGPU reads the mask as if it were the full [B, H, S, L] (no broadcast strides)."""
    full = "let m = (bh / params.heads) * ms.x + (bh % params.heads) * ms.y + s * ms.z + l * ms.w;"
    dense = "let m = row * params.kv_len + l + 0u * ms.x;"
    with wgsl_substitution("fused_sdpa_scores_masked", full, dense) as runner:
        kinds = _kinds_blamed(runner, _fused_sdpa_case(), "webgpu")
    assert kinds & {Kind.NUMERIC, Kind.NAN_INF, Kind.STALE_READ}, kinds


_UPDATE_STEPS: list[dict[str, np.ndarray | int]] = [
    {"value": _f32(1, 3, 2, 3), "pos": 0},
    {"value": _f32(1, 2, 2, 3, seed=1), "pos": 5},  # past the end: refused
    {"value": _f32(1, 1, 2, 3, seed=2), "pos": 3},
]


def test_update_cache_accepting_an_overflow_is_caught(runner: LockstepRunner) -> None:
    """Vulkan forgets the cache_overflow check: it accepts the step the contract refuses."""

    def no_checks(graph: ComputeGraph, node: DispatchNode) -> None:
        node.resize_fn = lambda g: None

    with vulkan_node_patch("update_cache", no_checks):
        kinds = _kinds_blamed(
            runner, Case(_update_cache_graph(), _UPDATE_STEPS, name="u"), "vulkan"
        )
    assert Kind.ERROR_ASYMMETRY in kinds, kinds


# ---------------------------------------------------------------------------- refusals


def _binary_both_operands() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 16])
    b.output(b.op("add", a=x, b=x, scalar=b.float(2.0)))
    return b.build()


def _binary_no_operand() -> Graph:
    b = GraphBuilder()
    b.output(b.op("mul", a=b.input("x", "float32", [4, 16])))
    return b.build()


def _binary_scalar_out_dims() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 16])
    b.output(b.op("mul", a=x, scalar=b.float(2.0), out_dims=[1, 16]))
    return b.build()


def _binary_scalar_too_large() -> Graph:
    b = GraphBuilder()
    b.output(b.op("add", a=b.input("x", "float32", [4, 16]), scalar=b.float(1e39)))
    return b.build()


CONFIG_BAD_GRAPHS: dict[str, Callable[[], Graph]] = {
    "fused_sdpa_mask_width": lambda: _fused_sdpa_graph([1, 1, 1, 9]),
    "fused_sdpa_mask_rank": lambda: _fused_sdpa_graph([1, 10]),
    "fused_sdpa_k_heads": lambda: _fused_sdpa_graph(None, k_heads=1),
    "update_cache_not_state": lambda: _update_cache_graph(state=False),
    "update_cache_heads": lambda: _update_cache_graph(cache_heads=3),
    "embedding_layout_not_a_bool": lambda: _embedding_graph(2),
    "view_two_minus_ones": lambda: _view_infer([-1, 4, -1], [8, 4, 16]),
    "view_minus_two": lambda: _view_infer([-2, 16], [32, 16]),
    "binary_both_operands": _binary_both_operands,
    "binary_no_operand": _binary_no_operand,
    "binary_scalar_out_dims": _binary_scalar_out_dims,
    "binary_scalar_too_large": _binary_scalar_too_large,
}


@pytest.mark.parametrize("name", sorted(CONFIG_BAD_GRAPHS))
def test_backends_reject_config_alike(
    name: str, runtimes: list[Runtime], runner: LockstepRunner
) -> None:
    graph = CONFIG_BAD_GRAPHS[name]()
    expected = expected_build_error(graph)
    assert expected is not None, "the contract model must reject this graph"
    for rt in runtimes:
        with pytest.raises(GraphBuildError) as info:
            rt.load(graph)
        assert error_key(info.value) == error_key(expected), f"{rt.name}: {info.value}"
    assert_parity(runner.run(Case(graph, [], name=name)))
