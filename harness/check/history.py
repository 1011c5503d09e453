"""What a process ran before a case: recorded as it runs, kept in a bundle, run again.

The runtimes pool their memory (per-graph arenas in recycled blocks, cached bind groups and
descriptor sets) and the process caches pipelines, so a bug can show only after certain
other graphs ran in the same process: a case that fails in a worker may pass on its own in a
fresh one. To replay such a finding, a worker keeps its history: a `History` watches its
runtimes (`harness.check.steps.keep_journal`) and notes every `StepLoop` they run (the case,
on which runtimes, with which read-backs and canaries, how many steps), in order, since the
runtimes were opened. The cases are the ones the search already holds (no copy); the
history keeps the newest `max_loops` loops within `max_bytes` of array data, and counts the
ones it let go.

On disk (a bundle's `history/`, or a cold re-run's scratch folder), `save_loops` writes
`history.json` (format `parity-history/1`: each loop's case digest, runtimes, read-backs,
canaries, contract, limit and step count, plus how many loops the worker had run and how
many it dropped) and each distinct case once under `cases/<digest>/` (`Case.save`).
`run_loops` runs loops again on other runtimes, in order, ignoring their results: what
matters is the state they leave behind.
"""

from __future__ import annotations

import json
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graph_format import GraphFormatError, Runtime
from harness.check.repeatability import digest_case
from harness.check.steps import StepLoop, keep_journal
from harness.gen.case import Case

HISTORY_FORMAT = "parity-history/1"
HISTORY_FILE = "history.json"


class HistoryError(ValueError):
    """A history folder that cannot be read; the message names the file and what is wrong."""


@dataclass(eq=False)
class Loop:
    """One case as a set of runtimes ran it (a `StepLoop`).

    Attributes:
        case: the case.
        runtimes: the names of the runtimes it ran on, in order.
        reads: the tensors read back after each step.
        canaries: slack canaries were filled before each step.
        contract: the contract model predicted each step.
        limit: the workgroups-per-dimension limit the model honoured (None: the runtimes').
        steps: the steps it executed (a loop may stop early).
    """

    case: Case
    runtimes: tuple[str, ...]
    reads: tuple[str, ...] = ()
    canaries: bool = True
    contract: bool = True
    limit: int | None = None
    steps: int = 0

    def to_json(self, digest: str) -> dict[str, Any]:
        """Plain data for history.json, the case named by its digest."""
        return {
            "case": digest,
            "runtimes": list(self.runtimes),
            "reads": list(self.reads),
            "canaries": self.canaries,
            "contract": self.contract,
            "limit": self.limit,
            "steps": self.steps,
        }


def _nbytes(case: Case) -> int:
    """Bytes of array data a case holds (its constants and step inputs)."""
    constants = sum(int(np.asarray(v).nbytes) for v in case.graph.constants.values())
    inputs = sum(int(v.nbytes) for s in case.steps for v in s.values() if isinstance(v, np.ndarray))
    return constants + inputs + 1024  # and its graph, roughly


class History:
    """The loops some runtimes ran, oldest first, bounded (see the module docstring).

    Args:
        max_loops: loops kept at most.
        max_bytes: array data of the cases kept at most (each case counted once).
    """

    def __init__(self, max_loops: int = 20_000, max_bytes: int = 64 << 20) -> None:
        self.max_loops = max_loops
        self.max_bytes = max_bytes
        self.loops: deque[Loop] = deque()
        self.noted = 0  # loops noted since the runtimes were opened
        self.dropped = 0  # the oldest of them, let go to stay within the bounds
        self._bytes = 0
        self._held: dict[int, list[Any]] = {}  # id(case) -> [loops holding it, bytes]
        # Each running StepLoop's entry (weak: gone with the loop).
        self._open: weakref.WeakKeyDictionary[StepLoop, Loop] = weakref.WeakKeyDictionary()

    def watch(self, runtimes: Sequence[Runtime]) -> History:
        """Note every loop `runtimes` run from now on; returns self."""
        keep_journal(runtimes, self)
        return self

    def entered(self, loop: StepLoop) -> None:
        """Note a loop as it starts (`harness.check.steps.Journal`)."""
        entry = Loop(
            loop.case,
            tuple(rt.name for rt in loop.runtimes),
            tuple(loop.reads),
            loop.canaries,
            loop.contract,
            loop.limit,
        )
        self._open[loop] = entry
        self.loops.append(entry)
        self.noted += 1
        held = self._held.setdefault(id(loop.case), [0, _nbytes(loop.case)])
        if held[0] == 0:
            self._bytes += held[1]
        held[0] += 1
        while self.loops and (len(self.loops) > self.max_loops or self._bytes > self.max_bytes):
            self._drop()

    def stepped(self, loop: StepLoop, index: int) -> None:
        """Count a step the loop ran (`harness.check.steps.Journal`)."""
        entry = self._open.get(loop)
        if entry is not None:
            entry.steps = max(entry.steps, index + 1)

    def _drop(self) -> None:
        old = self.loops.popleft()
        self.dropped += 1
        held = self._held[id(old.case)]
        held[0] -= 1
        if held[0] == 0:
            self._bytes -= held[1]
            del self._held[id(old.case)]

    def before(self, case: Case) -> list[Loop]:
        """The loops that ran before `case` first did (all of them if it never did)."""
        out: list[Loop] = []
        for entry in self.loops:
            if entry.case is case:
                break
            out.append(entry)
        return out


