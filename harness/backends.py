"""Opening the runtimes by name, so that a missing driver is a clear message, not a traceback."""

from __future__ import annotations

from collections.abc import Sequence

from graph_format import BackendUnavailable, Runtime

BACKENDS = ("webgpu", "vulkan")


def open_runtime(name: str) -> Runtime:
    """The runtime called `name` on this machine's default adapter.

    Raises:
        BackendUnavailable: no driver, loader or compiler; the message says what to install.
        ValueError: an unknown backend name.
    """
    if name == "webgpu":
        from webgpu_backend import WebGPURuntime

        return WebGPURuntime()
    if name == "vulkan":
        from vulkan_ref import VulkanRuntime

        return VulkanRuntime()
    raise ValueError(f"unknown backend {name!r}; choose from {BACKENDS}")


def open_runtimes(names: Sequence[str] = BACKENDS) -> list[Runtime]:
    """Open several runtimes; the first unavailable one raises BackendUnavailable."""
    return [open_runtime(name) for name in names]


__all__ = ["BACKENDS", "BackendUnavailable", "open_runtime", "open_runtimes"]
