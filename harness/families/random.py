"""The `random` family: random DAGs over every op that has a random-graph generator.

Graphs grow from one or two float inputs sharing a dynamic sequence dim `S` (and sometimes a
dynamic batch dim `B`) through the generators each op's module registers
(`harness.gen.graphgen`); the family exercises every op any generator may add. A graph
whose every op takes float16 (no fused_sdpa, update_cache or scalar operand) is drawn in
float16 for a share of the cases (`harness.gen.blocks.case_dtypes`), the q4 scales kept
float32; the draw comes last, so the graphs' shapes stay those of float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

import harness.ops  # noqa: F401  (every op's module registers its generator at import)
from harness.gen.blocks import case_dtypes, float_array, live_sequences
from harness.gen.case import Case
from harness.gen.families import register_family
from harness.gen.graphgen import GENERATORS, DimSpec, GraphGen, Sym, emitted_ops
from harness.gen.half import half_precision


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
    names = sorted(ops or GENERATORS)
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
        added += GENERATORS[draw(st.sampled_from(names))].grow(g)
    sinks = [t.name for t in g.pool if t.name not in g.consumed and t.depth > 0]
    if not sinks:
        sinks = [g.pool[-1].name] if g.pool[-1].depth > 0 else []
    if not sinks:  # no op applied: fall back to one rms_norm so the graph has an output
        GENERATORS["rms_norm"].grow(g)
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
        for feed in g.step_inputs:
            step.update(feed(values))
        steps.append(step)
    case = Case(
        graph,
        steps,
        name="random_graph",
        meta={"seed": seed, "family": "random_graph", "ops": [n.op for n in graph.ops]},
    )
    # The precision, drawn last (shape draws stay put): float16 for a share of the graphs
    # whose every op takes it. The q4 scales stay float32.
    ops_run = [n.op for n in graph.ops]
    if draw(case_dtypes(ops_run)) == "float16":
        scales = {n.arg("scales") for n in graph.ops if n.op in ("linear_q4gsw", "embedding_q4gsw")}
        return half_precision(case, keep=scales)
    return case


register_family("random", random_graph_cases, emitted_ops(GENERATORS.values()), dtype_per_case=True)
