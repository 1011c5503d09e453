"""Where a run's host time goes: per-section accumulators, off unless asked for.

`benchmarks/throughput.py` splits the time of every step into sections (the names in
`SECTIONS`): drawing the case (`generation`, Hypothesis's own time between test calls),
building and closing both graphs (`build`), the backends' `LoadedGraph.execute` calls
(`execute`: encode, submit, wait, read back), the whole-graph float64 reference with its
propagated error bounds (`reference`: `ReferenceEvaluator.step`), every other check
(`oracles`, which includes the per-op checks on each backend's own inputs) and making and
handing over the case records (`records`). The code on the step path adds to the running
process's accumulator with `add(section, seconds)`; while timing is off (the default) that
is two `perf_counter` calls, a global lookup and a `None` test per section, so a parity run
pays nothing measurable for it.

Each process times itself: a worker of `parity run --jobs N` hands its figures to the
parent with its tallies (harness.run.workers).
"""

from __future__ import annotations

from collections.abc import Mapping

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


def add(section: str, seconds: float) -> None:
    """Count `seconds` toward `section` (nothing while timing is off)."""
    if _times is not None:
        _times[section] = _times.get(section, 0.0) + seconds


def get(section: str) -> float:
    """The seconds counted toward `section` so far (0 while timing is off)."""
    return _times.get(section, 0.0) if _times is not None else 0.0


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


__all__ = ["SECTIONS", "add", "disable", "enable", "get", "merge", "take"]
