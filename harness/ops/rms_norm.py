"""Model of rms_norm(x, weight, eps): out = x * rsqrt(mean(x^2, -1) + eps) * weight.

Kernel design (both backends): one workgroup of 64 invocations per row (rows = numel / W),
`rms_norm_vec4` when the row width W is a multiple of 4, else `rms_norm`; in half precision
(float16 x, weight and out) `rms_norm_f16` at every width, which loads f16, accumulates the
sum of squares and computes in f32 and stores f16 (its budget: the fp32 one plus the f16
store, `harness.model.local_budget`). W is the weight's
length and may not change at run time: a live last dim != W is refused by both backends.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import FLOAT_DTYPES, Graph, GraphBuildError, InputError, OpNode
from graph_format.kernels import Value
from harness.gen.blocks import (
    family_dtype,
    float_array,
    leading_dims,
    row_widths,
    seeds,
    step_dims,
)
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import GraphGen, generator
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    kernels,
    numel,
    register,
    ro,
    rw,
    tensors,
    uniform_float_dtype,
)
from harness.model.numerics import SAFETY, ULP_INVERSE_SQRT, arithmetic, gamma

WORKGROUP = (64, 1, 1)
LONG_WIDTH = 4096  # `width>=4096`: a row of 16 passes of the 64 lanes (vec4) or more
# The widths of the family's long cases: a real decoder's hidden sizes, vec4 and not.
LONG_WIDTHS = (2048, 4096, 4098, 8191, 8192)


class RmsNormModel(OpModel):
    """Contract, reference and budget of rms_norm."""

    activations = ("x",)
    # A long row (`regimes`): what a pr run must reach as well.
    pr_regimes = (f"width>={LONG_WIDTH}",)
    required_regimes = (
        "size=1",
        "size=max",
        "size=mid",
        "step=grow",
        "step=shrink",
        *pr_regimes,
    )
    dtypes = FLOAT_DTYPES
    kernels = kernels(
        KernelSpec(
            "rms_norm",
            (rw("out"), ro("x"), ro("weight")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "rms_norm_vec4",
            (rw("out", "vec4<f32>"), ro("x", "vec4<f32>"), ro("weight", "vec4<f32>")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "rms_norm_f16",
            (rw("out", "f16"), ro("x", "f16"), ro("weight", "f16")),
            exact=True,
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        x, w, out = tensors(node, graph, "x", "weight", "out")
        uniform_float_dtype(node, graph, "x", "weight", "out", name_tensor=False)
        if w.dims != (x.dims[-1],):
            raise GraphBuildError(node.name, "weight length != x width", tensor=w.name)
        if out.dims != x.dims:
            raise GraphBuildError(node.name, "out dims != x dims", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        dims = live.of(node, "x")
        width = live.max_of(node, "weight")[0]
        if dims[-1] != width:
            raise InputError(node.name, "row_width", f"live width {dims[-1]} != {width}")
        live.set_output(node, "out", dims)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        width = live.max_of(node, "weight")[0]
        return {
            "num_rows": numel(live.of(node, "x")) // width,
            "row_width": width,
            "eps": float(live.graph.scalar(node.arg("eps"))),
            "workgroup_size": WORKGROUP[0],
        }

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: a long row (a decoder's hidden size)."""
        return {f"width>={LONG_WIDTH}"} if live.of(node, "x")[-1] >= LONG_WIDTH else set()

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        dims = live.of(node, "x")
        if live.graph.tensor(node.arg("x")).dtype == "float16":
            kernel = "rms_norm_f16"
        else:
            kernel = "rms_norm_vec4" if dims[-1] % 4 == 0 else "rms_norm"
        return [(node.name, kernel, WORKGROUP, (numel(dims) // dims[-1], 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        x, w, eps = args["x"], args["weight"], args["eps"]
        rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
        return {"out": x * rstd * w}

    # The math holds for x with a leading probe axis (the mean is over the last dim).
    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        x = args["x"]
        n = x.shape[-1]
        a = arithmetic()
        # In the kernel's arithmetic (`arithmetic()`: f32, or f16 for `precision = "f16"`).
        # Rounding: sum of n squares (gamma_n, any order), /n and +eps (u each) give the
        # argument of inverseSqrt, whose relative error halves through the root; the
        # builtin adds its own ULPs; two products (x*rstd, *w) add u each.
        rel = (gamma(n) + 2 * a.u) / 2 + ULP_INVERSE_SQRT * a.eps + 2 * a.u
        # Flushes below the smallest normal: squares (n of them, then / n), the mean and eps
        # itself (1e-5 is subnormal in f16) shift the root's argument m + eps by up to
        # 3 tiny, relative 3 tiny / (m + eps), halved through the root; the products x*rstd
        # (times |w| after) and the result may flush too: tiny (|w| + 1). Nothing in f32,
        # where generated data stay far above 2^-126.
        mean = np.mean(x * x, axis=-1, keepdims=True) + abs(float(args["eps"]))
        with np.errstate(divide="ignore"):
            flush = np.where(mean > 0, 1.5 * a.tiny / mean, 0.0)
        local = (rel + flush) * np.abs(outputs["out"]) + a.tiny * (np.abs(args["weight"]) + 1)
        return {"out": SAFETY * local}


MODEL = register("rms_norm", RmsNormModel())


# ---------------------------------------------------------------------------- cases


@family("rms_norm", exercises={"rms_norm"})
@st.composite
def rms_norm_cases(draw: st.DrawFn) -> Case:
    """A single rms_norm over an input with dynamic leading dims; a quarter of the cases
    over long rows (`LONG_WIDTHS`, up to 8192) and few of them."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims())
    width = draw(row_widths())
    eps = draw(st.sampled_from([1e-6, 1e-5]))
    lives = draw(step_dims(leading))
    dtype = draw(family_dtype("rms_norm"))  # last: the shape draws stay where they were
    # After them, the long shapes: a quarter of the cases (the simplest draw, 0, stays short).
    if draw(st.integers(0, 3)) == 3:
        leading = draw(leading_dims(max_rank=2, max_size=4))
        width = draw(st.sampled_from(LONG_WIDTHS))
        lives = draw(step_dims(leading))
    # Half the f16 cases have rows of large values, whose sum of squares passes the f16
    # maximum 65504 after about 64 elements: rms_norm_f16 accumulates in f32 and must
    # survive it (an f16 accumulator overflows to inf). The output stays O(|weight|).
    scale = draw(st.sampled_from([1.0, 32.0])) if dtype == "float16" else 1.0
    b = GraphBuilder()
    x = b.input("x", dtype, [d.max_size for d in leading] + [width])
    w = b.constant("weight", float_array(rng, [width], dtype=dtype))
    b.output(b.op("rms_norm", x=x, weight=w, eps=b.float(eps)))
    steps: list[StepInputs] = [
        {"x": float_array(rng, [*lead, width], scale, dtype)} for lead in lives
    ]
    meta = {"seed": seed, "family": "rms_norm", "dtype": dtype}
    return Case(b.build(), steps, name="rms_norm", meta=meta)


# ---------------------------------------------------------------------------- random graphs


@generator("rms_norm")
def gen_rms_norm(g: GraphGen) -> bool:
    """rms_norm over the (static) last dim of any pool tensor."""
    candidates = [t for t in g.pool if isinstance(t.dims[-1], int)]
    if not candidates:
        return False
    x = g.pick(candidates)
    width = x.dims[-1]
    assert isinstance(width, int)
    out = g.builder.op(
        "rms_norm", x=x.name, weight=g.constant("w", [width]), eps=g.builder.float(1e-6)
    )
    g.produced(out, x.dims, [x])
    return True
