"""Golden values of the op configurations of issue 14 item 6 from PyTorch, added to tests/golden/.

Run by hand, never by the suite or CI (it needs PyTorch, which the project does not depend
on), from the repository root:

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchenv/bin/python scripts/golden/generate_op_configs.py

Each case's expected output is computed in float64 from the float32 inputs, independently of
this project's code: `x + 3.0`-style scalar operands with PyTorch's own add and mul,
view_copy's -1 with `Tensor.view`, the high-nibble embedding (`is_linear_weight = False`) and
the masked, non-causal `et_vk.sdpa` with upstream ExecuTorch's CPU implementations
(backends/vulkan/custom_ops_lib.py at cff6f4dd32: `embedding_q4gsw_impl`, `sdpa_impl`), the
embedding's final product taken in float64 rather than float32 (exact either way: a 4-bit
value times a float32 scale). The cases are written into tests/golden/manifest.json and
golden.npz: the arrays of these cases are replaced, every other case is kept bit for bit
(checked before writing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from golden_io import write_golden  # this folder (the script runs from it)

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"
SEED = 20261126


def embedding_q4gsw_impl(
    weight: torch.Tensor,
    weight_scales: torch.Tensor,
    group_size: int,
    indices: torch.Tensor,
    is_linear_weight: bool = False,
) -> torch.Tensor:
    """Upstream's CPU kernel (custom_ops_lib.embedding_q4gsw_impl), in float64."""
    high = (weight >> 4).to(torch.int8) - 8
    low = (weight & 0xF).to(torch.int8) - 8
    if is_linear_weight:
        unpacked = torch.stack([low, high], dim=-1).reshape(weight.shape[0], -1)
    else:
        unpacked = torch.stack([high, low], dim=-1).reshape(weight.shape[0], -1)
    num_groups = weight_scales.shape[1] if weight_scales.dim() > 1 else 1
    unpacked_groups = unpacked.reshape(weight.shape[0], num_groups, group_size)
    scales = (
        weight_scales.unsqueeze(-1) if weight_scales.dim() > 1 else weight_scales.reshape(1, 1, 1)
    )
    dequantized = unpacked_groups.double() * scales.double()
    dequantized = dequantized.reshape(weight.shape[0], -1)
    return torch.nn.functional.embedding(indices, dequantized)


def sdpa_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Upstream's CPU kernel of `et_vk.sdpa` (custom_ops_lib.sdpa_impl), verbatim."""
    if scale is None:
        scale = 1.0 / (q.size(-1) ** 0.5)
    attn = torch.matmul(q, k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        attn = attn + attn_mask
    attn = torch.softmax(attn, dim=-1)
    return torch.matmul(attn, v)


def _f32(rng: np.random.Generator, *dims: int) -> np.ndarray:
    return rng.standard_normal(dims).astype(np.float32)


def _t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).double()


def build_cases(rng: np.random.Generator) -> list[tuple[str, str, dict[str, Any], np.ndarray]]:
    """(id, op, args (arrays and literals), expected out) of every case."""
    cases: list[tuple[str, str, dict[str, Any], np.ndarray]] = []
    for op, scalar in (("add", 0.1), ("mul", -1234.56)):
        a = _f32(rng, 3, 5, 8)
        out = _t(a) + scalar if op == "add" else _t(a) * scalar
        cases.append((f"{op}.scalar", op, {"a": a, "scalar": scalar}, out.numpy()))
    x = _f32(rng, 2, 3, 16)
    cases.append(
        ("view_copy.infer", "view_copy", {"x": x, "sizes": [-1, 8]}, _t(x).view(-1, 8).numpy())
    )
    vocab, dim, group = 7, 32, 8
    weight = rng.integers(0, 256, (vocab, dim // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 1.0, (vocab, dim // group)).astype(np.float32)
    ids = rng.integers(0, vocab, (2, 3)).astype(np.int64)
    out = embedding_q4gsw_impl(
        torch.from_numpy(weight), torch.from_numpy(scales), group, torch.from_numpy(ids), False
    )
    args = {
        "weight": weight,
        "scales": scales,
        "group_size": group,
        "indices": ids,
        "is_linear_weight": False,
    }
    cases.append(("embedding_q4gsw.high_nibble", "embedding_q4gsw", args, out.numpy()))
    # Upstream's op test: q, k, v [B, H, S|L, D], a mask [B, 1, 1, L] in [-1, 1).
    q, k, v = _f32(rng, 2, 3, 5, 16), _f32(rng, 2, 3, 9, 16), _f32(rng, 2, 3, 9, 16)
    mask = (rng.uniform(0.0, 1.0, (2, 1, 1, 9)) * 2.0 - 1.0).astype(np.float32)
    out = sdpa_impl(_t(q), _t(k), _t(v), _t(mask))
    args = {"q": q, "k": k, "v": v, "attn_mask": mask}
    cases.append(("fused_sdpa.mask", "fused_sdpa", args, out.numpy()))
    q, k, v = _f32(rng, 1, 2, 7, 8), _f32(rng, 1, 2, 3, 8), _f32(rng, 1, 2, 3, 8)
    out = sdpa_impl(_t(q), _t(k), _t(v), None, 0.3)
    cases.append(
        ("fused_sdpa.scale", "fused_sdpa", {"q": q, "k": k, "v": v, "scale": 0.3}, out.numpy())
    )
    return cases


def main() -> None:
    rng = np.random.default_rng(SEED)
    manifest_path, npz_path = GOLDEN_DIR / "manifest.json", GOLDEN_DIR / "golden.npz"
    manifest = json.loads(manifest_path.read_text())
    with np.load(npz_path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    cases = build_cases(rng)
    ids = {case_id for case_id, *_ in cases}

    def ours(key: str) -> bool:
        return any(key.startswith(f"{case_id}.") for case_id in ids)

    kept = {k: v for k, v in arrays.items() if not ours(k)}
    entries = [c for c in manifest["cases"] if c["id"] not in ids]
    for case_id, op, args, out in cases:
        entry_args: dict[str, Any] = {}
        for slot, value in args.items():
            if isinstance(value, np.ndarray):
                kept[f"{case_id}.{slot}"] = value
                entry_args[slot] = f"{case_id}.{slot}"
            else:
                entry_args[slot] = value
        kept[f"{case_id}.out"] = out
        entries.append(
            {"id": case_id, "op": op, "args": entry_args, "expected": {"out": f"{case_id}.out"}}
        )
    manifest["cases"] = entries
    write_golden(npz_path, manifest_path, manifest, arrays, kept, ours)
    print(f"wrote {len(cases)} cases to {GOLDEN_DIR}: {sorted(ids)}")


if __name__ == "__main__":
    main()
