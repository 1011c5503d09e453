"""The exact tier: kernel pairs declared to round alike (`KernelSpec.exact`) must give
bit-identical outputs on bit-identical inputs, so a single-backend bug far under its error
budget is still a finding (`bit_mismatch`, docs/oracles.md "Exact equality").

Each plant changes one backend's rms_norm by a rounding's worth at width 8192, where the
budget is loose (issue 20: real error ~4e-4 of the budget there): the numeric tier alone
passes it; the exact tier names the op and the backend farther from the float64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.check.divergence import BugKey
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model import q4
from tests.cli_support import (
    GEMV_FOURTH_LOAD,
    GEMV_ONE_CODE_OFF,
    RMS_EPS_DROPPED,
    RMS_MEAN,
    RMS_MEAN_OVER_N_PLUS_1,
    SPLIT_PROB,
    SPLIT_ROW_2000_DROPPED,
)
from tests.plants import glsl_substitution, wgsl_substitution

pytestmark = pytest.mark.gpu

WIDTH = 8192


def wide_rms_norm_case() -> Case:
    """x[3, 8192] -> rms_norm (the vec4 kernel), two steps."""
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.input("x", "float32", [3, WIDTH])
    w = b.constant("w", rng.standard_normal(WIDTH).astype(np.float32))
    b.output(b.op("rms_norm", name="norm", x=x, weight=w, eps=b.float(1e-6)))
    steps = [{"x": rng.standard_normal((n, WIDTH)).astype(np.float32)} for n in (3, 2)]
    return Case(b.build(), steps, name="wide_rms_norm")


def test_the_project_kernels_round_alike(runner: LockstepRunner) -> None:
    result = runner.run(wide_rms_norm_case())
    assert result.ok, [d.message for d in result.divergences]
    assert result.bits == {"rms_norm|rms_norm_vec4|webgpu~vulkan": (0, 0)}


def test_an_accumulation_order_change_is_a_bit_mismatch() -> None:
    # Each lane sums its texel's squares in reverse order: as accurate, rounded otherwise.
    with wgsl_substitution(
        "rms_norm_vec4",
        "acc += dot(v, v);",
        "acc += v.w * v.w + v.z * v.z + v.y * v.y + v.x * v.x;",
    ) as runner:
        result = runner.run(wide_rms_norm_case())
    kinds = {(str(d.kind), d.op) for d in result.divergences}
    assert kinds == {("bit_mismatch", "norm")}, [d.message for d in result.divergences]
    assert result.max_utilization < 0.1  # far under budget: the numeric tier cannot see it
    hit = result.divergences[0]
    assert hit.blame in ("webgpu", "vulkan")  # by the reference: either may round nearer
    assert hit.details.pairs[0].ulps > 0 and hit.details.pairs[0].allowed_ulps == 0


def test_a_scale_off_by_a_few_ulps_is_blamed_on_its_backend() -> None:
    # Vulkan's rstd is 2^-20 too large: ~8 ULPs on every element, all away from the reference.
    with glsl_substitution(
        "rms_norm_vec4",
        "+ pc.eps);",
        "+ pc.eps) * (1.0 + 1.0 / 1048576.0);",
    ) as runner:
        result = runner.run(wide_rms_norm_case())
    assert result.max_utilization < 0.1
    assert {d.bug_key() for d in result.divergences} == {
        BugKey("rms_norm", "bit_mismatch", "vulkan")
    }, [d.message for d in result.divergences]
    assert [d.step for d in result.divergences] == [0, 1]


# --- small bugs at the sizes: K = 2048 and 8192, context 4096, width 8192 ----------


def gemv_case(k: int) -> Case:
    """linear_q4gsw, one activation row (the GEMV route; its main loop runs at K > 1536),
    N = 64, groups of 128."""
    rng = np.random.default_rng(9)
    n, group = 64, 128
    packed, scales = q4.quantize(rng.standard_normal((n, k)), group)
    b = GraphBuilder()
    x = b.input("x", "float32", [1, k])
    out = b.op(
        "linear_q4gsw",
        name="linear",
        out_dims=[1, n],
        x=x,
        weight=b.constant("weight", packed),
        scales=b.constant("scales", scales),
        group_size=b.int(group, "group_size"),
    )
    b.output(out)
    return Case(b.build(), [{"x": rng.standard_normal((1, k)).astype(np.float32)}], name="gemv")


def decode_case(context: int) -> Case:
    """sdpa_with_kv_cache decoding one token at `context` (the split-K route), 8 query heads
    over 2 KV heads of 64, the caches holding random rows from the start (initial data)."""
    rng = np.random.default_rng(13)
    heads, kv_heads, dim = 8, 2, 64
    b = GraphBuilder()
    q = b.input("q", "float32", [1, 1, heads, dim])
    k = b.input("k", "float32", [1, 1, kv_heads, dim])
    v = b.input("v", "float32", [1, 1, kv_heads, dim])
    pos = b.symint_input("input_pos")
    shape = (1, context, kv_heads, dim)
    caches = {
        n: b.state(n, "float32", shape, rng.standard_normal(shape).astype(np.float32))
        for n in ("k_cache", "v_cache")
    }
    b.output(b.op("sdpa_with_kv_cache", name="attn", q=q, k=k, v=v, input_pos=pos, **caches))
    # A query of small scores: every key weighs about 1 / context, as over a long context
    # that attends broadly (one key's weight is then the smallest a dropped key can have).
    step: dict[str, np.ndarray | int] = {
        name: (scale * rng.standard_normal((1, 1, h, dim))).astype(np.float32)
        for name, h, scale in (("q", heads, 0.05), ("k", kv_heads, 1.0), ("v", kv_heads, 1.0))
    }
    step["input_pos"] = context - 1
    return Case(b.build(), [step], name="decode")


SMALL_BUGS = {
    "gemv K=2048": ("q4gsw_gemv", GEMV_FOURTH_LOAD, GEMV_ONE_CODE_OFF, lambda: gemv_case(2048)),
    "gemv K=8192": ("q4gsw_gemv", GEMV_FOURTH_LOAD, GEMV_ONE_CODE_OFF, lambda: gemv_case(8192)),
    "decode context 4096": (
        "sdpa_fd_split",
        SPLIT_PROB,
        SPLIT_ROW_2000_DROPPED,
        lambda: decode_case(4096),
    ),
    "rms_norm width 8192, mean over n + 1": (
        "rms_norm_vec4",
        RMS_MEAN,
        RMS_MEAN_OVER_N_PLUS_1,
        wide_rms_norm_case,
    ),
    "rms_norm width 8192, eps dropped": (
        "rms_norm_vec4",
        RMS_MEAN,
        RMS_EPS_DROPPED,
        wide_rms_norm_case,
    ),
}


@pytest.mark.parametrize("name", list(SMALL_BUGS))
def test_a_small_bug_at_a_long_size_is_a_bit_mismatch_on_its_backend(name: str) -> None:
    """Issue 20's bug kinds at its sizes, planted in one WGSL kernel: one q4 code off by one
    in the GEMV's main loop (K = 2048 and 8192), one cache row left out of the decode's
    softmax (context 4096, keys of about equal weight), rms_norm's mean over n + 1 and its eps
    dropped (width 8192). On these cases each stays within the rigorous budget (0.001 to 0.97
    of it: unnoticed before the new tiers) and is a `bit_mismatch` blamed on webgpu (and a
    `numeric_suspect` where the statistical bound sees it); the clean kernels pass."""
    stem, old, new, make = SMALL_BUGS[name]
    case = make()
    with wgsl_substitution(stem, old, old) as clean:  # the same runtimes, unplanted
        assert clean.run(case).ok
    with wgsl_substitution(stem, old, new) as runner:
        result = runner.run(case)
    keys = {d.bug_key() for d in result.divergences}
    assert BugKey(case.graph.ops[0].op, "bit_mismatch", "webgpu") in keys, keys
    assert {k.blame for k in keys} == {"webgpu"}, keys
    assert {k.kind for k in keys} <= {"bit_mismatch", "numeric_suspect"}, keys
    assert result.max_utilization < 1.0  # the rigorous budget alone lets it pass
