"""Model of add(a, b) and mul(a, b) with numpy broadcasting.

Kernel design (both backends): one dispatch slot, 64 invocations per workgroup, one per
output element, logical count ceil(numel(out) / 64); kernel `<op>_flat` when the two live
shapes are equal and `<op>_broadcast` otherwise. Live shapes that do not broadcast are
refused (`InputError` reason "broadcast").
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graph_format import Dims, Graph, GraphBuildError, InputError, OpNode
from harness.model.numerics import SAFETY, U32
from harness.ops import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    div_up,
    kernels,
    numel,
    ro,
    rw,
)

WORKGROUP = (64, 1, 1)


def broadcast(a: Dims, b: Dims) -> Dims | None:
    """The broadcast shape of `a` and `b`, or None."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        return None


class BinaryModel:
    """Contract, reference and budget of an elementwise binary op."""

    def __init__(self, op: str) -> None:
        self.op = op
        bindings = (rw("out"), ro("a"), ro("b"))
        self.kernels = kernels(
            KernelSpec(f"{op}_flat", "binary_flat", "binary_flat", bindings),
            KernelSpec(f"{op}_broadcast", "binary_broadcast", "binary_broadcast", bindings),
        )

    def check(self, node: OpNode, graph: Graph) -> None:
        a, b, out = (graph.tensor(n) for n in (node.args["a"], node.args["b"], node.outputs["out"]))  # type: ignore[arg-type]
        if any(t.dtype != "float32" for t in (a, b, out)):
            raise GraphBuildError(node.name, f"{self.op} is float32 only")
        if any(len(t.dims) > 4 for t in (a, b, out)):
            raise GraphBuildError(node.name, "rank above 4")
        if broadcast(a.dims, b.dims) != out.dims:
            raise GraphBuildError(node.name, "out is not the broadcast", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        dims = broadcast(live.of(node, "a"), live.of(node, "b"))
        if dims is None:
            raise InputError(node.name, "broadcast", "live shapes do not broadcast")
        live.set_output(node, "out", dims)

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        a, b = live.of(node, "a"), live.of(node, "b")
        variant = "flat" if a == b else "broadcast"
        count = div_up(numel(live.dims[node.outputs["out"]]), WORKGROUP[0])
        return [(node.name, f"{self.op}_{variant}", WORKGROUP, (count, 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        a, b = args["a"], args["b"]
        return {"out": a + b if self.op == "add" else a * b}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {"out": SAFETY * U32 * np.abs(outputs["out"])}  # one rounding of the exact result


ADD = BinaryModel("add")
MUL = BinaryModel("mul")
