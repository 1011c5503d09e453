"""Model of linear_q4gsw(x, weight, scales, group_size, bias?): out = x @ dequant(W).T + bias.

Format (docs/design.md §7, harness/model/q4.py): weight uint8 `[N, K_pad/2]` (K_pad = K
rounded up to 8, low nibble = even k, value = nibble - 8), scales float32 `[groups, N_pad4]`
with `groups >= ceil(K / group_size)` and N_pad4 = N rounded up to 4, optional float32 bias
`[N]`.
K is x's last dim and stays fixed at run time; M = numel(x) / K over all leading dims; the
output is `x.shape[:-1] + [N]`.

Half precision: x, bias and out may be float16 together (the scales stay float32, the
weight uint8); the kernels are then `q4gsw_gemm_f16` and `q4gsw_gemv_f16`, which load f16,
dequantize, multiply and accumulate in f32 exactly as their f32 twins and store f16 (the
budget: the f32 one plus the f16 store, `harness.model.local_budget`).

Load-time checks, in this order (the first failure is the error; its key is (op, tensor)):
1. dtypes: x float32 or float16 (else float32 is expected), weight uint8, scales float32,
   bias and out x's float type (tensor: the first offender in that order);
2. group_size > 0 (tensor: None);
3. weight is `[N, K_pad/2]` for x's K (tensor: weight) — a wrong packed width and a K that
   differs between x and the weight are the same fault;
4. scales is 2-D with N_pad4 columns (tensor: scales);
5. scales has at least ceil(K / group_size) rows (tensor: scales);
6. bias is `[N]` (tensor: bias);
7. out's max dims are `x.dims[:-1] + [N]` (tensor: out).
At run time a live K other than the build K is refused: `InputError(op, "in_features")`.

Kernel design (identical on both backends; dispatch slots in this order):

`q4gsw_gemm` — register-tiled GEMM, always built. One invocation per 4×4 output tile (4 rows
× 4 columns), 64 invocations per workgroup, tiles numbered column-tile fastest
(`tile = m_tile * ceil(N/4) + n_tile`), logical count `ceil(ceil(M/4) * ceil(N/4) / 64)`.
Each invocation walks k ascending one weight word (8 nibbles) per column at a time, skips
k >= K (the zero nibbles of the padded tail would multiply x's next row), dequantizes
`(nibble - 8) * scale[k // group_size][n]` and accumulates x * w into 16 registers; loads
clamp rows to M-1 and columns to N-1, stores are guarded, bias is added last.

`q4gsw_gemv` — cooperative GEMV for M == 1, built when K % 8 == 0 and group_size % 8 == 0
(so a weight word never straddles a scale group). A workgroup of 64 lanes computes the two
adjacent columns 2p and 2p+1 (2p+1 guarded for odd N) and grid-strides over column pairs:
logical count `min(ceil(N/2), 8192)`. Lane l takes weight words l, l+64, l+128, ... of both
rows (lanes interleave by word, so a warp's weight loads are one contiguous 128-byte line
and its activation loads — two vec4 per word — are half-coalesced), 4 words per lane per
step, all 8 loads issued before any use. A word is decoded as 2×4 nibbles with the
magic-number trick (`bitcast(0x4B000000 | (w & 0xF << 4j)) - (2^23 + 8*16^j)` = (nibble-8)*16^j,
exact), dotted with its 8 activations into a vec4 whose components carry the exact power-of-two
factors 16^j, folded (exactly scaled back) into one partial, multiplied by the word's group
scale (one vec2 load for both columns) and accumulated. A shared-memory tree reduction
(vec2, both columns at once) combines the lanes; lane 0 adds the bias and writes.
docs/benchmarks.md gives the reasons for these choices and the knobs to tune on a GPU.

`q4gsw_gemm_f16acc` — the GEMM of a float16 graph whose `accumulate_bits` is 16 (optional
int argument; 32 when absent, 16 refused unless x is float16): as `q4gsw_gemm_f16`, but the
scales are rounded to f16, the dequantized weights are f16 products and the products are
summed by f16 fused multiply-adds in blocks of 32 k (4 weight words, from k = 0); each
block's sum is added to an f32 accumulator. Upstream's `steel_half_pwdq_f16acc` sums all of
K in f16; blocks keep the bound defined for any K (`half_budget` derives it). The GEMV route
(M = 1) stays f32-accumulating in such a graph, with its own budget.

Routing at run time, from the live M: the GEMV when M == 1 and the GEMV was built, the GEMM
otherwise. A slot that is not taken is logged with ran=False and count (0, 0, 0).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import FLOAT_DTYPES, Graph, GraphBuildError, InputError, OpNode, dtype_slot
from graph_format.kernels import Value
from harness.gen.blocks import (
    family_dtype,
    float_array,
    live_sizes,
    seeds,
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
    div_up,
    int_literal,
    kernels,
    numel,
    op_dtype,
    optional_tensor,
    q4,
    register,
    ro,
    rw,
    tensors,
)
from harness.model.constants import remember
from harness.model.numerics import SAFETY, U16, arithmetic, f16_store, gamma

GEMM, GEMV = "q4gsw_gemm", "q4gsw_gemv"
GEMM_F16, GEMV_F16 = dtype_slot(GEMM, "float16"), dtype_slot(GEMV, "float16")
GEMM_F16ACC = "q4gsw_gemm_f16acc"  # accumulate_bits = 16
F16ACC_BLOCK = 32  # k per f16 accumulation block of q4gsw_gemm_f16acc (4 weight words)
# Below the f16 normal range (2^-14) an f16 result may be flushed to zero (WGSL and Vulkan
# both allow it): an absolute error of up to 2^-14 per f16 operation.
TINY16 = 2.0**-14


def accumulate_bits(node: OpNode, graph: Graph) -> int:
    """The graph's accumulate_bits (32 when absent): 16 routes the GEMM to its f16-accumulating
    kernel."""
    name = node.optional_arg("accumulate_bits")
    return 32 if name is None else int(graph.scalar(name))


TILE = 4  # a GEMM invocation's outputs: TILE rows × TILE columns
GEMM_WORKGROUP = (64, 1, 1)
GEMV_WORKGROUP = (64, 1, 1)  # lanes per workgroup; a power of two (tree reduction)
GEMV_MAX_WORKGROUPS = 8192  # grid cap; more column pairs are grid-strided
GEMV_STEP_WORDS = 4  # weight words per lane and row in flight in the GEMV's main loop
# The GEMV's main loop (every step's words in range, no bounds checks) runs when the words
# of a row exceed (GEMV_STEP_WORDS - 1) lanes' worth: K > 3 * 64 * 8 = 1536. Below it only
# the word-by-word tail runs. `regimes` names the step that takes it.
GEMV_MAIN_LOOP_MIN_WORDS = (GEMV_STEP_WORDS - 1) * GEMV_WORKGROUP[0] + 1
GEMV_MAIN_LOOP = "gemv_main_loop"
LONG_K = 2048  # `K>=2048`: a long reduction, the K of a real decoder's projections


def gemv_eligible(k: int, group_size: int) -> bool:
    """Whether the GEMV is built: whole weight words per row, and none straddles a group."""
    return k % 8 == 0 and group_size % 8 == 0


def gemv_main_loop(m: int, k: int, group_size: int) -> bool:
    """Whether a step of live M runs the GEMV's main loop (4 words in flight per lane): the
    GEMV route (M = 1, the GEMV built) with more than 3 x 64 words per row."""
    return m == 1 and gemv_eligible(k, group_size) and k // 8 >= GEMV_MAIN_LOOP_MIN_WORDS


class LinearQ4gswModel(OpModel):
    """Contract, reference and budget of linear_q4gsw."""

    # M = 1 (the GEMV) and M at its max, crossed both ways; the GEMV's main loop (K > 1536,
    # `regimes`), which a pr run must reach as well (`pr_regimes`).
    activations = ("x",)
    pr_regimes = (GEMV_MAIN_LOOP,)
    required_regimes = ("size=1", "size=max", "step=grow", "step=shrink", *pr_regimes)
    dtypes = FLOAT_DTYPES
    kernels = kernels(
        KernelSpec(
            GEMM,
            (rw("out"), ro("x"), ro("weight", "u32"), ro("scales"), ro("bias")),
            exact=True,
            webgpu_ulps=0,
            shader="q4gsw_gemm",
        ),
        KernelSpec(
            GEMV,
            (
                rw("out"),
                ro("x", "vec4<f32>"),
                ro("weight", "u32"),
                ro("scales", "vec2<f32>"),
                ro("bias"),
            ),
            exact=True,
            webgpu_ulps=0,
            shader="q4gsw_gemv",
        ),
        KernelSpec(
            GEMM_F16,
            (
                rw("out", "f16"),
                ro("x", "f16"),
                ro("weight", "u32"),
                ro("scales"),
                ro("bias", "f16"),
            ),
            exact=True,
            shader="q4gsw_gemm_f16",
        ),
        KernelSpec(
            GEMM_F16ACC,
            (
                rw("out", "f16"),
                ro("x", "f16"),
                ro("weight", "u32"),
                ro("scales"),
                ro("bias", "f16"),
            ),
            exact=True,
        ),
        KernelSpec(
            GEMV_F16,
            (
                rw("out", "f16"),
                ro("x", "vec4<f16>"),
                ro("weight", "u32"),
                ro("scales", "vec2<f32>"),
                ro("bias", "f16"),
            ),
            exact=True,
            shader="q4gsw_gemv_f16",
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        x, weight, scales, out = tensors(node, graph, "x", "weight", "scales", "out")
        bias = optional_tensor(node, graph, "bias")
        dtype = x.dtype if x.dtype in FLOAT_DTYPES else "float32"
        wanted = [(x, dtype), (weight, "uint8"), (scales, "float32")]
        wanted += [(bias, dtype)] if bias is not None else []
        wanted += [(out, dtype)]
        for tensor, dtype in wanted:
            if tensor.dtype != dtype:
                raise GraphBuildError(
                    node.name,
                    f"{tensor.name} must be {dtype}, not {tensor.dtype}",
                    tensor=tensor.name,
                )
        group_size = int_literal(node, graph, "group_size")
        if group_size <= 0:
            raise GraphBuildError(node.name, f"group_size must be > 0, not {group_size}")
        bits = accumulate_bits(node, graph)
        if bits not in (16, 32) or (bits == 16 and dtype != "float16"):
            raise GraphBuildError(
                node.name, f"accumulate_bits must be 32, or 16 with float16 x, not {bits}"
            )
        k = x.dims[-1]
        if len(weight.dims) != 2 or weight.dims[1] != q4.k_padded(k) // 2:
            raise GraphBuildError(
                node.name,
                f"weight must be [N, {q4.k_padded(k) // 2}] for K={k}, not {list(weight.dims)}",
                tensor=weight.name,
            )
        n = weight.dims[0]
        if len(scales.dims) != 2 or scales.dims[1] != q4.n_padded(n):
            raise GraphBuildError(
                node.name,
                f"scales must be [groups, {q4.n_padded(n)}] for N={n}, not {list(scales.dims)}",
                tensor=scales.name,
            )
        if scales.dims[0] < q4.num_groups(k, group_size):
            raise GraphBuildError(
                node.name,
                f"scales needs >= {q4.num_groups(k, group_size)} groups for K={k} and "
                f"group_size={group_size}, not {scales.dims[0]}",
                tensor=scales.name,
            )
        if bias is not None and bias.dims != (n,):
            raise GraphBuildError(
                node.name, f"bias must be [{n}], not {list(bias.dims)}", tensor=bias.name
            )
        if out.dims != (*x.dims[:-1], n):
            raise GraphBuildError(
                node.name,
                f"out must be x.dims[:-1] + [N] = {[*x.dims[:-1], n]}, not {list(out.dims)}",
                tensor=out.name,
            )

    @staticmethod
    def _sizes(node: OpNode, live: LiveState) -> tuple[int, int, int, int]:
        """(M, N, K, group_size) for the live x; K is the build-time K."""
        k = live.max_of(node, "x")[-1]
        n = live.max_of(node, "weight")[0]
        m = numel(live.of(node, "x")) // k
        return m, n, k, live.int_arg(node, "group_size")

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: a step that runs the GEMV's main loop, and a long reduction."""
        m, _, k, group_size = self._sizes(node, live)
        tags = {GEMV_MAIN_LOOP} if gemv_main_loop(m, k, group_size) else set()
        if k >= LONG_K:
            tags.add(f"K>={LONG_K}")
        return tags

    def resize(self, node: OpNode, live: LiveState) -> None:
        dims = live.of(node, "x")
        k = live.max_of(node, "x")[-1]
        if dims[-1] != k:
            raise InputError(
                node.name, "in_features", f"x's live last dim {dims[-1]} != in_features {k}"
            )
        n = live.max_of(node, "weight")[0]
        live.set_output(node, "out", (*dims[:-1], n))

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        m, n, k, group_size = self._sizes(node, live)
        values: dict[str, Value] = {
            "m": m,
            "n": n,
            "k": k,
            "k_words": div_up(k, 8),
            "group_size": group_size,
            "n_padded": div_up(n, 4) * 4,
            "has_bias": int(node.optional_arg("bias") is not None),
            "gemv_workgroups": min(div_up(n, 2), GEMV_MAX_WORKGROUPS),
            "workgroup_size": (GEMV_WORKGROUP if slot in (GEMV, GEMV_F16) else GEMM_WORKGROUP)[0],
        }
        if slot in (GEMV, GEMV_F16):
            values["max_workgroups"] = GEMV_MAX_WORKGROUPS
        return values

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        m, n, k, group_size = self._sizes(node, live)
        has_gemv = gemv_eligible(k, group_size)
        use_gemv = has_gemv and m == 1
        dtype = op_dtype(live.graph, node)
        gemm, gemv = dtype_slot(GEMM, dtype), dtype_slot(GEMV, dtype)
        if accumulate_bits(node, live.graph) == 16:
            gemm = GEMM_F16ACC
        off = (0, 0, 0)
        gemm_count = (div_up(div_up(m, TILE) * div_up(n, TILE), GEMM_WORKGROUP[0]), 1, 1)
        slots = [(node.name, gemm, GEMM_WORKGROUP, off if use_gemv else gemm_count, not use_gemv)]
        if has_gemv:
            gemv_count = (min(div_up(n, 2), GEMV_MAX_WORKGROUPS), 1, 1)
            slots.append(
                (node.name, gemv, GEMV_WORKGROUP, gemv_count if use_gemv else off, use_gemv)
            )
        return slots

    @staticmethod
    def _dequantized(args: Args, *, absolute: bool = False) -> np.ndarray:
        """The weights `[N, K]` in float64 (or their magnitudes), once per case for constants."""
        k = args["x"].shape[-1]
        weight, scales = np.asarray(args["weight"]), np.asarray(args["scales"])
        group_size = int(args["group_size"])

        def dequantize() -> np.ndarray:
            packed = weight.astype(np.uint8)  # float64 bytes, exact
            w = q4.dequantize(packed, scales, group_size, k)
            return np.abs(w) if absolute else w

        return remember(("linear_q4gsw", absolute, group_size, k), (weight, scales), dequantize)

    def _linear(self, args: Args, x: np.ndarray) -> np.ndarray:
        """x `[..., M, K]` times the weights, plus the bias: one matrix product per leading
        index, each the same whatever the leading dims."""
        out: np.ndarray = x @ self._dequantized(args).T
        if args.get("bias") is not None:
            out = out + args["bias"]
        return out

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        x = args["x"]
        out = self._linear(args, x.reshape(-1, x.shape[-1]))
        return {"out": out.reshape(*x.shape[:-1], out.shape[-1])}

    def probe_reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        """`reference` of every probe at once: x carries a leading probe axis, and each
        probe's product is the one `reference` computes for it, bit for bit."""
        x = args["x"]
        out = self._linear(args, x.reshape(x.shape[0], -1, x.shape[-1]))
        return {"out": out.reshape(*x.shape[:-1], out.shape[-1])}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        x = args["x"]
        k = x.shape[-1]
        w = self._dequantized(args, absolute=True)
        ax = np.abs(x.reshape(-1, k))
        bias = args.get("bias")
        ab = np.abs(bias) if bias is not None else 0.0
        # Rounding. Each term x_k * w_k of an output meets at most K + 2 roundings on its
        # path, in any kernel of this op: the dequantization q * s (q is a small integer,
        # s a float32: one rounding, or none where the scale is applied by a fused
        # multiply-add), the product with x (none when fused), at most K - 1 additions in
        # any summation tree of K terms (lanes, words, groups; the GEMV's power-of-two
        # factors 16^j are exact), and the bias addition. Higham: |error| <=
        # gamma(K + 2) * (sum_k |x_k| |w_k| + |b|). Exact zeros (padded nibbles, skipped
        # tails, idle lanes) add no rounding. The f16 kernels compute the same way from
        # exact f16 inputs (their loads widen exactly): this bound, and local_budget adds
        # the one rounding of the f16 store. u is the kernel's arithmetic's (`gamma`): f16's
        # for a kernel declaring `precision = "f16"`, whose sums of K + 2 >= 2048 terms have
        # no worst-case bound (a `BudgetError`). Results below the smallest normal may
        # flush: a dequantized weight (tiny |x_k| each), each product and each partial sum
        # (tiny each) and the bias addition: tiny (sum_k |x_k| + 2K + 1), nothing in f32.
        tiny = arithmetic().tiny
        flushed = tiny * (ax.sum(axis=-1, keepdims=True) + 2 * k + 1)
        local = SAFETY * (gamma(k + 2) * (ax @ w.T + ab) + flushed)
        return {"out": local.reshape(outputs["out"].shape)}

    def half_budget(
        self,
        node: OpNode,
        args: Args,
        outputs: Mapping[str, np.ndarray],
        budgets: Mapping[str, np.ndarray],
    ) -> dict[str, np.ndarray]:
        """The f16 op's budget: the f32 computation's (`budget`) plus the f16 store, except on
        the GEMM route of accumulate_bits = 16 (`q4gsw_gemm_f16acc`), whose bound is blocked.

        Derivation for q4gsw_gemm_f16acc, one output, S = sum_k |x_k| |w_k| over exact f16 x
        and the float64 dequantized w. Each term meets the scale's rounding to f16 (u16
        relative) and the f16 product (nibble - 8) * scale (u16): 2 u16 S. Within a block of
        B = F16ACC_BLOCK consecutive k (k ascending, from k = 0, as the kernel walks them),
        the f16 fused multiply-adds from 0 round each partial sum P_i once:
        |fl(P_{i-1} + t_i) - (P_{i-1} + t_i)| <= u16 |P_i|, so the block's error is at most
        u16 sum_i |P_i| (first order; Higham's recursive-summation bound before it is relaxed
        to gamma_B sum |t_i|, which for sums of mixed signs is sqrt(B) times looser). The
        partial sums are computed here exactly, in the kernel's order. A block's f16 sum is
        exact in f32; the nb = ceil(K / B) block sums and the bias are added in f32:
        gamma32(nb + 1) (S + |b|). A flushed f16 scale, product or partial sum below 2^-14
        adds up to 3 K TINY16. Second-order products are dropped, as every derivation here
        drops them (SAFETY covers them); then the f16 store. Every term is per block, so the
        bound holds for any K: an unblocked f16 sum (upstream's steel_half_pwdq_f16acc) has
        gamma_K undefined for K >= 2048. Generated data keep block sums far below 65504.
        """
        x = args["x"]
        k = x.shape[-1]
        rows = x.reshape(-1, k)
        group_size = int(args["group_size"])
        bits = args.get("accumulate_bits")
        gemv_route = rows.shape[0] == 1 and gemv_eligible(k, group_size)
        out = outputs["out"]
        if bits is None or int(bits) != 16 or gemv_route:
            return {"out": np.asarray(f16_store(budgets["out"], out))}
        w = self._dequantized(args)
        terms = np.abs(rows) @ np.abs(w).T
        partials = np.zeros_like(terms)
        for k0 in range(0, k, F16ACC_BLOCK):
            block = rows[:, None, k0 : k0 + F16ACC_BLOCK] * w[None, :, k0 : k0 + F16ACC_BLOCK]
            partials += np.abs(np.cumsum(block, axis=-1)).sum(axis=-1)
        bias = args.get("bias")
        ab = np.abs(bias) if bias is not None else 0.0
        blocks = div_up(k, F16ACC_BLOCK)
        local = SAFETY * (
            2 * U16 * terms + U16 * partials + gamma(blocks + 1) * (terms + ab) + 3 * k * TINY16
        )
        return {"out": np.asarray(f16_store(local.reshape(out.shape), out))}


