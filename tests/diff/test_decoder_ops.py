"""Generated parity tests of the decoder's ops on both backends, every step fully checked.

Each family (harness/strategies.py) draws graphs and live-shape sequences biased to where
resize bugs live (S = 1, S at the max, sizes around workgroup multiples, KV-cache sessions
with prefill, decode, chunks, resets and overflows, contexts around the decode route's splits)
and runs them through the lockstep runner: metadata against the contract, slack canaries,
per-op and end-to-end numerics against the float64 reference, cache state, validation.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, target
from hypothesis import strategies as st

from harness.check.lockstep import LockstepRunner
from harness.check.verdict import assert_parity
from harness.gen.case import Case
from harness.strategies import (
    attention_block,
    attention_cases,
    attention_step,
    cases,
    embedding_cases,
    invalid_steps,
    rope_cases,
    rope_hf_cases,
    sdpa_cases,
    silu_mul_cases,
    unary_cases,
    view_cases,
)

pytestmark = pytest.mark.gpu


def _check(runner: LockstepRunner, case: Case) -> None:
    result = runner.run(case)
    target(min(result.max_utilization, 1e6), label="max error/budget")
    assert_parity(result)


@given(case=unary_cases("sigmoid"))
def test_sigmoid_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=unary_cases("silu"))
def test_silu_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=silu_mul_cases())
def test_silu_mul_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=embedding_cases())
def test_embedding_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=rope_cases())
def test_rope_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=rope_hf_cases())
def test_rope_hf_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=view_cases())
def test_view_with_symints_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=sdpa_cases())
def test_sdpa_with_kv_cache_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=attention_cases())
def test_attention_block_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


# (S, input_pos) sessions on a 16-row cache: upstream WebGPU validates a new input_pos against
# the previous step's S (reference §7.2), which fails a decode after any prefill past half the
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


@given(data=st.data())
def test_invalid_steps_are_rejected_alike(runner: LockstepRunner, data: st.DataObject) -> None:
    """A rank change, a dim < 1 or above its max, or a narrowed last dim on any tensor input
    of a decoder-op case, anywhere in its sequence: rejected alike (or accepted alike, as
    the contract says), and the graph stays usable."""
    case = data.draw(cases(["silu_mul", "embedding", "rope", "rope_hf", "view", "sdpa"]))
    bad = data.draw(invalid_steps(case))
    case.steps.insert(data.draw(st.integers(0, len(case.steps))), bad)
    case.steps.append(case.steps[0])
    assert_parity(runner.run(case))
