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


BAD_GRAPHS: dict[str, Callable[[], Graph]] = {
    "rms_norm_weight_too_short": _rms_norm_weight_too_short,
    "rms_norm_out_dims": _rms_norm_out_dims,
    "rms_norm_int_input": _rms_norm_int_input,
    "add_not_broadcast": _add_not_broadcast,
    "mul_wrong_out": _mul_wrong_out,
}


@pytest.mark.parametrize("name", sorted(BAD_GRAPHS))
def test_backends_reject_alike(name: str, runtimes: list[Runtime], runner: LockstepRunner) -> None:
    graph = BAD_GRAPHS[name]()
    expected = expected_build_error(graph)
    assert expected is not None, "the contract model must reject this graph"
    for rt in runtimes:
        with pytest.raises(GraphBuildError) as info:
            rt.load(graph)
        assert error_key(info.value) == error_key(expected), f"{rt.name}: {info.value}"
    assert_parity(runner.run(Case(graph, [], name=name)))
