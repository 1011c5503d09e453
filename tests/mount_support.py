"""Small filesystems for the tests of a full or read-only disk.

`tmpfs(path, size)` mounts a tmpfs of `size` bytes on `path` for the length of a `with`
block and unmounts it after; `remount_read_only` turns it read-only; `fill` uses up what is
left of it. Mounting needs root (or CAP_SYS_ADMIN): elsewhere the test is skipped, saying
why. Root ignores file modes, so a read-only filesystem, not `chmod`, is how these tests get
EROFS/EACCES.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["mount", *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        return subprocess.CompletedProcess(["mount", *args], 1, "", str(err))


@contextmanager
def tmpfs(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of `size` bytes mounted on `path` (created) while the block runs.

    Skips the test where this process may not mount (not root, no CAP_SYS_ADMIN).
    """
    path.mkdir(parents=True, exist_ok=True)
    proc = _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if proc.returncode != 0:
        pytest.skip(
            f"cannot mount a {size}-byte tmpfs on {path} (needs root or CAP_SYS_ADMIN): "
            f"{proc.stderr.strip() or proc.returncode}"
        )
    try:
        yield path
    finally:
        # A process of the test may still hold a file open there: detach it lazily then.
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount_read_only(path: Path) -> None:
    """Make the tmpfs mounted on `path` read-only."""
    proc = _mount("-o", "remount,ro", str(path))
    assert proc.returncode == 0, f"cannot remount {path} read-only: {proc.stderr}"


def fill(path: Path) -> None:
    """Use up the free space of the filesystem `path` is on, with a file in `path`."""
    block = b"\0" * 4096
    with (path / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(block)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    # What a block could not take, a byte may.
    with (path / "filler").open("ab", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0")
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    assert os.statvfs(path).f_bavail == 0
