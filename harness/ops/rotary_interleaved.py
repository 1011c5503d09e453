"""Model of apply_rotary_emb_interleaved(x, freqs_cis) -> out: EdgeTAM's interleaved rope.

Upstream ExecuTorch's `et_vk.apply_rotary_emb_interleaved`: x `[B, N, C]` holds (real, imag)
pairs `[r, i]` along its last dim, freqs_cis `[N, C]` the matching `[cos, sin]` pairs of each
token, and per pair k of token n:
    out[2k] = r cos - i sin,   out[2k+1] = r sin + i cos,   (cos, sin) = freqs_cis[n, 2k:2k+2].
B and N are dynamic: freqs_cis is fed at x's live N (a caller slices it by position), and
`out` has x's live dims. Upstream also takes freqs at any rank whose flattened layout is
`[N, C]`; this project's contract is the 2-D form.

Kernel design (both backends): one invocation per (real, imag) pair of x, so C must be even
(refused at load otherwise). Upstream's WebGPU op accepts any even C; its Vulkan shader reads
vec4 texels (two pairs) and refuses C % 4 != 0 — a limit of that kernel, not of the op, so
the contract takes the WebGPU op's. 64 invocations per workgroup, one dispatch slot
`rotary_emb_interleaved`, logical count ceil(numel(x) / 2 / 64) (upstream's Vulkan dispatches
(C/4, N, B) threads; a 1-D count lets the backends fold it like every other kernel here). Pair
p of x is pair p % (C/2) of token n = (p / (C/2)) % N, whose freqs pair is
n * (C/2) + p % (C/2).

Live checks, in this order (`InputError` with subject the op):
1. "width": x's live C must stay its max C (the kernel's pairs per token);
2. "freqs_shape": freqs_cis's live dims must be [N, C] for x's live N.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import FLOAT_DTYPES, Graph, GraphBuildError, InputError, OpNode, dtype_slot
from graph_format.kernels import Value
from harness.gen.blocks import DynamicDim, family_dtype, float_array, seeds, step_dims
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import DimSpec, GraphGen, PoolTensor, generator
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
    register,
    ro,
    rw,
    tensors,
    uniform_float_dtype,
)
from harness.model.numerics import SAFETY, arithmetic, gamma
from harness.ops.rotary import rope_tables
from harness.ops.view import view_as

OP = "apply_rotary_emb_interleaved"
WORKGROUP = (64, 1, 1)
PAIR = 2  # elements per invocation: one (real, imag) pair


def _pairs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The even (real or cos) and odd (imag or sin) elements of the last dim."""
    return a[..., 0::2], a[..., 1::2]


