"""The device seam of the WebGPU runtime: one runtime, several WebGPU implementations.

The runtime's logic (resize hooks, slots, binding, the buffer pool, guards and canaries) is
one Python implementation (`webgpu_backend.graph`, `webgpu_backend.pool`). What it asks of a
device is this module's `Implementation`: a handful of calls, each a plain WebGPU operation,
that three implementations provide (docs/design.md §2.1):

- `wgpu`: wgpu-native (Naga) in this process, through wgpu-py (`webgpu_backend.gpu.wgpu_native`);
- `dawn`: Dawn (Tint) in a node host process running the pinned npm `webgpu` package
  (`webgpu_backend.gpu.dawn`);
- `chrome`: a page in headless Chromium (`webgpu_backend.gpu.chrome`).

The remote two share one client (`webgpu_backend.gpu.remote`) and one JS module
(`webgpu_backend/gpu/host/webgpu_host.mjs`). Their protocol batches: creating objects,
writing buffers and recording a step are sent without waiting (the client chooses every
object's id), and a step costs one round trip, for its read-back. Errors come back through
WebGPU error scopes and map to the exceptions the wgpu path raises: `KernelBuildError` with
the compiler's whole text (line:col), `DeviceError` for validation errors and a lost device.

Op modules never see an implementation: they build through `WebGPUGraph`, which records
`Launch`es and `Copy`s and hands them to `Implementation.run` once per step.
"""

from __future__ import annotations

import atexit
import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from graph_format import webgpu_runtime_name

# How a kernel sees each of its bindings, by binding index: ("storage_rw" | "storage_ro" |
# "uniform"), as `webgpu_backend.binding.Layout`.
Layout = tuple[tuple[int, str], ...]

# The implementations are `graph_format.WEBGPU_IMPLEMENTATIONS`, the default (wgpu) first:
# it runs in process with no other program than node (which reflection needs anyway), on
# every Vulkan driver the Vulkan runtime runs on; dawn needs a lavapipe of Mesa 25 or a GPU
# driver, chrome a browser. Each runtime's name is `graph_format.webgpu_runtime_name`'s.

# The Vulkan loader's driver-selection variables: set, they can hide every Vulkan driver
# (wgpu says so when it finds none), and the dawn host's environment replaces them.
DRIVER_VARIABLES = ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES")


class BufferUsage(StrEnum):
    """What a buffer is for; each implementation maps it to its usage flags."""

    STORAGE = "storage"  # STORAGE | COPY_SRC | COPY_DST
    UNIFORM = "uniform"  # UNIFORM | COPY_DST
    READBACK = "readback"  # MAP_READ | COPY_DST


@dataclass(eq=False)
class GpuBuffer:
    """A buffer of an implementation; `handle` is that implementation's own object (a wgpu
    GPUBuffer, or the id a remote host knows it by)."""

    label: str
    size: int
    usage: BufferUsage
    handle: Any


@dataclass(eq=False)
class GpuLayout:
    """A bind group layout and the pipeline layout over it, as one object."""

    layout: Layout
    handle: Any


@dataclass(eq=False)
class GpuPipeline:
    """A compute pipeline of one kernel."""

    kernel: str
    handle: Any


@dataclass(eq=False)
class GpuBindGroup:
    """A bind group: buffer ranges bound to a layout's binding indices."""

    handle: Any


@dataclass(frozen=True)
class Launch:
    """One dispatch of a step: a pipeline, its bind group (group 0), a physical grid."""

    pipeline: GpuPipeline
    bind_group: GpuBindGroup
    grid: tuple[int, int, int]


@dataclass(frozen=True)
class Copy:
    """A buffer-to-buffer copy recorded after a step's dispatches (the read-back)."""

    src: GpuBuffer
    src_offset: int
    dst: GpuBuffer
    dst_offset: int
    size: int


@dataclass(frozen=True)
class BindEntry:
    """One binding of a bind group: `size` bytes of `buffer` from `offset`."""

    binding: int
    buffer: GpuBuffer
    offset: int
    size: int


