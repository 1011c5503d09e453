"""Model of add(a, b) and mul(a, b) with numpy broadcasting, and of add(a, scalar) and
mul(a, scalar) (`x + 3.0`: a float literal instead of b; upstream's `aten.add.Tensor` with a
scalar operand).

A node takes exactly one of b and scalar, and the scalar must be finite and within float32's
range (it reaches the kernel rounded to f32); anything else is refused at load. With a
scalar operand a and out share one float dtype; in float16 the kernel computes in f32 with the
scalar as f32 (as PyTorch computes a half tensor with a Python float) and rounds once to f16.

Kernel design (both backends): one dispatch slot, 64 invocations per workgroup, one per
output element, logical count ceil(numel(out) / 64); kernel `<op>_flat` when the two live
shapes are equal and `<op>_broadcast` otherwise (`<op>_flat_f16`, `<op>_broadcast_f16` in
half precision: load f16, compute in f32, store f16), `<op>_scalar` (out takes a's live dims)
for a scalar operand (`<op>_scalar_f16` in half precision). Live shapes that do not broadcast
are refused (`InputError` reason "broadcast").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from hypothesis import strategies as st

from graph_format import (
    FLOAT_DTYPES,
    Dims,
    Graph,
    GraphBuildError,
    InputError,
    OpNode,
    ScalarValue,
    dtype_slot,
)
from graph_format.kernels import Value
from harness.gen.blocks import (
    DynamicDim,
    case_dtypes,
    float_array,
    leading_dims,
    seeds,
    step_dims,
)
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import register_family
from harness.gen.graphgen import DimSpec, GraphGen, Grow, PoolTensor, register_generator
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
    workgroups_regime,
)
from harness.model.numerics import SAFETY, arithmetic, gamma

WORKGROUP = (64, 1, 1)
FLOAT32_MAX = float(np.finfo(np.float32).max)


def broadcast(a: Dims, b: Dims) -> Dims | None:
    """The broadcast shape of `a` and `b`, or None."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        return None


# The kernels' op_kind override / specialization constant, and the rank their broadcast
# indexing covers (sizes and strides right-aligned to it).
OP_KINDS = {"add": 0, "mul": 1}
KERNEL_RANK = 4


def _right_aligned(dims: Dims) -> tuple[int, ...]:
    """`dims` with leading 1s to KERNEL_RANK."""
    return (1,) * (KERNEL_RANK - len(dims)) + tuple(dims)


def _broadcast_strides(dims: Dims, out: Dims) -> tuple[int, ...]:
    """Row-major element strides of an operand along `out`'s right-aligned dims, 0 where
    the operand has size 1 (it broadcasts, or the dim is 1 anyway)."""
    sizes = _right_aligned(dims)
    strides = [int(np.prod(sizes[d + 1 :])) for d in range(KERNEL_RANK)]
    return tuple(0 if size == 1 else stride for size, stride in zip(sizes, strides, strict=True))


