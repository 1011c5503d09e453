"""Random DAGs over the implemented ops, with dynamic dims shared through symbols.

A graph is grown from its inputs: every tensor in the pool has a *dims spec* whose entries
are ints (static) or `Sym`s (dynamic dims such as the sequence length, shared by every
tensor that has them). Each step of a case draws a live value per symbol, so all tensors
resize together, as in a real model. Op generators (`OP_GENERATORS`, one per op type) pick
operands from the pool and add one op; joins prefer operands produced at different depths,
so a hook that reads a stale co-input (a propagation-order bug) is reachable.

To make a new op reachable from random graphs, write a generator `def gen_<op>(g: GraphGen)
-> bool` (False when the pool offers no valid operands) and register it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model import q4
from harness.strategies import float_array, live_sequences


@dataclass(frozen=True)
class Sym:
    """A dynamic dim shared by every tensor that has it."""

    name: str
    max: int


DimSpec = int | Sym


@dataclass
class PoolTensor:
    """A float32 tensor of the graph being grown, with its dims spec and producer depth."""

    name: str
    dims: tuple[DimSpec, ...]
    depth: int


@dataclass
class GraphGen:
    """The state of one graph while op generators grow it."""

    draw: st.DrawFn
    rng: np.random.Generator
    builder: GraphBuilder = field(default_factory=GraphBuilder)
    syms: list[Sym] = field(default_factory=list)
    pool: list[PoolTensor] = field(default_factory=list)
    inputs: list[PoolTensor] = field(default_factory=list)
    consumed: set[str] = field(default_factory=set)
    # Extra per-step inputs a generator needs (SymInt inputs, tables sliced per step):
    # name -> function of the step's symbol values giving the input.
    step_inputs: dict[str, Callable[[dict[str, int]], np.ndarray | int]] = field(
        default_factory=dict
    )

    # ------------------------------------------------------------------ helpers for generators

    @staticmethod
    def max_dims(dims: Sequence[DimSpec]) -> list[int]:
        """Max dims of a spec."""
        return [d.max if isinstance(d, Sym) else d for d in dims]

    @staticmethod
    def live_dims(dims: Sequence[DimSpec], values: dict[str, int]) -> tuple[int, ...]:
        """Live dims of a spec for the step's symbol values."""
        return tuple(values[d.name] if isinstance(d, Sym) else d for d in dims)

    def add_input(self, stem: str, dims: tuple[DimSpec, ...]) -> PoolTensor:
        """A new float32 graph input (fresh data every step)."""
        name = self.builder.input(self.builder.fresh(stem), "float32", self.max_dims(dims))
        tensor = PoolTensor(name, dims, 0)
        self.inputs.append(tensor)
        self.pool.append(tensor)
        return tensor

    def constant(self, stem: str, shape: Sequence[int], scale: float = 1.0) -> str:
        """A float32 constant of random data."""
        return self.builder.constant(self.builder.fresh(stem), float_array(self.rng, shape, scale))

    def produced(
        self, name: str, dims: tuple[DimSpec, ...], operands: Sequence[PoolTensor]
    ) -> PoolTensor:
        """Record an op's output in the pool (its operands are now consumed)."""
        self.consumed.update(t.name for t in operands)
        tensor = PoolTensor(name, dims, 1 + max((t.depth for t in operands), default=0))
        self.pool.append(tensor)
        return tensor

    def pick(self, candidates: Sequence[PoolTensor]) -> PoolTensor:
        """One of `candidates` (shrinks toward the first)."""
        return candidates[self.draw(st.integers(0, len(candidates) - 1))]

    def pick_group(self, groups: Sequence[list[PoolTensor]]) -> list[PoolTensor]:
        """One of several candidate groups."""
        return groups[self.draw(st.integers(0, len(groups) - 1))]

    def pick_pair(self, candidates: Sequence[PoolTensor]) -> tuple[PoolTensor, PoolTensor] | None:
        """Two distinct operands, preferring ones produced at different depths."""
        if len(candidates) < 2:
            return None
        first = self.pick(candidates)
        others = [t for t in candidates if t.name != first.name]
        deeper = [t for t in others if t.depth != first.depth]
        second = self.pick(deeper if deeper and self.draw(st.booleans()) else others)
        return first, second


# ---------------------------------------------------------------------------- generators


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


def _gen_binary(op: str) -> Callable[[GraphGen], bool]:
    def gen(g: GraphGen) -> bool:
        """`op` joining two same-spec tensors of different depth, or one with a constant
        that broadcasts over its leading dims."""
        by_spec: dict[tuple[DimSpec, ...], list[PoolTensor]] = {}
        for t in g.pool:
            by_spec.setdefault(t.dims, []).append(t)
        pairs = [ts for ts in by_spec.values() if len(ts) >= 2]
        if pairs and g.draw(st.booleans()):
            a, b = g.pick_pair(g.pick_group(pairs))  # type: ignore[misc]  # groups have >= 2
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


