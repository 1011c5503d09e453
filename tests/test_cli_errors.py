"""The `parity` command never lies and never crashes: exit statuses, bad input, busy folders,
closed pipes, a missing driver.

Bad input is one line naming the file (exit 2, no traceback); an internal error prints its
traceback (exit 3); a run folder is locked for the life of the run; output to a closed pipe
is dropped without killing the command. Runs here are tiny (one family, one or two
examples); the planted run of `tests/cli_support.py` is shared with tests/test_cli.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import REPO, parity, popen_parity, read_summary, wait_for

pytestmark = pytest.mark.gpu

TINY_RUN = (
    "--families", "add", "--max-examples", "1", "--no-database", "--no-expectations", "--jobs", "1"
)  # fmt: skip


def _main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """The command in this process (no interpreter start-up)."""
    from harness.run.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse: --help and bad arguments
        status = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean one-case run (exit 0)."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    proc = parity("run", *TINY_RUN, "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


def _assert_bad_input(status: int, err: str, command: str, where: str, what: str) -> None:
    assert status == 2, err
    assert "Traceback" not in err, err
    assert err.startswith(f"parity {command}: {where}"), err
    assert what in err, err


# ---------------------------------------------------------------------------- bad input


def _rewrite_records(folder: Path, edit: Any) -> Path:
    """Apply `edit` to the first case record of a copied run; returns cases.jsonl."""
    path = folder / "cases.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    case = next(r for r in records if r["record"] == "case")
    edit(case)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_malformed_records_are_one_line_naming_file_and_line(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edits = {
        "missing": (lambda r: r.pop("case_id"), "field 'case_id' is missing"),
        "mistyped": (lambda r: r.update(steps="3"), "field 'steps' must be an integer"),
        "separator": (lambda r: r.update(case_id="../../evil"), "is not a plain name"),
        "divergence": (
            lambda r: r.update(divergences=[{"kind": "numeric"}]),
            "field divergences[0].'blame' is missing",
        ),
    }
    for name, (edit, what) in edits.items():
        run = _copy(tiny_run, tmp_path / name)
        cases = _rewrite_records(run, edit)
        status, _, err = _main(capsys, "report", run)
        _assert_bad_input(status, err, "report", f"{cases}:1: case record: ", what)
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_damaged_bundles_are_one_line_naming_the_file(
    planted_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    finding = read_summary(planted_run)["findings"][0]
    source = planted_run / finding["bundle"]

    truncated = _copy(source, tmp_path / "truncated")
    steps = truncated / "case" / "steps.npz"
    steps.write_bytes(steps.read_bytes()[: steps.stat().st_size // 2])
    status, _, err = _main(capsys, "replay", truncated)
    _assert_bad_input(status, err, "replay", str(steps), "not a readable .npz")

    no_shaders = _copy(source, tmp_path / "no-shaders")
    shutil.rmtree(no_shaders / "shaders" / "wgsl")
    status, _, err = _main(capsys, "replay", no_shaders)
    _assert_bad_input(status, err, "replay", str(no_shaders / "shaders" / "wgsl"), "missing")

    # The report reads each bundle's evidence: a truncated arrays.npz is named, not crashed on.
    run = _copy(planted_run, tmp_path / "run")
    arrays = run / finding["bundle"] / "arrays.npz"
    arrays.write_bytes(arrays.read_bytes()[:100])
    status, _, err = _main(capsys, "report", run)
    _assert_bad_input(status, err, "report", str(arrays), "not a readable .npz")


def test_unwritable_out_is_one_line(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "run"
    status, _, err = _main(capsys, "run", *TINY_RUN, "--out", out)
    _assert_bad_input(status, err, "run", f"--out {out}: cannot write", "Not a directory")
    status, _, err = _main(capsys, "merge", "--out", out, tiny_run)
    _assert_bad_input(status, err, "merge", f"--out {out}: cannot create", "Not a directory")


def test_an_internal_error_prints_its_traceback_and_exits_3(
    tiny_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import harness.run.cli

    def planted(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted harness bug")

    monkeypatch.setattr(harness.run.cli, "render_report", planted)
    status, _, err = _main(capsys, "report", tiny_run)
    assert status == 3, err
    assert "Traceback (most recent call last)" in err and "planted harness bug" in err
    assert "parity report: internal error" in err


def test_usage_errors_negative_repeats_and_the_exit_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = _main(capsys, "run", "--repeats", "-1")
    assert status == 2 and "expected an integer >= 0, got -1" in err
    status, _, err = _main(capsys, "report", "a", "--bogus")
    assert status == 2 and "usage: parity report" in err and "unrecognized arguments" in err
    status, out, _ = _main(capsys, "--help")
    assert status == 0
    for line in ("0  no unexpected divergence", "2  usage, set-up or input", "3  internal error"):
        assert line in out, out
    assert "130  stopped by SIGINT or SIGTERM" in out
    assert "4  coverage short: no unexpected divergence, but a complete run" in out
    status, out, _ = _main(capsys, "run", "--help")
    assert status == 0 and "exits 4 (coverage short)" in " ".join(out.split()), out


def test_ops_run_the_family_that_exercises_each_op() -> None:
    from harness.ops import MODELS
    from harness.run.cli import _families

    def families(ops: str) -> list[str]:
        return _families(argparse.Namespace(families=None, ops=ops))

    assert families("apply_rotary_emb,view_copy,sym_size,rms_norm") == ["rope", "view", "rms_norm"]
    assert families("apply_rotary_emb_hf,embedding_q4gsw,sdpa_with_kv_cache") == [
        "rope_hf",
        "embedding",
        "sdpa",
    ]
    assert families(",".join(MODELS))  # every op `parity list` shows is accepted


# ---------------------------------------------------------------------------- report, merge


def test_report_refuses_missing_or_empty_records_and_keeps_pages(
    planted_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copy(planted_run, tmp_path / "run")
    pages = sorted(p.name for p in (run / "failures").iterdir())
    assert pages
    (run / "cases.jsonl").write_text("")
    status, _, err = _main(capsys, "report", run)
    _assert_bad_input(status, err, "report", str(run / "cases.jsonl"), "holds no record")
    (run / "cases.jsonl").unlink()
    status, _, err = _main(capsys, "report", run)
    _assert_bad_input(status, err, "report", str(run / "cases.jsonl"), "missing")
    assert sorted(p.name for p in (run / "failures").iterdir()) == pages


def test_merge_takes_out_and_never_overwrites_what_it_was_not_asked_to(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = _copy(tiny_run, tmp_path / "shard")
    before = (shard / "cases.jsonl").read_text()
    # The old form `parity merge OUT SHARD...`: refused with a hint and merge's own usage.
    status, _, err = _main(capsys, "merge", shard, shard)
    assert status == 2 and "usage: parity merge" in err and "--out OUT is required" in err
    status, _, err = _main(capsys, "merge", "--out", shard, shard)
    assert status == 2 and "is one of the shards" in err
    status, _, err = _main(capsys, "merge", "--out", tiny_run, shard)
    assert status == 2 and "a run folder and not an earlier merge" in err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    status, _, err = _main(capsys, "merge", "--out", mine, shard)
    assert status == 2 and "--force" in err
    merged = tmp_path / "merged"
    for _ in range(2):  # a new folder, then an earlier merge's output: both fine
        status, _, err = _main(capsys, "merge", "--out", merged, shard)
        assert status == 0, err
    assert read_summary(merged)["merged"] and read_summary(merged)["exit_status"] == 0
    status, _, err = _main(capsys, "merge", "--out", mine, shard, "--force")
    assert status == 0, err
    assert (mine / "notes.txt").read_text() == "keep" and (mine / "index.html").is_file()
    assert (shard / "cases.jsonl").read_text() == before
    assert (tiny_run / "run.json").is_file()


# ---------------------------------------------------------------------------- exit status


def test_summary_records_the_exit_status_the_process_returns(
    tiny_run: Path, planted_run: Path, tmp_path: Path
) -> None:
    for folder, status in ((tiny_run, 0), (planted_run, 1)):
        summary = read_summary(folder)
        assert summary["status"] == "complete"
        assert summary["exit_status"] == summary["runs"][0]["exit_status"] == status
    # A run replacing its own earlier run says what it replaces.
    again = _copy(tiny_run, tmp_path / "again")
    proc = parity("run", *TINY_RUN, "--out", again)
    assert proc.returncode == 0, proc.stderr
    assert f"replacing the earlier run in {again} (`parity run" in proc.stderr


# ---------------------------------------------------------------------------- the lock


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A run busy in its first chunk (far more examples than the test waits for)."""
    out = tmp_path / "live"
    proc = popen_parity(
        "run", "--families", "rms_norm", "--max-examples", "5000", "--chunk-examples", "5000",
        "--no-database", "--no-expectations", "--jobs", "1", "--out", out,
        stderr_path=tmp_path / "stderr",
    )  # fmt: skip
    try:
        records = out / "cases.jsonl"
        wait_for(lambda: records.is_file() and records.stat().st_size, 120, "a first record")
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_a_second_command_on_a_live_run_exits_2_naming_the_holder(
    live_run: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, out = live_run
    holder = f"in use by another parity process (pid {proc.pid} on "
    for command in (("run", *TINY_RUN, "--out", out), ("report", out)):
        second = parity(*command)
        assert second.returncode == 2, second.stderr
        assert holder in second.stderr and "--max-examples 5000" in second.stderr
        assert "Traceback" not in second.stderr
    assert proc.poll() is None  # the live run goes on


def test_a_killed_run_leaves_no_stale_lock(
    live_run: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, out = live_run
    assert f'"pid": {proc.pid},' in (out / ".parity.lock.json").read_text()  # it held the lock
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    report = parity("report", out)
    assert report.returncode == 0, report.stderr  # the records so far: no bug planted
    assert read_summary(out)["status"] == "killed"
    rerun = parity("run", *TINY_RUN, "--out", out)
    assert rerun.returncode == 0, rerun.stderr


# ---------------------------------------------------------------------------- pipes, drivers


def _closed_pipe() -> int:
    """The write end of a pipe whose reader is gone (as after `| head` exits)."""
    read, write = os.pipe()
    os.close(read)
    return write


def _run_into_closed_pipe(
    *args: str | Path, stderr_too: bool = False
) -> subprocess.CompletedProcess[str]:
    write = _closed_pipe()
    try:
        return subprocess.run(
            [sys.executable, "-m", "harness.cli", *map(str, args)],
            cwd=REPO,
            stdout=write,
            stderr=write if stderr_too else subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.close(write)


def test_a_closed_pipe_is_dropped_quietly(planted_run: Path, tmp_path: Path) -> None:
    listing = _run_into_closed_pipe("list")
    assert listing.returncode == 0, listing.stderr
    assert listing.stderr == ""
    bundle = planted_run / read_summary(planted_run)["findings"][0]["bundle"]
    replay = _run_into_closed_pipe("replay", bundle, "--json")
    assert replay.returncode == 1, replay.stderr  # still failing: its own status, not a crash
    assert "still failing" in replay.stderr
    assert "Traceback" not in replay.stderr and "BrokenPipe" not in replay.stderr
    # `parity run ... 2>&1 | head`: progress lines are dropped, the run finishes.
    out = tmp_path / "run"
    run = _run_into_closed_pipe("run", *TINY_RUN, "--out", out, stderr_too=True)
    assert run.returncode == 0
    summary = read_summary(out)
    assert summary["status"] == "complete" and summary["totals"]["cases"] == 1


@pytest.mark.parametrize("variable", ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"])
def test_no_vulkan_driver_names_the_package(variable: str, tmp_path: Path) -> None:
    env = {variable: str(tmp_path / "nonexistent.json")}
    run = parity("run", *TINY_RUN, "--out", tmp_path / "run", env=env)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("parity run: webgpu: ") and "not Vulkan" in line  # opened first
    assert "mesa-vulkan-drivers" in line and variable in line
    listing = parity("list", "--json", env=env)
    assert listing.returncode == 0, listing.stderr
    adapters = json.loads(listing.stdout)["adapters"]
    assert set(adapters) == {"webgpu", "webgpu-dawn", "webgpu-chrome", "vulkan"}
    assert not adapters["vulkan"]["available"]
    assert "mesa-vulkan-drivers" in adapters["vulkan"]["reason"]
    # WebGPU is compared against Vulkan on the same adapter: wgpu's OpenGL fallback is no
    # WebGPU for this harness (issue 18: it was listed available).
    assert not adapters["webgpu"]["available"], adapters["webgpu"]
    assert "Vulkan" in adapters["webgpu"]["reason"]
    text = parity("list", env=env)
    assert text.returncode == 0
    assert re.search(r"^  vulkan +UNAVAILABLE: vulkan: the Vulkan loader", text.stdout, re.M)
    assert re.search(r"^  webgpu +UNAVAILABLE: webgpu: ", text.stdout, re.M)


def test_no_node_is_a_setup_error_before_any_chunk(tmp_path: Path) -> None:
    """Without node (WGSL reflection) a run refuses at set-up: one line naming node, exit
    2 (it was a failure of every chunk and exit 3, seen on a GPU machine without node)."""
    bin_dir = tmp_path / "bin"  # the tools a run needs, but node
    bin_dir.mkdir()
    for tool in ("glslc", "spirv-cross"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    run = parity("run", *TINY_RUN, "--out", tmp_path / "run", env={"PATH": str(bin_dir)})
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("parity run: webgpu: WGSL reflection needs node"), line


def test_no_xdg_runtime_dir_lines(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "list"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "XDG_RUNTIME_DIR" not in proc.stderr
