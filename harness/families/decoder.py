"""A tiny Llama-style decoder as a graph, and the step schedules to run it with.

    embedding -> L x [rms_norm -> q/k/v linear -> view to heads -> rope -> sdpa with KV cache
    -> view back -> o linear -> residual add -> rms_norm -> gate/up linear -> silu * up
    -> down linear -> residual add] -> rms_norm -> lm-head linear

Weights are q4gsw (harness/model/q4.py); the KV caches are state tensors; `input_pos` is a SymInt
graph input; the views to and from heads take their sequence length from `sym_size` of the
q projection (an intermediate, so a stale SymInt would show); rope reads host-sliced
frequency rows `input_pos .. input_pos + S - 1` given as graph inputs `[S, head_dim / 2]`.
A step is (input_pos, S): a prefill of S tokens, a decode step (S = 1), a further prefill
chunk, or a reset to position 0. A quarter of the family's sessions run in half precision
(`in_half_precision`: f16 activations, KV caches and logits, f32 q4 scales).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from graph_format import Graph
from harness.gen.blocks import family_dtype, kv_steps
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case, StepInputs
from harness.gen.families import family
from harness.gen.half import half_precision
from harness.model import q4


@dataclass(frozen=True)
class DecoderConfig:
    """Shape of a tiny Llama decoder."""

    vocab: int = 64
    hidden: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128
    layers: int = 2
    max_seq: int = 32
    group_size: int = 32
    eps: float = 1e-5
    rope_theta: float = 10000.0

    def check(self) -> None:
        """Raise ValueError for a configuration the ops cannot run."""
        problems = []
        if self.n_heads % self.n_kv_heads:
            problems.append(
                f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}"
            )
        if self.head_dim % 2:
            problems.append(f"head_dim {self.head_dim} must be even (rope pairs)")
        for name, k in (
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("q width", self.n_heads * self.head_dim),
        ):
            if k % self.group_size:
                problems.append(f"{name} {k} is not a multiple of group_size {self.group_size}")
        if problems:
            raise ValueError("decoder config: " + "; ".join(problems))

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(N, K) of each projection of a layer."""
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        return {
            "wq": (q, self.hidden),
            "wk": (kv, self.hidden),
            "wv": (kv, self.hidden),
            "wo": (self.hidden, q),
            "w_gate": (self.ffn, self.hidden),
            "w_up": (self.ffn, self.hidden),
            "w_down": (self.hidden, self.ffn),
        }


@dataclass
class DecoderWeights:
    """Every constant of a decoder, in the graph format's layouts."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def random(cls, config: DecoderConfig, rng: np.random.Generator) -> DecoderWeights:
        """Random q4gsw weights with Llama-like scales, and standard rope tables."""
        config.check()
        a: dict[str, np.ndarray] = {}
        emb = rng.standard_normal((config.vocab, config.hidden))
        packed, scales = q4.quantize(emb, config.group_size)
        groups = q4.num_groups(config.hidden, config.group_size)
        a["tok_embeddings.weight"] = packed
        a["tok_embeddings.scales"] = np.ascontiguousarray(scales[:groups, : config.vocab].T)
        for layer in range(config.layers):
            for name, (n, k) in config.linear_shapes().items():
                w = rng.standard_normal((n, k)) / np.sqrt(k)
                a[f"layers.{layer}.{name}.weight"], a[f"layers.{layer}.{name}.scales"] = (
                    q4.quantize(w, config.group_size)
                )
            for norm in ("attention_norm", "ffn_norm"):
                a[f"layers.{layer}.{norm}.weight"] = (
                    1 + 0.1 * rng.standard_normal(config.hidden)
                ).astype(np.float32)
        a["norm.weight"] = (1 + 0.1 * rng.standard_normal(config.hidden)).astype(np.float32)
        w = rng.standard_normal((config.vocab, config.hidden)) / np.sqrt(config.hidden)
        a["output.weight"], a["output.scales"] = q4.quantize(w, config.group_size)
        a["freqs_cos"], a["freqs_sin"] = rope_tables(config)
        return cls(a)

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> DecoderWeights:
        """Weights stored under `<prefix><name>` (the golden files' layout)."""
        return cls({k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)})


def rope_tables(config: DecoderConfig) -> tuple[np.ndarray, np.ndarray]:
    """Llama frequency tables cos/sin `[max_seq, head_dim / 2]` (float32)."""
    half = config.head_dim // 2
    inv = 1.0 / config.rope_theta ** (np.arange(half) * 2 / config.head_dim)
    angles = np.outer(np.arange(config.max_seq), inv)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def build_decoder(config: DecoderConfig, weights: DecoderWeights) -> Graph:
    """The decoder graph for `config` with `weights`; output `logits` `[1, S, vocab]`."""
    config.check()
    d = _DecoderGraph(config, weights.arrays, GraphBuilder())
    b = d.b
    x = b.op(
        "embedding_q4gsw",
        name="tok_embeddings",
        weight=d.const("tok_embeddings.weight"),
        scales=d.const("tok_embeddings.scales"),
        group_size=d.gs,
        indices=d.tokens,
        out_dims=[1, config.max_seq, config.hidden],
    )
    for layer in range(config.layers):
        p = f"layers.{layer}"
        x = d.feed_forward(p, d.attention(p, x))
    n = b.op("rms_norm", name="norm", x=x, weight=d.const("norm.weight"), eps=d.eps)
    b.output(d.linear("output", n, config.vocab))
    return b.build()


