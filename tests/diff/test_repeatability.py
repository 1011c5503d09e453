"""Repeatability: a flaky backend is reported as non-deterministic, with hashes, and keeps
that verdict when Hypothesis replays the case (no Flaky error, no shrinking astray)."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from harness.check.divergence import BugKey
from harness.check.lockstep import LockstepRunner
from harness.check.repeatability import classify
from harness.check.shrinking import find_minimal
from harness.check.verdict import CaseChecker
from harness.ops.rms_norm import rms_norm_cases
from tests.diff.test_planted_bugs import rms_norm_case
from webgpu_backend.graph import WebGPUGraph

pytestmark = pytest.mark.gpu


@contextmanager
def flaky_webgpu() -> Iterator[None]:
    """Every other graph loaded on WebGPU gets a bumped output: results differ between runs.

    Alternating (rather than random) keeps the test itself deterministic.
    """
    original = WebGPUGraph.execute
    ordinals: weakref.WeakKeyDictionary[WebGPUGraph, int] = weakref.WeakKeyDictionary()
    loads = itertools.count()

    def execute(self: WebGPUGraph, inputs: Any, **kwargs: Any) -> Any:
        result = original(self, inputs, **kwargs)
        if self not in ordinals:
            ordinals[self] = next(loads)
        if ordinals[self] % 2:
            for array in result.outputs.values():
                array.flat[0] += 1.0
        return result

    WebGPUGraph.execute = execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        WebGPUGraph.execute = original  # type: ignore[method-assign]


def test_deterministic_backends_are_classified_so(runner: LockstepRunner) -> None:
    verdict = classify(rms_norm_case(), runner.runtimes, runs=3)
    assert verdict.kind == "deterministic"
    assert all(len(set(h)) == 1 for h in verdict.hashes.values())


def test_flaky_backend_is_named(runner: LockstepRunner) -> None:
    with flaky_webgpu():
        verdict = classify(rms_norm_case(), runner.runtimes, runs=3)
    assert verdict.kind == "nondeterministic:webgpu", verdict
    assert len(set(verdict.hashes["webgpu"])) > 1 and len(set(verdict.hashes["vulkan"])) == 1


def test_flaky_failure_keeps_its_verdict_through_shrinking(runner: LockstepRunner) -> None:
    checker = CaseChecker(runner, repeats=3)
    with flaky_webgpu():
        outcome = find_minimal(rms_norm_cases(), checker.check, max_examples=40)
    assert outcome.bug == BugKey.nondeterministic(["webgpu"]), outcome.error
    assert outcome.error is not None and outcome.error.repeatability is not None
    assert outcome.error.repeatability.kind == "nondeterministic:webgpu"