# ---------------------------------------------------------------------------- on disk


def save_loops(
    folder: Path, loops: Sequence[Loop], *, noted: int | None = None, dropped: int = 0
) -> Path:
    """Write `loops` into `folder` (history.json and cases/<digest>/); returns the folder.

    Args:
        noted: how many loops the worker had run before the case (default: len(loops)).
        dropped: how many of those the worker no longer held.
    """
    folder.mkdir(parents=True, exist_ok=True)
    digests: dict[int, str] = {}
    for entry in loops:
        if id(entry.case) not in digests:
            digest = digest_case(entry.case)[:16]
            digests[id(entry.case)] = digest
            target = folder / "cases" / digest
            if not (target / "case.json").exists():
                entry.case.save(target)
    doc = {
        "format": HISTORY_FORMAT,
        "noted": len(loops) if noted is None else noted,
        "dropped": dropped,
        "loops": [entry.to_json(digests[id(entry.case)]) for entry in loops],
    }
    (folder / HISTORY_FILE).write_text(json.dumps(doc, indent=1) + "\n")
    return folder


def load_loops(folder: Path) -> list[Loop]:
    """The loops `save_loops` wrote into `folder`, in order.

    Raises:
        HistoryError: history.json or a case it names is missing or malformed.
    """
    path = folder / HISTORY_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise HistoryError(f"{path}: not a readable history ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != HISTORY_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else doc
        raise HistoryError(f"{path}: format must be {HISTORY_FORMAT!r}, got {got!r}")
    cases: dict[str, Case] = {}
    out: list[Loop] = []
    for i, item in enumerate(doc.get("loops", [])):
        try:
            digest = str(item["case"])
            if digest not in cases:
                cases[digest] = Case.load(folder / "cases" / digest)
            limit = item.get("limit")
            out.append(
                Loop(
                    cases[digest],
                    tuple(str(n) for n in item["runtimes"]),
                    tuple(str(n) for n in item.get("reads", [])),
                    bool(item.get("canaries", True)),
                    bool(item.get("contract", True)),
                    None if limit is None else int(limit),
                    int(item.get("steps", 0)),
                )
            )
        except GraphFormatError as err:
            raise HistoryError(str(err)) from None
        except (KeyError, TypeError, ValueError) as err:
            raise HistoryError(f"{path}: loops[{i}]: not a loop ({err!r})") from None
    return out


def run_loops(runtimes: Mapping[str, Runtime], loops: Sequence[Loop]) -> None:
    """Run `loops` again, in order, on the runtimes of the same names (results ignored).

    Raises:
        HistoryError: a loop names a runtime that is not in `runtimes`.
    """
    for i, entry in enumerate(loops):
        missing = [n for n in entry.runtimes if n not in runtimes]
        if missing:
            raise HistoryError(f"history loop {i}: no runtime called {missing[0]!r} to run it on")
        chosen = [runtimes[n] for n in entry.runtimes]
        with StepLoop(
            chosen,
            entry.case,
            reads=entry.reads,
            canaries=entry.canaries,
            contract=entry.contract,
            limit=entry.limit,
        ) as loop:
            if entry.steps:
                for _ in loop.steps(until=entry.steps - 1):
                    pass


__all__ = [
    "HISTORY_FILE",
    "HISTORY_FORMAT",
    "History",
    "HistoryError",
    "Loop",
    "load_loops",
    "run_loops",
    "save_loops",
]