class BinaryModel(OpModel):
    """Contract, reference and budget of an elementwise binary op."""

    activations = ("a", "b")
    dtypes = FLOAT_DTYPES

    def __init__(self, op: str) -> None:
        self.op = op
        # The flat kernel over 4 workgroups of its own size or more (the family's wide cases
        # reach 4 of 256 invocations, a foreign kernel's size, and more): a pr run must too.
        self.pr_regimes = (workgroups_regime(f"{op}_flat", 4),)
        self.required_regimes = ("size=1", "size=max", "step=shrink", *self.pr_regimes)
        bindings = (rw("out"), ro("a"), ro("b"))
        half = (rw("out", "f16"), ro("a", "f16"), ro("b", "f16"))
        self.kernels = kernels(
            KernelSpec(f"{op}_flat", bindings, exact=True, webgpu_ulps=0, shader="binary_flat"),
            KernelSpec(
                f"{op}_broadcast",
                bindings,
                exact=True,
                webgpu_ulps=0,
                shader="binary_broadcast",
            ),
            KernelSpec(f"{op}_flat_f16", half, exact=True, shader="binary_flat_f16"),
            KernelSpec(
                f"{op}_broadcast_f16",
                half,
                exact=True,
                shader="binary_broadcast_f16",
            ),
            KernelSpec(
                f"{op}_scalar",
                (rw("out"), ro("a")),
                exact=True,
                webgpu_ulps=0,
                shader="binary_scalar",
            ),
            KernelSpec(
                f"{op}_scalar_f16",
                (rw("out", "f16"), ro("a", "f16")),
                exact=True,
                shader="binary_scalar_f16",
            ),
        )

    def check(self, node: OpNode, graph: Graph) -> None:
        b_name, scalar_name = node.optional_arg("b"), node.optional_arg("scalar")
        if (b_name is None) == (scalar_name is None):
            raise GraphBuildError(node.name, f"{self.op} takes exactly one of b and scalar")
        if scalar_name is not None:
            value = graph.values[scalar_name]
            assert isinstance(value, ScalarValue)
            if not abs(float(value.value)) <= FLOAT32_MAX:  # also refuses nan
                raise GraphBuildError(node.name, "the scalar must be a finite float32")
            a, out = tensors(node, graph, "a", "out")
            uniform_float_dtype(node, graph, "a", "out", name_tensor=False)
            if len(a.dims) > 4:
                raise GraphBuildError(node.name, "rank above 4")
            if a.dims != out.dims:
                raise GraphBuildError(node.name, "out is not a's shape", tensor=out.name)
            return
        a, b, out = tensors(node, graph, "a", "b", "out")
        uniform_float_dtype(node, graph, "a", "b", "out", name_tensor=False)
        if any(len(t.dims) > 4 for t in (a, b, out)):
            raise GraphBuildError(node.name, "rank above 4")
        if broadcast(a.dims, b.dims) != out.dims:
            raise GraphBuildError(node.name, "out is not the broadcast", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        if node.optional_arg("b") is None:  # a scalar operand
            live.set_output(node, "out", live.of(node, "a"))
            return
        dims = broadcast(live.of(node, "a"), live.of(node, "b"))
        if dims is None:
            raise InputError(node.name, "broadcast", "live shapes do not broadcast")
        live.set_output(node, "out", dims)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        out = live.dims[node.outputs["out"]]
        values: dict[str, Value] = {
            "numel": numel(out),
            "op_kind": OP_KINDS[self.op],
            "workgroup_size": WORKGROUP[0],
        }
        if "_scalar" in slot:  # add_scalar, add_scalar_f16, ...
            values["scalar"] = float(live.graph.scalar(node.arg("scalar")))
        if "_broadcast" in slot:  # add_broadcast, add_broadcast_f16, ...
            values["out_sizes"] = _right_aligned(out)
            values["a_strides"] = _broadcast_strides(live.of(node, "a"), out)
            values["b_strides"] = _broadcast_strides(live.of(node, "b"), out)
        return values

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        out_dtype = live.graph.tensor(node.outputs["out"]).dtype
        if node.optional_arg("b") is None:
            variant = "scalar"
        else:
            variant = "flat" if live.of(node, "a") == live.of(node, "b") else "broadcast"
        kernel = dtype_slot(f"{self.op}_{variant}", out_dtype)
        count = div_up(numel(live.dims[node.outputs["out"]]), WORKGROUP[0])
        return [(node.name, kernel, WORKGROUP, (count, 1, 1), True)]

    def _apply(self, a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
        out: np.ndarray = a + b if self.op == "add" else a * b
        return out

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        b = args.get("b")
        return {"out": self._apply(args["a"], float(args["scalar"]) if b is None else b)}

    def probe_reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        """`reference` of every probe at once: a and b carry a leading probe axis; the
        rest of their dims broadcast against each other as they do without it."""
        a, b = args["a"], args.get("b")
        if b is None:  # a scalar broadcasts over the probe axis too
            return self.reference(node, args)
        rank = max(a.ndim, b.ndim)

        def aligned(t: np.ndarray) -> np.ndarray:  # the probe axis first, then ones
            return t.reshape(t.shape[0], *(1,) * (rank - t.ndim), *t.shape[1:])

        return {"out": self._apply(aligned(a), aligned(b))}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        # In the kernel's arithmetic (u, tiny: f32's, or f16's for `precision = "f16"`).
        a = arithmetic()
        out = np.abs(outputs["out"])
        if args.get("b") is not None:
            # One rounding of the exact result; one below the normal range may flush (in
            # f32 the generated data never get there).
            return {"out": SAFETY * (a.u * out + a.tiny)}
        # The kernel reads the scalar s rounded to its arithmetic, s(1 + d1), |d1| <= u: a + s
        # is off by u|s| before its own rounding, a * s by a second factor (1 + d1), so
        # gamma(2)|a s|. A scalar below the normal range may be flushed to zero: off by
        # < tiny (times |a|).
        scalar = abs(float(args["scalar"]))
        if self.op == "add":
            return {"out": SAFETY * (a.u * (out + scalar) + a.tiny)}
        return {"out": SAFETY * (gamma(2) * out + a.tiny * (np.abs(args["a"]) + 1))}


ADD = register("add", BinaryModel("add"))
MUL = register("mul", BinaryModel("mul"))


# ---------------------------------------------------------------------------- cases


# How an input of a binary op relates to the output on one dim.
_FOLLOW, _ONE, _EITHER = "follow", "one", "either"
# Scalar operands: exact in f32 or not (0.1, -1234.56), small and large (never 0: a product
# of zeros is a degenerate case, any result would pass).
SCALARS = (3.0, -0.5, 0.1, 1e-3, -1234.56, 2.0**20)
# In float16 a scalar above 2^10 becomes 2^10 (exact in f16): the products of normal data with
# 2^20 would overflow f16's 65504.
F16_SCALAR_MAX = 2.0**10
# Row widths of the binary family's wide cases: 4 workgroups of 256 invocations and more.
WIDE_WIDTHS = (1024, 1025, 2049, 4096)
# In random graphs the result feeds other ops: moderate scalars keep their values (and so
# their budgets) in the range the other generators draw for.
GRAPH_SCALARS = (3.0, -0.5, 0.1, 2.0)


def _binary_step_shapes(
    draw: st.DrawFn, leading: Sequence[DynamicDim], width: int, modes: list[list[str]]
) -> list[list[list[int]]]:
    """Per step, each input's live dims: the leading dims step by step, each input's dims
    following them, 1, or either (`modes`)."""
    shapes: list[list[list[int]]] = []
    for lead in draw(step_dims(leading)):
        live_out = [*lead, width]
        step_shapes = []
        for dims_modes in modes:
            offset = len(live_out) - len(dims_modes)
            live = []
            for j, m in enumerate(dims_modes):
                size = live_out[offset + j]
                if m == _ONE or (m == _EITHER and draw(st.booleans())):
                    size = 1
                live.append(size)
            step_shapes.append(live)
        shapes.append(step_shapes)
    return shapes


@st.composite
def binary_cases(draw: st.DrawFn, op: str | None = None, wide: bool = True) -> Case:
    """add or mul of two inputs that broadcast against each other in varied patterns.

    Per output dim each input either follows the live size, is always 1 (broadcasts), or
    switches between 1 and the live size from step to step (so the kernel variant flips
    between flat and broadcast at run time). An input may also have fewer dims. A quarter
    of the cases are wide (`WIDE_WIDTHS`): two inputs of one shape, 1024 to 65536 elements,
    past 4 workgroups of 256 invocations (a foreign kernel's size; 16 of the project's 64);
    none with `wide` off.
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    op = op or draw(st.sampled_from(["add", "mul"]))
    leading = draw(leading_dims(max_rank=3))
    width = draw(st.one_of(st.integers(1, 8), st.sampled_from([16, 33, 64])))
    out_dims = [*leading, DynamicDim(width, False)]
    # The first input has every dim; the second may have fewer (it aligns on the right).
    ranks = [len(out_dims), draw(st.integers(1, len(out_dims)))]
    modes = [
        [draw(st.sampled_from([_FOLLOW, _FOLLOW, _ONE, _EITHER])) for _ in range(rank)]
        for rank in ranks
    ]
    # Some input must reach each dim's max, or the output would not have the max dims.
    offset = len(out_dims) - ranks[1]
    for i in range(len(out_dims)):
        second = modes[1][i - offset] if i >= offset else _ONE
        if modes[0][i] == _ONE and second == _ONE:
            modes[0][i] = _FOLLOW
    shapes = _binary_step_shapes(draw, leading, width, modes)
    # After them, a quarter of the cases are wide: two inputs of one shape (the flat kernel
    # over many workgroups). Drawn last, so that its simplest value (0, narrow) leaves the
    # case above as it was drawn, and shrinking can drop it.
    if wide and draw(st.integers(0, 3)) == 3:
        leading = draw(leading_dims(max_rank=2, max_size=4))
        width = draw(st.sampled_from(WIDE_WIDTHS))
        out_dims = [*leading, DynamicDim(width, False)]
        modes = [[_FOLLOW] * len(out_dims), [_FOLLOW] * len(out_dims)]
        shapes = _binary_step_shapes(draw, leading, width, modes)
    dtype = draw(case_dtypes([op]))  # last: the shape draws stay where they were
    b = GraphBuilder()
    names = []
    for k, dims_modes in enumerate(modes):
        offset = len(out_dims) - len(dims_modes)
        max_dims = [
            1 if m == _ONE else out_dims[offset + j].max_size for j, m in enumerate(dims_modes)
        ]
        names.append(b.input("ab"[k], dtype, max_dims))
    b.output(b.op(op, a=names[0], b=names[1], out_dims=[d.max_size for d in out_dims]))
    steps: list[StepInputs] = [
        {"ab"[k]: float_array(rng, live, dtype=dtype) for k, live in enumerate(step_shapes)}
        for step_shapes in shapes
    ]
    meta = {"seed": seed, "family": "binary", "dtype": dtype}
    return Case(b.build(), steps, name=op, meta=meta)


@st.composite
def binary_scalar_cases(draw: st.DrawFn, op: str) -> Case:
    """add or mul of a tensor and a float scalar (`x + 3.0`), the tensor's leading dims
    moving step by step; float16 for a share of the cases where the op takes it."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    leading = draw(leading_dims(max_rank=3))
    width = draw(st.one_of(st.integers(1, 8), st.sampled_from([16, 33, 64])))
    scalar = draw(st.sampled_from(SCALARS))
    lives = draw(step_dims(leading))
    dtype = draw(case_dtypes([op]))  # last: the shape draws stay where they were
    if dtype == "float16" and abs(scalar) > F16_SCALAR_MAX:
        scalar = F16_SCALAR_MAX  # 2^20 x a would overflow f16 (65504) to inf
    b = GraphBuilder()
    a = b.input("a", dtype, [*(d.max_size for d in leading), width])
    b.output(b.op(op, a=a, scalar=b.float(scalar, "scalar")))
    steps: list[StepInputs] = [
        {"a": float_array(rng, [*lead, width], dtype=dtype)} for lead in lives
    ]
    meta = {"seed": seed, "family": "binary", "operand": "scalar", "dtype": dtype}
    return Case(b.build(), steps, name=f"{op}_scalar", meta=meta)


# ---------------------------------------------------------------------------- random graphs


def _gen_binary(op: str) -> Grow:
    def gen(g: GraphGen) -> bool:
        """`op` joining two same-spec tensors of different depth, one with a constant that
        broadcasts over its leading dims, or one with a float scalar."""
        if g.draw(st.integers(0, 3)) == 0:
            x = g.pick(g.pool)
            scalar = g.builder.float(g.draw(st.sampled_from(GRAPH_SCALARS)))
            g.produced(g.builder.op(op, a=x.name, scalar=scalar), x.dims, [x])
            return True
        by_spec: dict[tuple[DimSpec, ...], list[PoolTensor]] = {}
        for t in g.pool:
            by_spec.setdefault(t.dims, []).append(t)
        pairs = [ts for ts in by_spec.values() if len(ts) >= 2]
        if bool(pairs) and g.draw(st.booleans()):
            a, b = g.pick_pair(g.pick_group(pairs))
            out = g.builder.op(op, a=a.name, b=b.name)
            g.produced(out, a.dims, [a, b])
            return True
        x = g.pick(g.pool)
        last = x.dims[-1]
        if not isinstance(last, int):
            return False
        c = g.constant("c", [last], scale=0.5)
        out = g.builder.op(op, a=x.name, b=c, out_dims=g.max_dims(x.dims))
        g.produced(out, x.dims, [x])
        return True

    return gen


def _binary_family(op: str) -> Callable[[], st.SearchStrategy[Case]]:
    """The strategy factory of `op`'s own family: two tensors, or (a quarter of the cases,
    shrinking toward two tensors) a tensor and a scalar."""
    return lambda: st.sampled_from([False, False, False, True]).flatmap(
        lambda scalar: binary_scalar_cases(op) if scalar else binary_cases(op)
    )


for _op in ("add", "mul"):
    register_family(_op, _binary_family(_op), {_op})
    register_generator(_op, _gen_binary(_op))
