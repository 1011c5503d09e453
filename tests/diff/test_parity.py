"""Generated parity tests: every registered case family on both backends.

Every family (`harness.families.FAMILIES`: each op's own, the DAGs, attention blocks,
decoders and random graphs) is a test of its own. Every step of every case is checked with
the full oracle stack (harness/check/lockstep.py): metadata against the contract, slack
canaries, per-op and end-to-end numerics, validation. As `parity run --profile pr` runs some
chunks under a lowered workgroup limit, cases of every family also run under the profile's
`fold_limit`, where the backends fold their counts into 2-D grids (and refuse those no grid
holds).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_format import Runtime
from harness.check.backends import open_runtimes
from harness.check.lockstep import LockstepRunner
from harness.check.verdict import CaseChecker
from harness.families import FAMILIES, cases
from harness.gen.case import Case
from harness.run.profiles import PROFILES

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def folding_checker(runtimes: list[Runtime]) -> CaseChecker:
    """A checker whose runtimes honour the Hypothesis profile's lowered workgroup limit."""
    profile = PROFILES[os.environ.get("HYPOTHESIS_PROFILE", "pr")]
    if profile.fold_limit is None:
        pytest.skip(f"the {profile.name} profile runs nothing under a lowered workgroup limit")
    return CaseChecker(LockstepRunner(open_runtimes(max_workgroups_per_dim=profile.fold_limit)))


@pytest.mark.parametrize("family", sorted(FAMILIES))
@given(data=st.data())
def test_family_agrees(checker: CaseChecker, family: str, data: st.DataObject) -> None:
    """Every registered case family (each op's own and the multi-op ones), fully checked."""
    checker.check(data.draw(FAMILIES[family](), label=family))


@given(case=cases())
def test_every_family_agrees_on_folded_grids(folding_checker: CaseChecker, case: Case) -> None:
    folding_checker.check(case)
