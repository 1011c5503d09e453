"""Canaries: poisoned slack words around each buffer, and the stale reads and slack writes
they catch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from graph_format import (
    DTYPES,
    Graph,
    StepResult,
)
from harness.check.contract import ModelStep
from harness.check.divergence import (
    CanaryDetails,
    Divergence,
    Kind,
    StaleReadDetails,
)
from harness.check.oracles.where import consumer, writer

# ---------------------------------------------------------------------------- canaries

# Slack poison is a quiet NaN whose top 12 bits are 0x7FE (sign 0, exponent all ones, the
# quiet bit and a marker bit) with bit 20 clear, tagged in the low 20 bits with the tensor it
# was written into (9 bits) and the step (11 bits). No canonical NaN matches the mask: x86
# and Arm produce 0x7FC00000 (marker clear), NVIDIA 0x7FFFFFFF (bit 20 set), x86 SSE's
# "indefinite" 0xFFC00000 (sign set). Distinct tags per tensor make a slack-to-slack copy
# visible as a write, and let a stale read name the tensor and step its value came from.
# A copy keeps the tag on every device; arithmetic on poison keeps it where NaN payloads
# propagate (lavapipe) and turns into a canonical NaN where they do not (NVIDIA), which the
# numeric oracle then reports as a NaN.
POISON_MARK = 0x7FE00000
POISON_MASK = 0xFFF00000
# The upper half of a poison word as a 16-bit element (float16 tensors).
POISON_HALF_MARK = POISON_MARK >> 16
POISON_HALF_MASK = POISON_MASK >> 16


def poison_word(step: int, tensor_id: int) -> int:
    """The u32 written into the slack of canaried tensor `tensor_id` before step `step`."""
    return POISON_MARK | ((tensor_id & 0x1FF) << 11) | (step & 0x7FF)


def decode_poison(word: int) -> tuple[int, int]:
    """(tensor id, step) of a poison word."""
    return (word >> 11) & 0x1FF, word & 0x7FF


def canary_fill(
    step: int, graph: Graph, expected: ModelStep, canaried: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Per canaried tensor, (first slack byte, poison word) for the contract's live dims."""
    fill = {}
    for tensor_id, name in enumerate(canaried):
        itemsize = DTYPES[graph.tensor(name).dtype].itemsize
        live = int(np.prod(expected.cur_dims[name])) * itemsize
        fill[name] = ((live + 3) // 4 * 4, poison_word(step, tensor_id))
    return fill


def check_canaries(
    step: int,
    graph: Graph,
    expected: ModelStep,
    results: Mapping[str, StepResult],
    fill: Mapping[str, tuple[int, int]],
) -> list[Divergence]:
    """Slack unchanged after the step (no write past the live size), no guard damaged (no
    write past the allocation), and no poison in any live value read back (no stale read)."""
    out: list[Divergence] = []
    canaried = list(fill)
    for name, res in results.items():
        # One vectorized look over all tensors first (a step has dozens of small ones, and
        # numpy's cost per call is what this check costs); the tensor-by-tensor search only
        # runs to describe what that look found.
        slacks = {t: _slack(res.raw[t], offset) for t, (offset, _) in fill.items()}
        if slacks and _any_word_differs(slacks, fill):
            out += _slack_writes(step, graph, expected, name, slacks, fill)
        # A write past the allocation itself, found in the guard the runtime keeps after it
        # (StepResult.guard_writes); a scratch buffer is named `<op node>.<label>`.
        for tensor, written in res.guard_writes.items():
            owner = next((n.name for n in graph.ops if tensor.startswith(f"{n.name}.")), None)
            out.append(
                Divergence(
                    step,
                    Kind.CANARY_WRITE,
                    name,
                    f"{name} wrote {written} word(s) past the allocation of {tensor!r} (into "
                    "the guard that follows it)",
                    op=writer(graph, tensor) or owner or consumer(graph, tensor),
                    tensor=tensor,
                    details=CanaryDetails(written, past_allocation=True),
                )
            )
        read = {
            tensor: array
            for tensor, array in {**res.outputs, **res.tensors}.items()
            if array.dtype.itemsize in (2, 4) and not graph.tensor(tensor).state
        }
        live = {
            tensor: np.ascontiguousarray(array).view(np.uint32).ravel()
            for tensor, array in read.items()
            if array.dtype.itemsize == 4
        }
        halves = {
            tensor: np.ascontiguousarray(array).view(np.uint16).ravel()
            for tensor, array in read.items()
            if array.dtype.itemsize == 2
        }
        if (live and _any_poison(live)) or (halves and _any_half_poison(halves)):
            out += _stale_reads(step, graph, name, live, halves, canaried)
    return out


def _slack(raw: np.ndarray, offset: int) -> np.ndarray:
    """The whole words of a raw read-back from byte `offset` on, as uint32."""
    return raw[offset : len(raw) // 4 * 4].view(np.uint32)


def _any_word_differs(
    slacks: Mapping[str, np.ndarray], fill: Mapping[str, tuple[int, int]]
) -> bool:
    """Whether any slack holds a word other than its tensor's poison."""
    words = np.array([fill[t][1] for t in slacks], np.uint32)
    expected = np.repeat(words, [s.size for s in slacks.values()])
    return bool((np.concatenate(list(slacks.values())) != expected).any())


def _any_poison(live: Mapping[str, np.ndarray]) -> bool:
    """Whether any live 4-byte word carries the slack poison's mark."""
    return bool(((np.concatenate(list(live.values())) & POISON_MASK) == POISON_MARK).any())


def _any_half_poison(halves: Mapping[str, np.ndarray]) -> bool:
    """Whether any live 16-bit element holds a poison word's upper half."""
    joined = np.concatenate(list(halves.values()))
    return bool(((joined & POISON_HALF_MASK) == POISON_HALF_MARK).any())


def _slack_writes(
    step: int,
    graph: Graph,
    expected: ModelStep,
    name: str,
    slacks: Mapping[str, np.ndarray],
    fill: Mapping[str, tuple[int, int]],
) -> list[Divergence]:
    """A canary write per slack that a backend changed."""
    out: list[Divergence] = []
    for tensor, (offset, word) in fill.items():
        hit = np.flatnonzero(slacks[tensor] != word)
        if not hit.size:
            continue
        itemsize = DTYPES[graph.tensor(tensor).dtype].itemsize
        elements = sorted({(offset + 4 * int(h)) // itemsize for h in hit[:4096]})
        live_numel = int(np.prod(expected.cur_dims[tensor]))
        out.append(
            Divergence(
                step,
                Kind.CANARY_WRITE,
                name,
                f"{name} wrote {hit.size} word(s) past the live size of {tensor!r} "
                f"(first at element {elements[0]}; live numel {live_numel})",
                op=writer(graph, tensor),
                tensor=tensor,
                details=CanaryDetails(
                    int(hit.size),
                    first_element=elements[0],
                    elements=elements[:256],
                    live_numel=live_numel,
                    max_numel=int(np.prod(graph.tensor(tensor).dims)),
                ),
            )
        )
    return out


def _stale_reads(
    step: int,
    graph: Graph,
    name: str,
    live: Mapping[str, np.ndarray],
    halves: Mapping[str, np.ndarray],
    canaried: list[str],
) -> list[Divergence]:
    """A stale read per live value read back that holds slack poison: 4-byte words carrying
    the poison's mark (each names the tensor and step it came from), or 16-bit elements
    holding a poison word's upper half (an f16 NaN no arithmetic produces, 0x7FE0-0x7FEF;
    the tag is split between the halves, so the source is not named)."""
    found: list[tuple[str, np.ndarray, list[tuple[str, int | str]]]] = []
    for tensor, words in live.items():
        poisoned = np.flatnonzero((words & POISON_MASK) == POISON_MARK)
        if poisoned.size:
            origins: list[tuple[str, int | str]] = sorted(
                {
                    (canaried[t] if t < len(canaried) else f"#{t}", st)
                    for t, st in (decode_poison(int(w)) for w in words[poisoned[:256]])
                }
            )
            found.append((tensor, poisoned, origins))
    for tensor, half in halves.items():
        poisoned = np.flatnonzero((half & POISON_HALF_MASK) == POISON_HALF_MARK)
        if poisoned.size:
            found.append((tensor, poisoned, [("a poison word's upper half", "?")]))
    out: list[Divergence] = []
    for tensor, poisoned, named in found:
        sources = ", ".join(f"{t} at step {st}" for t, st in named[:4])
        out.append(
            Divergence(
                step,
                Kind.STALE_READ,
                name,
                f"{name}: {poisoned.size} live element(s) of {tensor!r} hold slack poison "
                f"(from {sources}); first flat index {int(poisoned[0])}",
                op=writer(graph, tensor),
                tensor=tensor,
                details=StaleReadDetails(
                    int(poisoned.size),
                    int(poisoned[0]),
                    [int(i) for i in poisoned[:256]],
                    [list(o) for o in named],
                ),
            )
        )
    return out
