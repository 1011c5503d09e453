"""A catalog of planted bugs, one per failure class, for the shrinking tests and benchmark.

Each entry names the case strategy to search, how the bug is planted for the duration of
the search (a context manager, or shader swaps that fresh runtimes load from a planted copy
of the shader folders: `planted`), and the bug key the minimal case must keep: (class, op
type, blamed side, order of magnitude for numeric findings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from graph_format import OpNode
from harness import ops as harness_ops
from harness.check.lockstep import LockstepRunner
from harness.families import cases
from harness.gen.blocks import invalid_steps
from harness.gen.case import Case
from harness.ops.binary import binary_cases
from harness.ops.rms_norm import rms_norm_cases
from tests.plants import (
    Swap,
    push_too_much,
    shader_substitutions,
    vulkan_node_patch,
    webgpu_after_hook,
    webgpu_grid_hook,
    webgpu_without_set_cur_dims,
)
from vulkan_ref.graph import ComputeGraph, DispatchNode
from webgpu_backend.graph import Dispatch, WebGPUGraph


@dataclass(frozen=True)
class Plant:
    """A planted bug and what finding it must produce; `wgsl` and `glsl` are its shader
    swaps (tests/plants.py `Swap`), for a bug planted in the kernels."""

    name: str
    cases: Callable[[], st.SearchStrategy[Case]]
    plant: Callable[[], AbstractContextManager[Any]]
    kind: str
    op_type: str
    blame: str
    wgsl: tuple[Swap, ...] = ()
    glsl: tuple[Swap, ...] = ()


@contextmanager
def planted(plant: Plant, runner: LockstepRunner) -> Iterator[LockstepRunner]:
    """The runner to search with while `plant` is planted: `runner`, or for a bug in the
    kernels one over fresh runtimes built from the planted shader folders."""
    with plant.plant():
        if plant.wgsl or plant.glsl:
            with shader_substitutions(plant.wgsl, plant.glsl) as searching:
                yield searching
        else:
            yield runner


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


_WRITE_PAST_END: tuple[Swap, ...] = (
    ("binary_flat", "if (i >= params.numel)", "if (i > params.numel)"),
)
# The last element copies b's element past its live end (a copy keeps the poison's tag on
# every device; see harness/check/oracles/).
_READ_PAST_END: tuple[Swap, ...] = (
    ("binary_flat", "a[i] + b[i]", "select(a[i] + b[i], b[i + 1u], i + 1u == params.numel)"),
)
# A small systematic error: the mean of squares divides by W + 1.
_MEAN_OVER_WIDTH_PLUS_ONE: tuple[Swap, ...] = tuple(
    (stem, "/ float(width)", "/ float(width + 1)") for stem in ("rms_norm", "rms_norm_vec4")
)
_NAN_FROM_RSQRT: tuple[Swap, ...] = tuple(
    (stem, "+ params.eps)", "- 1.0)") for stem in ("rms_norm", "rms_norm_vec4")
)


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
    def fold(real: Callable[[int, int], tuple[int, int, int]], count: int, limit: int) -> Any:
        return (count, 2, 1) if count >= 3 else real(count, limit)

    return webgpu_grid_hook(fold)


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
        nullcontext,
        "canary_write",
        "add",
        "webgpu",
        wgsl=_WRITE_PAST_END,
    ),
    Plant(
        "read past the live end",
        # Narrow cases only: a wide case below its max (filtered) does not shrink back to a
        # narrow one, whose earlier draws the filter may reject.
        lambda: _below_max(binary_cases("add", wide=False), "b"),
        nullcontext,
        "stale_read",
        "add",
        "webgpu",
        wgsl=_READ_PAST_END,
    ),
    Plant(
        "mean over W+1",
        rms_norm_cases,
        nullcontext,
        "numeric",
        "rms_norm",
        "vulkan",
        glsl=_MEAN_OVER_WIDTH_PLUS_ONE,
    ),
    Plant(
        "NaN from rsqrt",
        rms_norm_cases,
        nullcontext,
        "nan_inf",
        "rms_norm",
        "webgpu",
        wgsl=_NAN_FROM_RSQRT,
    ),
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
