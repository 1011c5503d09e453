"""An OS lock on a run folder for the life of the command that writes (or reads) it.

`parity run` holds it from before it clears the folder until its report is written; `parity
report` and `parity merge` hold it while they read and render. A second command on the same
folder fails at once with `RunFolderBusy`, naming the holder (pid, command, start time, read
from `HOLDER_FILE` beside the lock). The lock is the kernel's (`flock`, through `filelock`):
it dies with its process, so a run killed by SIGKILL leaves no stale lock behind, only the
two small files, which the next holder reuses.

A command that only reads a folder (`parity merge`, of its shards) takes it shared
(`shared=True`): readers do not exclude each other, only a writer, and need no write access,
so shards on a read-only filesystem merge. Where the folder has no lock file and none can be
made (read-only), no parity process can be writing there, and none is taken.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from filelock import FileLock, Timeout

from harness.run.records import OUTPUT_ERRNOS, writing

LOCK_FILE = ".parity.lock"
HOLDER_FILE = ".parity.lock.json"
# Files of the lock itself: a folder holding only these still counts as empty.
LOCK_FILES = frozenset({LOCK_FILE, HOLDER_FILE})


class LockUnavailable(RuntimeError):
    """A folder's lock cannot be taken; the message names the folder and why."""


class RunFolderBusy(LockUnavailable):
    """Another live parity process holds the folder; the message names it."""


class RunFolderLock:
    """The lock of one folder; a context manager (`with RunFolderLock(path, command):`).

    Args:
        shared: for a command that only reads the folder (see the module docstring).
    """

    def __init__(self, folder: Path, command: str, shared: bool = False) -> None:
        self.folder = Path(folder)
        self.command = command
        self.shared = shared
        self._lock = FileLock(self.folder / LOCK_FILE, timeout=0)
        self._shared_fd: int | None = None

    def acquire(self) -> RunFolderLock:
        """Take the lock without waiting, and (unless shared) write who holds it.

        Raises:
            RunFolderBusy: another process holds it (for a shared lock: a writer).
            LockUnavailable: the folder cannot hold the lock file (missing, unwritable).
            OutputError: the holder's details cannot be written (a full disk).
        """
        if self.shared:
            return self._acquire_shared()
        try:
            self._lock.acquire(blocking=False)
        except Timeout:
            other = describe_holder(self.folder)
            raise RunFolderBusy(
                f"{self.folder}: in use by another parity process ({other}); wait for it to "
                "finish or pick another folder"
            ) from None
        except OSError as err:  # after Timeout, which is one
            raise LockUnavailable(
                f"{self.folder / LOCK_FILE}: cannot take the folder's lock: {err.strerror or err}"
            ) from None
        holder = {
            "pid": os.getpid(),
            "command": self.command,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": socket.gethostname(),
        }
        tmp = self.folder / f".{HOLDER_FILE}.{os.getpid()}.tmp"
        try:
            with writing(self.folder / HOLDER_FILE):
                tmp.write_text(json.dumps(holder) + "\n", encoding="utf-8")
                tmp.replace(self.folder / HOLDER_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            self.release()
            raise
        return self

    def _acquire_shared(self) -> RunFolderLock:
        import fcntl  # Unix; `flock`, as filelock's exclusive lock there, so the two exclude

        path = self.folder / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as err:
            if err.errno in OUTPUT_ERRNOS and not path.exists() and self.folder.is_dir():
                return self  # read-only and never locked: no parity process writes here
            try:  # a lock file made by a run, in a folder this process may not write
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                raise LockUnavailable(
                    f"{path}: cannot take the folder's lock: {err.strerror or err}"
                ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if isinstance(err, BlockingIOError):
                raise RunFolderBusy(
                    f"{self.folder}: in use by another parity process "
                    f"({describe_holder(self.folder)}); wait for it to finish or pick another "
                    "folder"
                ) from None
            raise LockUnavailable(
                f"{path}: cannot take the folder's lock: {err.strerror or err}"
            ) from None
        self._shared_fd = fd
        return self

    def release(self) -> None:
        """Let the lock go (idempotent); the files stay for the next holder."""
        if self._shared_fd is not None:
            os.close(self._shared_fd)  # closing the descriptor drops its flock
            self._shared_fd = None
        if self._lock.is_locked:
            self._lock.release()

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def describe_holder(folder: Path) -> str:
    """Who holds a folder's lock, as far as its holder file says."""
    try:
        holder: dict[str, Any] = json.loads((folder / HOLDER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "its holder has not written its details yet"
    return (
        f"pid {holder.get('pid')} on {holder.get('host')}, `{holder.get('command')}`, "
        f"started {holder.get('started')}"
    )


def command_line() -> str:
    """This process's command line as `parity ...`, for holder files and run.json."""
    return " ".join(["parity", *sys.argv[1:]]) if sys.argv else "parity"


__all__ = [
    "HOLDER_FILE",
    "LOCK_FILE",
    "LOCK_FILES",
    "LockUnavailable",
    "RunFolderBusy",
    "RunFolderLock",
    "command_line",
    "describe_holder",
]
