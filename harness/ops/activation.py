"""Model of sigmoid(x), silu(x) and the fused silu_mul(gate, up) = silu(gate) * up.

Kernel design (both backends): one dispatch slot, 64 invocations per workgroup, one per
element, logical count ceil(numel / 64); the kernels are `sigmoid` and `silu` (one shader,
`unary_activation`, with an op-kind constant) and `silu_mul` (shader `silu_mul`). The math,
exactly as both kernels evaluate it in float32:
    sigmoid(x) = 1 / (1 + exp(-x)),  silu(x) = x / (1 + exp(-x)),
    silu_mul(g, u) = (g / (1 + exp(-g))) * u.
silu_mul takes gate and up of equal live shapes (no broadcasting): anything else is refused
(`InputError` reason "shape").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import FLOAT_DTYPES, Graph, GraphBuildError, InputError, OpNode, dtype_slot
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
from harness.gen.families import family, register_family
from harness.gen.graphgen import DimSpec, GraphGen, Grow, PoolTensor, generator, register_generator
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    div_up,
    kernels,
    numel,
    register,
    ro,
    rw,
    tensors,
    uniform_float_dtype,
)
from harness.model.numerics import SAFETY, ULP_DIVIDE, arithmetic

WORKGROUP = (64, 1, 1)
# The unary kernel's op_kind override / specialization constant.
OP_KINDS = {"sigmoid": 0, "silu": 1}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        sigmoid: np.ndarray = 1.0 / (1.0 + np.exp(-x))
    return sigmoid


def quotient_budget(x: np.ndarray, result: np.ndarray) -> np.ndarray:
    """Local error bound of r = n / (1 + exp(-x)) in the kernel's arithmetic (`arithmetic()`:
    f32, or f16 for a kernel declaring `precision = "f16"`), for n = 1 or n = x exact.

    exp(-x) has `ulp_exp(x)` ULP of error (3 + 2|x| in f32, 1 + 2|x| in f16); in 1 + t that
    relative error shrinks by t / (1 + t); an exp(-x) below the smallest normal may also
    flush to 0 or come back subnormal (absolute, relative to 1 + t); the addition (u) and
    the division (2.5 ULP) add their own. Where 1 + exp(-x) exceeds the division's range
    (2^126 in f32: x < -87.3; 2^14 in f16: x < -9.70) its accuracy is not specified, and
    exp(-x) itself overflows past the largest finite value (f16: 65504, x < -11.09): a GPU
    may give n * (1/y) with 1/y flushed to zero, or n / inf, so the result may be anything
    from 0 to the exact value: the bound is |r| there (an f16 silu is -0 below x ~ -11).
    Results may flush to zero below the smallest normal (`tiny`: 2^-126, f16 2^-14). At
    x = +-inf (sigmoid's 1 and 0) the exp is exact (0 or inf) and so is the result, up to
    the rounding and flush terms.
    """
    a = arithmetic()
    with np.errstate(over="ignore", invalid="ignore"):  # inf / inf where t overflows
        t = np.exp(-x)
        weight = np.where(np.isfinite(t), t / (1.0 + t), 1.0)
        # An exp(-x) below the smallest normal may flush to 0 (off by t < tiny) or come back
        # subnormal (off by ulp_exp(x) subnormal spacings, eps tiny each), relative to 1 + t.
        # Only where x is finite: exp(-inf) is an exact 0. (f32 data never gets there.)
        below = np.isfinite(x) & (t < a.tiny)
        subnormal = np.where(below, a.tiny * (1.0 + a.ulp_exp(x) * a.eps) / (1.0 + t), 0.0)
    # At x = +inf, exp(-x) is an exact 0 (weight 0): its error term is 0, not 0 * inf.
    rel = (
        np.where(weight > 0, weight * a.ulp_exp(x), 0.0) * a.eps
        + subnormal
        + a.u
        + ULP_DIVIDE * a.eps
    )
    unspecified = -x > np.log(a.divisor_limit)
    # At x = -inf (rel infinite) the result is an exact 0 (n / inf; unspecified division
    # below): no relative error of it, 0 rather than inf * 0.
    relative = np.where(result == 0, 0.0, rel * np.abs(result))
    bound: np.ndarray = SAFETY * (relative + a.tiny)
    return bound + np.where(unspecified, np.abs(result), 0.0)


class UnaryActivationModel(OpModel):
    """Contract, reference and budget of sigmoid or silu."""

    activations = ("x",)
    required_regimes = ("size=1", "size=max")
    dtypes = FLOAT_DTYPES

    def __init__(self, op: str) -> None:
        self.op = op
        half = "unary_activation_f16"
        self.kernels = kernels(
            KernelSpec(
                op,
                (rw("out"), ro("x")),
                exact=True,
                shader="unary_activation",
                # No webgpu_ulps: exp may differ by 3 + 2|x| ULP between devices (WGSL).
            ),
            KernelSpec(f"{op}_f16", (rw("out", "f16"), ro("x", "f16")), exact=True, shader=half),
        )

    def check(self, node: OpNode, graph: Graph) -> None:
        x, out = tensors(node, graph, "x", "out")
        uniform_float_dtype(node, graph, "x", "out")
        if out.dims != x.dims:
            raise GraphBuildError(node.name, "out dims != x dims", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        live.set_output(node, "out", live.of(node, "x"))

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        return {
            "numel": numel(live.of(node, "x")),
            "op_kind": OP_KINDS[self.op],
            "workgroup_size": WORKGROUP[0],
        }

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        count = div_up(numel(live.of(node, "x")), WORKGROUP[0])
        kernel = dtype_slot(self.op, live.graph.tensor(node.arg("x")).dtype)
        return [(node.name, kernel, WORKGROUP, (count, 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        x = args["x"]
        s = _sigmoid(x)
        return {"out": s if self.op == "sigmoid" else x * s}

    # Element by element: x may carry a leading probe axis.
    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {"out": quotient_budget(args["x"], outputs["out"])}


class SiluMulModel(OpModel):
    """Contract, reference and budget of the fused silu(gate) * up."""

    activations = ("gate", "up")
    required_regimes = ("size=1", "size=max")
    dtypes = FLOAT_DTYPES
    kernels = kernels(
        KernelSpec(
            "silu_mul",
            (rw("out"), ro("gate"), ro("up")),
            exact=True,
            # No webgpu_ulps: exp may differ by 3 + 2|x| ULP between devices (WGSL).
        ),
        KernelSpec(
            "silu_mul_f16",
            (rw("out", "f16"), ro("gate", "f16"), ro("up", "f16")),
            exact=True,
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        gate, up, out = tensors(node, graph, "gate", "up", "out")
        uniform_float_dtype(node, graph, "gate", "up", "out")
        if up.dims != gate.dims:
            raise GraphBuildError(node.name, "up dims != gate dims", tensor=up.name)
        if out.dims != gate.dims:
            raise GraphBuildError(node.name, "out dims != gate dims", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        gate, up = live.of(node, "gate"), live.of(node, "up")
        if gate != up:
            raise InputError(node.name, "shape", f"live gate {list(gate)} != up {list(up)}")
        live.set_output(node, "out", gate)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        return {"numel": numel(live.of(node, "gate")), "workgroup_size": WORKGROUP[0]}

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        count = div_up(numel(live.of(node, "gate")), WORKGROUP[0])
        kernel = dtype_slot("silu_mul", live.graph.tensor(node.arg("gate")).dtype)
        return [(node.name, kernel, WORKGROUP, (count, 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        g, up = args["gate"], args["up"]
        return {"out": g * _sigmoid(g) * up}

    # Element by element: gate and up may carry the same leading probe axis.
    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        g, up = args["gate"], args["up"]
        s = _sigmoid(g)
        silu = g * s
        # silu(g) to its own bound, then one more rounding in the product with up (and a
        # product below the smallest normal may flush), in the kernel's arithmetic.
        a = arithmetic()
        local = quotient_budget(g, silu) * np.abs(up) + SAFETY * (
            a.u * np.abs(outputs["out"]) + a.tiny
        )
        return {"out": local}


SIGMOID = register("sigmoid", UnaryActivationModel("sigmoid"))
SILU = register("silu", UnaryActivationModel("silu"))
SILU_MUL = register("silu_mul", SiluMulModel())


# ---------------------------------------------------------------------------- cases


@st.composite
def unary_cases(draw: st.DrawFn, op: str) -> Case:
    """sigmoid or silu over dynamic leading dims; magnitudes up to ~60 exercise exp's error."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims())
    width = draw(row_widths())
    scale = draw(st.sampled_from([1.0, 4.0, 16.0]))
    lives = draw(step_dims(leading))
    dtype = draw(family_dtype(op))  # last: the shape draws stay where they were
    b = GraphBuilder()
    x = b.input("x", dtype, [d.max_size for d in leading] + [width])
    b.output(b.op(op, name=op, x=x))
    steps: list[StepInputs] = [
        {"x": float_array(rng, [*lead, width], scale, dtype)} for lead in lives
    ]
    return Case(b.build(), steps, name=op, meta={"seed": seed, "family": op, "dtype": dtype})


@family("silu_mul", exercises={"silu_mul"})
@st.composite
def silu_mul_cases(draw: st.DrawFn) -> Case:
    """The fused silu(gate) * up; now and then a step whose up has another live shape."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims())
    width = draw(row_widths())
    scale = draw(st.sampled_from([1.0, 4.0, 16.0]))
    shapes = []
    for lead in draw(step_dims(leading)):
        live = [*lead, width]
        up_live = list(live)
        if draw(st.integers(0, 9)) == 0 and live[-1] > 1:
            up_live[-1] -= 1  # refused by both: gate and up must match
        shapes.append((live, up_live))
    dtype = draw(family_dtype("silu_mul"))  # last: the shape draws stay where they were
    b = GraphBuilder()
    dims = [d.max_size for d in leading] + [width]
    gate, up = b.input("gate", dtype, dims), b.input("up", dtype, dims)
    b.output(b.op("silu_mul", name="silu_mul", gate=gate, up=up))
    steps: list[StepInputs] = []
    for live, up_live in shapes:
        steps.append(
            {
                "gate": float_array(rng, live, scale, dtype),
                "up": float_array(rng, up_live, dtype=dtype),
            }
        )
    meta = {"seed": seed, "family": "silu_mul", "dtype": dtype}
    return Case(b.build(), steps, name="silu_mul", meta=meta)


# ---------------------------------------------------------------------------- random graphs


def _gen_unary(op: str) -> Grow:
    def gen(g: GraphGen) -> bool:
        """`op` over any pool tensor."""
        x = g.pick(g.pool)
        g.produced(g.builder.op(op, x=x.name), x.dims, [x])
        return True

    return gen


@generator("silu_mul")
def gen_silu_mul(g: GraphGen) -> bool:
    """silu(gate) * up over two same-spec tensors, preferably of different depths."""
    by_spec: dict[tuple[DimSpec, ...], list[PoolTensor]] = {}
    for t in g.pool:
        by_spec.setdefault(t.dims, []).append(t)
    pairs = [ts for ts in by_spec.values() if len(ts) >= 2]
    if not pairs:
        return False
    gate, up = g.pick_pair(g.pick_group(pairs))
    g.produced(g.builder.op("silu_mul", gate=gate.name, up=up.name), gate.dims, [gate, up])
    return True


def _unary_family(op: str) -> Callable[[], st.SearchStrategy[Case]]:
    """The strategy factory of `op`'s own family."""
    return lambda: unary_cases(op)


for _op in ("sigmoid", "silu"):
    register_family(_op, _unary_family(_op), {_op})
    register_generator(_op, _gen_unary(_op))
