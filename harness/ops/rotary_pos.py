"""Model of apply_rotary_emb_pos: the Llama (pair-interleaved) rope whose kernel computes its
own angles from int32 positions and theta, as ggml's `rope_norm` does.

Shapes: xq `[B, S, Hq, D]`, xk `[B, S, Hkv, D]` (any even D), positions int32 `[S]` (one per
token, shared by the batch), freq_factors float32 `[D/2]` (optional, llama.cpp's
`freq_factors`), outputs shaped like their inputs. Pair i of token s turns by

    angle(s, i) = positions[s] * freq_scale * theta_base^(-2i/D) / freq_factors[i]

(freq_factors[i] = 1 when absent): out[2i] = x[2i] cos - x[2i+1] sin, out[2i+1] = x[2i] sin
+ x[2i+1] cos. theta_base and freq_scale are float literals of the graph (theta_base > 0,
both finite); positions is any int32 (a graph input, the session's positions: prefill S
tokens from some position, then one token at a time).

Half precision: xq, xk and both outputs float16 together (positions stay int32, freq_factors
float32, as llama.cpp keeps them); the slot is then `rotary_emb_pos_f16`, which loads f16,
computes the angles and rotates in f32 exactly as its f32 twin and stores f16 (budget: the
f32 one plus the f16 store, `harness.model.local_budget`).

Kernel design (both backends): one dispatch slot `rotary_emb_pos`, as `rotary_emb`'s: 64
invocations per workgroup, one per rotated pair, q's pairs first, logical count
ceil((numel(xq) + numel(xk)) / 2 / 64). Each invocation computes its angle (the exponent
`-(f32(2i) / f32(D)) * log2(theta_base)`, `exp2` of it, times freq_scale, divided by the
factor, times f32(position)), reduces it into [-pi, pi] (where WGSL and Vulkan specify sin
and cos) and rotates. `angle_error` derives what that costs.

Live checks, in this order (`InputError` with subject the op):
1. "head_dim": the live D of xq and xk must stay the max D;
2. "qk_shape": xk's live B and S must equal xq's;
3. "positions_shape": positions' live dims must be [S].
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import (
    FLOAT_DTYPES,
    Graph,
    GraphBuildError,
    InputError,
    OpNode,
    TensorValue,
    dtype_slot,
)
from graph_format.kernels import Value
from harness.gen.blocks import DynamicDim, family_dtype, float_array, head_dims, seeds
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import GraphGen, Sym, generator
from harness.gen.half import half_precision
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    div_up,
    kernels,
    numel,
    op_dtype,
    optional_tensor,
    register,
    ro,
    rw,
    tensors,
    uniform_float_dtype,
)
from harness.model.numerics import SAFETY, Arithmetic, arithmetic, gamma
from harness.ops.rotary import (
    check_qk,
    join,
    live_qk,
    pairs,
    rope_operands,
    rotated,
    rotated_dims,
)

OP = "apply_rotary_emb_pos"
KERNEL = "rotary_emb_pos"
WORKGROUP = (64, 1, 1)

# Accuracy of the builtins the angle takes, from the WGSL spec (floating-point accuracy) and
# the Vulkan precision tables, which agree: log2 3 ULP outside [0.5, 2] and an absolute
# 2^-21 inside (f16: 2^-7); exp2 3 + 2|x| ULP (f16: 1 + 2|x|); pow(x, y) inherited from
# exp2(y * log2(x)); division 2.5 ULP; sin and cos an absolute 2^-11 (f16: 2^-7) inside
# [-pi, pi] and nothing specified outside. One ULP of a normal value v is at most eps |v|.
# The width-dependent ones are the kernel's `Arithmetic`'s (`arithmetic()`).
ULP_LOG2 = 3.0
ULP_DIVISION = 2.5


def _log2_error(x: float, a: Arithmetic) -> float:
    """Absolute error of log2(x) in arithmetic `a` for x > 0 of that width (spec bound)."""
    if 0.5 <= x <= 2.0:
        return a.log2_absolute
    return ULP_LOG2 * a.eps * abs(math.log2(x))


def exponents(head_dim: int, theta_base: float) -> np.ndarray:
    """t_i = -(2i/D) log2(theta_base), i < D/2: pair i's frequency is 2^t_i."""
    return -(np.arange(head_dim // 2) * 2.0 / head_dim) * math.log2(theta_base)


def angles(
    positions: np.ndarray,
    head_dim: int,
    theta_base: float,
    freq_scale: float,
    freq_factors: np.ndarray | None,
) -> np.ndarray:
    """The exact angles `[S, D/2]` (float64) of the given positions."""
    freqs = freq_scale * np.exp2(exponents(head_dim, theta_base))
    if freq_factors is not None:
        freqs = freqs / freq_factors
    return np.outer(np.asarray(positions, np.float64), freqs)


def angle_error(
    positions: np.ndarray,
    head_dim: int,
    theta_base: float,
    freq_scale: float,
    freq_factors: np.ndarray | None,
) -> np.ndarray:
    """How far (radians, `[S, D/2]`) the cos and sin a kernel computes for each pair of
    each token may be from cos and sin of the exact angle, before SAFETY (first order), in
    the kernel's arithmetic (`arithmetic()`; the text below names f32's constants: u,
    EPS32 = 2u, TINY32, 3 + 2|x| ULP of exp2, 2^-21 and 2^-11 absolute of log2 and sin/cos,
    2^24 exact ints; f16's are 2^-11, 2^-10, 2^-14, 1 + 2|x|, 2^-7, 2^-7, 2^11).

    Derivation. The kernel holds theta_base and freq_scale rounded to f32 (relative u each;
    log2 of the rounded base is off by up to u / ln 2 = 1.4427 u). Pair i's frequency is
    2^t with t = -(2i/D) L, L = log2(theta_base), computed one of two ways:
    (A) the project's kernels: e = f32(2i) / f32(D) (2.5 ULP, <= 5u |e|), L = log2(base)
        (`_log2_error`), t = -(e L) (u |t|): dt <= |t| (5u + u) + |e| (err_L + 1.4427 u);
    (B) ggml's: pow(theta_scale, i), theta_scale = base^(-2/D) computed in f32 (pow(base,
        -2/D): t1 = -(2/D) L with dt1 <= 6u |t1| + (2/D)(err_L + 1.4427 u), so a relative
        error r_s = ln 2 dt1 + (3 + 2|t1|) EPS32, which also covers a host's one rounding u),
        then pow = exp2(i log2(theta_scale)): log2 of it off by r_s / ln 2 plus log2's own
        error (`_log2_error`), times i, and the product's u |t|:
        dt <= i (r_s / ln 2 + err_log2(theta_scale)) + u |t|.
    exp2 of t + dt is 2^t (1 + ln 2 dt) to first order, and exp2 itself adds 3 + 2|t| ULP:
    the frequency's relative error is r_f = ln 2 dt + (3 + 2|t|) EPS32, the larger of (A)
    and (B). Then the angle: times freq_scale (u, and the u of its rounding), divided by the
    factor (2.5 ULP = 5u; counted with or without factors, since a kernel may divide by
    1.0), times f32(position) (u, and another u for a position past 2^24): r = r_f + 8u (+u),
    error |angle| r, and TINY32 for an angle flushed below the smallest normal.
    Reduction into [-pi, pi] (the project's kernels: k = round(a / 2pi), a - k 2pi_f32,
    clamped to the largest f32 below pi; sin and cos are specified only in [-pi, pi]): with
    |k 2pi| <= |a| + 2pi, 2pi's own rounding and the product's cost u (|a| + 2pi) each, the
    subtraction u (pi + 2u|a|), and the clamp moves a reduced angle that k's rounding pushed
    past pi (by up to 2u |a|) by at most 2u |a| + 2u pi: 4u |a| + 7u pi in all. A kernel
    that leaves the reduction to its sin and cos is held to the same bound.
    Last, sin and cos: 2^-11 absolute. cos and sin are 1-Lipschitz, so each is off by at most
    the sum of the three.
    """
    a = arithmetic()
    dim = head_dim
    t = exponents(dim, theta_base)
    pairs = np.arange(dim // 2, dtype=np.float64)
    e = pairs * 2.0 / dim
    division = ULP_DIVISION * a.eps  # relative, 5u
    base_rounding = a.u / math.log(2.0)  # log2 of the base rounded to the arithmetic
    # (A): e's division and the product e L, then L's own error scaled by e.
    dt_a = np.abs(t) * (division + a.u) + e * (_log2_error(theta_base, a) + base_rounding)
    # (B): theta_scale = 2^t1 computed in f32, then raised to i.
    theta_scale, t1 = theta_base ** (-2.0 / dim), abs(2.0 / dim * math.log2(theta_base))
    dt1 = (division + a.u) * t1 + 2.0 / dim * (_log2_error(theta_base, a) + base_rounding)
    rel_scale = math.log(2.0) * dt1 + a.ulp_exp(t1) * a.eps
    dt_b = pairs * (rel_scale / math.log(2.0) + _log2_error(theta_scale, a)) + a.u * np.abs(t)
    rel_freq = math.log(2.0) * np.maximum(dt_a, dt_b) + a.ulp_exp(t) * a.eps
    # The angle: freq_scale's rounding and product (2u), the factor's division, the position.
    pos = np.asarray(positions, np.float64)[:, None]
    big = np.where(np.abs(pos) > a.exact_int, a.u, 0.0)
    rel_angle = rel_freq[None, :] + 2.0 * a.u + division + a.u + big
    exact = np.abs(angles(positions, dim, theta_base, freq_scale, freq_factors))
    computed = exact * rel_angle + a.tiny
    reduction = 4.0 * a.u * exact + 7.0 * a.u * math.pi
    bound: np.ndarray = computed + reduction + a.sin_cos_absolute
    return bound


def _op_floats(node: OpNode, args: Args) -> tuple[float, float, np.ndarray | None]:
    factors = args.get("freq_factors")
    return (
        float(args["theta_base"]),
        float(args["freq_scale"]),
        None if factors is None else np.asarray(factors, np.float64),
    )


class PositionRotaryModel(OpModel):
    """Contract, reference and budget of apply_rotary_emb_pos (angles from positions)."""

    op = OP
    activations = ("xq", "xk")
    # Decode (one token), the whole prefill, a decode after a prefill, and llama.cpp's
    # frequency factors (`regimes`).
    required_regimes = ("size=1", "size=max", "step=shrink", "freq_factors")
    dtypes = FLOAT_DTYPES

    def __init__(self) -> None:
        half = dtype_slot(KERNEL, "float16")
        self.kernels = kernels(
            KernelSpec(
                KERNEL,
                (
                    rw("xq_out"),
                    rw("xk_out"),
                    ro("xq"),
                    ro("xk"),
                    ro("positions", "i32"),
                    ro("freq_factors"),
                ),
                exact=False,  # rounds apart on NVIDIA (docs/oracles.md)
            ),
            KernelSpec(
                half,
                (
                    rw("xq_out", "f16"),
                    rw("xk_out", "f16"),
                    ro("xq", "f16"),
                    ro("xk", "f16"),
                    ro("positions", "i32"),
                    ro("freq_factors"),
                ),
                exact=False,  # rounds apart on NVIDIA (docs/oracles.md)
            ),
        )

    def check(self, node: OpNode, graph: Graph) -> None:
        xq, xk, positions, xq_out, xk_out = tensors(
            node, graph, "xq", "xk", "positions", "xq_out", "xk_out"
        )
        factors = optional_tensor(node, graph, "freq_factors")
        uniform_float_dtype(node, graph, "xq", "xk", "xq_out", "xk_out")
        if positions.dtype != "int32":
            raise GraphBuildError(node.name, "positions must be int32", tensor=positions.name)
        if factors is not None and factors.dtype != "float32":
            raise GraphBuildError(node.name, "freq_factors must be float32", tensor=factors.name)
        _check_shapes(node, xq, xk, positions, factors)
        _check_scalars(node, graph)
        if xq_out.dims != xq.dims:
            raise GraphBuildError(node.name, "xq_out dims != xq dims", tensor=xq_out.name)
        if xk_out.dims != xk.dims:
            raise GraphBuildError(node.name, "xk_out dims != xk dims", tensor=xk_out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        xq, xk, _ = live_qk(node, live)
        positions = live.of(node, "positions")
        if positions != (xq[1],):
            raise InputError(
                node.name,
                "positions_shape",
                f"live positions {list(positions)} must be [{xq[1]}], one per token",
            )
        live.set_output(node, "xq_out", xq)
        live.set_output(node, "xk_out", xk)

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """Coverage: B * S, the tokens the dispatch covers (heads are fixed per case)."""
        dims = live.of(node, "xq")
        return dims[0] * dims[1]

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: the frequency factors bound (llama.cpp's long-context ropes)."""
        return {"freq_factors"} if node.optional_arg("freq_factors") else set()

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        xq, xk = live.of(node, "xq"), live.of(node, "xk")
        dim = live.max_of(node, "xq")[3]
        base = float(live.graph.scalar(node.arg("theta_base")))
        q_pairs = numel(xq) // 2
        return {
            "q_pairs": q_pairs,
            "total_pairs": q_pairs + numel(xk) // 2,
            "half_dim": dim // 2,
            "head_dim": dim,
            "seq": xq[1],
            "q_heads": xq[2],
            "k_heads": xk[2],
            "theta_base": base,
            "freq_scale": float(live.graph.scalar(node.arg("freq_scale"))),
            "has_freq_factors": int(node.optional_arg("freq_factors") is not None),
            "workgroup_size": WORKGROUP[0],
        }

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        pairs = (numel(live.of(node, "xq")) + numel(live.of(node, "xk"))) // 2
        kernel = dtype_slot(KERNEL, op_dtype(live.graph, node))
        return [(node.name, kernel, WORKGROUP, (div_up(pairs, WORKGROUP[0]), 1, 1), True)]

    def _angles(self, node: OpNode, args: Args) -> np.ndarray:
        base, scale, factors = _op_floats(node, args)
        return angles(args["positions"], args["xq"].shape[-1], base, scale, factors)

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        # [S, D/2] broadcast from the right: xq and xk may carry a leading probe axis.
        theta = self._angles(node, args)[:, None, :]
        c, s = np.cos(theta), np.sin(theta)
        out = {}
        for name in ("xq", "xk"):
            a, b = pairs(args[name])
            out[f"{name}_out"] = join(a * c - b * s, a * s + b * c)
        return out

    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Per element: each of cos and sin is off by up to `angle_error` (delta), and the
        rotation a c -+ b s rounds twice (gamma(2)): (|a| + |b|) delta + gamma(2) (|a c| +
        |b s|), and its two products and result may flush below the smallest normal (3 tiny),
        times SAFETY; all in the kernel's arithmetic."""
        base, scale, factors = _op_floats(node, args)
        dim = args["xq"].shape[-1]
        delta = angle_error(args["positions"], dim, base, scale, factors)[:, None, :]
        theta = self._angles(node, args)[:, None, :]
        c, s = np.abs(np.cos(theta)), np.abs(np.sin(theta))
        out = {}
        for name in ("xq", "xk"):
            a, b = (np.abs(v) for v in pairs(args[name]))
            trig = (a + b) * delta
            flushed = 3 * arithmetic().tiny
            first = SAFETY * (trig + gamma(2) * (a * c + b * s) + flushed)
            second = SAFETY * (trig + gamma(2) * (a * s + b * c) + flushed)
            out[f"{name}_out"] = join(first, second)
        return out


MODEL = register(OP, PositionRotaryModel())


# ---------------------------------------------------------------------------- cases

# Rope bases of real models (Llama 2, Llama 3) and a small one (frequencies fall fast), and
# linear position-interpolation scales.
THETA_BASES = (10000.0, 500000.0, 100.0)
FREQ_SCALES = (1.0, 0.25, 0.5)


def session_positions(draw: st.DrawFn, max_seq: int) -> list[np.ndarray]:
    """The positions of a generation session, one array per step: a prefill of S tokens
    from a start position (0, or a context already cached), then decode steps one token at a
    time, positions continuing; now and then a second prefill chunk mid-session."""
    position = draw(st.sampled_from([0, 0, 1]) | st.integers(2, 4096))
    steps = []
    for kind in [
        "prefill",
        *draw(st.lists(st.sampled_from(["decode"] * 3 + ["chunk"]), min_size=1, max_size=5)),
    ]:
        seq = 1 if kind == "decode" else draw(st.integers(1, max_seq))
        steps.append(np.arange(position, position + seq, dtype=np.int32))
        position += seq
    return steps


@family("rope_pos", exercises={OP})
@st.composite
def rope_pos_cases(draw: st.DrawFn) -> Case:
    """apply_rotary_emb_pos over a session's positions (prefill, then decode), with a random
    batch, different q and k head counts, a real theta (or a small one), a frequency scale
    and, in half the cases, llama.cpp-style frequency factors."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    batch, max_seq = draw(st.integers(1, 2)), draw(st.integers(1, 16))
    q_heads, k_heads, dim = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(head_dims())
    base, scale = draw(st.sampled_from(THETA_BASES)), draw(st.sampled_from(FREQ_SCALES))
    with_factors = draw(st.booleans())
    b = GraphBuilder()
    xq = b.input("xq", "float32", [batch, max_seq, q_heads, dim])
    xk = b.input("xk", "float32", [batch, max_seq, k_heads, dim])
    positions = b.input("positions", "int32", [max_seq])
    factors = (
        b.constant("freq_factors", rng.uniform(1.0, 8.0, dim // 2).astype(np.float32))
        if with_factors
        else None
    )
    outs = b.op(
        OP,
        name="rope_pos",
        xq=xq,
        xk=xk,
        positions=positions,
        theta_base=b.float(base, "theta_base"),
        freq_scale=b.float(scale, "freq_scale"),
        freq_factors=factors,
        out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
    )
    b.output(*outs)
    steps: list[StepInputs] = []
    leading = DynamicDim(batch, batch > 1)
    for pos in session_positions(draw, max_seq):
        bsz = draw(st.integers(1, batch)) if leading.dynamic else batch
        steps.append(
            {
                "xq": float_array(rng, [bsz, len(pos), q_heads, dim]),
                "xk": float_array(rng, [bsz, len(pos), k_heads, dim]),
                "positions": pos,
            }
        )
    case = Case(b.build(), steps, name="rope_pos", meta={"seed": seed, "family": "rope_pos"})
    # Last: the shape draws stay where they were; f16 data are the f32 data rounded, the
    # frequency factors stay float32 (as llama.cpp's).
    if draw(family_dtype("rope_pos")) == "float16":
        return half_precision(case, keep={factors} if factors else set())
    return case


# ---------------------------------------------------------------------------- random graphs


@generator(OP)
def gen_apply_rotary_emb_pos(g: GraphGen) -> bool:
    """Position rope of two head views; positions `[S]` is a graph input fed every step at
    the live S (consecutive, from a random start), theta and the scale literals."""
    operands = rope_operands(g)
    if operands is None:
        return False
    q, k, _ = operands
    seq = q.dims[1]
    assert isinstance(seq, Sym)
    b = g.builder
    positions = b.input(b.fresh("positions"), "int32", [seq.max])

    def feed(values: dict[str, int]) -> StepInputs:
        start = int(g.rng.integers(0, 2048))
        return {positions: np.arange(start, start + values[seq.name], dtype=np.int32)}

    g.step_inputs.append(feed)
    outputs = b.op(
        OP,
        xq=q.name,
        xk=k.name,
        positions=positions,
        theta_base=b.float(g.draw(st.sampled_from(THETA_BASES))),
        freq_scale=b.float(g.draw(st.sampled_from(FREQ_SCALES))),
        out_dims=rotated_dims(g, q, k),
    )
    rotated(g, outputs, q, k)
    return True


def _check_shapes(
    node: OpNode,
    xq: TensorValue,
    xk: TensorValue,
    positions: TensorValue,
    factors: TensorValue | None,
) -> None:
    """`PositionRotaryModel.check`'s shapes: xq and xk [B, S, H, D] with an even D shared, one
    position per token, one factor per frequency."""
    dim = check_qk(node, xq, xk)
    if positions.dims != (xq.dims[1],):
        raise GraphBuildError(node.name, f"positions must be [{xq.dims[1]}]", tensor=positions.name)
    if factors is not None and factors.dims != (dim // 2,):
        raise GraphBuildError(node.name, f"freq_factors must be [{dim // 2}]", tensor=factors.name)


def _check_scalars(node: OpNode, graph: Graph) -> None:
    """`PositionRotaryModel.check`'s scalars: theta_base finite and > 0, freq_scale finite."""
    base = float(graph.scalar(node.arg("theta_base")))
    scale = float(graph.scalar(node.arg("freq_scale")))
    if not (math.isfinite(base) and base > 0) or not math.isfinite(scale):
        raise GraphBuildError(
            node.name, f"theta_base {base} must be finite and > 0, freq_scale {scale} finite"
        )
