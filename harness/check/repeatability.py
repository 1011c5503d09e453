"""Re-running a case to tell deterministic divergences from flaky GPU results.

Each backend runs the case `runs` times, each time on a freshly loaded graph, and every
step's outputs, intermediates and errors are hashed bit for bit. A backend whose hashes
differ between runs is non-deterministic for this case; the case is then classified as
deterministic, non-deterministic on one backend, or on both, with the hashes as evidence.

These re-runs are warm: they reuse the runtimes (and their pools and caches) of the process
that found the case. A finding is also re-run cold, in a fresh process
(`harness.check.cold`); when only the warm runs show its bug, it is `history-dependent`:
it needs what ran before it in the process (`with_cold`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_format import Runtime
from harness.check.steps import StepLoop, intermediates, states
from harness.gen.case import Case

# The class of a finding whose bug shows only after what ran before it in the process.
HISTORY_DEPENDENT = "history-dependent"


@dataclass
class Repeatability:
    """The repeatability class of one case and its evidence."""

    # "deterministic" | "history-dependent" | "nondeterministic:<backend>" |
    # "nondeterministic:both" (written `class`)
    kind: str = field(metadata={"json": "class"})
    hashes: dict[str, list[str]] = field(default_factory=dict)  # backend -> one hash per run
    # The cold re-run's evidence (`harness.check.cold.ColdVerdict.to_json()`), when it ran.
    cold: dict[str, Any] | None = None

    @property
    def deterministic(self) -> bool:
        """Every backend produced identical bits on every (warm) run: deterministic, or
        history-dependent."""
        return not self.kind.startswith("nondeterministic")

    def with_cold(self, kind: str, evidence: dict[str, Any]) -> Repeatability:
        """This class refined by a cold re-run: `history-dependent` when its `kind` says so
        (only the warm runs failed), with the cold run's `evidence`."""
        refined = HISTORY_DEPENDENT if kind == HISTORY_DEPENDENT else self.kind
        return Repeatability(refined, self.hashes, evidence)

    @property
    def backends(self) -> list[str]:
        """The backends that were not repeatable."""
        return [name for name, runs in self.hashes.items() if len(set(runs)) > 1]

    def to_json(self) -> dict[str, object]:
        """Plain data for records."""
        out: dict[str, object] = {"class": self.kind, "hashes": self.hashes}
        if self.cold is not None:
            out["cold"] = self.cold
        return out


def digest_case(case: Case) -> str:
    """A content hash of a case: its graph, constants and every step's inputs."""
    h = hashlib.sha256()
    h.update(repr(case.graph.to_json()).encode())
    for name in sorted(case.graph.constants):
        h.update(name.encode())
        h.update(np.ascontiguousarray(case.graph.constants[name]).tobytes())
    for step in case.steps:
        for name in sorted(step):
            value = step[name]
            h.update(name.encode())
            h.update(
                np.ascontiguousarray(value).tobytes()
                if isinstance(value, np.ndarray)
                else str(int(value)).encode()
            )
    return h.hexdigest()


def run_hash(case: Case, runtime: Runtime) -> str:
    """Hash of everything one run of the case produces on one backend: every step's outputs,
    intermediates and state, or the error it raised (a load error ends the run)."""
    graph = case.graph
    h = hashlib.sha256()
    # No canaries: the hash is of what the kernels compute, on the allocations as they are.
    reads = [*intermediates(graph), *states(graph)]
    with StepLoop([runtime], case, reads=reads, canaries=False, contract=False) as loop:
        error = loop.load_errors[runtime.name]
        if error is not None:  # a refusal or a kernel that does not build is an outcome too
            h.update(f"load: {type(error).__name__}: {error}".encode())
            return h.hexdigest()[:16]
        for step in loop.steps():
            failure = step.failures.get(runtime.name)
            if failure is not None:  # an error is an outcome to compare like any other
                h.update(f"{type(failure).__name__}: {failure}".encode())
                continue
            result = step.results[runtime.name]
            produced = {**result.outputs, **result.tensors}
            for name in sorted(produced):
                h.update(name.encode())
                h.update(np.ascontiguousarray(produced[name]).tobytes())
    return h.hexdigest()[:16]


def classify(case: Case, runtimes: Sequence[Runtime], runs: int = 3) -> Repeatability:
    """Run the case `runs` times on each backend and classify its repeatability."""
    hashes = {rt.name: [run_hash(case, rt) for _ in range(runs)] for rt in runtimes}
    flaky = [name for name, values in hashes.items() if len(set(values)) > 1]
    if not flaky:
        kind = "deterministic"
    elif len(flaky) == len(hashes) and len(hashes) > 1:
        kind = "nondeterministic:both"
    else:
        kind = "nondeterministic:" + ",".join(flaky)
    return Repeatability(kind, hashes)
