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
from harness.builder import GraphBuilder

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
