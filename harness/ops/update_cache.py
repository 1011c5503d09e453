"""Model of update_cache(value, cache, input_pos): the KV-cache update on its own.

Upstream's `llama::update_cache` (the update `sdpa_with_kv_cache` runs first): value
`[1, S, H, D]`, cache a state tensor `[1, C, H, D]` of the same H and D; rows input_pos ...
input_pos + S - 1 of the cache take value's rows; nothing else changes and the op writes no
output (a graph reads the cache as state, or lists it as an output).

Live checks, in this order (`InputError`, subject the op): "shape" (value live must be
[1, S, H, D], only S moves), "input_pos" (negative), "cache_overflow" (input_pos + S > C).
They run before anything is dispatched, so a refused step leaves the cache as it was
(upstream's shader drops rows past the end silently instead, docs/design.md §8.8).

Kernel design (both backends): one dispatch slot `update_cache`, 64 invocations per
workgroup, one per element of value, logical count ceil(S * H * D / 64).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from hypothesis import strategies as st

from graph_format import Graph, GraphBuildError, InputError, OpNode
from graph_format.kernels import Value
from harness.gen.blocks import float_array, kv_steps, seeds
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.graphgen import GraphGen, Sym, generator
from harness.model import (
    Args,
    ExpectedDispatch,
    KernelSpec,
    LiveState,
    OpModel,
    div_up,
    kernels,
    register,
    ro,
    rw,
    tensors,
)
from harness.ops.view import view_as

WORKGROUP = (64, 1, 1)


class UpdateCacheModel(OpModel):
    """Contract, reference and budget of update_cache."""

    activations = ("value",)
    required_regimes = ("size=1", "size=max", "step=grow", "pos=0", "context=cache_end")
    kernels = kernels(
        KernelSpec(
            "update_cache",
            (rw("cache"), ro("value")),
            exact=True,
            webgpu_ulps=0,
        )
    )

    def check(self, node: OpNode, graph: Graph) -> None:
        value, cache = tensors(node, graph, "value", "cache")
        for t in (value, cache):
            if t.dtype != "float32":
                raise GraphBuildError(node.name, "update_cache is float32 only", tensor=t.name)
            if len(t.dims) != 4 or t.dims[0] != 1:
                raise GraphBuildError(node.name, "tensors must be [1, ., ., .]", tensor=t.name)
        if not cache.state:
            raise GraphBuildError(node.name, "the cache must be a state tensor", tensor=cache.name)
        if cache.dims[2:] != value.dims[2:]:
            raise GraphBuildError(node.name, "cache must be [1, C, H, D]", tensor=cache.name)

    def resize(self, node: OpNode, live: LiveState) -> None:
        value = live.of(node, "value")
        _, _, heads, dim = live.max_of(node, "value")
        rows = live.max_of(node, "cache")[1]
        seq = value[1]
        if value != (1, seq, heads, dim):
            raise InputError(
                node.name, "shape", f"live value {list(value)} must be [1, S, {heads}, {dim}]"
            )
        pos = live.int_arg(node, "input_pos")
        if pos < 0:
            raise InputError(node.name, "input_pos", f"input_pos {pos} is negative")
        if pos + seq > rows:
            raise InputError(
                node.name,
                "cache_overflow",
                f"input_pos {pos} + S {seq} exceeds the cache's {rows} rows",
            )

    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        _, seq, heads, dim = live.of(node, "value")
        return {
            "seq": seq,
            "input_pos": live.int_arg(node, "input_pos"),
            "heads": heads,
            "head_dim": dim,
            "workgroup_size": WORKGROUP[0],
        }

    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        _, seq, heads, dim = live.of(node, "value")
        count = div_up(seq * heads * dim, WORKGROUP[0])
        return [(node.name, "update_cache", WORKGROUP, (count, 1, 1), True)]

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """Coverage: S, the rows written."""
        return live.of(node, "value")[1]

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """Coverage: a write at the cache's start, and one reaching its end."""
        seq = live.of(node, "value")[1]
        pos = live.int_arg(node, "input_pos")
        tags = set()
        if pos == 0:
            tags.add("pos=0")
        if pos + seq == live.max_of(node, "cache")[1]:
            tags.add("context=cache_end")
        return tags

    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        # Indices count from the right: value and cache may carry the same leading probe
        # axis (the evaluator's probes).
        pos, value = int(args["input_pos"]), args["value"]
        args["cache"][..., 0, pos : pos + value.shape[-3], :, :] = value[..., 0, :, :, :]
        return {}

    probe_reference = reference

    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        return {"cache": np.zeros(np.shape(args["cache"]))}  # a copy: exact


MODEL = register("update_cache", UpdateCacheModel())


# ---------------------------------------------------------------------------- cases


@family("update_cache", exercises={"update_cache"})
@st.composite
def update_cache_cases(draw: st.DrawFn) -> Case:
    """update_cache over a KV-cache session (prefill, decode, chunks, reset, overflow), the
    cache starting from data of its own (so rows not written stay visible), and listed as the
    graph's output."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    heads, dim = draw(st.integers(1, 3)), draw(st.sampled_from([1, 3, 4, 16, 33]))
    cache_rows = draw(st.one_of(st.integers(1, 40), st.sampled_from([64, 65, 129])))
    max_seq = draw(st.integers(1, min(cache_rows, 24)))
    b = GraphBuilder()
    value = b.input("value", "float32", [1, max_seq, heads, dim])
    dims = [1, cache_rows, heads, dim]
    cache = b.state("cache", "float32", dims, initial=float_array(rng, dims))
    b.op("update_cache", name="update", value=value, cache=cache, input_pos=b.symint_input("pos"))
    b.output(cache)
    steps: list[StepInputs] = [
        {"value": float_array(rng, [1, seq, heads, dim]), "pos": position}
        for seq, position in draw(kv_steps(cache_rows, max_seq))
    ]
    return Case(
        b.build(), steps, name="update_cache", meta={"seed": seed, "family": "update_cache"}
    )


# ---------------------------------------------------------------------------- random graphs


@generator("update_cache")
def gen_update_cache(g: GraphGen) -> bool:
    """A pool tensor `[S, W]` (S a symbol) viewed as `[1, S, H, D]` and written into a state
    cache `[1, C, H, D]` with C at least S's max, at an `input_pos` SymInt graph input fed
    every step within the cache for the live S (the next chunk, a reset, the cache's end)."""
    candidates = g.sequence_rows()
    if not candidates:
        return False
    src = g.pick(candidates)
    seq, width = src.dims
    assert isinstance(seq, Sym) and isinstance(width, int)
    dim = g.draw(st.sampled_from([d for d in range(1, width + 1) if width % d == 0]))
    value = view_as(g, src, (1, seq, width // dim, dim))
    rows = seq.max + g.draw(st.integers(0, 8))
    b = g.builder
    input_pos = b.symint_input(b.fresh("input_pos"))
    session = {"next": 0}

    def position(values: dict[str, int]) -> StepInputs:
        live = values[seq.name]
        kind = g.draw(st.sampled_from(["next", "next", "reset", "end"]))
        if kind == "next" and session["next"] + live <= rows:
            pos = session["next"]
        elif kind == "end":
            pos = rows - live
        else:
            pos = 0
        session["next"] = pos + live
        return {input_pos: pos}

    g.step_inputs.append(position)
    cache = b.state(b.fresh("cache"), "float32", [1, rows, width // dim, dim])
    b.op("update_cache", value=value.name, cache=cache, input_pos=input_pos)
    return True
