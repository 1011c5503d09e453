"""History-dependent findings: a bug that shows only after other graphs ran in the process.

The planted bug keys Vulkan's descriptor-set cache without the binding offset
(tests/plants.py): `chain(3)` (three rms_norms, then an add of x and the last) leaves a set
for the add's bindings in the pool's recycled block; `chain(1)` binds the same block with
the same sizes at other offsets, reuses that set, and its add reads the wrong tensor. Alone,
in a fresh process, `chain(1)` passes: the warm re-runs of the run that found it repeat the
bug every time, but a replay of its case alone said "fixed" on the still-buggy tree.

Here: the runtimes' history is recorded (harness/check/history.py); a cold re-run in a fresh
process classes the finding history-dependent and shrinks its history to the one loop that
matters (harness/check/cold.py); the bundle keeps it and `parity replay`, in a fresh
process, runs it first and still fails. The plant reaches those processes through a
`sitecustomize` module on PYTHONPATH (`plant_in_every_process`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from harness.check.backends import open_runtimes
from harness.check.cold import RuntimeSpec, case_bugs, cold_check
from harness.check.divergence import BugKey
from harness.check.history import History, load_loops, run_loops, save_loops
from harness.check.lockstep import LockstepRunner
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.gen.families import Family
from harness.run import chunks
from harness.run.bundle import load_bundle, replay, write_bundle
from harness.run.chunks import ChunkRunner, RunConfig, Stop
from harness.run.plan import Chunk
from harness.run.records import BundleHistory, RunMeta, case_record
from tests.chunk_support import RecordingSink
from tests.cli_support import parity
from tests.plants import plant_in_every_process, vulkan_descriptor_sets_keyed_without_offset

pytestmark = pytest.mark.gpu

BUG = "add|numeric|vulkan|x1000"


def chain(norms: int, side: int = 8) -> Case:
    """x[side, side] through `norms` rms_norms, then add(x, the last): one step."""
    rng = np.random.default_rng(norms)
    b = GraphBuilder()
    x = b.input("x", "float32", [side, side])
    eps = b.float(1e-6)
    h = x
    for i in range(norms):
        w = b.constant(f"w{i}", rng.standard_normal(side).astype(np.float32))
        h = b.op("rms_norm", x=h, weight=w, eps=eps)
    b.output(b.op("add", a=x, b=h))
    step = {"x": rng.standard_normal((side, side)).astype(np.float32)}
    return Case(b.build(), [step], name=f"chain{norms}")


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The descriptor-set cache keyed without offset, here and in every process started
    from here (the environment that plants it is returned too)."""
    env = plant_in_every_process(tmp_path / "plant", "vulkan_descriptor_sets_keyed_without_offset")
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    with vulkan_descriptor_sets_keyed_without_offset():
        yield env


def _warm_history() -> tuple[History, list[Case], list[str]]:
    """Fresh runtimes that run an unrelated case, chain(3), another unrelated case and
    chain(1), watched by a History; (history, [those cases], chain(1)'s bug keys)."""
    runtimes = open_runtimes()
    history = History().watch(runtimes)
    runner = LockstepRunner(runtimes)
    cases = [chain(0, 4), chain(3), chain(2, 16), chain(1)]
    for case in cases[:-1]:
        runner.run(case)
    found = sorted({str(d.bug_key()) for d in runner.run(cases[-1]).divergences})
    return history, cases, found


def test_the_history_brings_the_bug_back_on_fresh_runtimes(
    planted: dict[str, str], tmp_path: Path
) -> None:
    history, cases, found = _warm_history()
    failing = cases[-1]
    assert BUG in found  # warm: after chain(3)
    assert case_bugs(open_runtimes(), failing) == []  # alone, on fresh runtimes: passes
    before = history.before(failing)
    assert [loop.case for loop in before] == cases[:-1]
    assert all(loop.runtimes == ("webgpu", "vulkan") and loop.steps == 1 for loop in before)
    assert history.noted == len(before) + 1 and history.dropped == 0
    # Saved and read back (each case once), the loops bring the bug back on fresh runtimes.
    loops = load_loops(save_loops(tmp_path / "history", before))
    assert len(list((tmp_path / "history" / "cases").iterdir())) == len(before)
    fresh = open_runtimes()
    run_loops({rt.name: rt for rt in fresh}, loops)
    assert BUG in case_bugs(fresh, failing)


def test_history_keeps_the_newest_loops_within_its_bounds() -> None:
    runtimes = open_runtimes()
    history = History(max_loops=2).watch(runtimes)
    runner = LockstepRunner(runtimes)
    cases = [chain(0, 4), chain(1, 4), chain(2, 4)]
    for case in cases:
        runner.run(case)
    assert [loop.case for loop in history.loops] == cases[1:]
    assert (history.noted, history.dropped) == (3, 1)


