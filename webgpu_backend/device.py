"""Adapter and device acquisition for the WebGPU runtime, and the per-device pipeline cache.

One `GPUDevice` serves every graph of a process: pipelines are expensive to create (about
0.1 s each on lavapipe), so they are cached per device, keyed by the kernel's source text
(its sha256), entry point, bind group layout (as the kernel's reflected bindings resolve it)
and override constants, and shared across graphs and Hypothesis examples. Keying by source
rather than by kernel name lets graphs built from another shader folder (a repro bundle's
copies, a user's manifest) live in the same process without picking up each other's modules.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wgpu

# wgpu's own hints; from wgpu.classes because mypy cannot follow the star imports that put
# them in the top-level namespace as well.
from wgpu.classes import (
    GPUAdapter,
    GPUBindGroupLayout,
    GPUComputePipeline,
    GPUDevice,
    GPUError,
    GPUPipelineLayout,
    GPUShaderModule,
)

from graph_format import ADAPTER_VARIABLE, BackendUnavailable, KernelBuildError, pick_adapter
from webgpu_backend.binding import Layout

_BUFFER_TYPES = {
    "storage_rw": wgpu.BufferBindingType.storage,
    "storage_ro": wgpu.BufferBindingType.read_only_storage,
    "uniform": wgpu.BufferBindingType.uniform,
}

# Limits raised to the adapter's maximum so that benchmark-sized weights fit in one binding.
_RAISED_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size")


# sha256 of the source, entry point, bind group layout, sorted pipeline constants
PipelineKey = tuple[str, str, Layout, tuple[tuple[str, int | float], ...]]


@dataclass
class Pipeline:
    """A compute pipeline with the bind group layout it was built against."""

    kernel: str
    pipeline: GPUComputePipeline
    layout: GPUBindGroupLayout


@dataclass
class WebGPUDevice:
    """A device, its limits and its caches of shader modules and pipelines."""

    adapter: GPUAdapter
    device: GPUDevice
    max_workgroups_per_dim: int
    max_invocations_per_workgroup: int
    # Why float16 graphs cannot run here ("" when the device has `shader-f16`).
    f16_unavailable: str = ""
    # by sha256 of the WGSL source
    _modules: dict[str, GPUShaderModule] = field(default_factory=dict)
    _layouts: dict[Layout, tuple[GPUBindGroupLayout, GPUPipelineLayout]] = field(
        default_factory=dict
    )
    _pipelines: dict[PipelineKey, Pipeline] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports."""
        info = dict(self.adapter.info)
        return {
            "backend": "webgpu",
            "api": f"wgpu-native via wgpu-py {wgpu.__version__} ({info.get('backend_type')})",
            "adapter": info.get("device", ""),
            "vendor": info.get("vendor", ""),
            "driver": info.get("description", ""),
            "adapter_type": info.get("adapter_type", ""),
            "max_workgroups_per_dim": self.max_workgroups_per_dim,
            "shader_f16": not self.f16_unavailable,
        }

    def bind_group_layout(self, layout: Layout) -> tuple[GPUBindGroupLayout, GPUPipelineLayout]:
        """(bind group layout, pipeline layout) for bindings of these indices and kinds,
        cached."""
        if layout not in self._layouts:
            entries = [
                {
                    "binding": index,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": _BUFFER_TYPES[kind]},
                }
                for index, kind in layout
            ]
            bgl = self.device.create_bind_group_layout(entries=entries)
            pl = self.device.create_pipeline_layout(bind_group_layouts=[bgl])
            self._layouts[layout] = (bgl, pl)
        return self._layouts[layout]

    def shader_module(self, kernel: str, source: str, digest: str, path: Path) -> GPUShaderModule:
        """The shader module of WGSL `source` (sha256 `digest`), cached.

        Raises:
            KernelBuildError: naga rejected the shader, with its whole message.
        """
        module = self._modules.get(digest)
        if module is None:
            try:
                module = self.device.create_shader_module(label=kernel, code=source)
            except GPUError as err:
                raise KernelBuildError("webgpu", kernel, str(path), str(err)) from None
            self._modules[digest] = module
        return module

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
            KernelBuildError: naga rejected the shader, or the pipeline did not validate;
                with wgpu's whole message (the "Caused by" chain, line and column).
        """
        key = (digest, entry_point, layout, tuple(sorted(constants.items())))
        cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        bgl, pl = self.bind_group_layout(layout)
        module = self.shader_module(kernel, source, digest, path)
        try:
            pipeline = self.device.create_compute_pipeline(
                label=kernel,
                layout=pl,
                compute={"module": module, "entry_point": entry_point, "constants": constants},
            )
        except GPUError as err:
            raise KernelBuildError("webgpu", kernel, str(path), str(err)) from None
        self._pipelines[key] = Pipeline(kernel, pipeline, bgl)
        return self._pipelines[key]


# The Vulkan loader's driver-selection variables: set, they can hide every Vulkan driver.
_DRIVER_VARIABLES = ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES")

# Adapter kinds, most preferred first (the ranking of graph_format's `pick_adapter`).
_PREFERENCE = ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU")


def _chosen_adapter() -> GPUAdapter | None:
    """The "high-performance" adapter, or the one VULKAN_PARITY_ADAPTER names among wgpu's
    Vulkan adapters, ranked by kind (in the Vulkan loader's order within a kind, as the
    Vulkan runtime ranks them, so that both runtimes of a worker open the same GPU)."""
    if not os.environ.get(ADAPTER_VARIABLE, "").strip():
        default: GPUAdapter | None = wgpu.gpu.request_adapter_sync(
            power_preference="high-performance"
        )
        return default

    def rank(adapter: GPUAdapter) -> int:
        kind = str(adapter.info.get("adapter_type", ""))
        return _PREFERENCE.index(kind) if kind in _PREFERENCE else len(_PREFERENCE)

    adapters = wgpu.gpu.enumerate_adapters_sync()
    ranked: list[GPUAdapter] = sorted(
        (a for a in adapters if a.info.get("backend_type") == "Vulkan"), key=rank
    )
    best = sum(1 for a in ranked if rank(a) == rank(ranked[0])) if ranked else 0
    return pick_adapter("webgpu", ranked, best, lambda a: str(a.info.get("device", "?")))


@functools.cache
def get_device() -> WebGPUDevice:
    """The process-wide WebGPU device (created on first use).

    Raises:
        BackendUnavailable: no adapter was found; the message names the package to install.
    """
    try:
        adapter = _chosen_adapter()
    except BackendUnavailable:
        raise
    except Exception as err:  # wgpu raises RuntimeError subclasses with driver text
        adapter = None
        reason = str(err)
    else:
        reason = "request_adapter returned None"
    if adapter is None:
        raise BackendUnavailable(
            f"webgpu: no WebGPU adapter found ({reason}). On Debian install "
            "'mesa-vulkan-drivers libvulkan1' for the lavapipe CPU driver."
        )
    through = adapter.info.get("backend_type")
    if through != "Vulkan":
        # WebGPU is checked against the Vulkan runtime on the same adapter: wgpu's fallback
        # to another API (OpenGL when no Vulkan driver loads) would compare other drivers.
        hidden = [f"{n}={os.environ[n]}" for n in _DRIVER_VARIABLES if os.environ.get(n)]
        raise BackendUnavailable(
            f"webgpu: wgpu offers {adapter.info.get('device', '?')!r} only through {through}, "
            f"not Vulkan{' (with ' + ', '.join(hidden) + ')' if hidden else ''}: this harness "
            "runs WebGPU on wgpu's Vulkan backend, beside the Vulkan runtime on the same "
            "adapter. On Debian install 'mesa-vulkan-drivers libvulkan1' for the lavapipe CPU "
            "driver, or your GPU's Vulkan driver."
        )
    return _open(adapter, "vulkan-parity", [])


def _open(adapter: GPUAdapter, label: str, features: list[str]) -> WebGPUDevice:
    """A device of `adapter` with `features`, plus `shader-f16` where the adapter offers it.

    One device for fp32 and f16 graphs alike, rather than a second one for f16: the feature
    only allows `enable f16;` in a shader; fp32 shaders compile and compute as they do
    without it (naga generates the same SPIR-V), and one device keeps one buffer pool and
    one pipeline cache for a process whose cases mix both (docs/design.md §10).
    """
    f16_unavailable = ""
    if "shader-f16" in adapter.features:
        features = [*features, "shader-f16"]
    else:
        f16_unavailable = (
            f"adapter {adapter.info.get('device', '?')!r} does not offer the 'shader-f16' feature"
        )
    limits = {name: adapter.limits[name] for name in _RAISED_LIMITS}
    device = adapter.request_device_sync(
        label=label, required_features=features, required_limits=limits
    )
    return WebGPUDevice(
        adapter=adapter,
        device=device,
        max_workgroups_per_dim=int(device.limits["max-compute-workgroups-per-dimension"]),
        max_invocations_per_workgroup=int(device.limits["max-compute-invocations-per-workgroup"]),
        f16_unavailable=f16_unavailable,
    )


@functools.cache
def get_timing_device() -> WebGPUDevice:
    """A second process-wide device with the `timestamp-query` feature, for GPU timing only.

    Opt-in (benchmarks, `webgpu_backend.profiling`): parity runs keep `get_device`, which
    requests no optional feature but `shader-f16`. Build graphs for timing on this device
    (`WebGPURuntime(get_timing_device())`); its pipelines are cached separately.

    Raises:
        BackendUnavailable: no adapter, or the adapter does not offer `timestamp-query`.
    """
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    if adapter is None:
        raise BackendUnavailable("webgpu: no WebGPU adapter found for a timing device")
    if "timestamp-query" not in adapter.features:
        raise BackendUnavailable(
            f"webgpu: adapter {adapter.info.get('device', '?')!r} does not offer the "
            "'timestamp-query' feature, so GPU time cannot be measured"
        )
    return _open(adapter, "vulkan-parity-timing", ["timestamp-query"])
