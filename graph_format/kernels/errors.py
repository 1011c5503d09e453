"""The errors of kernel manifests and their expressions, and the helpers of their messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from graph_format.errors import GraphBuildError, GraphFormatError, ParityError


class ExpressionError(ParityError, ValueError):
    """An expression that is not in the language, or that cannot be evaluated on its values.

    Attributes:
        expression: the expression's text.
        reason: what is wrong, and what was expected.
    """

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"expression {expression!r}: {reason}")
        self.expression = expression
        self.reason = reason


class KernelManifestError(GraphFormatError):
    """A `kernels.toml` that is malformed or does not fit the slots it names (bad input).

    The message is `<file>:<line>: <what>` for a TOML syntax error, else
    `<file>: <backend>.<slot>.<field>: <what>` (what was expected and what arrived).

    Attributes:
        path: the manifest file.
        where: the field (`webgpu.q4gsw_gemv.params.K_bytes`), or None.
        line: the line of a TOML syntax error, or None.
        what: what is wrong.
    """

    def __init__(
        self, path: Path | str, what: str, *, where: str | None = None, line: int | None = None
    ) -> None:
        place = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{place}: {where}: {what}" if where else f"{place}: {what}")
        self.path = str(path)
        self.where = where
        self.line = line
        self.what = what


class KernelRequirementError(GraphBuildError):
    """A kernel's declared limit (`requires`) that a graph breaks at load: an expected refusal
    of the backend running that kernel, not of the contract.

    Attributes:
        slot: the slot.
        requirement: the condition as written in the manifest.
        source: the kernel's file.
    """

    def __init__(self, op: str, slot: str, requirement: str, source: Path | str) -> None:
        super().__init__(
            op, f"{slot}: the kernel {source} requires {requirement}, which this graph breaks"
        )
        self.slot = slot
        self.requirement = requirement
        self.source = str(source)


class KernelInterfaceError(ParityError, ValueError):
    """A kernel's declarations do not fit its entry: a binding no role fills, a params member
    the op does not offer, an override the kernel does not declare. A backend raises it as
    its own KernelBuildError naming the kernel (the message says file, field, what the kernel
    declares and what the op offers).

    Attributes:
        slot: the slot.
        source: the kernel's file.
    """

    def __init__(self, slot: str, source: Path | str, message: str) -> None:
        super().__init__(f"{slot}: {message}")
        self.slot = slot
        self.source = str(source)


def _shown(value: Any) -> str:
    """A value as the user wrote it, with its TOML type."""
    kinds = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return f"{kinds.get(type(value), 'table')} {value!r}"


def _suggest(word: str, choices: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for a near miss (another case, a typo), else ""."""
    choices = list(choices)
    close = [c for c in choices if c.lower() == word.lower()]
    close = close or difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
