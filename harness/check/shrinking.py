"""Measuring how well a failure shrinks: time to find it, time to shrink it, and its size.

`find_minimal` runs a Hypothesis search over a case strategy with a given check (usually
`CaseChecker.check`, whose exceptions are keyed by `harness.check.divergence.BugKey`, so a shrink
must keep the bug) and reports the first failing case Hypothesis met, the minimal one it ended
with, their sizes, and how long each phase took. Used by the shrink tests and by
benchmarks/shrink_quality.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from graph_format import TensorValue
from harness.check.divergence import BugKey
from harness.check.verdict import DivergenceFound
from harness.gen.case import Case


@dataclass(frozen=True)
class CaseSize:
    """How big a case is: steps, ops, and elements of its inputs (at max and summed live)."""

    steps: int
    ops: int
    input_max_numel: int
    live_numel: int
    input_dims: dict[str, list[int]]

    @classmethod
    def of(cls, case: Case) -> CaseSize:
        """Measure a case."""
        graph = case.graph
        tensors = [n for n in graph.inputs if isinstance(graph.values[n], TensorValue)]
        live = sum(
            int(np.prod(value.shape))
            for step in case.steps
            for n in tensors
            if isinstance(value := step.get(n), np.ndarray)
        )
        return cls(
            steps=len(case.steps),
            ops=len(graph.ops),
            input_max_numel=sum(math.prod(graph.tensor(n).dims) for n in tensors),
            live_numel=live,
            input_dims={n: list(graph.tensor(n).dims) for n in tensors},
        )


@dataclass
class ShrinkOutcome:
    """The result of one search-and-shrink."""

    bug: BugKey | None  # the bug key the minimal case kept
    first: CaseSize | None
    minimal: CaseSize | None
    minimal_case: Case | None
    examples: int
    find_seconds: float
    shrink_seconds: float
    error: DivergenceFound | None


def find_minimal(
    cases: st.SearchStrategy[Case],
    check: Callable[[Case], Any],
    *,
    max_examples: int = 200,
    search_seed: int = 0,
) -> ShrinkOutcome:
    """Search `cases` for one that `check` fails, shrink it, and report both ends.

    Only the first distinct failure is pursued (report_multiple_bugs off), without an
    example database, so the measurement depends on nothing but the seed.
    """
    examples = 0
    first: list[Case] = []
    last: list[Case] = []
    found_at: list[float] = []

    def run_case(case: Case) -> None:
        nonlocal examples
        examples += 1
        try:
            check(case)
        except DivergenceFound:
            if not first:
                first.append(case)
                found_at.append(time.perf_counter())
            last[:] = [case]
            raise

    test = seed(search_seed)(
        settings(
            max_examples=max_examples,
            database=None,
            deadline=None,
            derandomize=False,
            report_multiple_bugs=False,
            phases=[Phase.generate, Phase.target, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )(given(case=cases)(run_case))
    )
    start = time.perf_counter()
    error: DivergenceFound | None = None
    try:
        test()
    except DivergenceFound as err:
        error = err
    end = time.perf_counter()
    found = found_at[0] if found_at else end
    return ShrinkOutcome(
        bug=type(error).bug if error else None,
        first=CaseSize.of(first[0]) if first else None,
        minimal=CaseSize.of(last[0]) if last else None,
        minimal_case=last[0] if last else None,
        examples=examples,
        find_seconds=found - start,
        shrink_seconds=end - found if error else 0.0,
        error=error,
    )
