"""Where a run's host time goes: per-section accumulators, off unless asked for.

`benchmarks/throughput.py` splits the time of every step into sections (the names in
`SECTIONS`): drawing the case (`generation`, Hypothesis's own time between test calls),
building and closing both graphs (`build`), the backends' `LoadedGraph.execute` calls
(`execute`: encode, submit, wait, read back), the float64 references (`reference`), the
rest of the oracles (`oracles`) and the records and bundles (`records`). The code on the
step path adds to the running process's accumulator with `add(section, seconds)`; while
timing is off (the default) that is one global lookup and a `None` test, so the parity run
pays nothing measurable for it.

Each process times itself: a worker of `parity run --jobs N` hands its figures to the
parent with its tallies (harness.run.workers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

SECTIONS = ("generation", "build", "execute", "reference", "oracles", "records")

# section -> seconds; None while timing is off.
_times: dict[str, float] | None = None


def enable() -> None:
    """Start accumulating (from zero)."""
    global _times
    _times = dict.fromkeys(SECTIONS, 0.0)


def disable() -> None:
    """Stop accumulating and forget the figures."""
    global _times
    _times = None


def enabled() -> bool:
    """Whether this process is accumulating."""
    return _times is not None


def add(section: str, seconds: float) -> None:
    """Count `seconds` toward `section` (nothing while timing is off)."""
    if _times is not None:
        _times[section] = _times.get(section, 0.0) + seconds


def take() -> dict[str, float]:
    """The figures so far, and start again from zero (empty while timing is off)."""
    global _times
    if _times is None:
        return {}
    taken, _times = _times, dict.fromkeys(SECTIONS, 0.0)
    return taken


def merge(into: dict[str, float], figures: Mapping[str, float]) -> None:
    """Add one process's figures to a total."""
    for section, seconds in figures.items():
        into[section] = into.get(section, 0.0) + seconds


@contextmanager
def section(name: str) -> Iterator[None]:
    """Time a block into `name` (for blocks that run once per case or less often)."""
    if _times is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - start)


__all__ = ["SECTIONS", "add", "disable", "enable", "enabled", "merge", "section", "take"]
