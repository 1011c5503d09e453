"""Opening the runtimes by name, so that a missing driver is a clear message, not a traceback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from graph_format import BackendUnavailable, Runtime
from graph_format.kernels import KernelManifest

BACKENDS = ("webgpu", "vulkan")
# The shader language each backend compiles, and the repo folder it reads by default.
SHADER_LANGUAGES = {"webgpu": "wgsl", "vulkan": "glsl"}


def open_runtime(
    name: str,
    shader_dir: str | Path | None = None,
    max_workgroups_per_dim: int | None = None,
    manifest: KernelManifest | None = None,
    allow_adapters: bool = False,
) -> Runtime:
    """The runtime called `name` on this machine's default adapter.

    Args:
        shader_dir: build graphs from the shaders in this folder (laid out like the repo's
            `wgsl/` or `glsl/`) instead of the repo's own, e.g. a repro bundle's copies.
        max_workgroups_per_dim: a workgroups-per-dimension limit below the device's, which
            the runtime honours as if the device had it (None: the device's).
        manifest: a kernel manifest whose `[<name>.<slot>]` entries replace those slots'
            kernels (docs/bring-your-own-kernels.md).
        allow_adapters: let the manifest's Python adapters run.

    Raises:
        BackendUnavailable: no driver, loader or compiler; the message says what to install.
        KernelManifestError: the manifest names an adapter and `allow_adapters` is off.
        ValueError: an unknown backend name, or a limit the device cannot lower to.
    """
    if name == "webgpu":
        from webgpu_backend import WebGPURuntime

        return WebGPURuntime(
            shader_dir=shader_dir,
            max_workgroups_per_dim=max_workgroups_per_dim,
            manifest=manifest,
            allow_adapters=allow_adapters,
        )
    if name == "vulkan":
        from vulkan_ref import VulkanRuntime

        return VulkanRuntime(
            shader_dir=shader_dir,
            max_workgroups_per_dim=max_workgroups_per_dim,
            manifest=manifest,
            allow_adapters=allow_adapters,
        )
    raise ValueError(f"unknown backend {name!r}; choose from {BACKENDS}")


def open_runtimes(
    names: Sequence[str] = BACKENDS,
    shader_dirs: Mapping[str, str | Path] | None = None,
    max_workgroups_per_dim: int | None = None,
    manifest: KernelManifest | None = None,
    allow_adapters: bool = False,
) -> list[Runtime]:
    """Open several runtimes; the first unavailable one raises BackendUnavailable.

    Args:
        shader_dirs: backend name -> shader folder overriding the repo's (see `open_runtime`).
        max_workgroups_per_dim: a lowered workgroups-per-dimension limit for all of them.
        manifest: one kernel manifest for all of them (each takes its own sections).
        allow_adapters: let the manifest's Python adapters run.
    """
    dirs = shader_dirs or {}
    return [
        open_runtime(name, dirs.get(name), max_workgroups_per_dim, manifest, allow_adapters)
        for name in names
    ]


__all__ = ["BACKENDS", "SHADER_LANGUAGES", "BackendUnavailable", "open_runtime", "open_runtimes"]
