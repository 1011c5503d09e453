"""Turning a case's divergences into a test failure that keeps the bug while Hypothesis shrinks.

Hypothesis tells failures apart by exception type and location, and only accepts a shrink
that fails the same way. `assert_parity` therefore raises an exception *class* made for the
bug key of the case's primary divergence (`harness.check.divergence.BugKey`: op type, class,
blamed backend, and for numeric failures the band of error / budget): a shrunk case must
show the same class on the same op type, blamed on the same side, as far over budget, not
drift to a barely failing or different failure.

`CaseChecker` adds repeatability: a failing case is re-run several times on each backend;
a case whose results change between runs is reported as non-deterministic (with output
hashes), and the verdict for it stays the same whenever Hypothesis replays it.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import currently_in_test_context, target

from graph_format import Runtime
from harness.check.divergence import BugKey, Divergence
from harness.check.lockstep import CaseResult, LockstepRunner
from harness.check.oracles import STATISTICAL_PREFIX
from harness.check.repeatability import Repeatability, classify, digest_case
from harness.gen.case import Case


class DivergenceFound(AssertionError):
    """A case diverged; the message lists every divergence, first step first."""

    bug: BugKey | None = None  # the key each subclass stands for (`exception_for`)

    def __init__(self, result: CaseResult, repeatability: Repeatability | None = None) -> None:
        lines = [f"case {result.name!r}: {len(result.divergences)} divergence(s)"]
        if repeatability is not None:
            lines.append(f"  repeatability: {repeatability.kind}")
        lines += [_line(d) for d in result.divergences[:20]]
        super().__init__("\n".join(lines))
        self.result = result
        self.repeatability = repeatability


_CLASSES: dict[BugKey, type[DivergenceFound]] = {}


def exception_for(bug: BugKey) -> type[DivergenceFound]:
    """The DivergenceFound subclass that stands for one bug key (one class per key)."""
    cls = _CLASSES.get(bug)
    if cls is None:
        name = f"Divergence[{bug}]"
        cls = type(name, (DivergenceFound,), {"bug": bug, "__module__": __name__})
        _CLASSES[bug] = cls
    return cls


def _line(d: Divergence) -> str:
    where = f"step {d.step}" if d.step >= 0 else "load"
    return f"  [{where}] {d.kind} (blame: {d.blame}) {d.message}"


def assert_parity(result: CaseResult) -> None:
    """Raise the DivergenceFound of the primary divergence's bug key if the case diverged."""
    main = result.primary()
    if main is not None:
        raise exception_for(main.bug_key())(result)


class CaseChecker:
    """Runs cases, classifies failures by repeatability and raises stable verdicts.

    Args:
        runner: the lockstep runner.
        repeats: runs per backend to classify a failing case (0 disables it).
    """

    def __init__(self, runner: LockstepRunner, *, repeats: int = 3) -> None:
        self.runner = runner
        self.repeats = repeats
        # Cases found non-deterministic keep that verdict when Hypothesis replays them, even
        # if a replay happens to pass: otherwise Hypothesis would report a flaky test.
        self._nondeterministic: dict[str, Repeatability] = {}

    @property
    def runtimes(self) -> Sequence[Runtime]:
        """The runner's runtimes."""
        return self.runner.runtimes

    def run(self, case: Case) -> tuple[CaseResult, Repeatability | None]:
        """Run a case; classify its repeatability when it diverged."""
        result = self.runner.run(case)
        key = digest_case(case)
        known = self._nondeterministic.get(key)
        repeat: Repeatability | None = known
        if result.divergences and known is None and self.repeats:
            repeat = classify(case, self.runtimes, self.repeats)
            if not repeat.deterministic:
                self._nondeterministic[key] = repeat
        return result, repeat

    def check(self, case: Case) -> CaseResult:
        """Run a case and raise a stable DivergenceFound subclass if it diverged.

        Inside a Hypothesis test, the largest error / budget ratio of each op type is fed to
        `target()`, steering generation toward the cases closest to failing.
        """
        result, repeat = self.run(case)
        if currently_in_test_context():
            for label, utilization in utilization_by_op_type(case, result).items():
                target(min(utilization, 1e6), label=label)
        if repeat is not None and not repeat.deterministic:
            raise exception_for(BugKey.nondeterministic(repeat.backends))(result, repeat)
        main = result.primary()
        if main is not None:
            raise exception_for(main.bug_key())(result, repeat)
        return result


def utilization_by_op_type(case: Case, result: CaseResult) -> dict[str, float]:
    """Largest finite error / budget ratio per op type over all steps and backends, by
    `target()` label: `<op type> error/budget` for the rigorous budgets, `<op type>
    error/statistical bound` for the statistical tier's (where it differs), so that a
    steered run hunts both edges."""
    op_types = {node.name: node.op for node in case.graph.ops}
    best: dict[str, float] = {}
    for step in result.steps:
        for backend in step.backends.values():
            for key, value in backend.utilization.items():
                tier = "error/budget"
                if key.startswith(STATISTICAL_PREFIX):
                    key, tier = key[len(STATISTICAL_PREFIX) :], "error/statistical bound"
                op_type = op_types.get(key.split(":", 1)[0], "graph")
                if value == value and value != float("inf"):
                    label = f"{op_type} {tier}"
                    best[label] = max(best.get(label, 0.0), value)
    return best
