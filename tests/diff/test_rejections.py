"""Rejections: graphs both backends must refuse at load, and steps they must refuse at run time.

Each `BAD_GRAPHS` entry builds a graph that is well formed (the format accepts it) but that an
op cannot run. The contract model predicts the `GraphBuildError`; both backends must raise one
with the same key, and the lockstep runner must report no divergence for it. Each `BAD_STEPS`
entry is a step an op must refuse (`InputError` or `ResizeError` with the model's key) between
two valid ones. Every registered case family also gets invalid steps mixed into its sequences
(`harness.gen.blocks.invalid_steps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_format import Graph, GraphBuildError, Runtime
from harness.check.contract import ContractModel, ModelStep, expected_build_error
from harness.check.lockstep import LockstepRunner, error_key
from harness.check.verdict import assert_parity
from harness.families import FAMILIES
from harness.gen.blocks import invalid_steps
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case

pytestmark = pytest.mark.gpu

F32 = np.float32


def _rms_norm_weight_too_short() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 16])
    w = b.constant("w", np.ones(15, F32))
    b.output(b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6)))
    return b.build()


def _rms_norm_out_dims() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [4, 16])
    w = b.constant("w", np.ones(16, F32))
    b.output(b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6), out_dims=[4, 17]))
    return b.build()


def _rms_norm_int_input() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "int32", [4, 16])
    w = b.constant("w", np.ones(16, F32))
    b.output(b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6), out_dims=[4, 16]))
    return b.build()


def _add_not_broadcast() -> Graph:
    b = GraphBuilder()
    a = b.input("a", "float32", [4, 16])
    c = b.input("c", "float32", [3, 16])
    b.output(b.op("add", a=a, b=c, out_dims=[4, 16]))
    return b.build()


def _mul_wrong_out() -> Graph:
    b = GraphBuilder()
    a = b.input("a", "float32", [4, 1])
    c = b.input("c", "float32", [1, 16])
    b.output(b.op("mul", a=a, b=c, out_dims=[4, 1]))
    return b.build()


def _sigmoid_int_input() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "int32", [4, 16])
    b.output(b.op("sigmoid", x=x, out_dims=[4, 16]))
    return b.build()


def _silu_mul_up_dims() -> Graph:
    b = GraphBuilder()
    gate, up = b.input("gate", "float32", [4, 16]), b.input("up", "float32", [4, 8])
    b.output(b.op("silu_mul", gate=gate, up=up, out_dims=[4, 16]))
    return b.build()


def _embedding(
    *,
    weight: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    group_size: int = 16,
    ids_dtype: str = "int32",
    computed_ids: bool = False,
) -> Graph:
    """A [20-token, D = 32] embedding, with one part replaced."""
    b = GraphBuilder()
    w = b.constant("weight", np.zeros((20, 16), np.uint8) if weight is None else weight)
    s = b.constant("scales", np.ones((20, 2), F32) if scales is None else scales)
    ids = b.input("tokens", ids_dtype, [1, 8])
    if computed_ids:
        ids = b.op("view_copy", x=ids, sizes=[b.int(8)], out_dims=[8], out_dtype=ids_dtype)
    dims = [*b.dims(ids), 32]
    b.output(
        b.op(
            "embedding_q4gsw",
            weight=w,
            scales=s,
            group_size=b.int(group_size, "group_size"),
            indices=ids,
            out_dims=dims,
        )
    )
    return b.build()


def _rope(
    *,
    head_dim: int = 16,
    k_seq: int = 6,
    freqs_width: int | None = None,
    sin_rows: int = 6,
) -> Graph:
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, 6, 4, head_dim])
    xk = b.input("xk", "float32", [1, k_seq, 2, head_dim])
    width = head_dim // 2 if freqs_width is None else freqs_width
    cos = b.input("freqs_cos", "float32", [6, width])
    sin = b.input("freqs_sin", "float32", [sin_rows, width])
    b.output(
        *b.op(
            "apply_rotary_emb",
            xq=xq,
            xk=xk,
            freqs_cos=cos,
            freqs_sin=sin,
            out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
        )
    )
    return b.build()


def _rope_hf(*, table_width: int = 16, sin_width: int | None = None) -> Graph:
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, 6, 4, 16])
    xk = b.input("xk", "float32", [1, 6, 2, 16])
    cos = b.constant("cos", np.ones((32, table_width), F32))
    sin = b.constant("sin", np.ones((32, sin_width or table_width), F32))
    b.output(
        *b.op(
            "apply_rotary_emb_hf",
            xq=xq,
            xk=xk,
            cos=cos,
            sin=sin,
            start_pos=b.symint_input("start_pos"),
            out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
        )
    )
    return b.build()


def _view(
    *, sizes: list[int] | None = None, x_dtype: str = "float32", out_dtype: str | None = None
) -> Graph:
    b = GraphBuilder()
    x = b.input("x", x_dtype, [1, 8, 64])
    n = b.symint_input("n")
    size_values = [n if v == -1 else b.int(v) for v in (sizes or [1, -1, 4, 16])]
    b.output(
        b.op(
            "view_copy",
            x=x,
            sizes=size_values,
            out_dims=[1, 8, 4, 16],
            out_dtype=out_dtype or x_dtype,
        )
    )
    return b.build()


def _sym_size_dim_out_of_range() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [1, 8, 64])
    seq = b.op("sym_size", x=x, dim=b.int(3))
    b.output(b.op("view_copy", x=x, sizes=[seq, b.int(64)], out_dims=[8, 64]))
    return b.build()


def _sdpa(
    *,
    q: tuple[int, ...] = (1, 6, 4, 16),
    k: tuple[int, ...] = (1, 6, 2, 16),
    v: tuple[int, ...] | None = None,
    k_cache: tuple[int, ...] = (1, 32, 2, 16),
    v_cache: tuple[int, ...] | None = None,
    state: bool = True,
) -> Graph:
    b = GraphBuilder()
    args = {
        "q": b.input("q", "float32", q),
        "k": b.input("k", "float32", k),
        "v": b.input("v", "float32", v or k),
    }
    for name, dims in (("k_cache", k_cache), ("v_cache", v_cache or k_cache)):
        args[name] = (
            b.state(name, "float32", dims) if state else b.constant(name, np.zeros(dims, F32))
        )
    b.output(b.op("sdpa_with_kv_cache", input_pos=b.symint_input("input_pos"), out_dims=q, **args))
    return b.build()


def _linear(
    *,
    x_dims: tuple[int, ...] = (3, 64),
    x_dtype: str = "float32",
    weight: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    group_size: int = 32,
    bias: np.ndarray | None = None,
    out_dims: tuple[int, ...] | None = None,
) -> Graph:
    """A linear_q4gsw with N = 6 outputs over x's K, with any one part made wrong."""
    n, k = 6, x_dims[-1]
    b = GraphBuilder()
    x = b.input("x", x_dtype, list(x_dims))
    w = weight if weight is not None else np.full((n, (k + 7) // 8 * 4), 0x88, np.uint8)
    s = scales if scales is not None else np.ones((-(-k // group_size), 8), F32)
    args = {
        "x": x,
        "weight": b.constant("weight", w),
        "scales": b.constant("scales", s),
        "group_size": b.int(group_size, "group_size"),
    }
    if bias is not None:
        args["bias"] = b.constant("bias", bias)
    dims = out_dims or (*x_dims[:-1], n)
    b.output(b.op("linear_q4gsw", out_dims=list(dims), **args))
    return b.build()


def _rope_interleaved(
    *,
    width: int = 16,
    x_dims: list[int] | None = None,
    freqs_dims: list[int] | None = None,
    out_dims: list[int] | None = None,
) -> Graph:
    """apply_rotary_emb_interleaved of x [2, 6, C] with freqs_cis [6, C], one part replaced."""
    b = GraphBuilder()
    x = b.input("x", "float32", x_dims or [2, 6, width])
    freqs = b.input("freqs_cis", "float32", freqs_dims or [6, width])
    b.output(b.op("apply_rotary_emb_interleaved", x=x, freqs_cis=freqs, out_dims=out_dims))
    return b.build()


def _rope_pos(
    *,
    positions: tuple[str, list[int]] = ("int32", [6]),
    factors: np.ndarray | None = None,
    theta_base: float = 10000.0,
    xk_dims: list[int] | None = None,
) -> Graph:
    """apply_rotary_emb_pos of xq [1, 6, 4, 16], xk [1, 6, 2, 16], one part replaced."""
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, 6, 4, 16])
    xk = b.input("xk", "float32", xk_dims or [1, 6, 2, 16])
    b.output(
        *b.op(
            "apply_rotary_emb_pos",
            xq=xq,
            xk=xk,
            positions=b.input("positions", *positions),
            theta_base=b.float(theta_base),
            freq_scale=b.float(1.0),
            freq_factors=None if factors is None else b.constant("ff", factors),
            out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
        )
    )
    return b.build()


BAD_GRAPHS: dict[str, Callable[[], Graph]] = {
    "rms_norm_weight_too_short": _rms_norm_weight_too_short,
    "rms_norm_out_dims": _rms_norm_out_dims,
    "rms_norm_int_input": _rms_norm_int_input,
    "add_not_broadcast": _add_not_broadcast,
    "mul_wrong_out": _mul_wrong_out,
    "sigmoid_int_input": _sigmoid_int_input,
    "silu_mul_up_dims": _silu_mul_up_dims,
    "embedding_float_weight": lambda: _embedding(weight=np.zeros((20, 16), F32)),
    "embedding_scales_shape": lambda: _embedding(scales=np.ones((20, 4), F32)),
    "embedding_scales_rows": lambda: _embedding(scales=np.ones((19, 2), F32)),
    "embedding_group_size": lambda: _embedding(group_size=12),
    "embedding_float_ids": lambda: _embedding(ids_dtype="float32"),
    "embedding_ids_not_an_input": lambda: _embedding(computed_ids=True),
    "rope_odd_head_dim": lambda: _rope(head_dim=15),
    "rope_k_seq": lambda: _rope(k_seq=5),
    "rope_freqs_width": lambda: _rope(freqs_width=16),
    "rope_sin_dims": lambda: _rope(sin_rows=5),
    "rope_hf_table_width": lambda: _rope_hf(table_width=8),
    "rope_interleaved_odd_width": lambda: _rope_interleaved(width=15),
    "rope_interleaved_rank": lambda: _rope_interleaved(x_dims=[6, 16]),
    "rope_interleaved_freqs_dims": lambda: _rope_interleaved(freqs_dims=[6, 8]),
    "rope_interleaved_freqs_rows": lambda: _rope_interleaved(freqs_dims=[5, 16]),
    "rope_interleaved_out_dims": lambda: _rope_interleaved(out_dims=[2, 6, 12]),
    "rope_hf_sin_width": lambda: _rope_hf(sin_width=8),
    "rope_pos_float_positions": lambda: _rope_pos(positions=("float32", [6])),
    "rope_pos_positions_length": lambda: _rope_pos(positions=("int32", [5])),
    "rope_pos_f16_factors": lambda: _rope_pos(factors=np.ones(8, np.float16)),
    "rope_pos_factors_length": lambda: _rope_pos(factors=np.ones(16, F32)),
    "rope_pos_theta_zero": lambda: _rope_pos(theta_base=0.0),
    "rope_pos_k_head_dim": lambda: _rope_pos(xk_dims=[1, 6, 2, 8]),
    "view_rank": lambda: _view(sizes=[-1, 4, 16]),
    "view_literal_above_max": lambda: _view(sizes=[1, -1, 8, 16]),
    "view_uint8": lambda: _view(x_dtype="uint8"),
    "view_dtype_change": lambda: _view(out_dtype="int32"),
    "sym_size_dim": _sym_size_dim_out_of_range,
    "sdpa_batch_two": lambda: _sdpa(q=(2, 6, 4, 16)),
    "sdpa_heads_not_a_multiple": lambda: _sdpa(q=(1, 6, 3, 16)),
    "sdpa_k_head_dim": lambda: _sdpa(k=(1, 6, 2, 8), k_cache=(1, 32, 2, 8)),
    "sdpa_v_dims": lambda: _sdpa(v=(1, 6, 1, 16)),
    "sdpa_cache_heads": lambda: _sdpa(k_cache=(1, 32, 4, 16)),
    "sdpa_v_cache_rows": lambda: _sdpa(v_cache=(1, 16, 2, 16)),
    "sdpa_cache_not_state": lambda: _sdpa(state=False),
    "linear_x_int32": lambda: _linear(x_dtype="int32"),
    "linear_weight_float": lambda: _linear(weight=np.zeros((6, 32), F32)),
    "linear_scales_uint8": lambda: _linear(scales=np.ones((2, 8), np.uint8)),
    "linear_bias_int": lambda: _linear(bias=np.zeros(6, np.int32)),
    "linear_group_size_zero": lambda: _linear(group_size=0, scales=np.ones((2, 8), F32)),
    "linear_group_size_negative": lambda: _linear(group_size=-8, scales=np.ones((2, 8), F32)),
    "linear_packed_width": lambda: _linear(weight=np.zeros((6, 31), np.uint8)),
    "linear_k_mismatch": lambda: _linear(
        x_dims=(3, 48), scales=np.ones((2, 8), F32), weight=np.zeros((6, 32), np.uint8)
    ),
    "linear_k_tail_unpadded": lambda: _linear(x_dims=(3, 60), weight=np.zeros((6, 30), np.uint8)),
    "linear_weight_rank": lambda: _linear(weight=np.zeros((6, 32, 1), np.uint8)),
    "linear_too_few_groups": lambda: _linear(group_size=16, scales=np.ones((3, 8), F32)),
    "linear_scales_unpadded": lambda: _linear(scales=np.ones((2, 6), F32)),
    "linear_scales_overpadded": lambda: _linear(scales=np.ones((2, 12), F32)),
    "linear_bias_length": lambda: _linear(bias=np.zeros(7, F32)),
    "linear_out_dims": lambda: _linear(out_dims=(3, 7)),
    "linear_out_rank": lambda: _linear(out_dims=(1, 3, 6)),
}


# The tensor each linear_q4gsw rejection must name (None: the fault is not in a tensor).
LINEAR_TENSOR = {
    "linear_x_int32": "x",
    "linear_weight_float": "weight",
    "linear_scales_uint8": "scales",
    "linear_bias_int": "bias",
    "linear_group_size_zero": None,
    "linear_group_size_negative": None,
    "linear_packed_width": "weight",
    "linear_k_mismatch": "weight",
    "linear_k_tail_unpadded": "weight",
    "linear_weight_rank": "weight",
    "linear_too_few_groups": "scales",
    "linear_scales_unpadded": "scales",
    "linear_scales_overpadded": "scales",
    "linear_bias_length": "bias",
    "linear_out_dims": "linear_q4gsw_0.out",
    "linear_out_rank": "linear_q4gsw_0.out",
}


@pytest.mark.parametrize("name", sorted(BAD_GRAPHS))
def test_backends_reject_alike(name: str, runtimes: list[Runtime], runner: LockstepRunner) -> None:
    graph = BAD_GRAPHS[name]()
    expected = expected_build_error(graph)
    assert expected is not None, "the contract model must reject this graph"
    if name in LINEAR_TENSOR:
        assert expected.tensor == LINEAR_TENSOR[name], expected
    for rt in runtimes:
        with pytest.raises(GraphBuildError) as info:
            rt.load(graph)
        assert error_key(info.value) == error_key(expected), f"{rt.name}: {info.value}"
        if name in LINEAR_TENSOR:
            # The message names the tensor (or group_size) and what was expected.
            assert (expected.tensor or "group_size") in str(info.value), info.value
    assert_parity(runner.run(Case(graph, [], name=name)))


# ---------------------------------------------------------------------------- run time


def _f32(*dims: int) -> np.ndarray:
    return np.random.default_rng(sum(dims)).standard_normal(dims).astype(F32)


def _sdpa_step(seq: int, pos: int, k_seq: int | None = None) -> dict[str, np.ndarray | int]:
    kv = k_seq or seq
    return {
        "q": _f32(1, seq, 4, 16),
        "k": _f32(1, kv, 2, 16),
        "v": _f32(1, kv, 2, 16),
        "input_pos": pos,
    }


def _rope_step(
    seq: int, k_seq: int | None = None, freqs: int | None = None, dim: int = 16
) -> dict[str, np.ndarray | int]:
    return {
        "xq": _f32(1, seq, 4, dim),
        "xk": _f32(1, k_seq or seq, 2, dim),
        "freqs_cos": _f32(freqs or seq, 8),
        "freqs_sin": _f32(freqs or seq, 8),
    }


def _rope_pos_step(seq: int, positions: int | None = None) -> dict[str, np.ndarray | int]:
    return {
        "xq": _f32(1, seq, 4, 16),
        "xk": _f32(1, seq, 2, 16),
        "positions": np.arange(100, 100 + (positions or seq), dtype=np.int32),
    }


def _rope_hf_step(seq: int, start: int) -> dict[str, np.ndarray | int]:
    return {"xq": _f32(1, seq, 4, 16), "xk": _f32(1, seq, 2, 16), "start_pos": start}


def _silu_mul() -> Graph:
    b = GraphBuilder()
    dims = [4, 16]
    b.output(
        b.op("silu_mul", gate=b.input("gate", "float32", dims), up=b.input("up", "float32", dims))
    )
    return b.build()


def _unused_symint() -> Graph:
    """A graph with a SymInt input no op reads: only the int32 rule applies to it."""
    b = GraphBuilder()
    b.symint_input("unused")
    b.output(b.op("silu", x=b.input("x", "float32", [4, 16])))
    return b.build()


INT32_PAST = 2**31  # the first value an int32 SymInt uniform cannot hold

# name -> (graph, a valid step, the step to refuse, the expected reason)
BAD_STEPS: dict[str, tuple[Callable[[], Graph], dict[str, Any], dict[str, Any], str]] = {
    "sdpa_cache_overflow": (_sdpa, _sdpa_step(6, 0), _sdpa_step(6, 27), "cache_overflow"),
    "sdpa_negative_pos": (_sdpa, _sdpa_step(1, 3), _sdpa_step(1, -1), "input_pos"),
    # The op's own check comes first, on the harness and both backends alike.
    "sdpa_pos_past_int32": (_sdpa, _sdpa_step(6, 0), _sdpa_step(6, INT32_PAST), "cache_overflow"),
    "sdpa_pos_below_int32": (_sdpa, _sdpa_step(1, 3), _sdpa_step(1, -INT32_PAST - 1), "input_pos"),
    "rope_hf_start_past_int32": (
        _rope_hf,
        _rope_hf_step(6, 0),
        _rope_hf_step(6, INT32_PAST),
        "start_pos",
    ),
    "unused_symint_past_int32": (
        _unused_symint,
        {"x": _f32(2, 16), "unused": 1},
        {"x": _f32(3, 16), "unused": INT32_PAST},
        "int_range",
    ),
    "sdpa_k_seq": (_sdpa, _sdpa_step(4, 0), _sdpa_step(4, 4, k_seq=3), "shape"),
    "rope_k_seq": (_rope, _rope_step(6), _rope_step(6, k_seq=5), "qk_shape"),
    "rope_freqs_rows": (_rope, _rope_step(4), _rope_step(4, freqs=5), "freqs_shape"),
    "rope_head_dim": (_rope, _rope_step(4), {**_rope_step(4), "xq": _f32(1, 4, 4, 14)}, "head_dim"),
    "rope_interleaved_freqs_rows": (
        _rope_interleaved,
        {"x": _f32(2, 4, 16), "freqs_cis": _f32(4, 16)},
        {"x": _f32(1, 4, 16), "freqs_cis": _f32(3, 16)},
        "freqs_shape",
    ),
    "rope_interleaved_width": (
        _rope_interleaved,
        {"x": _f32(2, 4, 16), "freqs_cis": _f32(4, 16)},
        {"x": _f32(2, 4, 12), "freqs_cis": _f32(4, 12)},
        "width",
    ),
    "rope_pos_positions_rows": (
        _rope_pos,
        _rope_pos_step(4),
        _rope_pos_step(4, positions=5),
        "positions_shape",
    ),
    "rope_pos_k_seq": (
        _rope_pos,
        _rope_pos_step(3),
        {**_rope_pos_step(3), "xk": _f32(1, 2, 2, 16)},
        "qk_shape",
    ),
    "rope_hf_past_table": (_rope_hf, _rope_hf_step(6, 26), _rope_hf_step(6, 27), "start_pos"),
    "rope_hf_negative": (_rope_hf, _rope_hf_step(1, 0), _rope_hf_step(1, -2), "start_pos"),
    "embedding_id_past_vocab": (
        _embedding,
        {"tokens": np.array([[0, 19]], np.int64)},
        {"tokens": np.array([[3, 20, 1]], np.int64)},
        "index_range",
    ),
    "embedding_negative_id": (
        _embedding,
        {"tokens": np.array([[5]], np.int32)},
        {"tokens": np.array([[5, -1]], np.int32)},
        "index_range",
    ),
    "view_numel": (_view, {"x": _f32(1, 5, 64), "n": 5}, {"x": _f32(1, 5, 64), "n": 4}, "numel"),
    "view_symint_above_max": (
        _view,
        {"x": _f32(1, 8, 64), "n": 8},
        {"x": _f32(1, 8, 64), "n": 9},
        "above_max",
    ),
    "silu_mul_shapes": (
        _silu_mul,
        {"gate": _f32(2, 16), "up": _f32(2, 16)},
        {"gate": _f32(2, 16), "up": _f32(1, 16)},
        "shape",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_STEPS))
def test_bad_steps_rejected_alike(name: str, runner: LockstepRunner) -> None:
    """Both backends refuse the step with the model's (subject, reason), before anything
    changes: the next step, the valid one again, is checked against the state before."""
    make, good, bad, reason = BAD_STEPS[name]
    result = runner.run(Case(make(), [good, bad, good], name=name))
    refused = result.steps[1]
    assert refused.expected_error is not None and reason in _model_key(make(), good, bad)
    assert all(b.error for b in refused.backends.values()), refused.backends
    assert_parity(result)


def _model_key(graph: Graph, good: dict[str, Any], bad: dict[str, Any]) -> tuple[Any, ...]:
    model = ContractModel(graph)
    model.step(good)
    expected = model.try_step(bad)
    assert not isinstance(expected, ModelStep), "the contract model must refuse the step"
    return error_key(expected)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@given(data=st.data())
def test_invalid_steps_are_rejected_alike(
    runner: LockstepRunner, family: str, data: st.DataObject
) -> None:
    """In a case of every registered family, a step with a rank change, a dim < 1 or above
    its max, or a narrowed last dim on one tensor input, anywhere in the sequence: rejected
    alike (or accepted alike, as the contract says), and the graph stays usable after it."""
    case = data.draw(FAMILIES[family](), label=family)
    bad = data.draw(invalid_steps(case), label="invalid step")
    case.steps.insert(data.draw(st.integers(0, len(case.steps)), label="position"), bad)
    case.steps.append(case.steps[0])  # a valid step after the rejection
    assert_parity(runner.run(case))
