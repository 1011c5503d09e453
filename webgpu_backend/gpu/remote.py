"""The client of the remote WebGPU implementations (`dawn`, `chrome`): one `Implementation`
whose calls become commands for a host running `webgpu_backend/gpu/host/webgpu_host.mjs`.

The protocol batches. Creating buffers, layouts and bind groups, writing buffers and
releasing objects need no answer: the client chooses every object's id, queues the command
(a write's bytes go into the batch's one binary blob) and sends the queue with the next call
that needs an answer, `create_pipeline` or `run`, always a batch's last command. So a step
costs one round trip. A message, both ways, is a frame: u32 LE length, that many bytes of
JSON, u32 LE length, that many bytes of blob (`encode_frame`). Requests are
`{"cmds": [...]}`; answers `{"errors": [...], "build": text?}` plus the read-back as blob,
or `{"lost": message}` once the device is lost. The commands (each `{"op": ..., ...}`):

- `createBuffer {id, label, size, usage}` (usage: a `BufferUsage` value);
- `release {ids}`: a destroyed buffer, or an object this process no longer references;
- `createLayout {id, entries: [[binding, kind], ...]}`: bind group layout + pipeline layout;
- `createBindGroup {id, layout, entries: [[binding, buffer, offset, size], ...]}`;
- `writeBuffer {buffer, offset, at, size}`: `size` bytes of the blob from `at`;
- `createPipeline {id, kernel, path, digest, source?, layout, entry, constants}` (the source
  is sent once per digest: the host caches shader modules by it);
- `run {launches: [[pipeline, bind_group, x, y, z], ...], copies: [[src, src_offset, dst,
  dst_offset, size], ...], readback, nbytes}`.

Errors come back through the host's error scopes and map to the exceptions the in-process
implementation raises: a pipeline's to `KernelBuildError` (the compiler's whole text, each
message `path:line:col`), the others (validation, out of memory, a lost device, a host that
ended) to `DeviceError` at the next `run`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graph_format import DeviceError, KernelBuildError, webgpu_runtime_name
from webgpu_backend.gpu import (
    AdapterFacts,
    BindEntry,
    BufferUsage,
    Copy,
    GpuBindGroup,
    GpuBuffer,
    GpuLayout,
    GpuPipeline,
    Implementation,
    Launch,
    Layout,
)

HOST_DIR = Path(__file__).resolve().parent / "host"

# How long one round trip may take before the host counts as hung. Generous: a cold pipeline
# of a large kernel compiles for seconds on lavapipe, and a loaded 2-core machine slows that
# several times over. A host that ends is noticed at once, whatever this says.
ROUND_TRIP_TIMEOUT_S = 600.0

_LENGTH = struct.Struct("<I")

Message = dict[str, Any]


class HostGone(Exception):
    """The host ended, or stopped answering; the text says how (its last output)."""


def encode_frame(message: Message, blob: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame: u32 LE length, JSON, u32 LE length, blob."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return b"".join((_LENGTH.pack(len(data)), data, _LENGTH.pack(len(blob)), blob))


def frame_length(prefix: bytes | bytearray) -> int | None:
    """The length of the frame that `prefix` begins, once enough of it is there to tell."""
    if len(prefix) < 4:
        return None
    json_end = 4 + int(_LENGTH.unpack_from(prefix, 0)[0])
    if len(prefix) < json_end + 4:
        return None
    return json_end + 4 + int(_LENGTH.unpack_from(prefix, json_end)[0])


def decode_frame(frame: bytes | bytearray) -> tuple[Message, bytes]:
    """(message, blob) of one whole frame.

    Raises:
        HostGone: the bytes are not a frame (a host that wrote something else).
    """
    try:
        json_end = 4 + _LENGTH.unpack_from(frame, 0)[0]
        message = json.loads(bytes(frame[4:json_end]))
        blob_end = json_end + 4 + _LENGTH.unpack_from(frame, json_end)[0]
    except (struct.error, ValueError) as err:
        raise HostGone(f"the host answered something other than a frame ({err})") from None
    if not isinstance(message, dict) or blob_end != len(frame):
        raise HostGone("the host answered a malformed frame")
    return message, bytes(frame[json_end + 4 : blob_end])


class Transport(ABC):
    """How frames reach a host and its answers come back."""

    @abstractmethod
    def exchange(
        self, message: Message, blob: bytes | bytearray | memoryview = b""
    ) -> tuple[Message, bytes]:
        """Send one request and wait for its answer.

        Raises:
            HostGone: the host ended, or did not answer within `ROUND_TRIP_TIMEOUT_S`.
        """

    @abstractmethod
    def close(self) -> None:
        """Stop the host (idempotent)."""


class RemoteImplementation(Implementation):
    """An `Implementation` whose device lives in a host reached through `transport`.

    Args:
        name: `dawn` or `chrome`.
        transport: the open transport, its host's device opened.
        opened: the host's answer to `open` (`{"facts": {"info", "limits", "features"}}`).
        api: what reports call the implementation ("Dawn (npm webgpu 0.6.2) in node 20.1").
    """

    def __init__(self, name: str, transport: Transport, opened: Message, api: str) -> None:
        self.name = name
        self.backend = webgpu_runtime_name(name)
        self._transport = transport
        facts = opened["facts"]
        info: dict[str, str] = facts["info"]
        self.limits = {str(k): int(v) for k, v in facts["limits"].items()}
        self.features = frozenset(str(f) for f in facts["features"])
        # Chrome names no device: its vendor and architecture say what it is ("google
        # swiftshader").
        adapter = (
            info.get("device")
            or info.get("description")
            or " ".join(filter(None, (info.get("vendor"), info.get("architecture"))))
            or "?"
        )
        self.f16_unavailable = (
            ""
            if "shader-f16" in self.features
            else f"adapter {adapter!r} does not offer the 'shader-f16' feature"
        )
        self.facts = AdapterFacts(
            api=api,
            adapter=adapter,
            vendor=info.get("vendor", ""),
            driver=info.get("description", ""),
            adapter_type=info.get("architecture", ""),
            extra={"features": sorted(self.features)},
        )
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._queue: list[Message] = []
        self._blob = bytearray()
        # Ids of objects garbage-collected here (appended by weakref finalizers, in any thread).
        self._released: list[int] = []
        # Errors of objects queued before a createPipeline, raised at the next run.
        self._errors: list[str] = []
        self._lost = ""
        self._sent_digests: set[str] = set()

    # -- objects ----------------------------------------------------------------------------

    def _new_id(self, owner: object) -> int:
        """A fresh id for `owner`, released on the host once `owner` is garbage."""
        object_id = next(self._ids)
        weakref.finalize(owner, self._release, object_id)
        return object_id

    def _release(self, object_id: int) -> None:
        self._released.append(object_id)  # the list of now: `_round_trip` swaps it

    def create_buffer(self, label: str, size: int, usage: BufferUsage) -> GpuBuffer:
        buffer = GpuBuffer(label, size, usage, None)
        buffer.handle = self._new_id(buffer)
        self._send(
            {
                "op": "createBuffer",
                "id": buffer.handle,
                "label": label,
                "size": size,
                "usage": usage,
            }
        )
        return buffer

    def destroy_buffer(self, buffer: GpuBuffer) -> None:
        self._send({"op": "release", "ids": [buffer.handle]})

    def create_layout(self, layout: Layout) -> GpuLayout:
        created = GpuLayout(layout, None)
        created.handle = self._new_id(created)
        self._send({"op": "createLayout", "id": created.handle, "entries": list(layout)})
        return created

    def create_bind_group(self, layout: GpuLayout, entries: Sequence[BindEntry]) -> GpuBindGroup:
        group = GpuBindGroup(None)
        group.handle = self._new_id(group)
        self._send(
            {
                "op": "createBindGroup",
                "id": group.handle,
                "layout": layout.handle,
                "entries": [[e.binding, e.buffer.handle, e.offset, e.size] for e in entries],
            }
        )
        return group

    def write_buffer(self, buffer: GpuBuffer, offset: int, data: bytes | memoryview) -> None:
        with self._lock:
            at = len(self._blob)
            self._blob += data
            self._queue.append(
                {
                    "op": "writeBuffer",
                    "buffer": buffer.handle,
                    "offset": offset,
                    "at": at,
                    "size": len(self._blob) - at,
                }
            )

    def _send(self, command: Message) -> None:
        with self._lock:
            self._queue.append(command)

    # -- round trips ------------------------------------------------------------------------

    def create_pipeline(
        self,
        kernel: str,
        source: str,
        path: Path,
        layout: GpuLayout,
        constants: Mapping[str, int | float],
        entry_point: str,
    ) -> GpuPipeline:
        pipeline = GpuPipeline(kernel, None)
        pipeline.handle = self._new_id(pipeline)
        digest = hashlib.sha256(source.encode()).hexdigest()
        command: Message = {
            "op": "createPipeline",
            "id": pipeline.handle,
            "kernel": kernel,
            "path": str(path),
            "digest": digest,
            "layout": layout.handle,
            "entry": entry_point,
            "constants": dict(constants),
        }
        with self._lock:
            if digest not in self._sent_digests:
                command["source"] = source
            answer, _ = self._round_trip(command)
            self._errors += answer.get("errors", [])
            if "build" in answer:
                raise KernelBuildError(self.backend, kernel, str(path), answer["build"])
            self._sent_digests.add(digest)
        return pipeline

    def compile(self, kernel: str, source: str, path: Path) -> None:
        """See `Implementation.compile`: the host's compiler alone (Tint's messages)."""
        digest = hashlib.sha256(source.encode()).hexdigest()
        command: Message = {
            "op": "compile",
            "kernel": kernel,
            "path": str(path),
            "digest": digest,
            "source": source,
        }
        with self._lock:
            answer, _ = self._round_trip(command)
            self._errors += answer.get("errors", [])
        if "build" in answer:
            raise KernelBuildError(self.backend, kernel, str(path), answer["build"])

    def run(
        self, launches: Sequence[Launch], copies: Sequence[Copy], readback: GpuBuffer, nbytes: int
    ) -> bytes:
        command: Message = {
            "op": "run",
            "launches": [
                [launch.pipeline.handle, launch.bind_group.handle, *launch.grid]
                for launch in launches
            ],
            "copies": [
                [c.src.handle, c.src_offset, c.dst.handle, c.dst_offset, c.size] for c in copies
            ],
            "readback": readback.handle,
            "nbytes": nbytes,
        }
        with self._lock:
            answer, data = self._round_trip(command)
            errors, self._errors = [*self._errors, *answer.get("errors", [])], []
        if errors:
            raise DeviceError(self.backend, errors)
        if len(data) != nbytes:
            raise DeviceError(
                self.backend, [f"the host read back {len(data)} bytes, {nbytes} were asked for"]
            )
        return data

    def _round_trip(self, last: Message) -> tuple[Message, bytes]:
        """Send the queue, ending with `last`, and return the host's answer.

        Raises:
            DeviceError: the device is lost, or the host ended or hung (then every later
                round trip raises it too).
        """
        if self._lost:
            raise DeviceError(self.backend, [self._lost])
        # Swap first: a finalizer appending meanwhile lands in one list or the other.
        released, self._released = self._released, []
        queue, blob = self._queue, self._blob
        self._queue, self._blob = [], bytearray()
        if released:
            # After the queue: an object created and dropped since the last flush is released
            # after its creation.
            queue.append({"op": "release", "ids": released})
        queue.append(last)
        try:
            answer, data = self._transport.exchange({"cmds": queue}, blob)
        except HostGone as gone:
            self._lost = f"device lost: the {self.name} host is gone: {gone}"
            raise DeviceError(self.backend, [self._lost]) from None
        if "lost" in answer:
            self._lost = str(answer["lost"])
            raise DeviceError(self.backend, [*answer.get("errors", []), self._lost])
        return answer, data

    def close(self) -> None:
        """Stop the host; the implementation cannot be used after."""
        with self._lock:
            self._lost = self._lost or f"the {self.name} implementation was closed"
            self._transport.close()


__all__ = [
    "HOST_DIR",
    "ROUND_TRIP_TIMEOUT_S",
    "HostGone",
    "RemoteImplementation",
    "Transport",
    "decode_frame",
    "encode_frame",
    "frame_length",
]
