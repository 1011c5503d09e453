"""Golden values of apply_rotary_emb_interleaved from PyTorch, added to tests/golden/.

Run by hand, never by the suite or CI (it needs PyTorch, which the project does not depend
on), from the repository root:

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchenv/bin/python scripts/golden/generate_apply_rotary_emb_interleaved.py

It computes each case's expected output with upstream ExecuTorch's CPU implementation of
`et_vk.apply_rotary_emb_interleaved` (backends/vulkan/custom_ops_lib.py: x viewed as
(real, imag) pairs, freqs_cis reshaped to (cos, sin) pairs, complex multiplication), in
float64 from the float32 inputs, independently of this project's code, and writes the
cases into tests/golden/manifest.json and golden.npz: the arrays of this op's cases are
replaced, every other case is kept bit for bit (checked before writing).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from golden_io import write_golden  # this folder (the script runs from it)

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden"
OP = "apply_rotary_emb_interleaved"
SEED = 20260711
# id -> (B, N, C, first position): a few tokens of a small head, and one wider, longer row.
CASES = {
    f"{OP}.basic": (2, 5, 16, 3),
    f"{OP}.wide": (1, 9, 64, 120),
}


def upstream_impl(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Upstream's CPU kernel (custom_ops_lib.apply_rotary_emb_interleaved_impl), verbatim."""
    batch, tokens, width = x.shape
    a_real, a_imag = x.view(batch, tokens, width // 2, 2).unbind(-1)
    cs = freqs_cis.reshape(tokens, width // 2, 2)
    b_real, b_imag = cs[..., 0], cs[..., 1]
    out = torch.stack(
        (a_real * b_real - a_imag * b_imag, a_real * b_imag + a_imag * b_real), dim=-1
    )
    return out.view(batch, tokens, width)


def freqs_cis(tokens: int, width: int, start: int, theta: float = 10000.0) -> np.ndarray:
    """[cos, sin] of each pair's angle (start + n) * theta^(-2k/C), interleaved, float32."""
    inv = 1.0 / theta ** (torch.arange(0, width, 2, dtype=torch.float64) / width)
    angles = torch.outer(torch.arange(start, start + tokens, dtype=torch.float64), inv)
    pairs = torch.stack((torch.cos(angles), torch.sin(angles)), dim=-1)
    return pairs.reshape(tokens, width).to(torch.float32).numpy()


def main() -> None:
    rng = np.random.default_rng(SEED)
    manifest_path, npz_path = GOLDEN_DIR / "manifest.json", GOLDEN_DIR / "golden.npz"
    manifest = json.loads(manifest_path.read_text())
    with np.load(npz_path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    kept = {k: v for k, v in arrays.items() if not k.startswith(f"{OP}.")}
    cases = [c for c in manifest["cases"] if c["op"] != OP]
    for case_id, (batch, tokens, width, start) in CASES.items():
        x = (rng.standard_normal((batch, tokens, width)) + rng.uniform(-0.5, 0.5)).astype(
            np.float32
        )
        freqs = freqs_cis(tokens, width, start)
        out = upstream_impl(torch.from_numpy(x).double(), torch.from_numpy(freqs).double())
        kept |= {
            f"{case_id}.x": x,
            f"{case_id}.freqs_cis": freqs,
            f"{case_id}.out": out.numpy(),
        }
        cases.append(
            {
                "id": case_id,
                "op": OP,
                "args": {"x": f"{case_id}.x", "freqs_cis": f"{case_id}.freqs_cis"},
                "expected": {"out": f"{case_id}.out"},
            }
        )
    manifest["cases"] = cases
    write_golden(
        npz_path, manifest_path, manifest, arrays, kept, lambda key: key.startswith(f"{OP}.")
    )
    print(f"wrote {len(CASES)} {OP} cases to {GOLDEN_DIR}")


if __name__ == "__main__":
    main()
