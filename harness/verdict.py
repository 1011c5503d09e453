"""Turning a case's divergences into a test failure that Hypothesis keeps apart by signature."""

from __future__ import annotations

from harness.divergence import Divergence
from harness.lockstep import CaseResult


class DivergenceFound(AssertionError):
    """A case diverged; the message lists every divergence, first step first."""

    def __init__(self, result: CaseResult) -> None:
        lines = [f"case {result.name!r}: {len(result.divergences)} divergence(s)"]
        lines += [_line(d) for d in sorted(result.divergences, key=lambda d: d.step)[:20]]
        super().__init__("\n".join(lines))
        self.result = result


def _line(d: Divergence) -> str:
    where = f"step {d.step}" if d.step >= 0 else "load"
    return f"  [{where}] {d.kind} (blame: {d.blame}) {d.message}"


def assert_parity(result: CaseResult) -> None:
    """Raise DivergenceFound if the case diverged anywhere."""
    if result.divergences:
        raise DivergenceFound(result)
