"""Generated parity tests of the decoder's ops on both backends, every step fully checked.

Each family (harness/strategies.py) draws graphs and live-shape sequences biased to where
resize bugs live (S = 1, S at the max, sizes around workgroup multiples, KV-cache sessions
with prefill, decode, chunks, resets and overflows, contexts around the decode route's splits)
and runs them through the lockstep runner: metadata against the contract, slack canaries,
per-op and end-to-end numerics against the float64 reference, cache state, validation.
"""

from __future__ import annotations

import pytest
from hypothesis import given, target

from harness.case import Case
from harness.lockstep import LockstepRunner
from harness.strategies import (
    attention_cases,
    embedding_cases,
    rope_cases,
    rope_hf_cases,
    sdpa_cases,
    silu_mul_cases,
    unary_cases,
    view_cases,
)
from harness.verdict import assert_parity

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
