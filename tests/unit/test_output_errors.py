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
from harness.run.runlock import LOCK_FILE, RunFolderBusy, RunFolderLock
from tests.mount_support import fill, remount_read_only, tmpfs

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
