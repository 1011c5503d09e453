"""`parity run --jobs N`: chunks in worker processes, one cases.jsonl, today's guarantees.

The runs here are small (a couple of chunks of a couple of examples) and use two workers
at most: the suite already runs under xdist on CI's two cores. A worker that dies is
planted in the workers alone: a `sitecustomize` module on the workers' PYTHONPATH (every
interpreter imports it at start-up, spawned workers included) wraps the chunk runner so
that the first worker to reach a given case calls `os._exit`.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import (
    PLANTED_RUN_ARGS,
    REPO,
    claimed_bundles,
    divergent_cases,
    parity,
    popen_parity,
    read_records,
    read_summary,
    wait_for,
)

pytestmark = pytest.mark.gpu

assert PLANTED_RUN_ARGS[-2:] == ("--jobs", "1")
TWO_WORKERS = (*PLANTED_RUN_ARGS[:-2], "--jobs", "2")


def _cases(folder: Path) -> set[tuple[str, str]]:
    return {(r["chunk"], r["case_id"]) for r in read_records(folder) if r["record"] == "case"}


def _findings(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((f["chunk"], f["case_id"], f["bug"]) for f in summary["findings"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (dead, not yet reaped by whoever adopted it) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_two_workers_find_what_one_process_finds(
    planted_run: Path, planted_wgsl: Path, tmp_path: Path
) -> None:
    out = tmp_path / "two"
    proc = parity("run", *TWO_WORKERS, "--wgsl-dir", planted_wgsl, "--out", out)
    assert proc.returncode == 1, proc.stderr
    one, two = read_summary(planted_run), read_summary(out)
    # Same seed, no database, no time budget: the same cases, chunk by chunk, and findings.
    assert _cases(out) == _cases(planted_run)
    assert _findings(two) == _findings(one)
    assert two["totals"] == one["totals"]
    run = json.loads((out / "run.json").read_text())
    assert run["jobs"] == 2 and [w["index"] for w in run["workers"]] == [1, 2]
    for worker in run["workers"]:
        assert worker["exit"] == "done" and worker["pid"] != os.getpid()
        assert set(worker["adapters"]) == {"webgpu", "vulkan"} and all(worker["adapters"].values())
        assert not _alive(worker["pid"])
    assert sum(w["chunks"] for w in run["workers"]) == 2
    # The report names each worker and its adapters.
    index = (out / "index.html").read_text()
    assert 'id="workers1"' in index and run["workers"][0]["adapters"]["vulkan"] in index
    assert "2 workers" in proc.stderr


def test_a_worker_is_replaced_once_it_has_run_its_share_of_cases(tmp_path: Path) -> None:
    args = (
        "run", "--families", "add", "--max-examples", "6", "--chunk-examples", "2",
        "--no-database", "--no-expectations", "--adapters", "0",
    )  # fmt: skip
    one = parity(*args, "--jobs", "1", "--out", tmp_path / "one")
    assert one.returncode == 0, one.stderr
    out = tmp_path / "worn"
    proc = parity(*args, "--jobs", "2", "--worker-cases", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr
    # Replacing workers between chunks changes nothing the run finds.
    assert _cases(out) == _cases(tmp_path / "one")
    assert read_summary(out)["totals"] == read_summary(tmp_path / "one")["totals"]
    workers = json.loads((out / "run.json").read_text())["workers"]
    # Three chunks, two workers, each worn out by its first chunk (a chunk has cases): the
    # third chunk ran on a fresh worker, and every worker ended as asked.
    assert [w["chunks"] for w in workers].count(1) == 3, workers
    assert all(w["chunks"] <= 1 for w in workers) and len(workers) >= 3
    assert all(w["exit"] == "done" for w in workers)
    assert not any(_alive(w["pid"]) for w in workers)
    assert "(--worker-cases)" in proc.stderr


def test_the_summary_does_not_depend_on_the_order_of_the_records(
    planted_run: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "shuffled"
    shutil.copytree(planted_run, copy, ignore=shutil.ignore_patterns(".parity.lock*"))
    lines = (copy / "cases.jsonl").read_text().splitlines()
    random.Random(3).shuffle(lines)
    (copy / "cases.jsonl").write_text("\n".join(lines) + "\n")
    proc = parity("report", copy)
    assert proc.returncode == 1, proc.stderr
    shuffled, original = read_summary(copy), read_summary(planted_run)
    for key in ("totals", "findings", "bugs", "per_family", "per_op", "coverage", "status"):
        assert shuffled[key] == original[key], key


SITECUSTOMIZE = """
import multiprocessing, os, time
from harness.run import chunks

_check = chunks.ChunkRunner._check


