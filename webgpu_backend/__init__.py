"""WebGPU compute runtime (kernels in wgsl/) with a tensor-shape resize engine, on any of
three WebGPU implementations: wgpu-native through wgpu-py (`wgpu`, the default), Dawn in a
node host (`dawn`) and headless Chromium (`chrome`) (`webgpu_backend.gpu`).

Implements `graph_format.Runtime`: `WebGPURuntime().load(graph)` builds a `WebGPUGraph`
whose `execute` resizes to the inputs' live shapes, propagates through per-op hooks and runs
every dispatch in one submit. Independent of `vulkan_ref` and of the harness by design.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graph_format import Graph, GraphBuildError
from graph_format.kernels import KernelManifest, KernelManifestError
from webgpu_backend.binding import KernelCatalog
from webgpu_backend.device import PipelineCache, WebGPUDevice, get_device
from webgpu_backend.graph import WebGPUGraph
from webgpu_backend.ops import OP_BUILDERS
from webgpu_backend.pool import BufferPool
from webgpu_backend.reflection import require_tool

__all__ = ["WebGPUGraph", "WebGPURuntime"]


class WebGPURuntime:
    """The WebGPU backend on the process's default adapter.

    Args:
        device: the device to use (default: the process-wide one of `implementation`).
        implementation: `wgpu`, `dawn` or `chrome` (`webgpu_backend.gpu`); ignored when
            `device` is given. The runtime's `name` says which: `webgpu` (wgpu),
            `webgpu-dawn`, `webgpu-chrome`.
        shader_dir: a folder of `<kernel>.wgsl` files to build graphs from instead of the
            repo's `wgsl/` (a repro bundle's own shader copies): drop-in copies of the
            project's kernels, bound as the project's are.
        max_workgroups_per_dim: a per-dimension workgroup count limit below the device's,
            which every graph honours as if the device had it (counts above it fold into a
            2-D grid; counts no grid can hold are refused), so the fold is tested anywhere.
        manifest: a kernel manifest (`graph_format.kernels.load_manifest`): the slots it
            replaces on webgpu run its kernels, bound as it says
            (docs/bring-your-own-kernels.md); the others the project's.
        allow_adapters: let the manifest's adapter classes be imported and run (they are
            the user's Python); without it a graph needing one is refused at load.

    Attributes:
        pool: the buffers and bind groups every graph of this runtime shares
            (`webgpu_backend.pool`); released when the runtime and its graphs are dropped.
        pipelines: the layouts and pipelines every graph of this runtime shares
            (`webgpu_backend.device.PipelineCache`), and `catalog` the kernel sources and
            their plans: no other runtime's, two runtimes on one device share only the
            device. Dropped by `close`.

    Raises:
        ValueError: a limit below 1 or above the device's.
        KernelManifestError: the manifest names an adapter for WebGPU and `allow_adapters`
            is off.
        ReflectionUnavailable: node or the npm package wgsl_reflect is missing (every
            kernel is bound through its reflection).
    """

    def __init__(
        self,
        device: WebGPUDevice | None = None,
        shader_dir: str | Path | None = None,
        max_workgroups_per_dim: int | None = None,
        manifest: KernelManifest | None = None,
        allow_adapters: bool = False,
        implementation: str = "wgpu",
    ) -> None:
        if manifest is not None and not allow_adapters:
            # Refused here, before any graph, as VulkanRuntime does: the runtime would run
            # the user's Python at some later load.
            for slot in manifest.slots("webgpu"):
                entry = manifest.entry("webgpu", slot)
                if entry is not None and entry.adapter is not None:
                    raise KernelManifestError(
                        manifest.path,
                        f"names the adapter {entry.adapter}, which runs Python from the kernel "
                        "folder; it runs only when allowed (WebGPURuntime(allow_adapters=True); "
                        "the parity command's --allow-adapters)",
                        where=f"webgpu.{slot}.adapter",
                    )
        self.device = device or get_device(implementation)
        self.name = self.device.backend
        require_tool()
        self.shader_dir = Path(shader_dir).resolve() if shader_dir else None
        self.manifest = manifest
        self.allow_adapters = allow_adapters
        self.catalog = KernelCatalog(self.shader_dir, manifest, allow_adapters)
        limit = self.device.max_workgroups_per_dim
        if max_workgroups_per_dim is not None and not 1 <= max_workgroups_per_dim <= limit:
            raise ValueError(
                f"{self.name}: a limit of {max_workgroups_per_dim} workgroups per dimension was "
                f"asked for; {self.device.info()['adapter']} allows 1 to {limit}"
            )
        self.max_workgroups_per_dim = max_workgroups_per_dim
        self.pool = BufferPool(self.device.gpu)
        self.pipelines = PipelineCache(self.device)

    def close(self) -> None:
        """Free what this runtime made and cached: its buffers, bind groups, pipelines and
        kernel plans (idempotent). Close its graphs first. The device (the process's) stays
        open."""
        self.pool.close()
        self.pipelines.close()
        self.catalog.close()

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports; `max_workgroups_per_dim` is the limit graphs honour,
        `kernels` the source file of each slot a manifest replaces (with the manifest),
        `shader_dir` the folder of the project kernels' copies when one was given."""
        info = self.device.info()
        if self.max_workgroups_per_dim is not None:
            info["device_max_workgroups_per_dim"] = info["max_workgroups_per_dim"]
            info["max_workgroups_per_dim"] = self.max_workgroups_per_dim
        if self.shader_dir is not None:
            info["shader_dir"] = str(self.shader_dir)
        if self.manifest is not None:
            info["manifest"] = str(self.manifest.path)
            info["kernels"] = self.catalog.replaced()
        return info

    def load(self, graph: Graph) -> WebGPUGraph:
        """Build `graph`.

        Raises:
            GraphBuildError: an op rejects the graph (`KernelRequirementError`: a replaced
                kernel's declared limit).
            KernelBuildError: a kernel's shader does not reflect, compile or validate, or
                does not fit its slot.
            KernelManifestError: a manifest's file cannot be read, or an adapter is not
                allowed or does not load.
        """
        for node in graph.ops:
            if node.op not in OP_BUILDERS:
                raise GraphBuildError(
                    node.name, f"{self.name} has no implementation of {node.op!r}"
                )
        return WebGPUGraph(
            self.device,
            graph,
            self.catalog,
            self.max_workgroups_per_dim,
            pool=self.pool,
            builders=OP_BUILDERS,
            pipelines=self.pipelines,
        )