@pytest.mark.slow  # a warm history, a cold re-run and a history shrink: about a minute
def test_a_cold_rerun_classes_it_history_dependent_and_shrinks_its_history(
    planted: dict[str, str], tmp_path: Path
) -> None:
    history, cases, _ = _warm_history()
    failing = cases[-1]
    bug = LockstepRunner(open_runtimes()).run(cases[1]).primary()
    assert bug is not None  # chain(3) fails alone too: its rms_norms share a set
    verdict = cold_check(failing, BugKey.parse(BUG), history.before(failing), RuntimeSpec())
    assert verdict.error is None
    assert verdict.kind == "history-dependent" and verdict.alone == []
    assert verdict.with_history is not None and BUG in verdict.with_history
    assert [loop.case for loop in verdict.loops] == [cases[1]]  # chain(3) alone matters
    assert verdict.reproduced and verdict.recorded == 3
    assert set(verdict.phases) == {"alone", "whole_history", "shrink"}
    # A finding that fails in a fresh process on its own needs no history.
    alone = cold_check(cases[1], bug.bug_key(), [], RuntimeSpec())
    assert alone.kind == "deterministic" and alone.loops == [] and alone.reproduced


@pytest.mark.slow  # fresh processes: a cold re-run and two replays
def test_its_bundle_replays_as_still_failing_in_a_fresh_process(
    planted: dict[str, str], tmp_path: Path
) -> None:
    runtimes = open_runtimes()
    history = History().watch(runtimes)
    runner = LockstepRunner(runtimes)
    runner.run(chain(3))
    failing = chain(1)
    result = runner.run(failing)
    record = case_record(failing, result, chunk="dag/0", family="dag", seq=1)
    assert str(record.bug) == BUG
    verdict = cold_check(failing, record.bug, history.before(failing), RuntimeSpec())
    assert verdict.kind == "history-dependent" and len(verdict.loops) == 1
    folder = write_bundle(
        tmp_path / "bundles" / "chain",
        failing,
        record,
        run=RunMeta(),
        runtimes=runtimes,
        history=verdict.loops,
    )
    bundle = load_bundle(folder)
    assert bundle.doc.history == BundleHistory("history", 1, 1)
    assert "history-dependent" in (folder / "README.md").read_text()
    # A fresh process, as a user would replay it: still failing, after its history.
    proc = parity("replay", folder, env=planted)
    assert proc.returncode == 1, proc.stderr
    assert "ran the 1 loop(s) of history" in proc.stderr
    assert f"still failing: same bug {BUG}" in proc.stderr
    # Its case alone passes: the replay that said "fixed" on the buggy tree.
    alone = parity("replay", folder, "--no-history", env=planted)
    assert alone.returncode == 0, alone.stderr
    assert "fixed" in alone.stderr
    # In this process too (fresh runtimes for the history, never the warm ones).
    outcome = replay(bundle, runtimes=runtimes)
    assert outcome.status == "still_failing" and outcome.history_loops == 1


@pytest.mark.slow  # fresh processes: two cold re-runs and two replays
def test_a_chunk_classes_its_findings_and_bundles_the_history(
    planted: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A family of two cases, chain(3) first (Hypothesis starts from the first choice): each
    # draw builds a new case object, as a real family does.
    strategy = lambda: st.builds(chain, st.sampled_from([3, 1]))  # noqa: E731
    families = {**chunks.FAMILIES, "chains": Family("chains", strategy, frozenset({"rms_norm"}))}
    monkeypatch.setattr(chunks, "FAMILIES", families)
    config = RunConfig(["chains"], "quick", 0, 4, 4, tmp_path / "run", repeats=1)
    runner = ChunkRunner(config, Stop())
    runner.open([None])
    sink = RecordingSink()
    runner.run_chunk(Chunk("chains", 0, 0, 4), sink)
    (record,) = sink.chunks
    assert not sink.errors
    classes = {str(f.bug): f.repeatability for f in record.findings}
    assert classes == {BUG: "history-dependent", "rms_norm|numeric|vulkan|x1000": "deterministic"}
    for finding in record.findings:
        assert finding.bundle is not None
        folder = tmp_path / "run" / finding.bundle
        doc = load_bundle(folder).doc
        assert doc.repeatability is not None
        if str(finding.bug) == BUG:
            assert doc.history == BundleHistory("history", 1, 1)
            assert doc.repeatability.cold["reproduced"] is True
        else:
            assert doc.history is None and not (folder / "history").exists()
        proc = parity("replay", folder, env=planted)
        assert proc.returncode == 1 and "still failing" in proc.stderr, proc.stderr
