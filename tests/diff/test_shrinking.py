"""Planted bugs are found by generation and shrunk to minimal cases that keep the bug.

For each failure class (tests/planted_catalog.py), a search with the bug planted must end
with the same class, op type and blamed side, on a case of one or two steps with tiny dims.
"""

from __future__ import annotations

import pytest

from harness.check.lockstep import LockstepRunner
from harness.check.shrinking import find_minimal
from harness.check.verdict import CaseChecker
from tests.planted_catalog import PLANTS, Plant, planted

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("plant", PLANTS, ids=lambda p: p.name.replace(" ", "-"))
def test_planted_bug_shrinks_to_a_minimal_case(runner: LockstepRunner, plant: Plant) -> None:
    with planted(plant, runner) as searching:
        checker = CaseChecker(searching, repeats=0)
        outcome = find_minimal(plant.cases(), checker.check, max_examples=150)
    assert outcome.bug is not None, f"{plant.name}: never found"
    bug = outcome.bug
    assert (bug.kind, bug.op_type, bug.blame) == (plant.kind, plant.op_type, plant.blame), (
        outcome.error
    )
    minimal = outcome.minimal
    assert minimal is not None and outcome.first is not None
    assert minimal.steps <= 2, f"{plant.name}: {minimal}"
    assert minimal.input_max_numel <= 16, f"{plant.name}: {minimal}"
    assert minimal.input_max_numel <= outcome.first.input_max_numel
