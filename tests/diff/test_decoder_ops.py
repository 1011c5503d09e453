"""KV-cache sessions of the decoder's attention block that upstream gets wrong, on both
backends with every oracle (the generated families of the decoder's ops run in
tests/diff/test_parity.py, one test per registered family)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.check.lockstep import LockstepRunner
from harness.check.verdict import assert_parity
from harness.families.attention import attention_block, attention_step
from harness.gen.case import Case

pytestmark = pytest.mark.gpu


# (S, input_pos) sessions on a 16-row cache: upstream WebGPU validates a new input_pos against
# the previous step's S (docs/design.md §8.2), which fails a decode after any prefill past half the
# cache; also a context that reaches the last row, a reset and a refused step past the end.
SESSIONS = {
    "prefill_past_half_then_decode": [(10, 0), (1, 10), (1, 11), (2, 12), (1, 14), (1, 15)],
    "full_prefill_then_reset": [(12, 0), (4, 12), (1, 0), (12, 1)],
    "overflow_then_reset": [(9, 0), (1, 9), (8, 10), (3, 0), (1, 3)],
}


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_attention_sessions(runner: LockstepRunner, name: str) -> None:
    rng = np.random.default_rng(11)
    graph = attention_block(rng, q_heads=4, kv_heads=2, dim=8, cache_rows=16, max_seq=12)
    steps = [attention_step(rng, graph, s, p) for s, p in SESSIONS[name]]
    assert_parity(runner.run(Case(graph, steps, name=name)))
