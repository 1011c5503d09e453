"""The WebGPU device as the runtime sees it: an implementation of the device seam
(`webgpu_backend.gpu`) and its limits, and the per-runtime pipeline cache.

One device per implementation serves every runtime of a process (opening one costs seconds:
a node host, a browser). What a runtime makes on it is its own: pipelines are expensive to
create (about 0.1 s each on lavapipe), so each runtime caches them (`PipelineCache`), keyed
by the kernel's source text (its sha256), entry point, bind group layout (as the kernel's
reflected bindings resolve it) and override constants, and shares them across its graphs
and Hypothesis examples; two runtimes share none, and closing a runtime drops its cache.
Keying by source rather than by kernel name lets graphs built from another shader folder (a
repro bundle's copies, a user's manifest) live in one runtime without picking up each
other's modules.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webgpu_backend.binding import Layout
from webgpu_backend.gpu import GpuLayout, GpuPipeline, Implementation, open_implementation

# sha256 of the source, entry point, bind group layout, sorted pipeline constants
PipelineKey = tuple[str, str, Layout, tuple[tuple[str, int | float], ...]]


@dataclass
class Pipeline:
    """A compute pipeline with the bind group layout it was built against."""

    kernel: str
    pipeline: GpuPipeline
    layout: GpuLayout


@dataclass
class WebGPUDevice:
    """An implementation's device and its limits."""

    gpu: Implementation
    max_workgroups_per_dim: int = 0
    max_invocations_per_workgroup: int = 0
    # Why float16 graphs cannot run here ("" when the device has `shader-f16`).
    f16_unavailable: str = ""

    def __post_init__(self) -> None:
        limits = self.gpu.limits
        self.max_workgroups_per_dim = self.max_workgroups_per_dim or int(
            limits["max-compute-workgroups-per-dimension"]
        )
        self.max_invocations_per_workgroup = int(limits["max-compute-invocations-per-workgroup"])
        self.f16_unavailable = self.f16_unavailable or self.gpu.f16_unavailable

    @property
    def backend(self) -> str:
        """The runtime's name on this device (`webgpu`, `webgpu-dawn`, `webgpu-chrome`)."""
        return self.gpu.backend

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports."""
        facts = self.gpu.facts
        return {
            "backend": self.gpu.backend,
            "implementation": self.gpu.name,
            "api": facts.api,
            "adapter": facts.adapter,
            "vendor": facts.vendor,
            "driver": facts.driver,
            "adapter_type": facts.adapter_type,
            "max_workgroups_per_dim": self.max_workgroups_per_dim,
            "max_storage_buffer_binding_size": self.gpu.limits.get(
                "max-storage-buffer-binding-size", 0
            ),
            "shader_f16": not self.f16_unavailable,
            **facts.extra,
        }


class PipelineCache:
    """The bind group layouts and compute pipelines one runtime made on its device, created
    once each (`WebGPURuntime.pipelines`, handed to every graph it loads)."""

    def __init__(self, device: WebGPUDevice) -> None:
        self.device = device
        self._layouts: dict[Layout, GpuLayout] = {}
        self._pipelines: dict[PipelineKey, Pipeline] = {}

    def __len__(self) -> int:
        """How many pipelines it holds."""
        return len(self._pipelines)

    def layout(self, layout: Layout) -> GpuLayout:
        """The bind group and pipeline layout of bindings of these indices and kinds,
        cached."""
        made = self._layouts.get(layout)
        if made is None:
            made = self._layouts[layout] = self.device.gpu.create_layout(layout)
        return made

    def pipeline(
        self,
        kernel: str,
        source: str,
        digest: str,
        path: Path,
        layout: Layout,
        constants: dict[str, int | float],
        entry_point: str = "main",
    ) -> Pipeline:
        """The compute pipeline of WGSL `source` (sha256 `digest`, read from `path`) with
        this bind group layout and these override constants, cached.

        Raises:
            KernelBuildError: the implementation's compiler rejected the shader, or the
                pipeline did not validate; with its whole message (line and column).
        """
        key = (digest, entry_point, layout, tuple(sorted(constants.items())))
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        made = self.layout(layout)
        pipeline = self.device.gpu.create_pipeline(
            kernel, source, path, made, constants, entry_point
        )
        self._pipelines[key] = Pipeline(kernel, pipeline, made)
        return self._pipelines[key]

    def close(self) -> None:
        """Drop every cached layout and pipeline (idempotent); graphs holding one keep it."""
        self._layouts.clear()
        self._pipelines.clear()


def get_device(implementation: str = "wgpu") -> WebGPUDevice:
    """The process-wide device of a WebGPU implementation (`wgpu`, `dawn`, `chrome`), opened
    on first use.

    Raises:
        BackendUnavailable: the implementation or an adapter for it is missing; the message
            names what to install.
    """
    return _device(implementation)


# The process's devices, the one state kept for the process: a device is the handle every
# runtime of an implementation shares (opening one costs seconds), and holds nothing a
# runtime made or cached (`PipelineCache`, `BufferPool` and the kernel catalog are each
# runtime's own).
@functools.cache
def _device(implementation: str) -> WebGPUDevice:
    # Cached by the name alone: `get_device()` and `get_device("wgpu")` are one device.
    return WebGPUDevice(open_implementation(implementation))


@functools.cache
def get_timing_device() -> WebGPUDevice:
    """A second process-wide wgpu device with the `timestamp-query` feature, for GPU timing
    only.

    Opt-in (benchmarks, `webgpu_backend.profiling`): parity runs keep `get_device`, which
    requests no optional feature but `shader-f16`. Build graphs for timing on this device
    (`WebGPURuntime(get_timing_device())`).

    Raises:
        BackendUnavailable: no adapter, or the adapter does not offer `timestamp-query`.
    """
    from webgpu_backend.gpu.wgpu_native import WgpuImplementation

    return WebGPUDevice(WgpuImplementation.open(timing=True))
