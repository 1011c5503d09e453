"""Nothing lost on a full or read-only disk: `parity run`, `report` and `merge` end.

A run whose output folder fills up (a 200 KiB tmpfs, as small as an outside tester's) stops,
says in one line which file it could not write and why, and exits 2; what it wrote stays
consistent (every bundle a record names is there, whole; no torn record), and its folder,
copied somewhere with space, reports. A report into a read-only place is one line too, and
`parity merge` reads shards on a read-only filesystem. Each test mounts its own tmpfs
(tests/mount_support.py) and is skipped where mounting is not permitted.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.run.records import ChunkRecord, read_records
from tests.cli_support import PLANTED_RUN_ARGS, parity
from tests.mount_support import fill, remount_read_only, tmpfs

pytestmark = pytest.mark.gpu


def _planted_args(jobs: int) -> list[str]:
    args = list(PLANTED_RUN_ARGS)
    args[args.index("--jobs") + 1] = str(jobs)
    return args


def _one_error_line(stderr: str, command: str, folder: Path, error: str) -> str:
    """The one line of `stderr` that says what could not be written; the last one."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if "cannot write" in line]
    assert len(lines) == 1, stderr
    assert stderr.splitlines()[-1] == lines[0], stderr
    pattern = rf"parity {command}: cannot write {re.escape(str(folder))}/\S+: {error}"
    assert re.fullmatch(pattern, lines[0]), lines[0]
    return lines[0]


def _assert_consistent(run: Path) -> None:
    """Every record reads, and every bundle a record names is there, whole."""
    text = (run / "cases.jsonl").read_text()
    assert text.endswith("\n"), "a torn last record"
    for line in text.splitlines():
        json.loads(line)
    records = list(read_records(run / "cases.jsonl"))
    ended = {r.chunk for r in records if isinstance(r, ChunkRecord)}
    named: list[str] = []
    for r in records:
        if isinstance(r, ChunkRecord):
            for f in r.findings:
                if f.bundle is None and r.status == "complete":
                    # Not bundled: the record says why.
                    assert f.bundle_error and "cannot write" in f.bundle_error, r
                named += [f.bundle] if f.bundle else []
        elif r.provisional_bundle and r.chunk not in ended:
            # What a chunk that never ended keeps (its findings replace it once it ends).
            named.append(r.provisional_bundle)
    for bundle in named:
        assert (run / bundle / "bundle.json").is_file(), f"{bundle} named but not written"
    leftovers = list((run / "bundles").glob(".*")) if (run / "bundles").is_dir() else []
    assert not leftovers, leftovers
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "error", meta["status"]
    assert meta["exit_status"] == 2
    assert any("No space left on device" in e for e in meta["errors"]), meta["errors"]
    # Workers (--jobs 2) were stopped, not killed: each said goodbye.
    assert all(w["exit"] == "done" for w in meta["workers"]), meta["workers"]


@pytest.mark.parametrize("jobs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_full_disk_stops_the_run_in_one_line_and_keeps_its_records_whole(
    planted_wgsl: Path, tmp_path: Path, jobs: int
) -> None:
    with tmpfs(tmp_path / "disk", 200 * 1024) as disk:
        run = disk / "run"
        proc = parity("run", *_planted_args(jobs), "--wgsl-dir", planted_wgsl, "--out", run)
        assert proc.returncode == 2, proc.stderr
        _one_error_line(proc.stderr, "run", run, "No space left on device")
        _assert_consistent(run)
        # `parity report` on the full disk itself: one line too.
        fill(disk)
        proc = parity("report", run)
        assert proc.returncode == 2, proc.stderr
        _one_error_line(proc.stderr, "report", run, "No space left on device")
        copy = shutil.copytree(run, tmp_path / "copy")
    # Somewhere with space, the folder reports; nothing there says the run was killed.
    proc = parity("report", copy)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads((copy / "summary.json").read_text())
    assert summary["status"] == "error"
    assert summary["findings"], "the findings made before the disk filled are reported"
    pages = [copy / "index.html", *(copy / "failures").glob("*.html")]
    assert len(pages) == 1 + len(summary["findings"])
    for page in pages:
        assert "killed" not in page.read_text(), page


def test_a_report_into_a_read_only_folder_is_one_line(planted_run: Path, tmp_path: Path) -> None:
    run = shutil.copytree(planted_run, tmp_path / "run")
    shutil.rmtree(run / "failures")
    with tmpfs(run / "failures", 64 * 1024) as failures:
        remount_read_only(failures)
        proc = parity("report", run)
        assert proc.returncode == 2, proc.stderr
        _one_error_line(proc.stderr, "report", failures, "Read-only file system")


def test_merge_reads_shards_on_a_read_only_filesystem(planted_run: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 64 * 1024 * 1024) as disk:
        shard = shutil.copytree(planted_run, disk / "shard")
        remount_read_only(disk)
        proc = parity("merge", "--out", tmp_path / "merged", shard)
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    merged = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert merged["findings"], "the shard's findings are merged"


def test_a_merge_into_a_full_disk_is_one_line(planted_run: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        proc = parity("merge", "--out", disk / "merged", planted_run)
        assert proc.returncode == 2, proc.stderr
        _one_error_line(proc.stderr, "merge", disk / "merged", "No space left on device")