@dataclass
class AdapterFacts:
    """What reports say about the adapter an implementation opened."""

    api: str  # "wgpu-native via wgpu-py 0.32.0 (Vulkan)", "Dawn (npm webgpu 0.6.2) in node 20"
    adapter: str  # the device's name
    vendor: str = ""
    driver: str = ""
    adapter_type: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Implementation(ABC):
    """A WebGPU device as the runtime uses it. One per process and implementation
    (`open_implementation`); graphs share it, their buffers through a `BufferPool`.

    Attributes:
        name: `wgpu`, `dawn` or `chrome`.
        backend: the runtime's name for reports and blame (`webgpu_runtime_name`).
        facts: the adapter, for reports.
        limits: the device's limits by WebGPU name (`max-compute-workgroups-per-dimension`,
            `min-storage-buffer-offset-alignment`, ...), as requested (`max-buffer-size` and
            `max-storage-buffer-binding-size` raised to the adapter's).
        features: the device's features (`shader-f16` when the adapter offers it).
        f16_unavailable: why float16 graphs cannot run ("" when `shader-f16` is enabled).
    """

    name: str
    backend: str
    facts: AdapterFacts
    limits: Mapping[str, int]
    features: frozenset[str]
    f16_unavailable: str

    @abstractmethod
    def create_buffer(self, label: str, size: int, usage: BufferUsage) -> GpuBuffer:
        """A new buffer of `size` bytes (zeroed, as WebGPU creates them)."""

    @abstractmethod
    def destroy_buffer(self, buffer: GpuBuffer) -> None:
        """Release a buffer nothing will use again."""

    @abstractmethod
    def create_layout(self, layout: Layout) -> GpuLayout:
        """A bind group layout of these (binding index, kind) entries, all visible to
        compute, and the pipeline layout of that one group."""

    @abstractmethod
    def create_pipeline(
        self,
        kernel: str,
        source: str,
        path: Path,
        layout: GpuLayout,
        constants: Mapping[str, int | float],
        entry_point: str,
    ) -> GpuPipeline:
        """The compute pipeline of WGSL `source` (read from `path`, for messages) with this
        layout and these override constants. Not cached here (`WebGPUDevice` caches).

        Raises:
            KernelBuildError: the compiler rejected the shader, or the pipeline did not
                validate; with the implementation's whole message (line and column).
        """

    @abstractmethod
    def compile(self, kernel: str, source: str, path: Path) -> None:
        """Compile WGSL `source` alone (no pipeline): for the compiler's verdict on a
        kernel that reflection refused.

        Raises:
            KernelBuildError: the compiler rejected it, with its whole message.
        """

    @abstractmethod
    def create_bind_group(self, layout: GpuLayout, entries: Sequence[BindEntry]) -> GpuBindGroup:
        """A bind group of `layout` binding these buffer ranges."""

    @abstractmethod
    def write_buffer(self, buffer: GpuBuffer, offset: int, data: bytes | memoryview) -> None:
        """Queue a write of `data` at `offset` (ordered before the next `run`)."""

    @abstractmethod
    def run(
        self, launches: Sequence[Launch], copies: Sequence[Copy], readback: GpuBuffer, nbytes: int
    ) -> bytes:
        """Record `launches` in one compute pass, then `copies`, submit with every write
        queued before, and return the first `nbytes` of `readback` once the GPU is done.

        Raises:
            DeviceError: a validation error (of this step, or of an object created since
                the last step) or a lost device, with the implementation's messages.
        """

    def close(self) -> None:  # noqa: B027 - the in-process one has nothing to stop
        """Release the device (a remote implementation stops its host)."""


def open_implementation(name: str = "wgpu") -> Implementation:
    """The process-wide device of implementation `name` (opened on first use).

    Raises:
        BackendUnavailable: the implementation cannot run here; the message says what to
            install (node and the npm package for dawn, a browser for chrome, a driver).
        ValueError: an unknown implementation.
    """
    webgpu_runtime_name(name)  # refuses an unknown name
    return _open(name)


# One device per implementation and process (`webgpu_backend.device`: it holds no runtime's
# cache), cached by the name alone.
@functools.cache
def _open(name: str) -> Implementation:
    opened: Implementation
    if name == "wgpu":
        from webgpu_backend.gpu.wgpu_native import WgpuImplementation

        opened = WgpuImplementation.open()
    elif name == "dawn":
        from webgpu_backend.gpu.dawn import DawnImplementation

        opened = DawnImplementation.open()
    else:
        from webgpu_backend.gpu.chrome import ChromeImplementation

        opened = ChromeImplementation.open()
    # A process-wide device is never closed by its users: its host stops at exit.
    atexit.register(opened.close)
    return opened


__all__ = [
    "DRIVER_VARIABLES",
    "AdapterFacts",
    "BindEntry",
    "BufferUsage",
    "Copy",
    "GpuBindGroup",
    "GpuBuffer",
    "GpuLayout",
    "GpuPipeline",
    "Implementation",
    "Launch",
    "Layout",
    "open_implementation",
]
