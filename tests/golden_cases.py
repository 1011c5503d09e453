"""Golden cases from PyTorch (tests/golden/, copied from shared/golden/): loading and graphs.

`manifest.json` names, per case, the op, which array is which argument, the parameters and
the expected outputs (computed by PyTorch in float64 from the float32 inputs).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graph_format import SIGNATURES, Graph
from harness.gen.builder import GraphBuilder

GOLDEN_DIR = Path(__file__).parent / "golden"
# Arguments that are activations (graph inputs); every other array argument is a constant.
ACTIVATIONS = {"x", "a", "b", "xq", "xk", "indices", "q", "k", "v", "gate", "up"}


@dataclass(frozen=True)
class GoldenCase:
    """One manifest entry with its arrays resolved."""

    id: str
    op: str
    args: dict[str, Any]
    expected: dict[str, np.ndarray]
    raw: dict[str, Any]


@functools.cache
def golden_cases() -> list[GoldenCase]:
    """Every case of the manifest."""
    manifest = json.loads((GOLDEN_DIR / "manifest.json").read_text())
    arrays = dict(np.load(GOLDEN_DIR / "golden.npz"))
    cases = []
    for entry in manifest["cases"]:
        args = {
            k: arrays[v] if isinstance(v, str) and v in arrays else v
            for k, v in entry.get("args", {}).items()
        }
        expected = {k: arrays[v] for k, v in entry.get("expected", {}).items()}
        cases.append(GoldenCase(entry["id"], entry["op"], args, expected, entry))
    return cases


def golden_arrays() -> dict[str, np.ndarray]:
    """All arrays of golden.npz by key."""
    return dict(np.load(GOLDEN_DIR / "golden.npz"))


def single_op_graph(case: GoldenCase) -> tuple[Graph, dict[str, np.ndarray]]:
    """A one-op graph for a single-op golden case, and the inputs of its one step."""
    sig = SIGNATURES[case.op]
    # Manifest arguments with no slot in the op's signature must mean what the graph format
    # assumes, never be dropped silently: embeddings here always use the linear nibble order.
    extra = {k: v for k, v in case.args.items() if sig.arg(k) is None}
    if extra not in ({}, {"is_linear_weight": True}):
        raise ValueError(f"{case.id}: arguments {extra} have no meaning in the graph format")
    b = GraphBuilder()
    args: dict[str, Any] = {}
    inputs: dict[str, np.ndarray] = {}
    for slot in sig.args:
        value = case.args.get(slot.name)
        if value is None:
            continue
        if isinstance(value, np.ndarray):
            array = value.astype(np.int32) if value.dtype == np.int64 else value
            if slot.name in ACTIVATIONS:
                dtype = {np.dtype(np.float32): "float32", np.dtype(np.int32): "int32"}[array.dtype]
                args[slot.name] = b.input(slot.name, dtype, array.shape)
                inputs[slot.name] = value
            else:
                args[slot.name] = b.constant(slot.name, array)
        elif slot.kind == "float":
            args[slot.name] = b.float(value, slot.name)
        else:
            args[slot.name] = b.int(value, slot.name)
    out_dims = {name: case.expected[name].shape for name, _ in sig.outputs}
    outs = b.op(case.op, name=case.op, out_dims=out_dims, **args)
    b.output(*(outs if isinstance(outs, tuple) else (outs,)))
    return b.build(), inputs


def sdpa_steps(case: GoldenCase) -> tuple[Graph, list[dict[str, np.ndarray | int]]]:
    """The one-op graph of a multi-step sdpa_with_kv_cache case and the inputs of its steps.

    q, k and v are inputs with the largest S of any step; the caches are zero-initialized
    state tensors of `cache_len` rows; `input_pos` is a SymInt input.
    """
    params = case.raw["params"]
    arrays = golden_arrays()
    steps: list[dict[str, np.ndarray | int]] = [
        {
            "q": arrays[s["q"]],
            "k": arrays[s["k"]],
            "v": arrays[s["v"]],
            "input_pos": int(s["input_pos"]),
        }
        for s in case.raw["steps"]
    ]
    max_seq = max(s["q"].shape[1] for s in steps)  # type: ignore[union-attr]
    heads, kv_heads, dim = params["n_heads"], params["n_kv_heads"], params["head_dim"]
    cache = [1, params["cache_len"], kv_heads, dim]
    b = GraphBuilder()
    q = b.input("q", "float32", [1, max_seq, heads, dim])
    k = b.input("k", "float32", [1, max_seq, kv_heads, dim])
    v = b.input("v", "float32", [1, max_seq, kv_heads, dim])
    pos = b.symint_input("input_pos")
    k_cache = b.state("k_cache", "float32", cache)
    v_cache = b.state("v_cache", "float32", cache)
    b.output(
        b.op(
            "sdpa_with_kv_cache",
            name=case.op,
            q=q,
            k=k,
            v=v,
            k_cache=k_cache,
            v_cache=v_cache,
            input_pos=pos,
        )
    )
    return b.build(), steps