def _gen_unary(op: str) -> Callable[[GraphGen], bool]:
    def gen(g: GraphGen) -> bool:
        """`op` over any pool tensor."""
        x = g.pick(g.pool)
        g.produced(g.builder.op(op, x=x.name), x.dims, [x])
        return True

    return gen


def gen_silu_mul(g: GraphGen) -> bool:
    """silu(gate) * up over two same-spec tensors, preferably of different depths."""
    by_spec: dict[tuple[DimSpec, ...], list[PoolTensor]] = {}
    for t in g.pool:
        by_spec.setdefault(t.dims, []).append(t)
    pairs = [ts for ts in by_spec.values() if len(ts) >= 2]
    if not pairs:
        return False
    gate, up = g.pick_pair(g.pick_group(pairs))  # type: ignore[misc]  # groups have >= 2
    g.produced(g.builder.op("silu_mul", gate=gate.name, up=up.name), gate.dims, [gate, up])
    return True


def gen_view_copy(g: GraphGen) -> bool:
    """A SymInt-dependent view: split a static last dim W into (H, W/H), or merge two static
    last dims back; every dynamic dim of the size list is a sym_size of x (often an
    intermediate), never inferred from numel. Ranks stay <= 4."""
    b = g.builder
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
    lead = x.dims[:-2] if merge else x.dims[:-1]
    if merge:
        h, d = x.dims[-2], x.dims[-1]
        assert isinstance(h, int) and isinstance(d, int)
        tail: tuple[DimSpec, ...] = (h * d,)
    else:
        width = x.dims[-1]
        assert isinstance(width, int)
        heads = [h for h in range(2, 9) if h < width and width % h == 0]
        h = heads[g.draw(st.integers(0, len(heads) - 1))]
        tail = (h, width // h)
    sizes = [
        b.op("sym_size", x=x.name, dim=b.int(i)) if isinstance(dim, Sym) else b.int(dim)
        for i, dim in enumerate(lead)
    ] + [b.int(v) for v in tail]  # type: ignore[arg-type]  # tail dims are static
    dims = (*lead, *tail)
    out = b.op("view_copy", x=x.name, sizes=sizes, out_dims=g.max_dims(dims))
    g.produced(out, dims, [x])
    return True


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


OP_GENERATORS: dict[str, Callable[[GraphGen], bool]] = {
    "rms_norm": gen_rms_norm,
    "add": _gen_binary("add"),
    "mul": _gen_binary("mul"),
    "sigmoid": _gen_unary("sigmoid"),
    "silu": _gen_unary("silu"),
    "silu_mul": gen_silu_mul,
    "view_copy": gen_view_copy,
    "linear_q4gsw": gen_linear_q4gsw,
}


# ---------------------------------------------------------------------------- strategy


@st.composite
def random_graph_cases(
    draw: st.DrawFn,
    ops: Sequence[str] | None = None,
    *,
    max_ops: int = 6,
    max_steps: int = 5,
) -> Case:
    """A random DAG of up to `max_ops` ops from `ops` (default: every registered generator)
    over inputs sharing a dynamic sequence dim (and sometimes a dynamic batch dim), run
    through a sequence of live sizes."""
    names = list(ops or OP_GENERATORS)
    seed = draw(st.integers(0, 2**32 - 1))
    g = GraphGen(draw, np.random.default_rng(seed))
    seq = Sym("S", draw(st.integers(2, 24)))
    g.syms.append(seq)
    lead: tuple[DimSpec, ...] = (seq,)
    if draw(st.booleans()):
        batch = Sym("B", draw(st.integers(2, 3)))
        g.syms.append(batch)
        lead = (batch, seq)
    width = draw(st.sampled_from([4, 8, 12, 16, 30, 32]))
    g.add_input("x", (*lead, width))
    if draw(st.booleans()):
        g.add_input("y", (*lead, width))
    n_ops = draw(st.integers(1, max_ops))
    added = 0
    for _ in range(n_ops * 3):
        if added == n_ops:
            break
        generator = OP_GENERATORS[draw(st.sampled_from(names))]
        added += generator(g)
    sinks = [t.name for t in g.pool if t.name not in g.consumed and t.depth > 0]
    if not sinks:
        sinks = [g.pool[-1].name] if g.pool[-1].depth > 0 else []
    if not sinks:  # no op applied: fall back to one rms_norm so the graph has an output
        gen_rms_norm(g)
        sinks = [g.pool[-1].name]
    g.builder.output(*sinks)
    graph = g.builder.build()

    n_steps = draw(st.integers(1, max_steps))
    per_sym = {
        s.name: draw(live_sequences(s.max, min_steps=n_steps, max_steps=n_steps)) for s in g.syms
    }
    steps = []
    for i in range(n_steps):
        values = {name: seq_values[i] for name, seq_values in per_sym.items()}
        step: dict[str, np.ndarray | int] = {
            t.name: float_array(g.rng, g.live_dims(t.dims, values)) for t in g.inputs
        }
        for name, make in g.step_inputs.items():
            step[name] = make(values)
        steps.append(step)
    return Case(
        graph,
        steps,
        name="random_graph",
        meta={"seed": seed, "family": "random_graph", "ops": [n.op for n in graph.ops]},
    )
