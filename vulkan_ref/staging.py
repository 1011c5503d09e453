"""A Vulkan graph's uploads and read-back through the runtime's staging block: what a step
writes (its inputs; on the first submit of a graph every slot's initial data and guard, after
that the guards found damaged) and what it reads (outputs, tensors asked for, every guard),
each as staging regions and block copies with nearby ranges merged (`Staging`); the read
results and the guard check once the submit finished. `vulkan_ref.recording` records the
copies planned here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from graph_format import DTYPES, Graph, StepResult, TensorValue
from vulkan_ref.pool import GUARD_WORD, Arena, StorageSlot
from vulkan_ref.tensor import VTensor

# Ranges of the block at most this far apart are copied as one region (with the bytes
# between): the validation layer's cost per vkCmdCopyBuffer grew faster than its region
# count (lavapipe: 60 regions 0.28 ms, 150 regions 1.8 ms), while copying a few KiB more
# costs the GPU next to nothing.
_MERGE_GAP = 16 << 10


@dataclass
class StagingPlan:
    """Offsets in the runtime's staging block for one submit (16-byte aligned regions)."""

    size: int = 0

    def take(self, nbytes: int) -> int:
        """The offset of a new region of `nbytes`."""
        offset = self.size
        self.size += (nbytes + 15) // 16 * 16
        return offset


@dataclass
class Writes:
    """Host data to stage (offset, bytes) and staging -> block copies (src, dst, size)."""

    host: list[tuple[int, np.ndarray]] = field(default_factory=list)
    copies: list[tuple[int, int, int]] = field(default_factory=list)
    zero: int = 0  # bytes of the block to zero first (the first submit of a graph)


@dataclass
class Reads:
    """Block -> staging copies, where each tensor's bytes land, and each guard's copy."""

    wanted: list[tuple[str, VTensor]] = field(default_factory=list)
    copies: list[tuple[int, int, int]] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)
    guards: list[tuple[VTensor, int]] = field(default_factory=list)


