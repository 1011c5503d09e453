"""The `wgpu` implementation of the device seam: wgpu-native (Naga) in this process, through
wgpu-py. The default implementation, and the only one with GPU timing
(`webgpu_backend.profiling`, `WgpuImplementation.open(timing=True)`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import wgpu

# wgpu's own hints; from wgpu.classes because mypy cannot follow the star imports that put
# them in the top-level namespace as well.
from wgpu.classes import GPUAdapter, GPUDevice, GPUError, GPUShaderModule, GPUValidationError

from graph_format import (
    ADAPTER_VARIABLE,
    BackendUnavailable,
    DeviceError,
    KernelBuildError,
    pick_adapter,
    webgpu_runtime_name,
)
from webgpu_backend.gpu import (
    DRIVER_VARIABLES,
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

_BUFFER_TYPES = {
    "storage_rw": wgpu.BufferBindingType.storage,
    "storage_ro": wgpu.BufferBindingType.read_only_storage,
    "uniform": wgpu.BufferBindingType.uniform,
}
_USAGES = {
    BufferUsage.STORAGE: wgpu.BufferUsage.STORAGE
    | wgpu.BufferUsage.COPY_SRC
    | wgpu.BufferUsage.COPY_DST,
    BufferUsage.UNIFORM: wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST,
    BufferUsage.READBACK: wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST,
}

# Limits raised to the adapter's maximum so that benchmark-sized weights fit in one binding.
RAISED_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size")

# Adapter kinds, most preferred first (the ranking of graph_format's `pick_adapter`).
_PREFERENCE = ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU")


class WgpuImplementation(Implementation):
    """wgpu-native's device on the chosen Vulkan adapter. `device` is wgpu-py's GPUDevice,
    for GPU timing (`webgpu_backend.profiling`) and benchmarks that go under the runtime."""

    name = "wgpu"

    def __init__(self, adapter: GPUAdapter, device: GPUDevice, f16_unavailable: str) -> None:
        self.backend = webgpu_runtime_name(self.name)
        self.adapter = adapter
        self.device = device
        self.queue = device.queue
        info = dict(adapter.info)
        self.facts = AdapterFacts(
            api=f"wgpu-native via wgpu-py {wgpu.__version__} ({info.get('backend_type')})",
            adapter=str(info.get("device", "")),
            vendor=str(info.get("vendor", "")),
            driver=str(info.get("description", "")),
            adapter_type=str(info.get("adapter_type", "")),
        )
        self.limits = {str(k): int(v) for k, v in device.limits.items() if isinstance(v, int)}
        self.features = frozenset(str(f) for f in device.features)
        self.f16_unavailable = f16_unavailable
        self._modules: dict[str, GPUShaderModule] = {}  # by WGSL source

    @classmethod
    def open(cls, timing: bool = False) -> WgpuImplementation:
        """A device on the "high-performance" adapter, or the one VULKAN_PARITY_ADAPTER
        names; with `timing`, one with the `timestamp-query` feature (a device of its own,
        for GPU timing only: parity runs request no optional feature but `shader-f16`).

        Raises:
            BackendUnavailable: no adapter, one only through another API than Vulkan, or
                (`timing`) one without `timestamp-query`; the message names what to install.
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
            # WebGPU is checked against the Vulkan runtime on the same adapter: wgpu's
            # fallback to another API (OpenGL when no Vulkan driver loads) would compare
            # other drivers.
            hidden = [f"{n}={os.environ[n]}" for n in DRIVER_VARIABLES if os.environ.get(n)]
            raise BackendUnavailable(
                f"webgpu: wgpu offers {adapter.info.get('device', '?')!r} only through "
                f"{through}, not Vulkan{' (with ' + ', '.join(hidden) + ')' if hidden else ''}: "
                "this harness runs WebGPU on wgpu's Vulkan backend, beside the Vulkan runtime "
                "on the same adapter. On Debian install 'mesa-vulkan-drivers libvulkan1' for "
                "the lavapipe CPU driver, or your GPU's Vulkan driver."
            )
        features = []
        if timing:
            if "timestamp-query" not in adapter.features:
                raise BackendUnavailable(
                    f"webgpu: adapter {adapter.info.get('device', '?')!r} does not offer the "
                    "'timestamp-query' feature, so GPU time cannot be measured"
                )
            features.append("timestamp-query")
        # One device for fp32 and f16 graphs alike, rather than a second one for f16: the
        # feature only allows `enable f16;` in a shader; fp32 shaders compile and compute as
        # they do without it (naga generates the same SPIR-V), and one device keeps one
        # buffer pool and one pipeline cache for a process whose cases mix both
        # (docs/design.md §10).
        f16_unavailable = ""
        if "shader-f16" in adapter.features:
            features.append("shader-f16")
        else:
            f16_unavailable = (
                f"adapter {adapter.info.get('device', '?')!r} does not offer the "
                "'shader-f16' feature"
            )
        limits = {name: adapter.limits[name] for name in RAISED_LIMITS}
        label = "vulkan-parity-timing" if timing else "vulkan-parity"
        device = adapter.request_device_sync(
            label=label, required_features=features, required_limits=limits
        )
        return cls(adapter, device, f16_unavailable)

    def create_buffer(self, label: str, size: int, usage: BufferUsage) -> GpuBuffer:
        """See `Implementation.create_buffer`."""
        buffer = self.device.create_buffer(label=label, size=size, usage=_USAGES[usage])
        return GpuBuffer(label, size, usage, buffer)

    def destroy_buffer(self, buffer: GpuBuffer) -> None:
        """See `Implementation.destroy_buffer`."""
        buffer.handle.destroy()

    def create_layout(self, layout: Layout) -> GpuLayout:
        """See `Implementation.create_layout`."""
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
        return GpuLayout(layout, (bgl, pl))

    def create_pipeline(
        self,
        kernel: str,
        source: str,
        path: Path,
        layout: GpuLayout,
        constants: Mapping[str, int | float],
        entry_point: str,
    ) -> GpuPipeline:
        """See `Implementation.create_pipeline`; naga's whole message (the "Caused by"
        chain, line and column) on a rejection."""
        module = self._module(kernel, source, path)
        try:
            pipeline = self.device.create_compute_pipeline(
                label=kernel,
                layout=layout.handle[1],
                compute={"module": module, "entry_point": entry_point, "constants": constants},
            )
        except GPUError as err:
            raise KernelBuildError(self.backend, kernel, str(path), str(err)) from None
        return GpuPipeline(kernel, pipeline)

    def compile(self, kernel: str, source: str, path: Path) -> None:
        """See `Implementation.compile`."""
        self._module(kernel, source, path)

    def _module(self, kernel: str, source: str, path: Path) -> GPUShaderModule:
        module = self._modules.get(source)
        if module is None:
            try:
                module = self.device.create_shader_module(label=kernel, code=source)
            except GPUError as err:
                raise KernelBuildError(self.backend, kernel, str(path), str(err)) from None
            self._modules[source] = module
        return module

    def create_bind_group(self, layout: GpuLayout, entries: Sequence[BindEntry]) -> GpuBindGroup:
        """See `Implementation.create_bind_group`."""
        group = self.device.create_bind_group(
            layout=layout.handle[0],
            entries=[
                {
                    "binding": e.binding,
                    "resource": {"buffer": e.buffer.handle, "offset": e.offset, "size": e.size},
                }
                for e in entries
            ],
        )
        return GpuBindGroup(group)

    def write_buffer(self, buffer: GpuBuffer, offset: int, data: bytes | memoryview) -> None:
        """See `Implementation.write_buffer`."""
        self.queue.write_buffer(buffer.handle, offset, data)

    def run(
        self, launches: Sequence[Launch], copies: Sequence[Copy], readback: GpuBuffer, nbytes: int
    ) -> bytes:
        """See `Implementation.run`."""
        try:
            encoder = self.device.create_command_encoder()
            cpass = encoder.begin_compute_pass()
            # A pass keeps its pipeline and bind group from one dispatch to the next (a bind
            # group stays bound across a change of pipeline), so each is set only when it
            # differs from the one in place: consecutive dispatches of one kernel (a
            # decoder's q, k and v projections) skip a call through wgpu each.
            pipeline: Any = None
            bind_group: Any = None
            for launch in launches:
                if launch.pipeline.handle is not pipeline:
                    pipeline = launch.pipeline.handle
                    cpass.set_pipeline(pipeline)
                if launch.bind_group.handle is not bind_group:
                    bind_group = launch.bind_group.handle
                    cpass.set_bind_group(0, bind_group)
                cpass.dispatch_workgroups(*launch.grid)
            cpass.end()
            for copy in copies:
                encoder.copy_buffer_to_buffer(
                    copy.src.handle, copy.src_offset, copy.dst.handle, copy.dst_offset, copy.size
                )
            self.queue.submit([encoder.finish()])
            target = readback.handle
            target.map_sync(wgpu.MapMode.READ, 0, nbytes)
            try:
                return bytes(target.read_mapped(0, nbytes))
            finally:
                target.unmap()
        except GPUValidationError as err:
            raise DeviceError(self.backend, [str(err)]) from None


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
