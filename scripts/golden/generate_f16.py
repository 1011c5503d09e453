"""Golden values of the half-precision cases (float16 inputs) from PyTorch, added to
tests/golden/.

Run by hand, never by the suite or CI (it needs PyTorch, which the project does not depend
on), from the repository root:

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchenv/bin/python scripts/golden/generate_f16.py

Each case's inputs are exact float16 values (as the harness generates them); its expected
outputs are PyTorch's (torch.nn.functional.rms_norm, torch.add/mul with broadcasting,
torch.sigmoid, torch.nn.functional.silu, silu(gate) * up, Tensor.view), computed in float64
from those float16 inputs, independently of this project's code. What a backend stores is
float16: it is judged against these values within the op's f16 budget (its f32 budget plus
the rounding of the stored value, harness/model/numerics.py `f16_store`). The script
replaces the arrays of the cases it makes (ids ending in `.f16...`) and keeps every other
case bit for bit (checked before writing).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from golden_io import write_golden  # this folder (the script runs from it)
from torch.nn import functional

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"
SEED = 20261126
MARK = ".f16"  # every case id this script owns contains it


def half(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """Normal data with an offset, rounded to float16 (what the kernels read)."""
    return ((rng.standard_normal(shape) + rng.uniform(-0.5, 0.5)) * scale).astype(np.float16)


def t(array: np.ndarray) -> torch.Tensor:
    """The float16 array as a float64 tensor (exact)."""
    return torch.from_numpy(array.astype(np.float64))


# id -> (op, arguments from a generator, expected outputs from the arguments)
Make = Callable[[np.random.Generator], dict[str, Any]]
Expect = Callable[[dict[str, Any]], dict[str, torch.Tensor]]


def _rms_norm(args: dict[str, Any]) -> dict[str, torch.Tensor]:
    width = args["x"].shape[-1]
    return {"out": functional.rms_norm(t(args["x"]), (width,), t(args["weight"]), args["eps"])}


CASES: dict[str, tuple[str, Make, Expect]] = {
    # 30 is not a multiple of 4 and 64 is: the fp32 op would take both kernels, f16 one.
    "rms_norm.f16": (
        "rms_norm",
        lambda rng: {"x": half(rng, (3, 5, 30)), "weight": half(rng, (30,)), "eps": 1e-6},
        _rms_norm,
    ),
    # Rows whose sum of squares passes the f16 maximum (65504): only f32 accumulation holds.
    "rms_norm.f16_large": (
        "rms_norm",
        lambda rng: {"x": half(rng, (4, 64), 48.0), "weight": half(rng, (64,)), "eps": 1e-5},
        _rms_norm,
    ),
    "add.f16_flat": (
        "add",
        lambda rng: {"a": half(rng, (2, 3, 17)), "b": half(rng, (2, 3, 17))},
        lambda a: {"out": torch.add(t(a["a"]), t(a["b"]))},
    ),
    "add.f16_broadcast": (
        "add",
        lambda rng: {"a": half(rng, (2, 3, 8)), "b": half(rng, (3, 1))},
        lambda a: {"out": torch.add(t(a["a"]), t(a["b"]))},
    ),
    "mul.f16_broadcast": (
        "mul",
        lambda rng: {"a": half(rng, (4, 1, 6)), "b": half(rng, (5, 6))},
        lambda a: {"out": torch.mul(t(a["a"]), t(a["b"]))},
    ),
    "sigmoid.f16": (
        "sigmoid",
        lambda rng: {"x": half(rng, (3, 21), 8.0)},
        lambda a: {"out": torch.sigmoid(t(a["x"]))},
    ),
    "silu.f16": (
        "silu",
        lambda rng: {"x": half(rng, (3, 21), 8.0)},
        lambda a: {"out": functional.silu(t(a["x"]))},
    ),
    "silu_mul.f16": (
        "silu_mul",
        lambda rng: {"gate": half(rng, (2, 19), 4.0), "up": half(rng, (2, 19))},
        lambda a: {"out": functional.silu(t(a["gate"])) * t(a["up"])},
    ),
    "view_copy.f16": (
        "view_copy",
        lambda rng: {"x": half(rng, (1, 3, 10)), "sizes": [1, 3, 2, 5]},
        lambda a: {"out": t(a["x"]).view(*a["sizes"])},
    ),
}


def main() -> None:
    rng = np.random.default_rng(SEED)
    manifest_path, npz_path = GOLDEN_DIR / "manifest.json", GOLDEN_DIR / "golden.npz"
    manifest = json.loads(manifest_path.read_text())
    with np.load(npz_path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    kept = {k: v for k, v in arrays.items() if MARK not in k}
    cases = [c for c in manifest["cases"] if MARK not in c["id"]]
    for case_id, (op, make, expect) in CASES.items():
        args = make(rng)
        expected = expect(args)
        entry_args: dict[str, Any] = {}
        for slot, value in args.items():
            if isinstance(value, np.ndarray):
                kept[f"{case_id}.{slot}"] = value
                entry_args[slot] = f"{case_id}.{slot}"
            else:
                entry_args[slot] = value
        for slot, value in expected.items():
            kept[f"{case_id}.{slot}"] = value.numpy()
        cases.append(
            {
                "id": case_id,
                "op": op,
                "args": entry_args,
                "expected": {slot: f"{case_id}.{slot}" for slot in expected},
            }
        )
    manifest["cases"] = cases
    write_golden(npz_path, manifest_path, manifest, arrays, kept, lambda key: MARK in key)
    print(f"wrote {len(CASES)} float16 cases to {GOLDEN_DIR}")


if __name__ == "__main__":
    main()
