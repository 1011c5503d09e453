"""Non-finite values on both backends (issue 20 item 4): a -inf additive mask, as causal and
padding masks carry it, runs clean, and a kernel that lets a masked key through is found.

Before the fix, the causal case was a `numeric` divergence on both backends although both
matched the float64 reference to ~1e-7: the budget was NaN (p * eps = 0 * inf).
"""

from __future__ import annotations

import numpy as np

from harness.check.divergence import Kind
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.ops.fused_sdpa import causal_mask
from tests.plants import glsl_substitution, wgsl_substitution

F32 = np.float32
LENGTHS = [(6, 10), (3, 7), (1, 10), (6, 6)]  # (S, L): S and L apart and moving


def _masked_attention(mask_dims: list[int]) -> Case:
    """fused_sdpa of q [1, 2, S, 8] over k, v [1, 2, L, 8] with an additive mask input of
    `mask_dims` (its S and L entries follow the step): causal -inf where it follows S and
    L, and a -inf padding key at l = 1 when it follows L (key 0 is never masked)."""
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 2, 6, 8])
    k = b.input("k", "float32", [1, 2, 10, 8])
    v = b.input("v", "float32", [1, 2, 10, 8])
    mask = b.input("mask", "float32", mask_dims)
    b.output(b.op("fused_sdpa", name="attn", q=q, k=k, v=v, attn_mask=mask))
    steps: list[dict[str, np.ndarray | int]] = []
    for seed, (seq, kv_len) in enumerate(LENGTHS):
        rng = np.random.default_rng(seed)
        step: dict[str, np.ndarray | int] = {
            name: rng.standard_normal([1, 2, rows, 8]).astype(F32)
            for name, rows in (("q", seq), ("k", kv_len), ("v", kv_len))
        }
        dims = [1, 1, seq if mask_dims[2] > 1 else 1, kv_len]
        values = rng.uniform(-2, 2, dims).astype(F32)
        if dims[2] > 1:
            values += causal_mask(seq, kv_len)
        values[..., 1] = -np.inf
        step["mask"] = values
        steps.append(step)
    return Case(b.build(), steps, name="fused_sdpa_neg_inf_mask")


def test_neg_inf_masks_run_clean(runner: LockstepRunner) -> None:
    """A causal mask [1, 1, S, L] and a padding mask [1, 1, 1, L], -inf where masked; the
    coverage cell "mask=-inf" says so on both backends."""
    for dims in ([1, 1, 6, 10], [1, 1, 1, 10]):
        result = runner.run(_masked_attention(dims))
        assert result.ok, [d.message for d in result.divergences]
        for backend, cell in result.coverage.to_json()["fused_sdpa"].items():
            assert "mask=-inf" in cell["regimes"], backend


def test_masked_key_let_through_is_caught() -> None:
    """A kernel that clamps the mask (to -8: each masked key keeps a weight ~e^-8 of an
    unmasked one) on one backend: a numeric finding blamed on it, not hidden by the -inf
    rule's zero error terms."""
    case = _masked_attention([1, 1, 6, 10])
    with wgsl_substitution(
        "fused_sdpa_scores_masked", "+ attn_mask[m];", "+ max(attn_mask[m], -8.0);"
    ) as runner:
        webgpu = runner.run(case).divergences
    with glsl_substitution(
        "fused_sdpa_scores_masked", "+ t_attn_mask[m];", "+ max(t_attn_mask[m], -8.0);"
    ) as runner:
        vulkan = runner.run(case).divergences
    for blamed, found in (("webgpu", webgpu), ("vulkan", vulkan)):
        kinds = {d.kind for d in found if d.blame == blamed}
        assert Kind.NUMERIC in kinds, [d.message for d in found]