class _DecoderGraph:
    """`build_decoder`'s builder and the graph's shared inputs and scalars, with the blocks
    each layer adds (built in the order the graph lists them)."""

    def __init__(self, config: DecoderConfig, w: Mapping[str, np.ndarray], b: GraphBuilder):
        self.config, self.w, self.b = config, w, b
        seq, hd = config.max_seq, config.head_dim
        self.tokens = b.input("tokens", "int32", [1, seq])
        self.input_pos = b.symint_input("input_pos")
        self.freqs_cos = b.input("freqs_cos", "float32", [seq, hd // 2])
        self.freqs_sin = b.input("freqs_sin", "float32", [seq, hd // 2])
        self.gs = b.int(config.group_size, "group_size")
        self.eps = b.float(config.eps, "eps")
        self.one, self.heads, self.kv_heads, self.head_dim = (
            b.int(1, "one"),
            b.int(config.n_heads, "n_heads"),
            b.int(config.n_kv_heads, "n_kv_heads"),
            b.int(hd, "head_dim"),
        )
        self.q_width = b.int(config.n_heads * hd, "q_width")
        self.shapes = config.linear_shapes()

    def const(self, name: str) -> str:
        """The weight `name` as a graph constant."""
        return self.b.constant(name, self.w[name])

    def linear(self, name: str, x: str, n: int) -> str:
        """A q4 linear layer `name` of `x` with `n` outputs."""
        out: str = self.b.op(
            "linear_q4gsw",
            name=name,
            x=x,
            weight=self.const(f"{name}.weight"),
            scales=self.const(f"{name}.scales"),
            group_size=self.gs,
            out_dims=[1, self.config.max_seq, n],
        )
        return out

    def _heads(self, p: str, part: str, x: str, s: str, heads: str, n: int) -> str:
        """`x` `[1, S, n * head_dim]` viewed as `[1, S, n, head_dim]`."""
        config = self.config
        out: str = self.b.op(
            "view_copy",
            name=f"{p}.{part}_heads",
            x=x,
            sizes=[self.one, s, heads, self.head_dim],
            out_dims=[1, config.max_seq, n, config.head_dim],
        )
        return out

    def attention(self, p: str, x: str) -> str:
        """Layer `p`'s attention block on `x`: norm, q/k/v, rope, the cached sdpa and the
        output projection; returns the residual sum."""
        b, config, shapes = self.b, self.config, self.shapes
        seq, hd = config.max_seq, config.head_dim
        h = b.op(
            "rms_norm",
            name=f"{p}.attention_norm",
            x=x,
            weight=self.const(f"{p}.attention_norm.weight"),
            eps=self.eps,
        )
        q = self.linear(f"{p}.wq", h, shapes["wq"][0])
        k = self.linear(f"{p}.wk", h, shapes["wk"][0])
        v = self.linear(f"{p}.wv", h, shapes["wv"][0])
        s = b.op("sym_size", name=f"{p}.seq_len", x=q, dim=b.int(1, f"{p}.seq_dim"))
        q4_ = self._heads(p, "q", q, s, self.heads, config.n_heads)
        k4 = self._heads(p, "k", k, s, self.kv_heads, config.n_kv_heads)
        v4 = self._heads(p, "v", v, s, self.kv_heads, config.n_kv_heads)
        q_rot, k_rot = b.op(
            "apply_rotary_emb",
            name=f"{p}.rope",
            xq=q4_,
            xk=k4,
            freqs_cos=self.freqs_cos,
            freqs_sin=self.freqs_sin,
            out_dims={
                "xq_out": [1, seq, config.n_heads, hd],
                "xk_out": [1, seq, config.n_kv_heads, hd],
            },
        )
        k_cache = b.state(f"{p}.k_cache", "float32", [1, seq, config.n_kv_heads, hd])
        v_cache = b.state(f"{p}.v_cache", "float32", [1, seq, config.n_kv_heads, hd])
        attn = b.op(
            "sdpa_with_kv_cache",
            name=f"{p}.attention",
            q=q_rot,
            k=k_rot,
            v=v4,
            k_cache=k_cache,
            v_cache=v_cache,
            input_pos=self.input_pos,
            out_dims=[1, seq, config.n_heads, hd],
        )
        flat = b.op(
            "view_copy",
            name=f"{p}.attn_flat",
            x=attn,
            sizes=[self.one, s, self.q_width],
            out_dims=[1, seq, config.n_heads * hd],
        )
        o = self.linear(f"{p}.wo", flat, shapes["wo"][0])
        out: str = b.op("add", name=f"{p}.attn_residual", a=x, b=o)
        return out

    def feed_forward(self, p: str, h2: str) -> str:
        """Layer `p`'s feed-forward block on `h2`: norm, gated SiLU; returns the residual sum."""
        b, shapes = self.b, self.shapes
        f = b.op(
            "rms_norm",
            name=f"{p}.ffn_norm",
            x=h2,
            weight=self.const(f"{p}.ffn_norm.weight"),
            eps=self.eps,
        )
        gate = self.linear(f"{p}.w_gate", f, shapes["w_gate"][0])
        up = self.linear(f"{p}.w_up", f, shapes["w_up"][0])
        act = b.op("silu_mul", name=f"{p}.silu_mul", gate=gate, up=up)
        down = self.linear(f"{p}.w_down", act, shapes["w_down"][0])
        out: str = b.op("add", name=f"{p}.ffn_residual", a=h2, b=down)
        return out


def decoder_step(
    config: DecoderConfig,
    weights: DecoderWeights,
    input_pos: int,
    tokens: np.ndarray,
) -> StepInputs:
    """The inputs of one step: tokens `[1, S]` (int64, as a host would pass them), the
    position, and the frequency rows `input_pos .. input_pos + S - 1`."""
    s = tokens.shape[-1]
    cos, sin = weights.arrays["freqs_cos"], weights.arrays["freqs_sin"]
    return {
        "tokens": np.asarray(tokens, np.int64).reshape(1, s),
        "input_pos": int(input_pos),
        "freqs_cos": np.ascontiguousarray(cos[input_pos : input_pos + s]),
        "freqs_sin": np.ascontiguousarray(sin[input_pos : input_pos + s]),
    }


def decoder_case(
    config: DecoderConfig,
    weights: DecoderWeights,
    schedule: Sequence[tuple[int, int]],
    rng: np.random.Generator,
    name: str = "decoder",
) -> Case:
    """A case running the decoder over `schedule`: (input_pos, S) per step, random tokens."""
    graph = build_decoder(config, weights)
    steps = [
        decoder_step(config, weights, pos, rng.integers(0, config.vocab, size=(1, s)))
        for pos, s in schedule
    ]
    return Case(
        graph, steps, name=name, meta={"config": config.__dict__, "schedule": list(schedule)}
    )


# ---------------------------------------------------------------------------- strategies


@st.composite
def decoder_configs(draw: st.DrawFn) -> DecoderConfig:
    """Small decoder shapes the ops can all run: grouped-query heads, even head dims, every
    projection width a multiple of the group size."""
    group_size = draw(st.sampled_from([16, 32]))
    kv_heads, group = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    head_dim = draw(st.sampled_from([8, 16]))
    heads = kv_heads * group
    # q width heads * head_dim and the hidden width must both be multiples of group_size.
    hidden = draw(st.sampled_from([w for w in (16, 32, 48, 64) if w % group_size == 0]))
    if heads * head_dim % group_size:
        head_dim = group_size // heads if group_size % heads == 0 else group_size
    return DecoderConfig(
        vocab=draw(st.integers(8, 64)),
        hidden=hidden,
        n_heads=heads,
        n_kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=draw(st.sampled_from([f for f in (32, 48, 64, 96) if f % group_size == 0])),
        layers=draw(st.integers(1, 2)),
        max_seq=draw(st.one_of(st.integers(2, 24), st.sampled_from([63, 65]))),
        group_size=group_size,
    )


# The op types of a decoder graph.
DECODER_OPS = (
    "embedding_q4gsw",
    "rms_norm",
    "linear_q4gsw",
    "apply_rotary_emb",
    "sdpa_with_kv_cache",
    "view_copy",
    "sym_size",
    "add",
    "silu_mul",
)


@family("decoder", exercises=DECODER_OPS)
@st.composite
def decoder_cases(draw: st.DrawFn) -> Case:
    """A random decoder over a KV-cache session: prefill at 0, decode steps, further prefill
    chunks, resets to 0, prefills longer than half the cache, contexts reaching the cache end
    and around the decode route's 64-row splits, and now and then a step past the end (both
    backends must refuse it and keep the caches)."""
    config = draw(decoder_configs())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    weights = DecoderWeights.random(config, rng)
    max_prefill = min(config.max_seq, 16)
    schedule = [(pos, s) for s, pos in draw(kv_steps(config.max_seq, max_prefill))]
    schedule[0] = (0, schedule[0][1])  # a session starts with a prefill at position 0
    case = decoder_case(config, weights, schedule, rng, name="decoder")
    # Last: the shape draws stay where they were. An f16 session: f16 weights' activations,
    # KV caches, rope tables and logits; the q4 weights and their scales are the same bytes.
    return in_half_precision(case) if draw(family_dtype("decoder")) == "float16" else case


def in_half_precision(case: Case) -> Case:
    """The f16 twin of a decoder case (`harness.gen.half`): every float tensor, the KV caches
    and the rope tables included, in float16, except the q4 scales, which stay float32."""
    scales = {name for name in case.graph.values if name.endswith(".scales")}
    return half_precision(case, keep=scales)
