"""The exit statuses of the `parity` command, in one place (the `--help` table is made here)."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """What a `parity` process returns."""

    CLEAN = 0
    DIVERGENT = 1
    BAD_INPUT = 2
    INTERNAL_ERROR = 3
    COVERAGE_SHORT = 4
    INTERRUPTED = 130


MEANINGS: dict[ExitStatus, str] = {
    ExitStatus.CLEAN: "no unexpected divergence (known ones allowed); replay: fixed",
    ExitStatus.DIVERGENT: "unexpected divergences found; replay: still (or differently) failing",
    ExitStatus.BAD_INPUT: "usage, set-up or input error: bad arguments, a missing or corrupt "
    "file, no Vulkan driver, a folder in use by another parity process, a full or read-only "
    "disk (one line naming the file)",
    ExitStatus.INTERNAL_ERROR: "internal error: a bug in the harness (traceback printed), or "
    "a run whose chunk failed for a reason other than a divergence",
    ExitStatus.COVERAGE_SHORT: "coverage short: no unexpected divergence, but a complete run "
    "left a cell its families are built to fill empty (its last lines name the cells and the "
    "examples that would fill them)",
    ExitStatus.INTERRUPTED: "stopped by SIGINT or SIGTERM (a run still writes its report)",
}


# A few words for the line that ends a run ("... (exit status 4: required coverage short)").
LABELS: dict[ExitStatus, str] = {
    ExitStatus.CLEAN: "no unexpected divergence",
    ExitStatus.DIVERGENT: "unexpected divergences found",
    ExitStatus.BAD_INPUT: "usage, set-up or input error",
    ExitStatus.INTERNAL_ERROR: "internal error",
    ExitStatus.COVERAGE_SHORT: "required coverage short",
    ExitStatus.INTERRUPTED: "interrupted",
}


def exit_table(indent: str = "  ") -> str:
    """The statuses as a plain-text table, for `--help`."""
    return "\n".join(f"{indent}{int(s):>3}  {MEANINGS[s]}" for s in ExitStatus)


__all__ = ["LABELS", "MEANINGS", "ExitStatus", "exit_table"]