def _planted(self, state, case):
    # In a worker only, at case PLANT_SEQ of chunk PLANT_CHUNK ("*": any chunk).
    worker = multiprocessing.parent_process() is not None
    where = os.environ["PLANT_CHUNK"] in ("*", state.chunk.id)
    if worker and where and state.seq == int(os.environ["PLANT_SEQ"]):
        if os.environ["PLANT_ACTION"] == "hang":
            time.sleep(300)  # a case that never ends (a hung driver)
        try:  # exit once per run (a marker file)
            os.close(os.open(os.environ["PLANT_MARKER"], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os._exit(7)
    return _check(self, state, case)


chunks.ChunkRunner._check = _planted
"""


def _plant(tmp_path: Path, action: str, chunk: str, seq: int) -> dict[str, str]:
    """The environment that plants `action` in the workers of a run."""
    folder = tmp_path / "plant"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {
        "PYTHONPATH": f"{folder}{os.pathsep}{REPO}",
        "PLANT_ACTION": action,
        "PLANT_CHUNK": chunk,
        "PLANT_SEQ": str(seq),
        "PLANT_MARKER": str(tmp_path / "marker"),
    }


def test_a_worker_that_dies_is_a_chunk_error_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = parity(
        "run", "--families", "add", "--max-examples", "6", "--chunk-examples", "2",
        "--no-database", "--no-expectations", "--jobs", "2", "--adapters", "0", "--out", out,
        env=_plant(tmp_path, "exit", "add/1", 1),
    )  # fmt: skip
    # A chunk failed for a reason other than a divergence: exit 3, with a report.
    assert proc.returncode == 3, proc.stderr
    assert (tmp_path / "marker").exists(), "the plant never fired"
    chunks = {r["chunk"]: r for r in read_records(out) if r["record"] == "chunk"}
    assert set(chunks) == {"add/0", "add/1", "add/2"}  # every chunk of the plan, once
    lost = chunks["add/1"]
    assert lost["status"] == "error"
    assert "exited with status 7" in lost["reason"] and "after 1 of its cases" in lost["reason"]
    assert chunks["add/0"]["status"] == chunks["add/2"]["status"] == "complete"
    # The case the dead worker finished is kept.
    kept = [r["seq"] for r in read_records(out) if r["record"] == "case" and r["chunk"] == "add/1"]
    assert kept == [0]
    run = json.loads((out / "run.json").read_text())
    ends = [w["exit"] for w in run["workers"]]
    assert ends.count("died: exited with status 7") == 1 and len(ends) == 3  # one replaced
    assert [w["adapter"] for w in run["workers"]] == [0, 0, 0]  # as --adapters dealt them
    summary = read_summary(out)
    assert summary["status"] == "error" and summary["exit_status"] == 3
    assert any("add/1" in e for e in summary["runs"][0]["errors"])
    # The report's banner says which worker died, how, and in which chunk.
    index = (out / "index.html").read_text()
    banner = re.search(r'<div id="error-banner">(.*?)</div>', index, re.S)
    assert banner, "the report does not say why the run ended in error"
    assert 'chunk <code class="chunk">add/1</code>' in banner.group(1)
    assert re.search(r"worker \d+ \(pid \d+, .*\) exited with status 7", banner.group(1))


def test_killing_the_parent_kills_its_workers_and_keeps_the_findings(
    planted_wgsl: Path, tmp_path: Path
) -> None:
    out = tmp_path / "killed"
    # Each worker hangs in the second case of its chunk: nothing it does would notice the
    # parent's death, so only the kernel (or the worker's watchdog) can end it.
    proc = popen_parity(
        "run", "--families", "rms_norm", "--max-examples", "200", "--no-expectations",
        "--no-database", "--wgsl-dir", planted_wgsl, "--jobs", "2", "--out", out,
        stderr_path=tmp_path / "stderr", env=_plant(tmp_path, "hang", "*", 1),
    )  # fmt: skip

    def findings_bundled() -> bool:
        # A record names its provisional bundle before the worker writes it: killed at once,
        # the worker would die mid-bundle. Each worker hangs once its bundle is written.
        written, pending = claimed_bundles(out)
        return divergent_cases(out) >= 2 and len(written) >= 2 and not pending

    try:
        wait_for(findings_bundled, 180, "2 divergent case records and their bundles")
        pids = [w["pid"] for w in json.loads((out / "run.json").read_text())["workers"]]
        assert pids and all(_alive(pid) for pid in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_for(lambda: not any(_alive(pid) for pid in pids), 20, "the workers to die")
    report = parity("report", out)
    assert report.returncode == 1, report.stderr
    summary = read_summary(out)
    assert summary["status"] == "killed" and summary["totals"]["unexpected_cases"] >= 1
    # Every finding recorded before the kill kept its (provisional) bundle.
    assert summary["findings"]
    assert all(f["provisional"] and f["bundle"] for f in summary["findings"])
    assert {f["bundle"] for f in summary["findings"]} <= set(claimed_bundles(out)[0])


def test_sigterm_stops_every_worker_after_its_current_case(
    planted_wgsl: Path, tmp_path: Path
) -> None:
    out = tmp_path / "terminated"
    proc = popen_parity(
        "run", "--families", "rms_norm", "--max-examples", "200", "--no-expectations",
        "--no-database", "--wgsl-dir", planted_wgsl, "--jobs", "2", "--out", out,
        stderr_path=tmp_path / "stderr",
    )  # fmt: skip
    try:
        wait_for(lambda: divergent_cases(out) >= 2, 180, "2 divergent case records")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    summary = read_summary(out)
    assert summary["status"] == "interrupted" and summary["exit_status"] == 130
    chunks = [r for r in read_records(out) if r["record"] == "chunk"]
    # Both workers' chunks ended interrupted, with their findings; the rest were skipped.
    assert len(chunks) == len(json.loads((out / "run.json").read_text())["chunks"])
    interrupted = [c for c in chunks if c["status"] == "interrupted"]
    assert interrupted and all(c["reason"] == "SIGTERM" for c in interrupted)
    assert {c["status"] for c in chunks} <= {"interrupted", "skipped", "complete"}
    assert summary["findings"] and all(f["bundle"] for f in summary["findings"])
    run = json.loads((out / "run.json").read_text())
    assert all(w["exit"] == "done" for w in run["workers"])


def test_an_adapter_the_machine_lacks_is_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = parity(
        "run", "--families", "add", "--max-examples", "1", "--no-database", "--jobs", "2",
        "--adapters", "0,7", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("parity run: --adapters: worker 2 was given adapter 7: ")
    assert "VULKAN_PARITY_ADAPTER=7 asks for adapter 7" in line and "Traceback" not in proc.stderr
    assert not out.exists()  # refused before the folder was touched
