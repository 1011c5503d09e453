"""The `attention` family: a decoder's attention block without the linears, over KV-cache
sessions (rms_norm, sym_size, views to heads, Llama rope, sdpa with its caches, view back)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from graph_format import Graph
from harness.gen.blocks import family_dtype, float_array, head_dims, kv_steps, seeds
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.half import half_precision
from harness.ops.rotary import rope_tables


def attention_block(
    rng: np.random.Generator,
    *,
    q_heads: int,
    kv_heads: int,
    dim: int,
    cache_rows: int,
    max_seq: int,
) -> Graph:
    """A decoder's attention block without the linears, wired as the decoder graph wires it.

    Inputs xq [1, S, Hq*D], xk and xv [1, S, Hkv*D], freqs_cos / freqs_sin [S, D/2] and the
    SymInt input_pos. q = view(rms_norm(xq), [1, s, Hq, D]) with s = sym_size of the
    rms_norm output (an intermediate); k and v are viewed with the same s; Llama rope; sdpa
    with the KV cache; the result viewed back to [1, S, Hq*D] with a sym_size of sdpa's
    output. v is shallower than q and k, so on WebGPU the sdpa hook sees stale co-inputs
    mid-propagation and must still converge to the live values.
    """
    b = GraphBuilder()
    xq = b.input("xq", "float32", [1, max_seq, q_heads * dim])
    xk = b.input("xk", "float32", [1, max_seq, kv_heads * dim])
    xv = b.input("xv", "float32", [1, max_seq, kv_heads * dim])
    cos = b.input("freqs_cos", "float32", [max_seq, dim // 2])
    sin = b.input("freqs_sin", "float32", [max_seq, dim // 2])
    pos = b.symint_input("input_pos")
    w = b.constant("q_norm", float_array(rng, [q_heads * dim]))
    hq = b.op("rms_norm", name="q_norm", x=xq, weight=w, eps=b.float(1e-6))
    seq = b.op("sym_size", name="seq", x=hq, dim=b.int(1, "seq_dim"))
    one, head_dim = b.int(1, "one"), b.int(dim, "head_dim")

    def heads(name: str, x: str, n: int) -> str:
        view: str = b.op(
            "view_copy",
            name=name,
            x=x,
            sizes=[one, seq, b.int(n, f"{name}_heads"), head_dim],
            out_dims=[1, max_seq, n, dim],
        )
        return view

    q4 = heads("q_heads", hq, q_heads)
    k4 = heads("k_heads", xk, kv_heads)
    v4 = heads("v_heads", xv, kv_heads)
    qr, kr = b.op(
        "apply_rotary_emb",
        name="rope",
        xq=q4,
        xk=k4,
        freqs_cos=cos,
        freqs_sin=sin,
        out_dims={"xq_out": b.dims(q4), "xk_out": b.dims(k4)},
    )
    cache = [1, cache_rows, kv_heads, dim]
    attn = b.op(
        "sdpa_with_kv_cache",
        name="sdpa",
        q=qr,
        k=kr,
        v=v4,
        k_cache=b.state("k_cache", "float32", cache),
        v_cache=b.state("v_cache", "float32", cache),
        input_pos=pos,
    )
    out_seq = b.op("sym_size", name="out_seq", x=attn, dim=b.int(1, "out_seq_dim"))
    b.output(
        b.op(
            "view_copy",
            name="merge_heads",
            x=attn,
            sizes=[one, out_seq, b.int(q_heads * dim, "width")],
            out_dims=[1, max_seq, q_heads * dim],
        )
    )
    return b.build()


def attention_step(rng: np.random.Generator, graph: Graph, seq: int, position: int) -> StepInputs:
    """Inputs of one `attention_block` step: S tokens at `position`, freqs sliced to match."""
    q_width, kv_width = graph.tensor("xq").dims[2], graph.tensor("xk").dims[2]
    dim = 2 * graph.tensor("freqs_cos").dims[1]
    angles = rope_tables(rng, position + np.arange(seq), dim)
    return {
        "xq": float_array(rng, [1, seq, q_width]),
        "xk": float_array(rng, [1, seq, kv_width]),
        "xv": float_array(rng, [1, seq, kv_width]),
        "freqs_cos": np.cos(angles).astype(np.float32),
        "freqs_sin": np.sin(angles).astype(np.float32),
        "input_pos": position,
    }


@family(
    "attention",
    exercises={"rms_norm", "apply_rotary_emb", "sdpa_with_kv_cache", "view_copy", "sym_size"},
)
@st.composite
def attention_cases(draw: st.DrawFn) -> Case:
    """`attention_block` over a KV-cache session (`kv_steps`)."""
    seed = draw(seeds())
    rng = np.random.default_rng(seed)
    kv_heads, group, dim = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(head_dims())
    cache_rows = draw(st.one_of(st.integers(2, 32), st.sampled_from([64, 70])))
    max_seq = draw(st.integers(1, min(cache_rows, 16)))
    graph = attention_block(
        rng,
        q_heads=kv_heads * group,
        kv_heads=kv_heads,
        dim=dim,
        cache_rows=cache_rows,
        max_seq=max_seq,
    )
    steps = [attention_step(rng, graph, s, p) for s, p in draw(kv_steps(cache_rows, max_seq))]
    case = Case(graph, steps, name="attention", meta={"seed": seed, "family": "attention"})
    # Last: the shape draws stay where they were; f16 data are the f32 data rounded.
    return half_precision(case) if draw(family_dtype("attention")) == "float16" else case
