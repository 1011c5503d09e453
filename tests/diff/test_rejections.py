"""Load-time rejections: graphs both backends must refuse, naming the same op and tensor.

Each entry builds a graph that is well formed (the format accepts it) but that an op cannot
run. The contract model predicts the `GraphBuildError`; both backends must raise one with
the same key, and the lockstep runner must report no divergence for it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from graph_format import Graph, GraphBuildError, Runtime
from harness.builder import GraphBuilder
from harness.case import Case
from harness.contract import expected_build_error
from harness.lockstep import LockstepRunner, error_key
from harness.verdict import assert_parity

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


BAD_GRAPHS: dict[str, Callable[[], Graph]] = {
    "rms_norm_weight_too_short": _rms_norm_weight_too_short,
    "rms_norm_out_dims": _rms_norm_out_dims,
    "rms_norm_int_input": _rms_norm_int_input,
    "add_not_broadcast": _add_not_broadcast,
    "mul_wrong_out": _mul_wrong_out,
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
