"""The committed ExecuTorch test models (tests/data/models/) as the importer's tests read them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from graph_format import SIGNATURES
from harness.importer.convert import ConvertedDocument, convert_document
from harness.importer.named_data import resolve_constants
from harness.importer.program import Method, Program, read_program
from harness.importer.vkgraph import VkGraph, read_delegate

MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"
LLAMAS = ("llama_rope", "llama_hf_rope_gqa", "llama_rope_gqa_f16")
IMPORTABLE = (*LLAMAS, "ffn_block")
REFUSED = ("refuse_cpu_ops_between", "refuse_op_outside_table")
# The project ops the Llama exports map onto that branch pte-ops adds (issue 27 item 2).
NEW_OPS = frozenset({"select_as_symint", "sym_add", "slice_copy", "select_copy"})
HAS_NEW_OPS = set(SIGNATURES) >= NEW_OPS
needs_new_ops = pytest.mark.skipif(
    not HAS_NEW_OPS,
    reason=f"needs the project ops {sorted(NEW_OPS - set(SIGNATURES))} (branch pte-ops, "
    "issue 27 item 2): every Llama export maps onto them",
)


def needs_ops_for(name: str) -> list[pytest.MarkDecorator]:
    """The marks of a test parametrized by model `name`: the Llamas need the new ops."""
    return [needs_new_ops] if name in LLAMAS else []


def model_params(names: tuple[str, ...]) -> list[object]:
    return [pytest.param(n, marks=needs_ops_for(n), id=n) for n in names]


@dataclass(frozen=True)
class ReadModel:
    """One committed model, read and converted to a document (no project schema needed)."""

    path: Path
    data: bytes
    program: Program
    method: Method
    vk: VkGraph
    arrays: list[bytes | None]
    document: ConvertedDocument


@cache
def read_model(name: str) -> ReadModel:
    path = MODELS_DIR / f"{name}.pte"
    data = path.read_bytes()
    program = read_program(data)
    (method,) = [m for m in program.methods if m.instructions]
    vk = read_delegate(method.delegates[0].blob)
    arrays = resolve_constants(vk, program.named_data)
    return ReadModel(path, data, program, method, vk, arrays, convert_document(vk, arrays))


def goldens(name: str) -> dict[str, np.ndarray]:
    with np.load(MODELS_DIR / f"{name}.golden.npz", allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def golden_steps(name: str, inputs: tuple[str, ...]) -> list[dict[str, np.ndarray | int]]:
    """Each golden step's graph inputs (tokens and input_pos, or the FFN's x), by name."""
    arrays = goldens(name)
    count = len(arrays["schedule"])
    keys = ("tokens", "input_pos") if name in LLAMAS else ("x",)
    return [
        {
            graph_input: arrays[f"step{i}.{key}"]
            for graph_input, key in zip(inputs, keys, strict=True)
        }
        for i in range(count)
    ]


def mutated(path: Path, tmp: Path, change: Callable[[bytearray], None]) -> Path:
    """A copy of model `path` in `tmp` with `change` applied to its bytes."""
    data = bytearray(path.read_bytes())
    change(data)
    out = tmp / f"{path.stem}.damaged.pte"
    out.write_bytes(bytes(data))
    return out
