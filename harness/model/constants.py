"""Work derived from a graph's constants, done once per case instead of once per call.

The reference evaluator holds a graph's constants as read-only float64 arrays for the whole
case (`harness.check.reference.ReferenceEvaluator.constants`), and the per-op check reads
the same arrays. An op's reference and budget may derive something expensive from them
(the q4 dequantization of a weight) on every call: `remember` computes it once for as long
as those arrays live. A writable array may change under a memo, so it is never remembered.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

# (key, id of every array) -> (a weak reference to every array, the remembered value). Kept
# for the process: a memo of a pure function of read-only arrays, each hit checked against
# the arrays themselves (the weak references), never an id alone, and each entry dropped
# with its arrays.
_MEMO: dict[tuple[Hashable, ...], tuple[tuple[weakref.ref[np.ndarray], ...], Any]] = {}


def remember(key: Hashable, arrays: Sequence[np.ndarray], compute: Callable[[], T]) -> T:
    """`compute()`, done once while every array of `arrays` lives, if all are read-only.

    Args:
        key: what is computed from the arrays, with any other argument it depends on
            (`("q4_dequantize", group_size, k)`).
        arrays: the arrays the result is derived from; it is remembered only when none of
            them is writable, and forgotten when any of them is freed.
        compute: computes the result; an array it returns is made read-only when it is
            remembered, so no caller can change what later callers get.
    """
    if any(a.flags.writeable for a in arrays):
        return compute()
    entry = (key, *(id(a) for a in arrays))
    hit = _MEMO.get(entry)
    if hit is not None and all(ref() is a for ref, a in zip(hit[0], arrays, strict=True)):
        remembered: T = hit[1]
        return remembered
    value = compute()
    if isinstance(value, np.ndarray):
        value.flags.writeable = False

    def forget(_: object, entry: tuple[Hashable, ...] = entry) -> None:
        _MEMO.pop(entry, None)

    _MEMO[entry] = (tuple(weakref.ref(a, forget) for a in arrays), value)
    return value


def remembered_count() -> int:
    """How many results are remembered now (for tests)."""
    return len(_MEMO)
