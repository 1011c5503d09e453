"""Reference Vulkan compute runtime (the `vulkan` package, GLSL in glsl/ compiled by glslc).

Implements `graph_format.Runtime` with ExecuTorch Vulkan's resize model: nodes whose resize
functions run in graph order on every execute, dispatch nodes that re-pick shader and
global/local sizes from live sizes and skip when the global size is zero. Independent of
`webgpu_backend` and of the harness by design.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graph_format import Graph, GraphBuildError
from graph_format.kernels import KernelManifest, KernelManifestError
from vulkan_ref.graph import ComputeGraph
from vulkan_ref.instance import VulkanContext, get_context
from vulkan_ref.ops import OP_IMPLS
from vulkan_ref.pipeline import PipelineCache
from vulkan_ref.pool import MemoryPool

__all__ = ["ComputeGraph", "VulkanRuntime"]


class VulkanRuntime:
    """The Vulkan backend on the preferred physical device (discrete GPU, else lavapipe).

    Args:
        context: the context to use (default: the process-wide one).
        shader_dir: a folder laid out like `glsl/` (`<kernel>.comp`, `include/`) to build
            graphs from instead of the repo's (a repro bundle's own shader copies).
        max_workgroups_per_dim: a per-axis workgroup count limit below the device's, which
            every graph honours as if the device had it (counts above it fold into rows;
            counts no grid can hold are refused), so the fold is tested on any device.
        manifest: kernels replacing slots (its `[vulkan.<slot>]` entries,
            docs/bring-your-own-kernels.md); unlisted slots run the project's kernels (from
            `shader_dir` if given).
        allow_adapters: run the Python adapters the manifest names (without it, a manifest
            naming one is refused).

    Attributes:
        pool: the memory, descriptor sets and submit objects every graph of this runtime
            shares (`vulkan_ref.pool`); released when the runtime and its graphs are dropped.
        pipelines: the shader modules, pipelines and compiled kernels every graph of this
            runtime shares (`vulkan_ref.pipeline.PipelineCache`), no other runtime's: two
            runtimes on one context share only the device. Destroyed by `close`.

    Raises:
        ValueError: a limit below 1 or above the device's.
        KernelManifestError: the manifest names an adapter for Vulkan and `allow_adapters`
            is off.
    """

    name = "vulkan"

    def __init__(
        self,
        context: VulkanContext | None = None,
        shader_dir: str | Path | None = None,
        max_workgroups_per_dim: int | None = None,
        *,
        manifest: KernelManifest | None = None,
        allow_adapters: bool = False,
    ) -> None:
        if manifest is not None and not allow_adapters:
            for slot in manifest.slots("vulkan"):
                entry = manifest.entry("vulkan", slot)
                if entry is not None and entry.adapter is not None:
                    raise KernelManifestError(
                        manifest.path,
                        f"names the Python adapter {entry.adapter}; running it needs "
                        "VulkanRuntime(allow_adapters=True) (parity: --allow-adapters)",
                        where=f"vulkan.{slot}.adapter",
                    )
        self.manifest = manifest
        self.allow_adapters = allow_adapters
        self.context = context or get_context()
        self.shader_dir = str(Path(shader_dir).resolve()) if shader_dir else None
        device = self.context.max_workgroup_count[0]
        if max_workgroups_per_dim is not None and not 1 <= max_workgroups_per_dim <= device:
            raise ValueError(
                f"vulkan: a limit of {max_workgroups_per_dim} workgroups per dimension was "
                f"asked for; {self.context.info()['adapter']} allows 1 to {device}"
            )
        self.max_workgroups_per_dim = max_workgroups_per_dim
        self.pool = MemoryPool(self.context)
        self.pipelines = PipelineCache(self.context)

    def close(self) -> None:
        """Free what this runtime made and cached: its memory, descriptor sets, pipelines
        and compiled kernels (idempotent). Close its graphs first: a graph of a closed
        runtime cannot execute. The context (the process's device) stays open."""
        self.pool.close()
        self.pipelines.close()

    def info(self) -> dict[str, Any]:
        """Adapter facts for reports; `max_workgroups_per_dim` is the limit graphs honour;
        `kernels` (with a manifest) names the source of each replaced slot."""
        info = self.context.info()
        if self.max_workgroups_per_dim is not None:
            info["device_max_workgroups_per_dim"] = info["max_workgroups_per_dim"]
            info["max_workgroups_per_dim"] = self.max_workgroups_per_dim
        if self.manifest is not None and self.manifest.slots("vulkan"):
            info["kernels"] = {
                slot: str(entry.source)
                for slot in self.manifest.slots("vulkan")
                if (entry := self.manifest.entry("vulkan", slot)) is not None
            }
        return info

    def load(self, graph: Graph) -> ComputeGraph:
        """Build `graph`.

        Raises:
            GraphBuildError: an op rejects the graph, or the graph breaks a kernel's
                `requires` over values fixed at load.
            KernelBuildError: a kernel does not compile, reflect or validate, or does not
                fit its slot (the message names the file and what does not fit).
        """
        for node in graph.ops:
            if node.op not in OP_IMPLS:
                raise GraphBuildError(node.name, f"vulkan has no implementation of {node.op!r}")
        return ComputeGraph(
            self.context,
            graph,
            self.shader_dir,
            self.max_workgroups_per_dim,
            pool=self.pool,
            manifest=self.manifest,
            allow_adapters=self.allow_adapters,
            impls=OP_IMPLS,
            pipelines=self.pipelines,
        )