MODEL = register("linear_q4gsw", LinearQ4gswModel())


# ---------------------------------------------------------------------------- cases


# How the live M of a linear evolves from step to step: every leading dim at 1 (M = 1, the
# GEMV route), every one at its max, or each drawn on its own.
_ONES, _MAX, _ANY = "ones", "max", "any"


# K past the GEMV's main-loop boundary: its first K (one full step, lane 0's), 2048 to 8192
# (a decoder's projections; 1, 2 and 4 full steps per lane) and any K in between (a partial
# step after the full ones).
LONG_KS = (8 * GEMV_MAIN_LOOP_MIN_WORDS, 2048, 3000, 4096, 8192)


@st.composite
def q4gsw_shapes(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(N, K, group_size, groups) of a valid q4gsw weight, biased to the edges.

    K with a padded tail (K % 8 != 0) and group sizes that are not multiples of 8 make the
    GEMV ineligible; group_size = K gives one group; N not a multiple of 4 pads the scales;
    now and then the scales carry one group more than K needs (the format allows it).
    """
    k = draw(st.one_of(st.sampled_from([8, 16, 32, 64, 128, 256, 520]), st.integers(1, 100)))
    group_size = draw(
        st.one_of(
            st.sampled_from([8, 16, 32, 64]).filter(lambda gs: gs <= max(k, 8)),
            st.just(k),
            st.integers(1, k),
        )
    )
    n = draw(st.one_of(st.integers(1, 24), st.sampled_from([32, 40, 64, 130, 257])))
    groups = q4.num_groups(k, group_size) + draw(st.sampled_from([0, 0, 0, 1]))
    return n, k, group_size, groups


@st.composite
def long_q4gsw_shapes(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(N, K, group_size, groups) with K > 1536 and the GEMV built: its main loop runs at
    M = 1. Group sizes of 3 to 32 words: each of a step's 4 words (64 words apart) has a
    scale group of its own; 3 and 12 words are not aligned with the 64 lanes (the scale index
    then tracks its place in the group). N stays small: the cost is N x K per row."""
    k = draw(
        st.one_of(
            st.sampled_from(LONG_KS),
            st.integers(GEMV_MAIN_LOOP_MIN_WORDS, 1024).map(lambda words: 8 * words),
        )
    )
    group_size = draw(st.sampled_from([32, 64, 128, 256, 24, 96]))
    n = draw(st.one_of(st.integers(1, 12), st.sampled_from([17, 32, 64])))
    groups = q4.num_groups(k, group_size) + draw(st.sampled_from([0, 0, 0, 1]))
    return n, k, group_size, groups


def _step_leads(draw: st.DrawFn, modes: list[str], lead_max: list[int]) -> list[list[int]]:
    """Each step's leading dims for its mode (`_ONES`, `_MAX`, `_ANY`)."""
    leads: list[list[int]] = []
    for mode in modes:
        if mode == _ONES:
            leads.append([1] * len(lead_max))
        elif mode == _MAX:
            leads.append(list(lead_max))
        else:
            leads.append([draw(live_sizes(size)) for size in lead_max])
    return leads


@family("linear_q4gsw", exercises={"linear_q4gsw"})
@st.composite
def linear_q4gsw_cases(draw: st.DrawFn) -> Case:
    """One linear_q4gsw whose live M moves between 1 (GEMV) and larger values (GEMM).

    x has 1 to 3 leading dims (M = their product, all of them); per step the leading dims
    are all 1, all at their max, or drawn independently, so sequences cross 1 <-> M > 1 in
    both directions, stay at 1, jump to the max and repeat. A quarter of the cases take a
    long K (1544 to 8192, `long_q4gsw_shapes`) with a small M and (nearly always) an M = 1
    step first: the GEMV's main loop, the path of every real decode.
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    n, k, group_size, groups = draw(q4gsw_shapes())
    rank = draw(st.integers(1, 3))
    # Outer dims stay small, so that max M = their product stays <= 528 (lavapipe is slow);
    # the innermost crosses the GEMM's 4-row tiles (and 64-invocation workgroups of tiles).
    lead_max = [draw(st.integers(1, 4)) for _ in range(rank - 1)]
    lead_max.append(draw(st.one_of(st.integers(1, 6), st.sampled_from([8, 9, 17, 33]))))
    has_bias = draw(st.booleans())
    modes = draw(st.lists(st.sampled_from([_ONES, _MAX, _ANY]), min_size=1, max_size=6))
    leads = _step_leads(draw, modes, lead_max)
    # Last: the shape draws stay where they were. In f16 the outputs stay far below 65504:
    # |out| ~ sqrt(K) (unit-variance x and dequantized weights) with K <= 8192.
    dtype = draw(family_dtype("linear_q4gsw"))
    # Half the f16 cases run the f16-accumulating GEMM (accumulate_bits = 16).
    bits = draw(st.sampled_from([16, 32])) if dtype == "float16" else 32
    # After them, a quarter of the cases (the simplest draw, 0, stays short) take a long K,
    # past the GEMV's main-loop boundary, as a decode: M <= 8, and nearly always an M = 1
    # step first (the shrinker may drop it: its draw's simplest value does), so that the
    # GEMV's main loop runs.
    if draw(st.integers(0, 3)) == 3:
        n, k, group_size, groups = draw(long_q4gsw_shapes())
        # Accumulating in f16 over K > 1536, the rigorous bound (K f16 roundings) lies above
        # every output: such a case is degenerate (seen on an H200's nightly run), so long
        # reductions accumulate in f32 until a statistical tier can judge them (issue 20).
        bits = 32
        lead_max = [draw(st.integers(1, 2)) for _ in range(rank)]
        if modes[0] != _ONES and draw(st.integers(0, 7)) != 0:
            modes = [_ONES, *modes]
        leads = _step_leads(draw, modes, lead_max)
    b = GraphBuilder()
    x = b.input("x", dtype, [*lead_max, k])
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group_size, groups=groups)
    weight = b.constant("weight", packed)
    scales_name = b.constant("scales", scales)
    group_size_name = b.int(group_size, "group_size")
    bias = b.constant("bias", float_array(rng, [n], dtype=dtype)) if has_bias else None
    b.output(
        b.op(
            "linear_q4gsw",
            out_dims=[*lead_max, n],
            x=x,
            weight=weight,
            scales=scales_name,
            group_size=group_size_name,
            bias=bias,
            accumulate_bits=b.int(16, "accumulate_bits") if bits == 16 else None,
        )
    )
    steps: list[StepInputs] = [{"x": float_array(rng, [*lead, k], dtype=dtype)} for lead in leads]
    meta = {"seed": seed, "family": "linear_q4gsw", "modes": modes, "dtype": dtype}
    meta |= {"accumulate_bits": bits} if bits == 16 else {}
    return Case(b.build(), steps, name="linear_q4gsw", meta=meta)


# ---------------------------------------------------------------------------- random graphs


@generator("linear_q4gsw")
def gen_linear_q4gsw(g: GraphGen) -> bool:
    """A q4 linear over the static last dim K of a pool tensor, to a new width N: M, the
    product of the leading (dynamic) dims, routes between the GEMV (M = 1) and the GEMM."""
    candidates = [t for t in g.pool if isinstance(t.dims[-1], int)]
    if not candidates:
        return False
    x = g.pick(candidates)
    k = x.dims[-1]
    assert isinstance(k, int)
    n = g.draw(st.sampled_from([4, 7, 8, 12, 16, 30, 32]))
    group_size = g.draw(st.sampled_from([gs for gs in (8, 16, 32, k) if gs <= k]))
    packed, scales = q4.quantize(g.rng.standard_normal((n, k)) / np.sqrt(k), group_size)
    dims = (*x.dims[:-1], n)
    out = g.builder.op(
        "linear_q4gsw",
        x=x.name,
        weight=g.builder.constant(g.builder.fresh("q4_weight"), packed),
        scales=g.builder.constant(g.builder.fresh("q4_scales"), scales),
        group_size=g.builder.int(group_size),
        out_dims=g.max_dims(dims),
    )
    g.produced(out, dims, [x])
    return True
