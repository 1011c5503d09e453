"""Models of apply_rotary_emb (Llama, pair-interleaved) and apply_rotary_emb_hf (rotate-half).

Shapes: xq `[B, S, Hq, D]`, xk `[B, S, Hkv, D]` (Hq and Hkv independent, any even D),
outputs shaped like their inputs.
- apply_rotary_emb: freqs_cos / freqs_sin `[S, D/2]` at the live S (the caller slices them
  by position). Pair i of token s: out[2i] = x[2i] c - x[2i+1] s, out[2i+1] = x[2i] s +
  x[2i+1] c, with (c, s) = freqs[s, i].
- apply_rotary_emb_hf: full-width tables cos / sin `[max_seq, D]`, row r = start_pos + s,
  h = D/2: out[i] = x[i] cos[r, i] - x[i+h] sin[r, i] and out[i+h] = x[i+h] cos[r, i+h] +
  x[i] sin[r, i+h]: the second half uses its own columns (upstream Vulkan reads column i
  for both halves, docs/design.md §8.5; that is wrong unless the halves of the table agree).

Half precision: all six tensors (q, k, both tables, both outputs) float16 together; the
slots are then `rotary_emb_f16` / `rotary_emb_hf_f16`, which load f16, rotate in f32 exactly
as their f32 twins and store f16 (budget: the f32 one plus the f16 store,
`harness.model.local_budget`).

Kernel design (both backends): one dispatch slot (`rotary_emb` / `rotary_emb_hf`) that
rotates q and k together, 64 invocations per workgroup, one per rotated pair: pairs
[0, numel(xq)/2) are q's, the rest k's; logical count ceil((numel(xq) + numel(xk)) / 2 / 64).

Live checks, in this order (`InputError` with subject the op):
1. "head_dim": the live D of xq and xk must stay the max D;
2. "qk_shape": xk's live B and S must equal xq's;
3. Llama: "freqs_shape": freqs_cos and freqs_sin live dims must be [S, D/2].
   HF: "table_shape": cos and sin live dims must be equal, with D columns; then
   "start_pos": start_pos must be >= 0 and start_pos + S <= the table's live rows.
"""

from __future__ import annotations

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
from harness.gen.blocks import (
    DynamicDim,
    family_dtype,
    float_array,
    head_dims,
    live_sequences,
    seeds,
    step_dims,
)
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import DimSpec, GraphGen, PoolTensor, Sym, generator
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
from harness.ops.view import view_as

WORKGROUP = (64, 1, 1)


def pairs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and second elements of x's adjacent pairs along its last axis."""
    split = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    return split[..., 0], split[..., 1]


