"""Models of view_copy(x, sizes) and sym_size(x, dim).

view_copy: out takes the live sizes named by its size list, each an int literal or a SymInt
resolved from its live value (never inferred from numel: reference §7.4). Live checks, in
this order: out's per-dim checks on the resolved sizes (`ResizeError` on out), then the
numel of x's live dims against the sizes' product (`InputError` reason "numel"). Kernel
design (both backends): one slot `view_copy`, a bitwise 32-bit copy, 64 invocations per
workgroup, one per element, logical count ceil(numel / 64). float32 or int32, same dtype.

sym_size: its SymInt output is x's live dim `dim` (negative dims count from the end), always
current when consumers resize; no dispatch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graph_format import Graph, GraphBuildError, InputError, OpNode, ScalarValue
from harness.ops import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    check_dims,
    div_up,
    kernels,
    numel,
    ro,
    rw,
)

WORKGROUP = (64, 1, 1)
VIEW_DTYPES = ("float32", "int32")


class ViewCopyModel:
    """Contract, reference and budget of view_copy."""

    kernels = kernels(
        KernelSpec("view_copy", "view_copy", "view_copy", (rw("out", "u32"), ro("x", "u32")))
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        x, out = graph.tensor(node.args["x"]), graph.tensor(node.outputs["out"])  # type: ignore[arg-type]
        if x.dtype not in VIEW_DTYPES:
            raise GraphBuildError(node.name, "view_copy copies float32 or int32", tensor=x.name)
        if out.dtype != x.dtype:
            raise GraphBuildError(node.name, "out dtype != x dtype", tensor=out.name)
        sizes = node.args["sizes"]
        assert isinstance(sizes, tuple)
        if len(sizes) != len(out.dims):
            raise GraphBuildError(node.name, "sizes must have out's rank", tensor=out.name)
        for d, name in enumerate(sizes):
            value = graph.values[name]
            if isinstance(value, ScalarValue) and not 1 <= int(value.value) <= out.dims[d]:
                raise GraphBuildError(
                    node.name,
                    f"literal size {value.value} at dim {d} out of range",
                    tensor=out.name,
                )

    def resize(self, node: OpNode, live: LiveState) -> None:
        sizes = live.ints(node, "sizes")
        name = node.outputs["out"]
        check_dims(name, sizes, live.graph.tensor(name).dims)
        have = numel(live.of(node, "x"))
        if numel(sizes) != have:
            raise InputError(
                node.name, "numel", f"sizes {list(sizes)} do not hold x's {have} elements"
            )
        live.set_output(node, "out", sizes)

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        count = div_up(numel(live.of(node, "x")), WORKGROUP[0])
        return [(node.name, "view_copy", WORKGROUP, (count, 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        return {"out": args["x"].reshape(args["sizes"])}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {"out": np.zeros(outputs["out"].shape)}  # a bitwise copy: exact


class SymSizeModel:
    """Contract and reference of sym_size (no kernels, no budget: it yields an int)."""

    def __init__(self) -> None:
        self.kernels: dict[str, KernelSpec] = {}

    def check(self, node: OpNode, graph: Graph) -> None:
        x = graph.tensor(node.args["x"])  # type: ignore[arg-type]
        dim = int(graph.scalar(node.args["dim"]))  # type: ignore[arg-type]
        if not -len(x.dims) <= dim < len(x.dims):
            raise GraphBuildError(node.name, f"dim {dim} is outside x's rank", tensor=x.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        dim = live.int_arg(node, "dim")
        live.symints[node.outputs["out"]] = live.of(node, "x")[dim]

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        return []

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        return {"out": np.asarray(args["x"].shape[int(args["dim"])])}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {}


VIEW_COPY = ViewCopyModel()
SYM_SIZE = SymSizeModel()
