"""Generated parity tests: random graphs and live-shape sequences on both backends.

Every step of every case is checked with the full oracle stack (harness/lockstep.py):
metadata against the contract, slack canaries, per-op and end-to-end numerics, validation.
"""

from __future__ import annotations

import pytest
from hypothesis import given, target

from harness.case import Case
from harness.lockstep import LockstepRunner
from harness.strategies import binary_cases, dag_cases, rms_norm_cases
from harness.verdict import assert_parity

pytestmark = pytest.mark.gpu


def _check(runner: LockstepRunner, case: Case) -> None:
    result = runner.run(case)
    target(min(result.max_utilization, 1e6), label="max error/budget")
    assert_parity(result)


@given(case=rms_norm_cases())
def test_rms_norm_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=binary_cases("add"))
def test_add_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=binary_cases("mul"))
def test_mul_agrees(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)


@given(case=dag_cases())
def test_dags_agree(runner: LockstepRunner, case: Case) -> None:
    _check(runner, case)
