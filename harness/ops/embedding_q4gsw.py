"""Model of embedding_q4gsw(weight, scales, group_size, indices, is_linear_weight?): q4 rows
looked up by token.

Format (docs/design.md §7): weight uint8 `[vocab, D/2]`, byte j of row t holds dims 2j and
2j+1, value = nibble - 8; scales float32 `[vocab, D / group_size]`;
out[..., d] = (nib(t, d) - 8) * scales[t, d // group_size] with t = indices[...].
Output dims: the indices' live dims + [D]. The nibble order is upstream's `is_linear_weight`:
1 (the default when left out, the layout of linear_q4gsw's weights) puts dim 2j in the low
nibble, 0 (upstream's own default, `(even + 8) << 4 | (odd + 8)`) in the high nibble; any other
value is refused at load.

Kernel design (both backends): one dispatch slot, kernel `embedding_q4gsw` (low nibble first)
or `embedding_q4gsw_even_high` (high nibble first), 64 invocations per workgroup, one per
output element, logical count ceil(numel(out) / 64). Any even D.
A float16 out takes the nibble order's `_f16` kernel: the same dequantization in f32 (scales
stay float32), each element rounded once to f16 (budget: the f32 one plus the f16 store,
`harness.model.local_budget`).

Token ids are checked on the host, against [0, vocab), before anything changes (`check_host`:
`InputError` reason "index_range"), so `indices` must be a graph input: a graph that computes
them on the device is refused at load.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import FLOAT_DTYPES, Graph, GraphBuildError, InputError, OpNode, dtype_slot
from graph_format.kernels import Value
from harness.gen.blocks import (
    family_dtype,
    leading_dims,
    seeds,
    step_dims,
)
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import GraphGen, generator
from harness.gen.half import half_precision
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
    register,
    ro,
    rw,
    tensors,
)
from harness.model.constants import remember
from harness.model.numerics import SAFETY, arithmetic

WORKGROUP = (64, 1, 1)


def is_linear_weight(node: OpNode, graph: Graph) -> int:
    """The node's nibble order: its is_linear_weight literal, 1 when left out."""
    name = node.optional_arg("is_linear_weight")
    return 1 if name is None else int(graph.scalar(name))


def kernel_of(node: OpNode, graph: Graph) -> str:
    """The kernel of the node's nibble order."""
    return "embedding_q4gsw" if is_linear_weight(node, graph) else "embedding_q4gsw_even_high"


def dequantize_rows(
    weight: np.ndarray, scales: np.ndarray, group_size: int, *, even_high: bool = False
) -> np.ndarray:
    """The float64 table `[vocab, D]` of q4 rows (value = nibble - 8): the even dim in a
    byte's low nibble, or with `even_high` (is_linear_weight = 0) in its high nibble."""
    w = np.asarray(weight).astype(np.int64)
    low, high = (w & 0xF) - 8, (w >> 4) - 8
    pair = [high, low] if even_high else [low, high]
    values = np.stack(pair, axis=-1).reshape(w.shape[0], -1).astype(np.float64)
    group = np.repeat(np.asarray(scales, np.float64), group_size, axis=1)
    return values * group


