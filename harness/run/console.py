"""What the `parity` command prints: lines to stdout and stderr that a closed pipe silences,
and the usage error every command may raise."""

from __future__ import annotations

import os
import sys


class UsageError(Exception):
    """Bad arguments: reported after the command's usage line, exit status 2."""


# Streams found closed (a reader such as `head` that stopped reading): output is dropped.
# The process's own stdout and stderr, so the process's state.
_closed_streams: set[str] = set()


def write(stream_name: str, text: str) -> None:
    """Write a line to stdout or stderr; a closed pipe silences that stream for good."""
    if stream_name in _closed_streams:
        return
    stream = getattr(sys, stream_name)
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        _closed_streams.add(stream_name)
        # Point the descriptor at /dev/null, so that neither the interpreter's final flush
        # nor a native library writes to the dead pipe again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError):
            pass


def out(text: str) -> None:
    """A line on stdout."""
    write("stdout", text)


def err(message: str) -> None:
    """A line on stderr."""
    write("stderr", message)