def join(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The inverse of `pairs`: first and second interleaved along the last axis."""
    return np.stack([first, second], axis=-1).reshape(*first.shape[:-1], -1)


def check_qk(node: OpNode, xq: TensorValue, xk: TensorValue) -> int:
    """The load-time checks of xq and xk every rope shares: [B, S, H, D] with one even D and
    one B, S; returns D."""
    for t in (xq, xk):
        if len(t.dims) != 4:
            raise GraphBuildError(node.name, "xq and xk must be [B, S, H, D]", tensor=t.name)
    dim = int(xq.dims[3])
    if dim % 2:
        raise GraphBuildError(node.name, f"head dim {dim} must be even", tensor=xq.name)
    if xk.dims[3] != dim or xk.dims[:2] != xq.dims[:2]:
        raise GraphBuildError(node.name, "xk must share xq's B, S and D", tensor=xk.name)
    return dim


def live_qk(node: OpNode, live: LiveState) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The live dims of xq and xk every rope checks alike (D as at load, one B and S), and
    the max D; raises the InputError of dims that do not fit."""
    xq, xk = live.of(node, "xq"), live.of(node, "xk")
    dim = live.max_of(node, "xq")[3]
    if xq[3] != dim or xk[3] != dim:
        raise InputError(node.name, "head_dim", f"live head dims {xq[3]}, {xk[3]} must stay {dim}")
    if xk[:2] != xq[:2]:
        raise InputError(node.name, "qk_shape", f"live xk {list(xk)} vs xq {list(xq)}")
    return xq, xk, dim


def _rotate_budget(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Bound of fl(a c -+ b s): two products and a sum, fused or not, in the kernel's
    arithmetic (`gamma`'s u), each of the three possibly flushed below the smallest normal
    (3 tiny: nothing in f32, counted in f16)."""
    flushed = 3 * arithmetic().tiny
    bound: np.ndarray = SAFETY * (gamma(2) * (np.abs(a * c) + np.abs(b * s)) + flushed)
    return bound


class _RotaryBase(OpModel):
    """What both rotary models share: the q/k shapes, their checks and the dispatch."""

    op = ""
    kernel = ""
    table_slots = ("", "")
    activations = ("xq", "xk")
    required_regimes: tuple[str, ...] = ()
    dtypes = FLOAT_DTYPES

    def __init__(self) -> None:
        c, s = self.table_slots
        half = dtype_slot(self.kernel, "float16")
        self.kernels = kernels(
            KernelSpec(
                self.kernel,
                (rw("xq_out"), rw("xk_out"), ro("xq"), ro("xk"), ro(c), ro(s)),
                exact=True,
                webgpu_ulps=0,
            ),
            KernelSpec(
                half,
                tuple(
                    b(name, "f16")
                    for b, name in (
                        (rw, "xq_out"),
                        (rw, "xk_out"),
                        (ro, "xq"),
                        (ro, "xk"),
                        (ro, c),
                        (ro, s),
                    )
                ),
                exact=True,
            ),
        )

    def table_width(self, head_dim: int) -> int:
        """Columns of the cos/sin tables for head dim D."""
        raise NotImplementedError

    def check(self, node: OpNode, graph: Graph) -> None:
        c_slot, s_slot = self.table_slots
        xq, xk, cos, sin, xq_out, xk_out = tensors(
            node, graph, "xq", "xk", c_slot, s_slot, "xq_out", "xk_out"
        )
        uniform_float_dtype(node, graph, "xq", "xk", c_slot, s_slot, "xq_out", "xk_out")
        dim = check_qk(node, xq, xk)
        if len(cos.dims) != 2 or cos.dims[1] != self.table_width(dim):
            raise GraphBuildError(
                node.name, f"{c_slot} must be [rows, {self.table_width(dim)}]", tensor=cos.name
            )
        if sin.dims != cos.dims:
            raise GraphBuildError(node.name, f"{s_slot} dims != {c_slot} dims", tensor=sin.name)
        if xq_out.dims != xq.dims:
            raise GraphBuildError(node.name, "xq_out dims != xq dims", tensor=xq_out.name)
        if xk_out.dims != xk.dims:
            raise GraphBuildError(node.name, "xk_out dims != xk dims", tensor=xk_out.name)

    def check_tables(self, node: OpNode, live: LiveState, seq: int, dim: int) -> None:
        """Raise the InputError of live table dims or positions that do not fit."""
        raise NotImplementedError

    def resize(self, node: OpNode, live: LiveState) -> None:
        xq, xk, dim = live_qk(node, live)
        self.check_tables(node, live, xq[1], dim)
        live.set_output(node, "xq_out", xq)
        live.set_output(node, "xk_out", xk)

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """Coverage: B * S, the tokens the dispatch covers (heads are fixed per case)."""
        dims = live.of(node, "xq")
        return dims[0] * dims[1]

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        xq, xk = live.of(node, "xq"), live.of(node, "xk")
        q_pairs = numel(xq) // 2
        values: dict[str, Value] = {
            "q_pairs": q_pairs,
            "total_pairs": q_pairs + numel(xk) // 2,
            "half_dim": live.max_of(node, "xq")[3] // 2,
            "seq": xq[1],
            "q_heads": xq[2],
            "k_heads": xk[2],
            "workgroup_size": WORKGROUP[0],
        }
        if "start_pos" in node.args:
            values["start_pos"] = live.int_arg(node, "start_pos")
        return values

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        pairs = (numel(live.of(node, "xq")) + numel(live.of(node, "xk"))) // 2
        kernel = dtype_slot(self.kernel, op_dtype(live.graph, node))
        return [(node.name, kernel, WORKGROUP, (div_up(pairs, WORKGROUP[0]), 1, 1), True)]


class LlamaRotaryModel(_RotaryBase):
    """Contract, reference and budget of apply_rotary_emb (pair-interleaved)."""

    op = "apply_rotary_emb"
    kernel = "rotary_emb"
    table_slots = ("freqs_cos", "freqs_sin")
    required_regimes = ("size=1", "size=max", "step=shrink")

    def table_width(self, head_dim: int) -> int:
        return head_dim // 2

    def check_tables(self, node: OpNode, live: LiveState, seq: int, dim: int) -> None:
        cos, sin = live.of(node, "freqs_cos"), live.of(node, "freqs_sin")
        if cos != (seq, dim // 2) or sin != cos:
            raise InputError(
                node.name,
                "freqs_shape",
                f"live freqs {list(cos)}, {list(sin)} must be [{seq}, {dim // 2}]",
            )

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        c = args["freqs_cos"][None, :, None, :]
        s = args["freqs_sin"][None, :, None, :]
        out = {}
        for name in ("xq", "xk"):
            a, b = pairs(args[name])
            out[f"{name}_out"] = join(a * c - b * s, a * s + b * c)
        return out

    # The tables broadcast from the right: xq and xk may carry a leading probe axis.
    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        c = args["freqs_cos"][None, :, None, :]
        s = args["freqs_sin"][None, :, None, :]
        out = {}
        for name in ("xq", "xk"):
            a, b = pairs(args[name])
            out[f"{name}_out"] = join(_rotate_budget(a, b, c, s), _rotate_budget(a, b, s, c))
        return out


class HfRotaryModel(_RotaryBase):
    """Contract, reference and budget of apply_rotary_emb_hf (rotate-half, start_pos)."""

    op = "apply_rotary_emb_hf"
    kernel = "rotary_emb_hf"
    table_slots = ("cos", "sin")
    # The table's first row and its last (`regimes`), where a row offset goes wrong.
    required_regimes = ("size=1", "start_pos=0", "rows=table_end")

    def table_width(self, head_dim: int) -> int:
        return head_dim

    def check_tables(self, node: OpNode, live: LiveState, seq: int, dim: int) -> None:
        cos, sin = live.of(node, "cos"), live.of(node, "sin")
        if sin != cos or cos[1] != dim:
            raise InputError(
                node.name, "table_shape", f"live tables {list(cos)}, {list(sin)} need {dim} columns"
            )
        start = live.int_arg(node, "start_pos")
        if start < 0 or start + seq > cos[0]:
            raise InputError(
                node.name,
                "start_pos",
                f"start_pos {start} + S {seq} must lie in the table's {cos[0]} rows",
            )

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: rows at the table's start or reaching its end."""
        start, seq = live.int_arg(node, "start_pos"), live.of(node, "xq")[1]
        tags = {"start_pos=0"} if start == 0 else set()
        if start + seq == live.of(node, "cos")[0]:
            tags.add("rows=table_end")
        return tags

    @staticmethod
    def _rows(table: np.ndarray, start: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        rows = table[start : start + seq][None, :, None, :]
        half = table.shape[1] // 2
        return rows[..., :half], rows[..., half:]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        # S from the right, so that xq and xk may carry a leading probe axis.
        start, seq = int(args["start_pos"]), args["xq"].shape[-3]
        c1, c2 = self._rows(args["cos"], start, seq)
        s1, s2 = self._rows(args["sin"], start, seq)
        out = {}
        for name in ("xq", "xk"):
            x = args[name]
            half = x.shape[-1] // 2
            x1, x2 = x[..., :half], x[..., half:]
            out[f"{name}_out"] = np.concatenate([x1 * c1 - x2 * s1, x2 * c2 + x1 * s2], axis=-1)
        return out

    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        start, seq = int(args["start_pos"]), args["xq"].shape[1]
        c1, c2 = self._rows(args["cos"], start, seq)
        s1, s2 = self._rows(args["sin"], start, seq)
        out = {}
        for name in ("xq", "xk"):
            x = args[name]
            half = x.shape[-1] // 2
            x1, x2 = x[..., :half], x[..., half:]
            first = _rotate_budget(x1, x2, c1, s1)
            second = _rotate_budget(x2, x1, c2, s2)
            out[f"{name}_out"] = np.concatenate([first, second], axis=-1)
        return out


LLAMA = register("apply_rotary_emb", LlamaRotaryModel())
HF = register("apply_rotary_emb_hf", HfRotaryModel())


# ---------------------------------------------------------------------------- cases


def rope_tables(
    rng: np.random.Generator, positions: np.ndarray, dim: int, theta: float = 10000.0
) -> np.ndarray:
    """Rotation angles pos * theta^(-2i/dim), i < dim/2, one row per position.

    The positions get a random fractional phase: at position 0 the true tables are constant
    (cos 1, sin 0), which would make the case degenerate (harness/check/oracles/); the kernels'
    job is the same for any angle.
    """
    freqs = theta ** (-np.arange(0, dim, 2) / dim)
    return np.outer(positions + rng.uniform(0.25, 0.75), freqs)


@family("rope", exercises={"apply_rotary_emb"})
@st.composite
def rope_cases(draw: st.DrawFn) -> Case:
    """apply_rotary_emb with dynamic batch and S, different q and k head counts, freqs [S, D/2]
    fed per step (as a decoder slices them by position)."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    batch, max_seq = draw(st.integers(1, 2)), draw(st.integers(1, 24))
    q_heads, k_heads, dim = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(head_dims())
    leading = [DynamicDim(batch, batch > 1), DynamicDim(max_seq, max_seq > 1)]
    b = GraphBuilder()
    xq = b.input("xq", "float32", [batch, max_seq, q_heads, dim])
    xk = b.input("xk", "float32", [batch, max_seq, k_heads, dim])
    cos = b.input("freqs_cos", "float32", [max_seq, dim // 2])
    sin = b.input("freqs_sin", "float32", [max_seq, dim // 2])
    outs = b.op(
        "apply_rotary_emb",
        name="rope",
        xq=xq,
        xk=xk,
        freqs_cos=cos,
        freqs_sin=sin,
        out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
    )
    b.output(*outs)
    steps = []
    for bsz, seq in draw(step_dims(leading)):
        angles = rope_tables(rng, draw(st.integers(0, 200)) + np.arange(seq), dim)
        steps.append(
            {
                "xq": float_array(rng, [bsz, seq, q_heads, dim]),
                "xk": float_array(rng, [bsz, seq, k_heads, dim]),
                "freqs_cos": np.cos(angles).astype(np.float32),
                "freqs_sin": np.sin(angles).astype(np.float32),
            }
        )
    case = Case(b.build(), steps, name="rope", meta={"seed": seed, "family": "rope"})
    # Last: the shape draws stay where they were; f16 data are the f32 data rounded.
    return half_precision(case) if draw(family_dtype("rope")) == "float16" else case


@family("rope_hf", exercises={"apply_rotary_emb_hf"})
@st.composite
def rope_hf_cases(draw: st.DrawFn) -> Case:
    """apply_rotary_emb_hf on full-width constant tables, start_pos a SymInt input (or an int).

    The tables' halves differ (random values), so a kernel reading the first half's columns
    for the second half is caught. Positions reach the table's end, and now and then run
    past it (refused by both).
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    max_seq = draw(st.integers(1, 20))
    rows = max_seq + draw(st.integers(0, 40))
    q_heads, k_heads, dim = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(head_dims())
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, max_seq, q_heads, dim])
    xk = b.input("xk", "float32", [1, max_seq, k_heads, dim])
    angles = rng.uniform(-np.pi, np.pi, (rows, dim))
    cos = b.constant("cos", np.cos(angles).astype(np.float32))
    sin = b.constant("sin", np.sin(angles).astype(np.float32))
    symbolic = draw(st.booleans()) or rows == max_seq
    fixed = draw(st.integers(0, rows - max_seq))
    start = b.symint_input("start_pos") if symbolic else b.int(fixed, "start_pos")
    outs = b.op(
        "apply_rotary_emb_hf",
        name="rope_hf",
        xq=xq,
        xk=xk,
        cos=cos,
        sin=sin,
        start_pos=start,
        out_dims={"xq_out": b.dims(xq), "xk_out": b.dims(xk)},
    )
    b.output(*outs)
    steps: list[StepInputs] = []
    for seq in draw(live_sequences(max_seq)):
        step: StepInputs = {
            "xq": float_array(rng, [1, seq, q_heads, dim]),
            "xk": float_array(rng, [1, seq, k_heads, dim]),
        }
        if symbolic:
            kind = draw(st.sampled_from(["any", "zero", "end", "past"]))
            step["start_pos"] = {
                "any": draw(st.integers(0, rows - seq)),
                "zero": 0,
                "end": rows - seq,
                "past": rows - seq + 1,
            }[kind]
        steps.append(step)
    case = Case(b.build(), steps, name="rope_hf", meta={"seed": seed, "family": "rope_hf"})
    # Last: the shape draws stay where they were; f16 data are the f32 data rounded.
    return half_precision(case) if draw(family_dtype("rope_hf")) == "float16" else case


# ---------------------------------------------------------------------------- random graphs


def heads_spec(t: PoolTensor, dim: int) -> tuple[DimSpec, ...] | None:
    """The `[B, S, H, D]` spec a pool tensor can be viewed as for head dim `dim` (S, dim 1, a
    symbol), or None: `[S, W]` -> `[1, S, W/D, D]`, `[B, S, W]` -> `[B, S, W/D, D]`, and a
    `[B, S, H, D]` tensor as it is."""
    dims, last = t.dims, t.dims[-1]
    if not isinstance(last, int) or last % dim:
        return None
    if len(dims) == 2 and isinstance(dims[0], Sym):
        return (1, dims[0], last // dim, dim)
    if len(dims) == 3 and isinstance(dims[0], Sym) and isinstance(dims[1], Sym):
        return (dims[0], dims[1], last // dim, dim)
    if len(dims) == 4 and isinstance(dims[1], Sym) and last == dim:
        return dims
    return None


def rope_operands(g: GraphGen) -> tuple[PoolTensor, PoolTensor, int] | None:
    """xq and xk of a rope, `[B, S, H, D]` views of two pool tensors (or one, twice) that
    share B and S, with an even head dim D; None when the pool has no candidate."""
    even_dims = range(2, 33, 2)
    candidates = [t for t in g.pool if any(heads_spec(t, d) for d in even_dims)]
    if not candidates:
        return None
    q_src = g.pick(candidates)
    dim = g.draw(st.sampled_from([d for d in even_dims if heads_spec(q_src, d)]))
    q_spec = heads_spec(q_src, dim)
    assert q_spec is not None
    k_sources = [
        t for t in g.pool if (spec := heads_spec(t, dim)) is not None and spec[:2] == q_spec[:2]
    ]
    others = [t for t in k_sources if t.name != q_src.name]
    k_src = g.pick(others or k_sources)
    k_spec = heads_spec(k_src, dim)
    assert k_spec is not None
    q = q_src if q_src.dims == q_spec else view_as(g, q_src, q_spec)
    # The same tensor as both xq and xk is viewed once more: two operands, two names.
    k = k_src if k_src.dims == k_spec and k_src.name != q.name else view_as(g, k_src, k_spec)
    return q, k, dim


def rotated_dims(g: GraphGen, q: PoolTensor, k: PoolTensor) -> dict[str, list[int]]:
    """The `out_dims` of a rope on q and k: each output has its input's max dims."""
    return {"xq_out": g.max_dims(q.dims), "xk_out": g.max_dims(k.dims)}


def rotated(g: GraphGen, outputs: tuple[str, str], q: PoolTensor, k: PoolTensor) -> None:
    """The outputs (xq_out, xk_out) of a rope on q and k join the pool."""
    q_out, k_out = outputs
    g.produced(q_out, q.dims, [q, k])
    g.produced(k_out, k.dims, [q, k])


@generator("apply_rotary_emb")
def gen_apply_rotary_emb(g: GraphGen) -> bool:
    """Llama rope of two head views; freqs_cos and freqs_sin `[S, D/2]` are graph inputs fed
    every step at the live S (rows of a random position, as a decoder slices them)."""
    operands = rope_operands(g)
    if operands is None:
        return False
    q, k, dim = operands
    b = g.builder
    rows = (q.dims[1], dim // 2)
    cos = b.input(b.fresh("freqs_cos"), "float32", g.max_dims(rows))
    sin = b.input(b.fresh("freqs_sin"), "float32", g.max_dims(rows))

    def tables(values: dict[str, int]) -> StepInputs:
        (seq, _) = g.live_dims(rows, values)
        angles = rope_tables(g.rng, int(g.rng.integers(0, 200)) + np.arange(seq), dim)
        return {cos: np.cos(angles).astype(np.float32), sin: np.sin(angles).astype(np.float32)}

    g.step_inputs.append(tables)
    outputs = b.op(
        "apply_rotary_emb",
        xq=q.name,
        xk=k.name,
        freqs_cos=cos,
        freqs_sin=sin,
        out_dims=rotated_dims(g, q, k),
    )
    rotated(g, outputs, q, k)
    return True


@generator("apply_rotary_emb_hf")
def gen_apply_rotary_emb_hf(g: GraphGen) -> bool:
    """Rotate-half rope of two head views on constant full-width tables `[rows, D]` (rows at
    least S's max, halves that differ); start_pos is a SymInt graph input fed every step at 0,
    at the table's end for the live S, or anywhere between."""
    operands = rope_operands(g)
    if operands is None:
        return False
    q, k, dim = operands
    seq = q.dims[1]
    assert isinstance(seq, Sym)
    rows = seq.max + g.draw(st.integers(0, 8))
    b = g.builder
    angles = g.rng.uniform(-np.pi, np.pi, (rows, dim))
    start_pos = b.symint_input(b.fresh("start_pos"))

    def start(values: dict[str, int]) -> StepInputs:
        last = rows - values[seq.name]
        kind = g.draw(st.sampled_from(["zero", "end", "any"]))
        if kind == "any":
            return {start_pos: g.draw(st.integers(0, last))}
        return {start_pos: 0 if kind == "zero" else last}

    g.step_inputs.append(start)
    outputs = b.op(
        "apply_rotary_emb_hf",
        xq=q.name,
        xk=k.name,
        cos=b.constant(b.fresh("cos"), np.cos(angles).astype(np.float32)),
        sin=b.constant(b.fresh("sin"), np.sin(angles).astype(np.float32)),
        start_pos=start_pos,
        out_dims=rotated_dims(g, q, k),
    )
    rotated(g, outputs, q, k)
    return True
