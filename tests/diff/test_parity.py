"""Generated parity tests: random graphs and live-shape sequences on both backends.

Every step of every case is checked with the full oracle stack (harness/lockstep.py):
metadata against the contract, slack canaries, per-op and end-to-end numerics, validation.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from harness.case import Case
from harness.strategies import binary_cases, dag_cases, random_graphs, rms_norm_cases
from harness.verdict import CaseChecker

pytestmark = pytest.mark.gpu


def _check(checker: CaseChecker, case: Case) -> None:
    checker.check(case)


@given(case=rms_norm_cases())
def test_rms_norm_agrees(checker: CaseChecker, case: Case) -> None:
    _check(checker, case)


@given(case=binary_cases("add"))
def test_add_agrees(checker: CaseChecker, case: Case) -> None:
    _check(checker, case)


@given(case=binary_cases("mul"))
def test_mul_agrees(checker: CaseChecker, case: Case) -> None:
    _check(checker, case)


@given(case=dag_cases())
def test_dags_agree(checker: CaseChecker, case: Case) -> None:
    _check(checker, case)


@given(case=random_graphs())
def test_random_graphs_agree(checker: CaseChecker, case: Case) -> None:
    _check(checker, case)
