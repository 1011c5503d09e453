"""The random-graph framework: a graph grown from its inputs by per-op generators.

A graph is grown from its inputs: every tensor in the pool has a *dims spec* whose entries
are ints (static) or `Sym`s (dynamic dims such as the sequence length, shared by every
tensor that has them). Each step of a case draws a live value per symbol, so all tensors
resize together, as in a real model. Op generators pick operands from the pool and add one
op; joins prefer operands produced at different depths, so a hook that reads a stale
co-input (a propagation-order bug) is reachable. Inputs a generator needs beyond the pool
(token ids, SymInts, tables sliced to the live size) are fed per step through
`GraphGen.step_inputs`, computed from the step's symbol values.

Each op's module in `harness/ops/` registers its generator with `@generator("<op>")`:
`def grow(g: GraphGen) -> bool` adds one op (False when the pool offers no valid operands).
The random family (`harness/families/random.py`) draws graphs over every registered one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from graph_format import SIGNATURES
from harness.gen.blocks import float_array
from harness.gen.builder import GraphBuilder
from harness.gen.case import StepInputs


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
    # Inputs a generator adds beyond the float pool (token ids, SymInts, tables sliced to the
    # live size): functions of the step's symbol values, each giving some of the step's
    # inputs (together, so that a cos and a sin table share their angles). They run in the
    # order added, inside the case's draw: `draw` may choose values that shrink (positions).
    step_inputs: list[Callable[[dict[str, int]], StepInputs]] = field(default_factory=list)

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

    def sequence_rows(self) -> list[PoolTensor]:
        """The pool's 2-D tensors `[S, W]` with S a symbol and W an int: rows per token,
        what the attention and cache generators view as `[1, S, H, D]`."""
        return [
            t
            for t in self.pool
            if len(t.dims) == 2 and isinstance(t.dims[0], Sym) and isinstance(t.dims[1], int)
        ]

    def pick(self, candidates: Sequence[PoolTensor]) -> PoolTensor:
        """One of `candidates` (shrinks toward the first)."""
        return candidates[self.draw(st.integers(0, len(candidates) - 1))]

    def pick_group(self, groups: Sequence[list[PoolTensor]]) -> list[PoolTensor]:
        """One of several candidate groups."""
        return groups[self.draw(st.integers(0, len(groups) - 1))]

    def pick_pair(self, candidates: Sequence[PoolTensor]) -> tuple[PoolTensor, PoolTensor]:
        """Two distinct operands, preferring ones produced at different depths.

        Raises:
            ValueError: fewer than two candidates.
        """
        if len(candidates) < 2:
            raise ValueError(f"a pair needs two candidates, got {len(candidates)}")
        first = self.pick(candidates)
        others = [t for t in candidates if t.name != first.name]
        deeper = [t for t in others if t.depth != first.depth]
        second = self.pick(deeper if bool(deeper) and self.draw(st.booleans()) else others)
        return first, second


Grow = Callable[[GraphGen], bool]


@dataclass(frozen=True)
class OpGenerator:
    """A registered generator: the op it adds, and every op type it may add (`emits`: a
    view's generator adds the `sym_size`s its sizes read, too)."""

    op: str
    grow: Grow
    emits: frozenset[str]


# op -> its generator, filled as `harness.ops` imports each op's module.
GENERATORS: dict[str, OpGenerator] = {}


def register_generator(op: str, grow: Grow, *also_emits: str) -> OpGenerator:
    """Register `grow` as the random-graph generator of `op` (which may also add
    `also_emits`); returns it.

    Raises:
        ValueError: an op without a schema, or one that has a generator already.
    """
    emits = frozenset({op, *also_emits})
    unknown = sorted(emits - set(SIGNATURES))
    if unknown:
        raise ValueError(f"generator of {op!r}: ops {unknown} have no schema")
    if op in GENERATORS:
        raise ValueError(f"op {op!r} has two random-graph generators")
    GENERATORS[op] = registered = OpGenerator(op, grow, emits)
    return registered


def generator(op: str, *also_emits: str) -> Callable[[Grow], Grow]:
    """Register the decorated function as the random-graph generator of `op`."""

    def decorate(grow: Grow) -> Grow:
        register_generator(op, grow, *also_emits)
        return grow

    return decorate


def emitted_ops(generators: Iterable[OpGenerator]) -> frozenset[str]:
    """Every op type the given generators may add."""
    return frozenset().union(*(g.emits for g in generators))
