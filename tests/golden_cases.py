"""Golden cases from PyTorch (tests/golden/, copied from shared/golden/): loading, and their
cases built with the harness's public API (`harness.single_op_graph`).

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

from graph_format import SIGNATURES
from harness import Case, single_op_graph
from harness.gen.case import StepInputs
from harness.ops import model_for

GOLDEN_DIR = Path(__file__).parent / "golden"


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


def single_op_case(case: GoldenCase) -> Case:
    """A one-op case (harness.single_op_graph) for a single-op golden case: its activations
    (the op model's `activations`) are graph inputs, every other array a constant, its
    outputs PyTorch's shapes."""
    sig = SIGNATURES[case.op]
    # Every manifest argument is a slot of the op's signature, never dropped silently (the
    # embeddings' `is_linear_weight: true` is the slot of that name, 1).
    extra = {k: v for k, v in case.args.items() if sig.arg(k) is None}
    if extra:
        raise ValueError(f"{case.id}: arguments {extra} have no meaning in the graph format")
    args = dict(case.args)
    activations = model_for(case.op).activations
    constants = {k for k, v in args.items() if isinstance(v, np.ndarray) and k not in activations}
    out_dims = {name: case.expected[name].shape for name, _ in sig.outputs}
    return single_op_graph(case.op, args, constants=constants, out_dims=out_dims, name=case.op)


def sdpa_case(case: GoldenCase) -> Case:
    """The one-op case of a multi-step sdpa_with_kv_cache golden case.

    q, k and v are inputs with the largest S of any step; the caches are zero-initialized
    state tensors of `cache_len` rows; `input_pos` is a SymInt input.
    """
    params = case.raw["params"]
    arrays = golden_arrays()
    steps: list[StepInputs] = [
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
    cache = np.zeros([1, params["cache_len"], kv_heads, dim], np.float32)
    one_op = single_op_graph(
        case.op,
        {**steps[0], "k_cache": cache, "v_cache": cache},
        state={"k_cache", "v_cache"},
        symints={"input_pos"},
        max_dims={
            "q": [1, max_seq, heads, dim],
            "k": [1, max_seq, kv_heads, dim],
            "v": [1, max_seq, kv_heads, dim],
        },
        name=case.op,
    )
    return Case(one_op.graph, steps, name=case.id)