def _interleave(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    return np.stack([first, second], axis=-1).reshape(*first.shape[:-1], -1)


class InterleavedRotaryModel(OpModel):
    """Contract, reference and budget of apply_rotary_emb_interleaved."""

    activations = ("x",)
    required_regimes = ("size=1", "size=max", "step=shrink")
    dtypes = FLOAT_DTYPES
    kernels = kernels(
        KernelSpec(
            "rotary_emb_interleaved",
            (rw("out", "vec2<f32>"), ro("x", "vec2<f32>"), ro("freqs_cis", "vec2<f32>")),
            exact=True,
            webgpu_ulps=0,
        ),
        # Half precision: x, freqs_cis and out f16, rotated in f32.
        KernelSpec(
            "rotary_emb_interleaved_f16",
            (rw("out", "vec2<f16>"), ro("x", "vec2<f16>"), ro("freqs_cis", "vec2<f16>")),
            exact=True,
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        x, freqs, out = tensors(node, graph, "x", "freqs_cis", "out")
        uniform_float_dtype(node, graph, "x", "freqs_cis", "out")
        if len(x.dims) != 3:
            raise GraphBuildError(node.name, "x must be [B, N, C]", tensor=x.name)
        if x.dims[2] % PAIR:
            raise GraphBuildError(node.name, "C must be even", tensor=x.name)
        if freqs.dims != x.dims[1:]:
            raise GraphBuildError(node.name, "freqs_cis must be [N, C]", tensor=freqs.name)
        if out.dims != x.dims:
            raise GraphBuildError(node.name, "out dims != x dims", tensor=out.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        x, freqs = live.of(node, "x"), live.of(node, "freqs_cis")
        width = live.max_of(node, "x")[2]
        if x[2] != width:
            raise InputError(node.name, "width", f"live C {x[2]} must stay {width}")
        if freqs != x[1:]:
            raise InputError(
                node.name, "freqs_shape", f"live freqs_cis {list(freqs)} must be {list(x[1:])}"
            )
        live.set_output(node, "out", x)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        dims = live.of(node, "x")
        return {
            "pairs": numel(dims) // PAIR,
            "row_pairs": live.max_of(node, "x")[-1] // PAIR,
            "tokens": dims[1],
            "workgroup_size": WORKGROUP[0],
        }

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        pairs = numel(live.of(node, "x")) // PAIR
        count = (div_up(pairs, WORKGROUP[0]), 1, 1)
        kernel = dtype_slot("rotary_emb_interleaved", op_dtype(live.graph, node))
        return [(node.name, kernel, WORKGROUP, count, True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        r, i = _pairs(args["x"])
        c, s = _pairs(args["freqs_cis"][None])
        return {"out": _interleave(r * c - i * s, r * s + i * c)}

    # The tables broadcast from the right: x may carry a leading probe axis.
    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        # As the other ropes: each output is two products and a sum (fused or not), so
        # |fl(a b +- c d) - (a b +- c d)| <= gamma(2) (|a b| + |c d|), plus 3 tiny for the
        # three results flushed below the smallest normal (in the kernel's arithmetic).
        r, i = _pairs(args["x"])
        c, s = _pairs(args["freqs_cis"][None])
        real = np.abs(r * c) + np.abs(i * s)
        imag = np.abs(r * s) + np.abs(i * c)
        flushed = 3 * arithmetic().tiny
        return {"out": SAFETY * (gamma(2) * _interleave(real, imag) + flushed)}


MODEL = register(OP, InterleavedRotaryModel())


# ---------------------------------------------------------------------------- cases


def interleaved_freqs(rng: np.random.Generator, positions: np.ndarray, width: int) -> np.ndarray:
    """freqs_cis `[len(positions), width]` float32: `[cos, sin]` of each pair's angle."""
    angles = rope_tables(rng, positions, width)
    return _interleave(np.cos(angles), np.sin(angles)).astype(np.float32)


@family("rope_interleaved", exercises={OP})
@st.composite
def rope_interleaved_cases(draw: st.DrawFn) -> Case:
    """apply_rotary_emb_interleaved with dynamic B and N, C even (C % 4 == 2 too),
    freqs_cis `[N, C]` fed per step at the live N from a random position; now and then a
    step whose freqs_cis has another N (refused by both)."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    batch, tokens = draw(st.integers(1, 2)), draw(st.integers(1, 32))
    width = draw(st.sampled_from([2, 4, 6, 8, 12, 16, 30, 32, 64, 96, 128]))
    leading = [DynamicDim(batch, batch > 1), DynamicDim(tokens, tokens > 1)]
    b = GraphBuilder()
    x = b.input("x", "float32", [batch, tokens, width])
    freqs = b.input("freqs_cis", "float32", [tokens, width])
    b.output(b.op(OP, name="rope", x=x, freqs_cis=freqs))
    steps: list[StepInputs] = []
    for bsz, n in draw(step_dims(leading)):
        rows = n
        if draw(st.integers(0, 9)) == 0:
            rows = n + 1 if n < tokens else n - 1 if n > 1 else n  # refused: N differs
        positions = draw(st.integers(0, 200)) + np.arange(rows)
        steps.append(
            {
                "x": float_array(rng, [bsz, n, width]),
                "freqs_cis": interleaved_freqs(rng, positions, width),
            }
        )
    case = Case(b.build(), steps, name="rope_interleaved", meta={"seed": seed})
    # Last: the shape draws stay where they were; f16 data are the f32 data rounded.
    return half_precision(case) if draw(family_dtype("rope_interleaved")) == "float16" else case


# ---------------------------------------------------------------------------- random graphs


def _tokens_spec(t: PoolTensor) -> tuple[DimSpec, ...] | None:
    """The `[B, N, C]` spec a pool tensor can be viewed as (C static and even):
    `[S, C]` -> `[1, S, C]`, a rank-3 tensor as it is; None otherwise."""
    dims, last = t.dims, t.dims[-1]
    if not isinstance(last, int) or last % PAIR:
        return None
    if len(dims) == 2:
        return (1, *dims)
    return dims if len(dims) == 3 else None


@generator(OP)
def gen_apply_rotary_emb_interleaved(g: GraphGen) -> bool:
    """The interleaved rope of a `[B, N, C]` pool tensor (or a `[1, S, C]` view of an
    `[S, C]` one); freqs_cis `[N, C]` is a graph input fed every step at the live N."""
    candidates = [t for t in g.pool if _tokens_spec(t) is not None]
    if not candidates:
        return False
    source = g.pick(candidates)
    spec = _tokens_spec(source)
    assert spec is not None
    x = source if source.dims == spec else view_as(g, source, spec)
    b = g.builder
    rows = spec[1:]
    freqs = b.input(b.fresh("freqs_cis"), "float32", g.max_dims(rows))

    def table(values: dict[str, int]) -> StepInputs:
        n, width = g.live_dims(rows, values)
        positions = int(g.rng.integers(0, 200)) + np.arange(n)
        return {freqs: interleaved_freqs(g.rng, positions, width)}

    g.step_inputs.append(table)
    out = b.op(OP, x=x.name, freqs_cis=freqs)
    g.produced(out, x.dims, [x])
    return True
