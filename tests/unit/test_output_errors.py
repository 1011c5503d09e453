"""Writing on a full or read-only disk: one typed error naming the file, nothing torn.

Every file a run writes goes through `harness.run.records`' writers, which raise
`OutputError(path, errno)` for a disk that is full, read-only or not ours, and leave what
was there whole: a record line is written entirely or not at all, a JSON file is the old one
or the new one. Reading needs no write access: a shared lock reads a read-only folder.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from harness.run.records import OutputError, RecordWriter, write_json, write_text
from harness.run.report import render_report
from harness.run.runlock import LOCK_FILE, RunFolderBusy, RunFolderLock
from tests.mount_support import fill, remount_read_only, tmpfs
from tests.unit.test_report import _case, _divergence, _run_meta, _write_run

LINE = json.dumps({"record": "case", "padding": "x" * 3000})


def test_a_record_line_that_does_not_fit_is_not_written_at_all(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 16 * 1024) as disk:
        path = disk / "cases.jsonl"
        writer = RecordWriter(path)
        written = 0
        with pytest.raises(OutputError) as caught:
            for written in range(100):  # noqa: B007 (counted for the assertion)
                writer.write_line(LINE)
        assert caught.value.path == path
        assert caught.value.errno == errno.ENOSPC
        assert str(caught.value) == f"cannot write {path}: No space left on device"
        text = path.read_text()
        # Every line that was written is whole; the one that did not fit left nothing.
        assert text == (LINE + "\n") * written
        with pytest.raises(OutputError):
            writer.write_line(LINE)
        assert path.read_text() == text
        writer.close()


def test_json_and_text_on_a_full_disk_keep_the_old_file(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        write_json(disk / "run.json", {"status": "running"})
        write_text(disk / "index.html", "<p>old</p>\n")
        fill(disk)
        with pytest.raises(OutputError) as caught:
            write_json(disk / "run.json", {"status": "complete", "padding": "x" * 8192})
        assert str(caught.value) == f"cannot write {disk / 'run.json'}: No space left on device"
        with pytest.raises(OutputError):
            write_text(disk / "index.html", "<p>new</p>\n" * 1000)
        assert json.loads((disk / "run.json").read_text()) == {"status": "running"}
        assert (disk / "index.html").read_text() == "<p>old</p>\n"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "index.html", "run.json"]


def test_a_read_only_disk_is_named_with_its_error(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        remount_read_only(disk)
        with pytest.raises(OutputError) as caught:
            write_json(disk / "summary.json", {})
        assert caught.value.errno == errno.EROFS
        assert str(caught.value) == f"cannot write {disk / 'summary.json'}: Read-only file system"
        with pytest.raises(OutputError):
            RecordWriter(disk / "cases.jsonl")


def test_a_shared_lock_reads_a_read_only_folder_but_not_one_being_written(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        (disk / "locked").mkdir()
        (disk / "never-locked").mkdir()
        RunFolderLock(disk / "locked", "parity run").acquire().release()  # leaves its files
        remount_read_only(disk)
        for folder in ("locked", "never-locked"):
            with (
                RunFolderLock(disk / folder, "parity merge", shared=True),
                RunFolderLock(disk / folder, "parity merge", shared=True),
            ):
                pass  # readers share it
        assert not (disk / "never-locked" / LOCK_FILE).exists()
    writable = tmp_path / "run"
    writable.mkdir()
    busy = pytest.raises(RunFolderBusy, match="in use by another parity process")
    with RunFolderLock(writable, "parity run"), busy:
        RunFolderLock(writable, "parity merge", shared=True).acquire()
    with RunFolderLock(writable, "parity merge", shared=True), pytest.raises(RunFolderBusy):
        RunFolderLock(writable, "parity run").acquire()


def _pages_without_bundles(tmp_path: Path, status: str) -> dict[str, str]:
    """Failure pages of a run whose chunk 0 could not bundle its finding and whose chunk 1
    never ended; the run ended `status`."""
    d = _divergence()
    error = "cannot write run/bundles/x: No space left on device"
    records = [
        _case("rms_norm/0", "a", [d]),
        {"record": "chunk", "chunk": "rms_norm/0", "status": "complete", "duration_s": 1,
         "findings": [{"case_id": "a", "bundle": None, "bundle_error": error, "shrunk": True,
                       "unexpected": 1, "bug": d["bug"]}]},
        _case("rms_norm/1", "b", [d]),
    ]  # fmt: skip
    errors = (
        [] if status == "running" else ["cannot write run/cases.jsonl: No space left on device"]
    )
    meta = _run_meta(["rms_norm/0", "rms_norm/1"], status=status, errors=errors)
    run = _write_run(tmp_path / status, meta, records)
    summary = render_report(run)
    assert [f.bundle_error for f in summary.findings] == [error, None]
    return {f.case_id: (run / "failures" / f"{f.id}.html").read_text() for f in summary.findings}


def test_a_failure_page_says_why_it_has_no_bundle_and_killed_only_when_it_was(
    tmp_path: Path,
) -> None:
    pages = _pages_without_bundles(tmp_path, "error")
    assert "No bundle was written for this case: cannot write run/bundles/x: No space" in pages["a"]
    assert (
        "No bundle was written for this case: its chunk never ended (the run ended with "
        "status error: cannot write run/cases.jsonl: No space left on device)"
    ) in pages["b"]
    assert not any("killed" in page for page in pages.values())
    pages = _pages_without_bundles(tmp_path, "running")  # never finalized: killed
    assert "the run was killed before its chunk ended" in pages["b"]
