"""Generated parity tests: random graphs and live-shape sequences on both backends.

Every step of every case is checked with the full oracle stack (harness/check/lockstep.py):
metadata against the contract, slack canaries, per-op and end-to-end numerics, validation.
As `parity run --profile pr` runs some chunks under a lowered workgroup limit, cases of
every family also run under the profile's `fold_limit`, where the backends fold their
counts into 2-D grids (and refuse those no grid holds).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given

from graph_format import Runtime
from harness.check.backends import open_runtimes
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import CaseChecker
from harness.gen.case import Case
from harness.run.profiles import PROFILES
from harness.strategies import binary_cases, cases, dag_cases, random_graphs, rms_norm_cases

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def folding_checker(runtimes: list[Runtime]) -> CaseChecker:
    """A checker whose runtimes honour the Hypothesis profile's lowered workgroup limit."""
    profile = PROFILES[os.environ.get("HYPOTHESIS_PROFILE", "pr")]
    if profile.fold_limit is None:
        pytest.skip(f"the {profile.name} profile runs nothing under a lowered workgroup limit")
    return CaseChecker(LockstepRunner(open_runtimes(max_workgroups_per_dim=profile.fold_limit)))


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


@given(case=cases())
def test_every_family_agrees_on_folded_grids(folding_checker: CaseChecker, case: Case) -> None:
    _check(folding_checker, case)
