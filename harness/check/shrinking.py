"""Shrinking one failure at a time, and measuring how well a failure shrinks.

`parity run` searches a chunk without shrinking (`SEARCH_PHASES`; its test body records each
bug, with `current_choices()`, and lets the search go on), then shrinks each distinct bug on
its own (`replay_and_shrink_settings`: a Hypothesis run that replays the one failing example
it is given and shrinks it, generating nothing), so that the first bug found is the first
reported, and a shrink budget can stop between bugs (harness/run/chunks.py).

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
from hypothesis.control import current_build_context
from hypothesis.database import ExampleDatabase, choices_to_bytes
from hypothesis.errors import InvalidArgument

from graph_format import TensorValue
from harness.check.divergence import BugKey
from harness.check.verdict import DivergenceFound
from harness.gen.case import Case

# A search that finds bugs without shrinking them (each is shrunk later, on its own).
SEARCH_PHASES = tuple(p for p in Phase if p not in (Phase.shrink, Phase.explain))


def current_choices() -> bytes | None:
    """The choice sequence of the example Hypothesis is running (call it inside a test body),
    serialized as Hypothesis's example database keeps it; None outside a test."""
    try:
        data = current_build_context().data
    except InvalidArgument:  # not inside a Hypothesis test
        return None
    return choices_to_bytes(data.choices)


class _OneExample(ExampleDatabase):
    """A database that offers one example, as a *secondary* entry: Hypothesis replays it
    and, finding it still failing, shrinks it (a primary entry that replays exactly would be
    taken as already shrunk). What Hypothesis saves goes to `keep`, if given (a run's own
    example database, whose next search then replays the shrunk example first)."""

    def __init__(self, choices: bytes, keep: ExampleDatabase | None = None) -> None:
        super().__init__()
        self.choices: bytes | None = choices
        self.keep = keep

    def save(self, key: bytes, value: bytes) -> None:
        if self.keep is not None:
            self.keep.save(key, value)

    def fetch(self, key: bytes) -> Any:
        if key.endswith(b".secondary") and self.choices is not None:
            yield self.choices

    def delete(self, key: bytes, value: bytes) -> None:
        if value == self.choices:
            self.choices = None

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if self.keep is not None:  # a superseded example, kept as a secondary one
            self.keep.move(src, dest, value)


def replay_and_shrink_settings(
    base: settings, choices: bytes, keep: ExampleDatabase | None = None
) -> settings:
    """`base` changed to replay the example of `choices` and shrink it, generating nothing;
    the examples it saves go to `keep`, if given.

    For a shrink that depends on nothing but a seed, apply these settings on top of
    `hypothesis.seed` (`seed` under them: `seed` on top would turn the database off, as
    derandomize would).
    """
    return settings(
        base,
        phases=[Phase.reuse, Phase.shrink],
        database=_OneExample(choices, keep),
        derandomize=False,
        report_multiple_bugs=False,
    )


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
        examples=examples,
        find_seconds=found - start,
        shrink_seconds=end - found if error else 0.0,
        error=error,
    )