class EmbeddingQ4gswModel(OpModel):
    """Contract, reference and budget of embedding_q4gsw."""

    activations = ("indices",)
    required_regimes = ("size=1", "size=max", "step=grow")
    dtypes = FLOAT_DTYPES
    kernels = kernels(
        *(
            KernelSpec(
                slot,
                (rw("out", element), ro("indices", "i32"), ro("weight", "u32"), ro("scales")),
                exact=True,
                # measured on fp32 only: Chrome's SwiftShader offers no f16
                webgpu_ulps=0 if element == "f32" else None,
            )
            for layout in ("embedding_q4gsw", "embedding_q4gsw_even_high")
            for slot, element in ((layout, "f32"), (dtype_slot(layout, "float16"), "f16"))
        )
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        if is_linear_weight(node, graph) not in (0, 1):
            raise GraphBuildError(node.name, "is_linear_weight must be 0 or 1")
        weight, scales, indices, out = tensors(node, graph, "weight", "scales", "indices", "out")
        group_size = int_literal(node, graph, "group_size")
        if weight.dtype != "uint8" or len(weight.dims) != 2:
            raise GraphBuildError(
                node.name, "weight must be uint8 [vocab, D/2]", tensor=weight.name
            )
        if scales.dtype != "float32":
            raise GraphBuildError(node.name, "scales must be float32", tensor=scales.name)
        if indices.dtype != "int32":
            raise GraphBuildError(node.name, "indices must be int32", tensor=indices.name)
        if out.dtype not in FLOAT_DTYPES:
            raise GraphBuildError(node.name, "out must be float32 or float16", tensor=out.name)
        vocab, dim = weight.dims[0], 2 * weight.dims[1]
        if group_size <= 0 or dim % group_size:
            raise GraphBuildError(node.name, f"group_size {group_size} must divide D = {dim}")
        if scales.dims != (vocab, dim // group_size):
            raise GraphBuildError(
                node.name, "scales must be [vocab, D / group_size]", tensor=scales.name
            )
        if indices.name not in graph.inputs:
            raise GraphBuildError(
                node.name,
                "indices must be a graph input (checked on the host)",
                tensor=indices.name,
            )
        if out.dims != (*indices.dims, dim):
            raise GraphBuildError(node.name, "out must be indices dims + [D]", tensor=out.name)

    def check_host(self, node: OpNode, live: LiveState) -> None:
        vocab = live.max_of(node, "weight")[0]
        data = live.host[node.arg("indices")]
        bad = np.flatnonzero((data < 0) | (data >= vocab))
        if bad.size:
            where = np.unravel_index(int(bad[0]), data.shape)
            raise InputError(
                node.name,
                "index_range",
                f"token id {int(data.flat[bad[0]])} at {list(map(int, where))} is outside "
                f"[0, {vocab})",
            )

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """Coverage: the number of tokens looked up."""
        return numel(live.of(node, "indices"))

    def resize(self, node: OpNode, live: LiveState) -> None:
        dim = 2 * live.max_of(node, "weight")[1]
        live.set_output(node, "out", (*live.of(node, "indices"), dim))

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        vocab, half = live.max_of(node, "weight")
        dim, group = 2 * half, live.int_arg(node, "group_size")
        return {
            "numel": numel(live.dims[node.outputs["out"]]),
            "embed_dim": dim,
            "group_size": group,
            "groups_per_row": div_up(dim, group),
            "vocab": vocab,
            "workgroup_size": WORKGROUP[0],
        }

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        count = div_up(numel(live.dims[node.outputs["out"]]), WORKGROUP[0])
        kernel = dtype_slot(kernel_of(node, live.graph), op_dtype(live.graph, node))
        return [(node.name, kernel, WORKGROUP, (count, 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        weight, scales = np.asarray(args["weight"]), np.asarray(args["scales"])
        group_size = int(args["group_size"])
        flag = args.get("is_linear_weight")
        even_high = flag is not None and int(flag) == 0
        table = remember(
            ("embedding_q4gsw", group_size, even_high),
            (weight, scales),
            lambda: dequantize_rows(weight, scales, group_size, even_high=even_high),
        )
        return {"out": table[args["indices"].astype(np.int64)]}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        # (nibble - 8) is exact; its product with the scale is rounded once (a 4-bit by
        # 24-bit product needs up to 28 bits). Below the normal range the product, or a
        # denormal scale itself, may be flushed to zero: |nibble - 8| <= 8 times tiny. In the
        # kernel's arithmetic (f32's u and tiny, or f16's for `precision = "f16"`).
        a = arithmetic()
        return {"out": SAFETY * (a.u * np.abs(outputs["out"]) + 8 * a.tiny)}


MODEL = register("embedding_q4gsw", EmbeddingQ4gswModel())


# ---------------------------------------------------------------------------- cases


@family("embedding", exercises={"embedding_q4gsw"})
@st.composite
def embedding_cases(draw: st.DrawFn) -> Case:
    """embedding_q4gsw on token ids of dynamic shape (int32 or int64 host data).

    Now and then a step holds an id outside the vocabulary, which both backends must refuse
    on the host. The nibble order is drawn: is_linear_weight left out, 1 or 0.
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    vocab = draw(st.integers(1, 70))
    dim = draw(st.sampled_from([2, 6, 8, 10, 30, 32, 64, 96]))
    group = draw(st.sampled_from([g for g in range(1, dim + 1) if dim % g == 0]))
    leading = draw(leading_dims(max_rank=3))
    b = GraphBuilder()
    weight = b.constant("weight", rng.integers(0, 256, (vocab, dim // 2), dtype=np.uint8))
    scales = rng.uniform(0.01, 1.0, (vocab, dim // group)) * rng.choice([-1.0, 1.0])
    s = b.constant("scales", scales.astype(np.float32))
    ids = b.input("indices", "int32", [d.max_size for d in leading])
    layout = draw(st.sampled_from([None, 1, 0]))
    b.output(
        b.op(
            "embedding_q4gsw",
            name="embedding",
            weight=weight,
            scales=s,
            group_size=b.int(group, "group_size"),
            indices=ids,
            is_linear_weight=None if layout is None else b.int(layout, "is_linear_weight"),
            out_dims=[d.max_size for d in leading] + [dim],
        )
    )
    steps: list[StepInputs] = []
    for lead in draw(step_dims(leading)):
        host = rng.integers(0, vocab, lead).astype(draw(st.sampled_from([np.int32, np.int64])))
        if draw(st.integers(0, 9)) == 0:
            host.flat[draw(st.integers(0, host.size - 1))] = draw(st.sampled_from([-1, vocab]))
        steps.append({"indices": host})
    case = Case(b.build(), steps, name="embedding", meta={"seed": seed, "family": "embedding"})
    # Last: the shape draws stay where they were. f16 out; the scales stay float32.
    if draw(family_dtype("embedding")) == "float16":
        return half_precision(case, keep={"scales"})
    return case


# ---------------------------------------------------------------------------- random graphs


@generator("embedding_q4gsw")
def gen_embedding_q4gsw(g: GraphGen) -> bool:
    """Token ids shaped like a pool tensor's leading dims (an int32 graph input, fresh ids
    every step) looked up in a q4 table of a few rows, in either nibble order; the rows
    `[..., D]` join the pool, D often a width already there, so that they can join other
    tensors."""
    x = g.pick(g.pool)  # only its leading dims: the ids follow the same symbols
    lead = x.dims[:-1]
    if not lead:
        return False
    widths = sorted(
        {t.dims[-1] for t in g.pool if isinstance(t.dims[-1], int)} & set(range(2, 65, 2))
    )
    if bool(widths) and g.draw(st.booleans()):
        dim = g.draw(st.sampled_from(widths))
    else:
        dim = g.draw(st.sampled_from([2, 6, 8, 16, 32]))
    group = g.draw(st.sampled_from([gs for gs in range(dim, 0, -1) if dim % gs == 0]))
    vocab = g.draw(st.integers(1, 40))
    b = g.builder
    weight = g.rng.integers(0, 256, (vocab, dim // 2), dtype=np.uint8)
    scales = g.rng.uniform(0.01, 1.0, (vocab, dim // group)) * g.rng.choice([-1.0, 1.0])
    ids = b.input(b.fresh("tokens"), "int32", g.max_dims(lead))

    def tokens(values: dict[str, int]) -> StepInputs:
        return {ids: g.rng.integers(0, vocab, g.live_dims(lead, values)).astype(np.int32)}

    g.step_inputs.append(tokens)
    dims = (*lead, dim)
    out = b.op(
        "embedding_q4gsw",
        weight=b.constant(b.fresh("emb_weight"), weight),
        scales=b.constant(b.fresh("emb_scales"), scales.astype(np.float32)),
        group_size=b.int(group),
        indices=ids,
        is_linear_weight=b.int(g.draw(st.sampled_from([0, 1]))),
        out_dims=g.max_dims(dims),
    )
    g.produced(out, dims, [])
    return True
