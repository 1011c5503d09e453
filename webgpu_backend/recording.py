"""Staging and recording one graph's work on its device: the initial contents of its
blocks, the host writes of a step (params uniforms, inputs, canary fills, re-poisoned
guards), the step's dispatches and read-back copies, and the guard check after it.

Everything here goes through the device seam (`webgpu_backend.gpu.Implementation`): writes
are queued, the dispatches and copies are handed to `Implementation.run` as one submit, and
its read-back is the step's one wait (one round trip for a remote implementation).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from webgpu_backend.gpu import Copy, Implementation, Launch
from webgpu_backend.nodes import ParamsBuffer, Scheduled
from webgpu_backend.pool import (
    GUARD_WORD,
    STORAGE,
    UNIFORM,
    Arena,
    Block,
    BufferPool,
    Slot,
    align_up,
)
from webgpu_backend.tensor import WebGPUTensor, storage_size

# A slot whose live bytes leave at most this much slack is read back whole with its guard;
# read-back regions at most this far apart in a block are merged into one copy.
_WHOLE_COPY_SLACK = 4096
_MERGE_GAP = 4096


@dataclass
class _Copy:
    """One copy from a block into the read-back buffer."""

    block: Block
    src: int
    dst: int
    size: int


@dataclass
class Reads:
    """The read-back plan of one execute: what was asked for, the copies, where each slot's
    bytes and each guard land, and the bytes in all."""

    wanted: list[tuple[str, WebGPUTensor]] = field(default_factory=list)
    copies: list[_Copy] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)
    guards: list[tuple[Slot, int]] = field(default_factory=list)
    size: int = 0

    def add(self, block: Block, current: _Copy | None, slot: Slot, src: int, size: int) -> _Copy:
        """Read `size` bytes at `src` of `slot` in `block`: extending `current` (the copy
        being extended) when the gap is short, else a new copy; returns the copy extended."""
        gap = src - (current.src + current.size) if current else -1
        if current is not None and 0 <= gap <= _MERGE_GAP:
            dst = current.dst + current.size + gap
            current.size += gap + size
        else:
            dst = self.size
            current = _Copy(block, src, dst, size)
            self.copies.append(current)
        self.size = max(self.size, align_up(dst + size, 8))
        if src == slot.offset:
            self.at[slot.name] = dst
            if slot.guard and size >= slot.binding_size:
                self.guards.append((slot, dst + slot.size))
        elif slot.guard:
            self.guards.append((slot, dst))
        return current


def _pieces(slot: Slot, nbytes: int) -> list[tuple[int, int]]:
    """(offset, bytes) to read of a slot of which `nbytes` are wanted: the slot whole with its
    guard when that leaves a short slack, else the bytes wanted and the guard apart."""
    if nbytes and slot.size - nbytes <= _WHOLE_COPY_SLACK:
        return [(slot.offset, slot.binding_size)]
    pieces = [(slot.offset, nbytes)] if nbytes else []
    return pieces + ([(slot.guard_offset, slot.guard)] if slot.guard else [])


class Recorder:
    """One graph's traffic with its device, once its arena is placed.

    Args:
        gpu: the implementation the graph runs on.
        pool: the runtime's pool (the read-back buffer).
        arena: the graph's placed blocks.
        guarded: every storage slot with a guard, with the name damage is reported under.
        params: the graph's params uniforms, in creation order.
    """

    def __init__(
        self,
        gpu: Implementation,
        pool: BufferPool,
        arena: Arena,
        guarded: Sequence[tuple[str, Slot]],
        params: Sequence[ParamsBuffer],
    ) -> None:
        self.gpu = gpu
        self.pool = pool
        self.arena = arena
        self.guarded = guarded
        self.params = params
        self._repoison: list[Slot] = []
        # Host images of the uniform blocks, which params writes are batched through.
        self._uniform_images = {
            p.block.serial: np.zeros(p.used, np.uint8)
            for p in arena.blocks
            if p.block.kind == UNIFORM
        }

    def write_initial(self, initial: Mapping[Slot, np.ndarray]) -> None:
        """Write every storage block whole: zeros, as a new WebGPU buffer starts (reused
        memory must too), then each slot's initial data and a poisoned guard; one write per
        block."""
        for placed in self.arena.blocks:
            if placed.block.kind != STORAGE:
                continue
            image = np.zeros(placed.used, np.uint8)
            words = image.view(np.uint32)
            for slot in placed.slots:
                words[slot.guard_offset // 4 : (slot.guard_offset + slot.guard) // 4] = GUARD_WORD
                data = initial.get(slot)
                if data is not None:
                    raw = data.reshape(-1).view(np.uint8)
                    image[slot.offset : slot.offset + raw.size] = raw
            self.gpu.write_buffer(placed.block.buffer, 0, image.data)

    def stage(
        self,
        uploads: Sequence[tuple[WebGPUTensor, np.ndarray]],
        fill: Sequence[tuple[WebGPUTensor, int, int]],
    ) -> None:
        """Queue a step's host writes: changed params, re-poisoned guards, slack fills
        ((tensor, byte offset, word): that word from there to the end of its allocation),
        inputs."""
        self._flush_params()
        for slot in self._repoison:
            self.gpu.write_buffer(slot.buffer, slot.guard_offset, self._guard_pattern[: slot.guard])
        self._repoison = []
        for tensor, offset, word in fill:
            words = (tensor.alloc_nbytes - offset) // 4
            if words > 0:
                self.gpu.write_buffer(
                    tensor.slot.buffer,
                    tensor.slot.offset + offset,
                    np.full(words, word, np.uint32).data,
                )
        for tensor, data in uploads:
            raw = data.tobytes()
            if len(raw) % 4:
                raw += bytes(4 - len(raw) % 4)  # WebGPU copies whole 4-byte words
            self.gpu.write_buffer(tensor.slot.buffer, tensor.slot.offset, raw)

    def run(
        self, scheduled: Sequence[Scheduled], wanted: Sequence[tuple[str, WebGPUTensor]]
    ) -> tuple[bytes, Reads]:
        """Run the step's dispatches, then copy what is `wanted` (kind "output", "tensor" or
        "raw", and the tensor) and every guard into the read-back buffer; return its bytes
        and where each piece landed.

        Raises:
            DeviceError: a validation error or a lost device.
        """
        launches = [
            Launch(item.run.pipeline.pipeline, item.run.bind_group, item.record.physical_grid)
            for item in scheduled
            if item.run is not None
        ]
        reads = self._plan_reads(wanted)
        readback = self.pool.readback(reads.size)
        copies = [Copy(c.block.buffer, c.src, readback, c.dst, c.size) for c in reads.copies]
        return self.gpu.run(launches, copies, readback, reads.size), reads

    def check_guards(self, blob: bytes, guards: Sequence[tuple[Slot, int]]) -> dict[str, int]:
        """Damaged words per guard read back; damaged guards are re-poisoned next step."""
        pattern = self._guard_pattern
        damaged: dict[str, int] = {}
        for slot, offset in guards:
            got = blob[offset : offset + slot.guard]
            if got == pattern[: slot.guard]:
                continue
            words = np.frombuffer(got, np.uint32)
            damaged[slot.name] = int(np.count_nonzero(words != GUARD_WORD))
            self._repoison.append(slot)
        return damaged

    def _flush_params(self) -> None:
        """Write every params uniform that changed: one write per uniform block, spanning
        the changed ones (a host image of the block keeps the bytes in between)."""
        spans: dict[int, tuple[Slot, int, int]] = {}
        for params in self.params:
            if not params.dirty:
                continue
            slot = params.slot
            image = self._uniform_images[slot.block_serial]
            image[slot.offset : slot.offset + len(params.data)] = np.frombuffer(
                params.data, np.uint8
            )
            params.dirty = False
            _, lo, hi = spans.get(slot.block_serial, (slot, slot.offset, 0))
            spans[slot.block_serial] = (
                slot,
                min(lo, slot.offset),
                max(hi, slot.offset + slot.size),
            )
        for serial, (slot, lo, hi) in spans.items():
            self.gpu.write_buffer(slot.buffer, lo, self._uniform_images[serial][lo:hi].data)

    @functools.cached_property
    def _guard_pattern(self) -> bytes:
        longest = max((slot.guard for _, slot in self.guarded), default=0)
        return np.full(longest // 4, GUARD_WORD, np.uint32).tobytes()

    def _plan_reads(self, wanted: Sequence[tuple[str, WebGPUTensor]]) -> Reads:
        """Copies into the read-back buffer of every guard and of the bytes asked for.

        A slot asked for whole ("raw"), or whose live bytes leave a short slack, is copied
        with its guard in one piece; regions close together in a block are merged into one
        copy (the bytes between come along), so a graph whose tensors are all read costs
        about one copy per block.
        """
        reads = Reads(wanted=list(wanted))
        need: dict[Slot, int] = {}
        for kind, tensor in wanted:
            nbytes = tensor.alloc_nbytes if kind == "raw" else storage_size(tensor.cur_nbytes)
            need[tensor.slot] = max(need.get(tensor.slot, 0), nbytes)
        for placed in self.arena.blocks:
            if placed.block.kind != STORAGE:
                continue
            current: _Copy | None = None  # the copy being extended
            for slot in placed.slots:
                for src, size in _pieces(slot, need.get(slot, 0)):
                    current = reads.add(placed.block, current, slot, src, size)
        return reads
