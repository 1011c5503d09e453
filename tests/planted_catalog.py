"""A catalog of planted bugs, one per failure class, for the shrinking tests and benchmark.

Each entry names the case strategy to search, a context manager that plants the bug for the
duration of the search, and the bug key the minimal case must keep: (class, op type,
blamed side, order of magnitude for numeric findings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

import webgpu_backend.graph
from graph_format import OpNode
from harness import ops as harness_ops
from harness.families import cases
from harness.gen.blocks import invalid_steps
from harness.gen.case import Case
from harness.ops.binary import binary_cases
from harness.ops.rms_norm import rms_norm_cases
from tests.plants import (
    glsl_substitution,
    push_too_much,
    vulkan_node_patch,
    webgpu_after_hook,
    webgpu_without_set_cur_dims,
    wgsl_substitution,
)
from vulkan_ref.graph import ComputeGraph, DispatchNode
from webgpu_backend.graph import Dispatch, WebGPUGraph


@dataclass(frozen=True)
class Plant:
    """A planted bug and what finding it must produce."""

    name: str
    cases: Callable[[], st.SearchStrategy[Case]]
    plant: Callable[[], AbstractContextManager[Any]]
    kind: str
    op_type: str
    blame: str


@contextmanager
def _patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    original = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, original)


def _count_at_max() -> AbstractContextManager[Any]:
    def keep_max(graph: WebGPUGraph, node: OpNode, dispatches: list[Dispatch]) -> None:
        dispatches[0].count = int(np.prod(graph.arg_tensor(node, "x").dims[:-1]))

    return webgpu_after_hook("rms_norm", keep_max)


def _always_broadcast() -> AbstractContextManager[Any]:
    def broadcast(graph: ComputeGraph, node: DispatchNode) -> None:
        variant = next(k for k in node.slots if "_broadcast" in k)
        node.pick_slot = lambda g: variant

    return vulkan_node_patch("add", broadcast)


def _write_past_end() -> AbstractContextManager[Any]:
    return wgsl_substitution("binary_flat", "if (i >= params.numel)", "if (i > params.numel)")


def _read_past_end() -> AbstractContextManager[Any]:
    # The last element copies b's element past its live end (a copy keeps the poison's tag
    # on every device; see harness/check/oracles.py).
    return wgsl_substitution(
        "binary_flat", "a[i] + b[i]", "select(a[i] + b[i], b[i + 1u], i + 1u == params.numel)"
    )


@contextmanager
def _mean_over_width_plus_one() -> Iterator[None]:
    # A small systematic error: the mean of squares divides by W + 1.
    with ExitStack() as stack:
        for stem in ("rms_norm", "rms_norm_vec4"):
            stack.enter_context(glsl_substitution(stem, "/ float(width)", "/ float(width + 1)"))
        yield


@contextmanager
def _nan_from_rsqrt() -> Iterator[None]:
    with ExitStack() as stack:
        for stem in ("rms_norm", "rms_norm_vec4"):
            stack.enter_context(wgsl_substitution(stem, "+ params.eps)", "- 1.0)"))
        yield


def _push_too_much() -> AbstractContextManager[Any]:
    return vulkan_node_patch("rms_norm", push_too_much, bound=True)


def _crash_below_max() -> AbstractContextManager[Any]:
    original = ComputeGraph.execute

    def execute(self: ComputeGraph, inputs: Any, **kwargs: Any) -> Any:
        for name, value in inputs.items():
            if isinstance(value, np.ndarray) and value.shape != self.graph.tensor(name).dims:
                raise RuntimeError("device lost")
        return original(self, inputs, **kwargs)

    return _patched(ComputeGraph, "execute", execute)


def _wasteful_grid() -> AbstractContextManager[Any]:
    original = webgpu_backend.graph.fold_grid

    def fold(count: int, limit: int) -> tuple[int, int, int]:
        return (count, 2, 1) if count >= 3 else original(count, limit)

    return _patched(webgpu_backend.graph, "fold_grid", fold)


def _skip_width_check() -> AbstractContextManager[Any]:
    def skip(graph: ComputeGraph, node: DispatchNode) -> None:
        out, x = node.tensors["out"], node.tensors["x"]
        node.resize_fn = lambda g: g.virtual_resize(out, g.sizes_of(x))  # type: ignore[arg-type]

    return vulkan_node_patch("rms_norm", skip)


def _no_restore() -> AbstractContextManager[Any]:
    return _patched(WebGPUGraph, "_restore", lambda self, snap: None)


@contextmanager
def _model_off_by_one() -> Iterator[None]:
    real = harness_ops.MODELS["rms_norm"]

    class OffByOne:
        kernels = real.kernels

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def dispatches(self, node: OpNode, live: Any) -> Any:
            return [
                (op, k, wg, (c[0] + 1, *c[1:]), ran)
                for op, k, wg, c, ran in real.dispatches(node, live)
            ]

    harness_ops.MODELS["rms_norm"] = OffByOne()  # type: ignore[assignment]
    try:
        yield
    finally:
        harness_ops.MODELS["rms_norm"] = real


@st.composite
def rms_norm_with_a_bad_step(draw: st.DrawFn) -> Case:
    """An rms_norm case with one step that narrows the row width (refused by the contract)."""
    case = draw(cases(["rms_norm"]))
    bad = draw(invalid_steps(case))
    case.steps.insert(draw(st.integers(0, len(case.steps))), bad)
    return case


def _below_max(cases: st.SearchStrategy[Case], name: str) -> st.SearchStrategy[Case]:
    """Cases whose input `name` is below its max in every step: reading one element past its
    live end then reads its slack (at the max it would read past the buffer, which WebGPU
    turns into a zero: a numeric finding instead)."""

    def below(case: Case) -> bool:
        dims = case.graph.tensor(name).dims
        return all(int(np.prod(step[name].shape)) < int(np.prod(dims)) for step in case.steps)  # type: ignore[union-attr]

    return cases.filter(below)


PLANTS = [
    Plant(
        "dispatch count left at max",
        rms_norm_cases,
        _count_at_max,
        "dispatch",
        "rms_norm",
        "webgpu",
    ),
    Plant(
        "output cur_dims not set",
        lambda: binary_cases("add"),
        lambda: webgpu_without_set_cur_dims("add"),
        "cur_dims",
        "add",
        "webgpu",
    ),
    Plant(
        "wrong kernel variant",
        lambda: binary_cases("add"),
        _always_broadcast,
        "dispatch",
        "add",
        "vulkan",
    ),
    Plant(
        "write past the live end",
        lambda: binary_cases("add"),
        _write_past_end,
        "canary_write",
        "add",
        "webgpu",
    ),
    Plant(
        "read past the live end",
        # Narrow cases only: a wide case below its max (filtered) does not shrink back to a
        # narrow one, whose earlier draws the filter may reject.
        lambda: _below_max(binary_cases("add", wide=False), "b"),
        _read_past_end,
        "stale_read",
        "add",
        "webgpu",
    ),
    Plant(
        "mean over W+1", rms_norm_cases, _mean_over_width_plus_one, "numeric", "rms_norm", "vulkan"
    ),
    Plant("NaN from rsqrt", rms_norm_cases, _nan_from_rsqrt, "nan_inf", "rms_norm", "webgpu"),
    Plant("validation message", rms_norm_cases, _push_too_much, "validation", "-", "vulkan"),
    Plant("crash below max", rms_norm_cases, _crash_below_max, "crash", "-", "vulkan"),
    Plant(
        "wasteful physical grid",
        rms_norm_cases,
        _wasteful_grid,
        "physical_grid",
        "rms_norm",
        "webgpu",
    ),
    Plant(
        "accepts a refused step",
        rms_norm_with_a_bad_step,
        _skip_width_check,
        "error_asymmetry",
        "rms_norm",
        "vulkan",
    ),
    Plant(
        "rejection changes state",
        rms_norm_with_a_bad_step,
        _no_restore,
        "state_after_reject",
        "rms_norm",
        "webgpu",
    ),
    Plant(
        "contract model off by one",
        rms_norm_cases,
        _model_off_by_one,
        "dispatch",
        "rms_norm",
        "model",
    ),
]
