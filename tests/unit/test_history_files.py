"""A worker's history on disk and its shrinking, without a device (harness/check/history.py,
harness/check/cold.py's delta debugging)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.check.cold import ddmin
from harness.check.history import HistoryError, Loop, load_loops, save_loops
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.run.records import read_bundle_doc

REGRESSION = Path(__file__).resolve().parents[1] / "regressions" / "rms-norm-drops-weight"


def _case(n: int) -> Case:
    b = GraphBuilder()
    x = b.input("x", "float32", [4, n])
    b.output(b.op("add", a=x, b=x))
    return Case(b.build(), [{"x": np.full((4, n), float(n), np.float32)}], name=f"c{n}")


def test_loops_round_trip_with_each_case_once(tmp_path: Path) -> None:
    one, two = _case(4), _case(8)
    loops = [
        Loop(one, ("webgpu", "vulkan"), ("a",), True, True, 64, 1),
        Loop(one, ("vulkan",), (), False, False, None, 1),
        Loop(two, ("webgpu",), (), False, False, None, 0),
    ]
    folder = save_loops(tmp_path / "history", loops, noted=10, dropped=2)
    doc = json.loads((folder / "history.json").read_text())
    assert doc["format"] == "parity-history/1" and (doc["noted"], doc["dropped"]) == (10, 2)
    assert len(list((folder / "cases").iterdir())) == 2
    back = load_loops(folder)
    assert [(b.runtimes, b.reads, b.canaries, b.contract, b.limit, b.steps) for b in back] == [
        (a.runtimes, a.reads, a.canaries, a.contract, a.limit, a.steps) for a in loops
    ]
    assert back[0].case is back[1].case  # read once
    assert np.array_equal(back[2].case.steps[0]["x"], two.steps[0]["x"])


def test_a_damaged_history_names_the_file(tmp_path: Path) -> None:
    folder = save_loops(tmp_path / "history", [Loop(_case(4), ("vulkan",))])
    (folder / "history.json").write_text('{"format": "parity-history/9"}')
    with pytest.raises(HistoryError, match=r"history\.json: format must be 'parity-history/1'"):
        load_loops(folder)
    (folder / "history.json").write_text('{"format": "parity-history/1", "loops": [{}]}')
    with pytest.raises(HistoryError, match=r"history\.json: loops\[0\]: not a loop"):
        load_loops(folder)


@pytest.mark.parametrize("needed", [{0}, {99}, {3, 70}, {10, 11, 12}])
def test_delta_debugging_finds_the_loops_a_bug_needs(needed: set[int]) -> None:
    calls: list[list[int]] = []

    def fails(items: list[int]) -> bool:
        calls.append(items)
        return needed <= set(items)

    found, trials = ddmin(list(range(100)), fails, max_trials=200)
    assert set(found) == needed and trials == len(calls)


def test_delta_debugging_stops_at_its_trial_budget() -> None:
    found, trials = ddmin(list(range(100)), lambda items: 5 in items, max_trials=3)
    assert trials == 3 and 5 in found and len(found) < 100


def test_a_bundle_without_a_history_still_reads() -> None:
    assert read_bundle_doc(REGRESSION / "bundle.json").history is None
