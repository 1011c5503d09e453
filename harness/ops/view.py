"""Models of view_copy(x, sizes) and sym_size(x, dim).

view_copy: out takes the live sizes named by its size list, each an int literal or a SymInt
resolved from its live value (never guessed from numel: docs/design.md §8.4). One int literal
may be -1 (as upstream's `aten.view_copy`): that size is inferred, x's live numel divided by
the product of the other sizes; two -1s are refused at load, and a product that does not
divide the live numel is refused at run time (`InputError` reason "numel", before the dims
checks). A SymInt is a size as it is (a live -1 is a nonpositive size); with a SymInt below 1
among the other sizes nothing is inferred (the dims checks refuse the list as it stands).
Live checks, in this order: out's per-dim checks on the resolved sizes (`ResizeError` on out),
then the numel of x's live dims against the sizes' product (`InputError` reason "numel").
Kernel design (both backends): one slot `view_copy`, a bitwise 32-bit copy, 64 invocations
per workgroup, one per element, logical count ceil(numel / 64). float32 or int32, same dtype.

sym_size: its SymInt output is x's live dim `dim` (negative dims count from the end), always
current when consumers resize; no dispatch.
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
    ScalarValue,
    dtype_slot,
)
from graph_format.kernels import Value
from harness.gen.blocks import (
    family_dtype,
    float_array,
    head_dims,
    live_sequences,
    seeds,
)
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import DimSpec, GraphGen, PoolTensor, Sym, generator
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    check_dims,
    div_up,
    int_literal,
    kernels,
    numel,
    register,
    ro,
    rw,
    tensors,
)

WORKGROUP = (64, 1, 1)
VIEW_DTYPES = ("float32", "int32", "float16")
INFER = -1  # the int literal of a size inferred from the live numel


def _is_infer(live: LiveState, name: str) -> bool:
    """Whether size-list entry `name` is the literal -1 (a SymInt never is)."""
    value = live.graph.values[name]
    return isinstance(value, ScalarValue) and int(value.value) == INFER


class ViewCopyModel(OpModel):
    """Contract, reference and budget of view_copy."""

    activations = ("x",)
    required_regimes = ("size=1", "size=max", "step=shrink")
    dtypes = FLOAT_DTYPES
    kernels = kernels(
        KernelSpec(
            "view_copy",
            (rw("out", "u32"), ro("x", "u32")),
            exact=True,
            webgpu_ulps=0,
        ),
        KernelSpec(
            "view_copy_f16",
            (rw("out", "f16"), ro("x", "f16")),
            exact=True,
        ),
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        x, out = tensors(node, graph, "x", "out")
        if x.dtype not in VIEW_DTYPES:
            raise GraphBuildError(
                node.name, "view_copy copies float32, int32 or float16", tensor=x.name
            )
        if out.dtype != x.dtype:
            raise GraphBuildError(node.name, "out dtype != x dtype", tensor=out.name)
        sizes = node.size_list("sizes")
        if len(sizes) != len(out.dims):
            raise GraphBuildError(node.name, "sizes must have out's rank", tensor=out.name)
        inferred = 0
        for d, name in enumerate(sizes):
            value = graph.values[name]
            if not isinstance(value, ScalarValue):
                continue
            if int(value.value) == INFER:
                inferred += 1
                if inferred > 1:
                    raise GraphBuildError(node.name, "more than one -1 size", tensor=out.name)
            elif not 1 <= int(value.value) <= out.dims[d]:
                raise GraphBuildError(
                    node.name,
                    f"literal size {value.value} at dim {d} out of range",
                    tensor=out.name,
                )

    def resize(self, node: OpNode, live: LiveState) -> None:
        sizes = live.ints(node, "sizes")
        have = numel(live.of(node, "x"))
        infer = [d for d, name in enumerate(node.size_list("sizes")) if _is_infer(live, name)]
        others = sizes[: infer[0]] + sizes[infer[0] + 1 :] if infer else ()
        # Only from sizes that are sizes: with a SymInt below 1 among the others, the -1
        # stays and the dims check refuses the list as it stands.
        if infer and min(others, default=1) >= 1:
            known = numel(others)
            if have % known:
                raise InputError(
                    node.name, "numel", f"sizes {list(sizes)} cannot hold x's {have} elements"
                )
            sizes = (*sizes[: infer[0]], have // known, *sizes[infer[0] + 1 :])
        name = node.outputs["out"]
        check_dims(name, sizes, live.graph.tensor(name).dims)
        if numel(sizes) != have:
            raise InputError(
                node.name, "numel", f"sizes {list(sizes)} do not hold x's {have} elements"
            )
        live.set_output(node, "out", sizes)

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        return {"numel": numel(live.of(node, "x")), "workgroup_size": WORKGROUP[0]}

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        count = div_up(numel(live.of(node, "x")), WORKGROUP[0])
        kernel = dtype_slot("view_copy", live.graph.tensor(node.arg("x")).dtype)
        return [(node.name, kernel, WORKGROUP, (count, 1, 1), True)]

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        return {"out": args["x"].reshape(args["sizes"])}  # numpy infers a -1 the same way

    def probe_reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        """`reference` of every probe at once: x carries a leading probe axis."""
        x = args["x"]
        return {"out": x.reshape(x.shape[0], *args["sizes"])}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {"out": np.zeros(outputs["out"].shape)}  # a bitwise copy: exact

    def half_budget(
        self,
        node: OpNode,
        args: Args,
        outputs: Mapping[str, np.ndarray],
        budgets: Mapping[str, np.ndarray],
    ) -> dict[str, np.ndarray]:
        """In half precision too: a copy of f16 elements rounds nothing."""
        return dict(budgets)


class SymSizeModel(OpModel):
    """Contract and reference of sym_size (no kernels, no budget: it yields an int)."""

    activations = ("x",)
    required_regimes = ("size=1", "size=max", "step=shrink")

    def __init__(self) -> None:
        self.kernels: dict[str, KernelSpec] = {}

    def check(self, node: OpNode, graph: Graph) -> None:
        (x,) = tensors(node, graph, "x")
        dim = int_literal(node, graph, "dim")
        if not -len(x.dims) <= dim < len(x.dims):
            raise GraphBuildError(node.name, f"dim {dim} is outside x's rank", tensor=x.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        dim = live.int_arg(node, "dim")
        live.symints[node.outputs["out"]] = live.of(node, "x")[dim]

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        raise KeyError(f"sym_size runs no kernel; no slot {slot!r}")

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        return []

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        return {"out": np.asarray(args["x"].shape[int(args["dim"])])}

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {}


VIEW_COPY = register("view_copy", ViewCopyModel())
SYM_SIZE = register("sym_size", SymSizeModel())


# ---------------------------------------------------------------------------- cases


@family("view", exercises={"view_copy", "sym_size", "rms_norm"})
@st.composite
def view_cases(draw: st.DrawFn) -> Case:
    """view_copy between [1, S, H*D] and [1, S, H, D] with sizes from SymInts or a -1.

    S of the split is a sym_size of an intermediate (an rms_norm output, so upstream WebGPU
    would read its stale dim), a SymInt graph input that now and then disagrees with the live
    numel (refused by both), or a -1 inferred from the live numel; the view back to
    [1, S, H*D] takes a sym_size of the view. Some graphs also flatten the norm's output to
    [-1, C], C now and then not dividing every live numel (refused by both).
    """
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    max_seq, heads, dim = draw(st.integers(1, 24)), draw(st.integers(1, 4)), draw(head_dims())
    seq_from = draw(st.sampled_from(["sym_size", "input", "infer"]))
    from_input = seq_from == "input"
    lives: list[tuple[int, int | None]] = []  # per step: S, and the SymInt n when an input
    for s in draw(live_sequences(max_seq)):
        wrong = from_input and draw(st.integers(0, 9)) == 0
        lives.append((s, (s % max_seq + 1 if wrong and max_seq > 1 else s) if from_input else None))
    width = heads * dim
    flatten_cols = None
    if draw(st.booleans()):
        divisors = [c for c in range(1, width + 1) if width % c == 0]
        flatten_cols = draw(st.sampled_from(divisors)) if draw(st.integers(0, 7)) else width + 1
    dtype = draw(family_dtype("view"))  # last: the shape draws stay where they were
    b = GraphBuilder()
    x = b.input("x", dtype, [1, max_seq, width])
    n = b.symint_input("n") if from_input else None
    w = b.constant("w", float_array(rng, [width], dtype=dtype))
    h = b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6))
    if seq_from == "infer":
        seq = b.int(INFER, "infer")
    else:
        seq = n or b.op("sym_size", name="seq", x=h, dim=b.int(-2, "dim"))
    one = b.int(1, "one")
    split = b.op(
        "view_copy",
        name="split_heads",
        x=h,
        sizes=[one, seq, b.int(heads, "heads"), b.int(dim, "head_dim")],
        out_dims=[1, max_seq, heads, dim],
    )
    back_seq = b.op("sym_size", name="split_seq", x=split, dim=b.int(1, "seq_dim"))
    merged = b.op(
        "view_copy",
        name="merge_heads",
        x=split,
        sizes=[one, back_seq, b.int(width, "width")],
        out_dims=[1, max_seq, width],
    )
    b.output(split, merged)
    if flatten_cols is not None:
        flat = b.op(
            "view_copy",
            name="flatten",
            x=h,
            sizes=[b.int(INFER, "rows"), b.int(flatten_cols, "cols")],
            out_dims=[-(-max_seq * width // flatten_cols), flatten_cols],
        )
        b.output(flat)
    steps: list[StepInputs] = []
    for s, given_n in lives:
        step: StepInputs = {"x": float_array(rng, [1, s, width], dtype=dtype)}
        if n is not None and given_n is not None:
            step["n"] = given_n
        steps.append(step)
    return Case(
        b.build(), steps, name="view", meta={"seed": seed, "family": "view", "dtype": dtype}
    )


# ---------------------------------------------------------------------------- random graphs


def view_as(
    g: GraphGen, x: PoolTensor, dims: tuple[DimSpec, ...], *, infer: bool = False
) -> PoolTensor:
    """A view_copy of `x` to the dims spec `dims` (the same symbols, the same product of
    static dims), added to the pool: every dynamic size is a sym_size of x at the dim of
    that symbol (often an intermediate's), or with `infer` the first one a -1 inferred from
    the live numel. Other ops' generators use it to bring a pool tensor to the rank they
    need."""
    b = g.builder
    first_sym = next((i for i, d in enumerate(dims) if isinstance(d, Sym)), None)
    sizes = [
        b.int(INFER)
        if infer and i == first_sym
        else b.op("sym_size", x=x.name, dim=b.int(x.dims.index(d)))
        if isinstance(d, Sym)
        else b.int(d)
        for i, d in enumerate(dims)
    ]
    out = b.op("view_copy", x=x.name, sizes=sizes, out_dims=g.max_dims(dims))
    return g.produced(out, dims, [x])


@generator("view_copy", "sym_size")
def gen_view_copy(g: GraphGen) -> bool:
    """A SymInt-dependent view: split a static last dim W into (H, W/H), or merge two static
    last dims back (`view_as`), a dynamic size from a sym_size or a -1. Ranks stay <= 4."""
    merges = [
        t for t in g.pool if len(t.dims) >= 3 and all(isinstance(d, int) for d in t.dims[-2:])
    ]
    splits = [
        t
        for t in g.pool
        if len(t.dims) <= 3
        and isinstance(t.dims[-1], int)
        and any(1 < h < t.dims[-1] and t.dims[-1] % h == 0 for h in range(2, 9))
    ]
    if not merges and not splits:
        return False
    merge = bool(merges) and (not splits or g.draw(st.booleans()))
    x = g.pick(merges if merge else splits)
    if merge:
        h, d = x.dims[-2], x.dims[-1]
        assert isinstance(h, int) and isinstance(d, int)
        dims: tuple[DimSpec, ...] = (*x.dims[:-2], h * d)
    else:
        width = x.dims[-1]
        assert isinstance(width, int)
        heads = [h for h in range(2, 9) if h < width and width % h == 0]
        h = heads[g.draw(st.integers(0, len(heads) - 1))]
        dims = (*x.dims[:-1], h, width // h)
    view_as(g, x, dims, infer=g.draw(st.booleans()))
    return True
