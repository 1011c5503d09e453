"""Opening the runtimes by name, so that a missing driver is a clear message, not a traceback;
warming their kernel caches in the background (`KernelWarmer`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from graph_format import (
    WEBGPU_IMPLEMENTATIONS,
    BackendUnavailable,
    Runtime,
    runtime_api,
    webgpu_implementation,
    webgpu_runtime_name,
)
from graph_format.kernels import KernelManifest

# The backends a run checks in lockstep by default: WebGPU on wgpu-native and Vulkan.
BACKENDS = ("webgpu", "vulkan")
# Every backend a run may check, in the order records and reports list them: one WebGPU
# runtime per implementation, then Vulkan.
ALL_BACKENDS = (*(webgpu_runtime_name(i) for i in WEBGPU_IMPLEMENTATIONS), "vulkan")
# The shader language of each API (`runtime_api`), and the repo folder it reads by default.
SHADER_LANGUAGES = {"webgpu": "wgsl", "vulkan": "glsl"}
# The WebGPU implementations a run checks by default (`parity run --webgpu`): wgpu-native
# alone, which runs wherever the Vulkan runtime does; dawn and chrome are asked for.
DEFAULT_WEBGPU = ("wgpu",)


def lockstep_backends(webgpu: Sequence[str] = DEFAULT_WEBGPU) -> tuple[str, ...]:
    """The backends of a run on these WebGPU implementations (`wgpu`, `dawn`, `chrome`):
    one WebGPU runtime per implementation, in the order given, then Vulkan.

    Raises:
        ValueError: an unknown implementation, a repeated one, or none.
    """
    if not webgpu:
        raise ValueError(
            f"no WebGPU implementation asked for; choose from {', '.join(WEBGPU_IMPLEMENTATIONS)}"
        )
    repeated = sorted({i for i in webgpu if list(webgpu).count(i) > 1})
    if repeated:
        raise ValueError(f"WebGPU implementation {', '.join(repeated)} named twice")
    return (*(webgpu_runtime_name(i) for i in webgpu), "vulkan")


def shader_language(backend: str) -> str:
    """The shader language a backend compiles (`wgsl` for every WebGPU runtime)."""
    return SHADER_LANGUAGES[runtime_api(backend)]


def open_runtime(
    name: str,
    shader_dir: str | Path | None = None,
    max_workgroups_per_dim: int | None = None,
    manifest: KernelManifest | None = None,
    allow_adapters: bool = False,
) -> Runtime:
    """The runtime called `name` (`vulkan`, `webgpu`, `webgpu-dawn`, `webgpu-chrome`) on
    this machine's default adapter.

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
    api = runtime_api(name)  # refuses an unknown name
    if api == "webgpu":
        from webgpu_backend import WebGPURuntime

        return WebGPURuntime(
            shader_dir=shader_dir,
            max_workgroups_per_dim=max_workgroups_per_dim,
            manifest=manifest,
            allow_adapters=allow_adapters,
            implementation=webgpu_implementation(name),
        )
    from vulkan_ref import VulkanRuntime  # the only other API runtime_api knows

    return VulkanRuntime(
        shader_dir=shader_dir,
        max_workgroups_per_dim=max_workgroups_per_dim,
        manifest=manifest,
        allow_adapters=allow_adapters,
    )


def open_runtimes(
    names: Sequence[str] = BACKENDS,
    shader_dirs: Mapping[str, str | Path] | None = None,
    max_workgroups_per_dim: int | None = None,
    manifest: KernelManifest | None = None,
    allow_adapters: bool = False,
) -> list[Runtime]:
    """Open several runtimes; the first unavailable one raises BackendUnavailable.

    Args:
        shader_dirs: API (`webgpu`, `vulkan`) -> shader folder overriding the repo's (see
            `open_runtime`); every WebGPU runtime reads the `webgpu` one.
        max_workgroups_per_dim: a lowered workgroups-per-dimension limit for all of them.
        manifest: one kernel manifest for all of them (each takes its own sections).
        allow_adapters: let the manifest's Python adapters run.
    """
    dirs = shader_dirs or {}
    return [
        open_runtime(
            name, dirs.get(runtime_api(name)), max_workgroups_per_dim, manifest, allow_adapters
        )
        for name in names
    ]


class KernelWarmer:
    """Compiles and reflects the project kernels a run needs in background threads (glslc,
    spirv-cross and node are processes, so threads run them side by side), into the caches a
    graph reads when it first needs a kernel.

    A cold start (empty SPIR-V and reflection caches, as on every fresh CI runner) would
    otherwise compile and reflect each kernel in turn, one process at a time, when the first
    graph using it loads. Only the kernels of the ops given are warmed, in their order
    (float32 kernels before the `_f16` ones, which a quarter of the cases run), and those a
    graph needs first are never queued behind the others: the graph builds one at once, and
    a kernel a thread is building is waited for, not built twice (vulkan_ref.spirv,
    webgpu_backend.reflection). A kernel that does not build is left to the graph that needs
    it, which reports it as a build error (a finding) exactly as without warming.

    Args:
        shader_dirs: backend name -> the shader folder its runtime reads (default: the
            repo's). A manifest's kernels (`--kernels`) are not warmed: each builds when used.
        ops: the op types whose kernels to warm, those needed first first (default: all).
        threads: at most this many at once (default: the CPUs, at most 8).
    """

    def __init__(
        self,
        shader_dirs: Mapping[str, str | Path] | None = None,
        ops: Iterable[str] | None = None,
        threads: int | None = None,
    ) -> None:
        from harness.ops import MODELS
        from vulkan_ref.reflection import warm_glsl
        from webgpu_backend.reflection import warm_wgsl

        dirs = {b: Path(d) for b, d in (shader_dirs or {}).items()}
        specs = [
            spec for op in (sorted(MODELS) if ops is None else ops)
            for spec in MODELS[op].kernels.values()
        ]  # fmt: skip
        specs.sort(key=lambda spec: "_f16" in spec.glsl)  # stable: the ops' order kept
        count = threads or min(8, os.cpu_count() or 1)
        self.executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix="kernel-warm")
        # One node process reflects the WGSL sources while the threads left compile GLSL.
        self.futures: list[Future[None]] = [
            self.executor.submit(warm_wgsl, dirs.get("webgpu"), [s.wgsl for s in specs]),
            *warm_glsl(self.executor, dirs.get("vulkan"), [s.glsl for s in specs]),
        ]

    def wait(self) -> None:
        """Block until every kernel is warmed (benchmarks and tests; a run never waits)."""
        for future in self.futures:
            future.result()

    def close(self) -> None:
        """Drop the kernels not started yet; those being built finish in their threads."""
        self.executor.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "ALL_BACKENDS",
    "BACKENDS",
    "DEFAULT_WEBGPU",
    "SHADER_LANGUAGES",
    "BackendUnavailable",
    "KernelWarmer",
    "lockstep_backends",
    "open_runtime",
    "open_runtimes",
    "shader_language",
]
