"""Validation messages reach the context that caused them, whatever other contexts exist."""

from __future__ import annotations

import pytest

from harness.divergence import Kind
from harness.lockstep import LockstepRunner
from tests.diff.test_planted_bugs import find, push_too_much, rms_norm_case
from tests.plants import vulkan_node_patch
from vulkan_ref.instance import get_context, validation_requested

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not validation_requested(), reason="the validation layer is off")
def test_a_second_validating_context_leaves_the_first_its_messages(
    runner: LockstepRunner,
) -> None:
    # The vulkan package keeps one Python debug callback per process; the benchmarks' robust
    # context used to take over every message of the runtimes' context.
    get_context(validation=True, robust=True)
    with vulkan_node_patch("rms_norm", push_too_much):
        result = runner.run(rms_norm_case())
    hits = find(result.divergences, Kind.VALIDATION, "vulkan")
    assert hits and "push" in hits[0].message.lower(), result.divergences