class Staging:
    """The uploads and read-back of one graph's steps.

    Args:
        graph: the graph's description (initial data, outputs).
        tensors: its tensor values by name.
        storage: every storage tensor, scratch included, in placement order.
        arena: the ranges of the pooled block they were placed in.
    """

    def __init__(
        self,
        graph: Graph,
        tensors: Mapping[str, VTensor],
        storage: list[VTensor],
        arena: Arena,
    ) -> None:
        self.graph = graph
        self.tensors = tensors
        self.storage = storage
        self.arena = arena
        # Zeroing, initial data and guards go at the head of the first submit; guards found
        # damaged go at the head of the next one.
        self.needs_init = True
        self.repoison: list[StorageSlot] = []

    @functools.cached_property
    def _storage_by_offset(self) -> list[VTensor]:
        return sorted(self.storage, key=lambda t: t.buffer.offset)

    @functools.cached_property
    def _guard_pattern(self) -> bytes:
        longest = max((t.buffer.guard for t in self.storage), default=0)
        return np.full(longest // 4, GUARD_WORD, np.uint32).tobytes()

    def submitted(self) -> None:
        """The planned writes reached the block: initial data and poison are in place."""
        self.needs_init = False
        self.repoison = []

    def plan_writes(
        self, plan: StagingPlan, tensor_inputs: list[tuple[VTensor, np.ndarray]]
    ) -> Writes:
        """Staging regions and copies of this step's uploads, plus (first submit) the
        initial data and guards of every slot, or (later) the guards found damaged."""
        writes = Writes()
        pieces: list[tuple[int, np.ndarray]] = []  # (block offset, bytes)
        poison = [t.buffer for t in self.storage] if self.needs_init else self.repoison
        if poison:
            pattern = np.frombuffer(self._guard_pattern, np.uint8)
            pieces += [(slot.guard_offset, pattern[: slot.guard]) for slot in poison]
        if self.needs_init:
            assert self.arena.block is not None
            writes.zero = self.arena.used
            for name, tensor in self.tensors.items():
                value = self.graph.values[name]
                assert isinstance(value, TensorValue)
                data = self.graph.initial_data(value)
                if data is not None:
                    array = np.ascontiguousarray(data, DTYPES[value.dtype])
                    pieces.append((tensor.buffer.offset, array.reshape(-1).view(np.uint8)))
        for tensor, array in tensor_inputs:
            pieces.append((tensor.buffer.offset, array.reshape(-1).view(np.uint8)))
        pieces = [(offset, raw) for offset, raw in pieces if raw.size]
        # The first submit writes onto zeros, so the bytes between nearby pieces may be
        # copied as zeros too: far fewer copy regions (the validation layer's checks of a
        # copy grow faster than its region count). Later, only touching pieces merge.
        gap = _MERGE_GAP if self.needs_init else 0
        runs, at = coalesce([(offset, raw.size) for offset, raw in pieces], gap)
        for start, end in runs:
            where = plan.take(end - start)
            writes.copies.append((where, start, end - start))
            if gap:
                writes.host.append((where, np.zeros(end - start, np.uint8)))
        for (_, raw), (run, within) in zip(pieces, at, strict=True):
            writes.host.append((writes.copies[run][0] + within, raw))
        return writes

    def plan_reads(self, plan: StagingPlan, read: Sequence[str], read_raw: Sequence[str]) -> Reads:
        """Copies of every slot's guard, and of the live bytes or the whole allocation
        where asked for, with nearby ranges merged into one copy region."""
        reads = Reads()
        live: dict[str, int] = {}
        wanted = [("output", n) for n in self.graph.outputs]
        wanted += [("tensor", n) for n in read] + [("raw", n) for n in read_raw]
        for kind, name in wanted:
            tensor = self.tensors[name]
            reads.wanted.append((kind, tensor))
            need = tensor.buffer.size if kind == "raw" else (tensor.nbytes + 3) // 4 * 4
            live[name] = max(live.get(name, 0), need)
        runs, placed = self._read_runs(live)
        for start, end in runs:
            reads.copies.append((start, plan.take(end - start), end - start))
        for tensor, run_index, within, guard in placed:
            offset = reads.copies[run_index][1] + within
            if guard:
                reads.guards.append((tensor, offset))
            else:
                reads.at[tensor.name] = offset
        return reads

    def _read_runs(
        self, live: Mapping[str, int]
    ) -> tuple[list[tuple[int, int]], list[tuple[VTensor, int, int, bool]]]:
        """The block ranges to read, `live` bytes of the tensors named and every guard, as
        runs (block start, end), and per range (tensor, its run, its offset in the run,
        whether it is the guard)."""
        # One pass in block order (slots do not overlap): a range at most _MERGE_GAP after
        # the open run's end joins it, else it starts the next run.
        runs: list[tuple[int, int]] = []  # closed runs, (block start, end)
        start = end = -(1 << 62)
        placed: list[tuple[VTensor, int, int, bool]] = []  # (tensor, run, offset in it, guard)
        for tensor in self._storage_by_offset:
            slot = tensor.buffer
            need = live.get(tensor.name, 0) if self.tensors.get(tensor.name) is tensor else 0
            if need:
                offset = slot.offset
                if offset - end > _MERGE_GAP:
                    if placed:
                        runs.append((start, end))
                    start = offset
                end = offset + need
                placed.append((tensor, len(runs), offset - start, False))
            offset = slot.guard_offset
            if offset - end > _MERGE_GAP:
                if placed:
                    runs.append((start, end))
                start = offset
            end = offset + slot.guard
            placed.append((tensor, len(runs), offset - start, True))
        runs.append((start, end))
        return runs, placed

    def check_guards(
        self, view: np.ndarray, guards: Sequence[tuple[VTensor, int]]
    ) -> dict[str, int]:
        """Damaged words per guard read back; damaged guards are re-poisoned next submit."""
        pattern = self._guard_pattern
        damaged: dict[str, int] = {}
        for tensor, offset in guards:
            slot = tensor.buffer
            got = view[offset : offset + slot.guard]
            if got.tobytes() == pattern[: slot.guard]:
                continue
            damaged[tensor.name] = int(np.count_nonzero(got.view(np.uint32) != GUARD_WORD))
            self.repoison.append(slot)
        return damaged

    def read_back(self, view: np.ndarray, reads: Reads, result: StepResult) -> None:
        """Copy what the step read out of the staging block into `result` (outputs, tensors
        asked for, raw allocations)."""
        for kind, tensor in reads.wanted:
            offset = reads.at[tensor.name]
            if kind == "raw":
                result.raw[tensor.name] = view[offset : offset + tensor.buffer.size].copy()
                continue
            raw = view[offset : offset + tensor.nbytes]
            array = raw.view(DTYPES[tensor.dtype]).reshape(tensor.sizes).copy()
            (result.outputs if kind == "output" else result.tensors)[tensor.name] = array


def coalesce(
    pieces: Sequence[tuple[int, int]], gap: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Merge (offset, size) ranges that do not overlap into runs of ranges at most `gap`
    bytes apart.

    Returns:
        The runs as (start, end), in offset order, and per piece (its run, its offset in it).
    """
    order = sorted(range(len(pieces)), key=lambda i: pieces[i][0])
    runs: list[tuple[int, int]] = []
    at: list[tuple[int, int]] = [(0, 0)] * len(pieces)
    for i in order:
        offset, size = pieces[i]
        if runs and offset - runs[-1][1] <= gap:
            start, end = runs[-1]
            runs[-1] = (start, max(end, offset + size))
        else:
            runs.append((offset, offset + size))
        at[i] = (len(runs) - 1, offset - runs[-1][0])
    return runs, at
