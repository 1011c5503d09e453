"""Warming the kernel caches in parallel (harness.check.backends.KernelWarmer) gives what
building each kernel on demand gives, builds each kernel once however many threads ask for
it, and leaves a kernel that does not build to the graph that needs it (a build error)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import vulkan_ref.reflection as spirv_reflection
import vulkan_ref.spirv as spirv
import webgpu_backend.reflection as wgsl_reflection
from harness.check.backends import KernelWarmer
from harness.ops import MODELS
from vulkan_ref.reflection import reflect_spirv
from vulkan_ref.spirv import ShaderCompileError, compile_glsl_file
from webgpu_backend.reflection import WgslReflectionError, reflect_wgsl

REPO = Path(__file__).resolve().parents[2]
# The ops warmed: every kernel of theirs is copied, silu_mul's broken.
OPS = ("rms_norm", "silu_mul")
BROKEN = "silu_mul"
STEMS = tuple(
    spec.glsl for op in OPS for spec in MODELS[op].kernels.values() if spec.glsl != BROKEN
)
BROKEN_GLSL = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undeclared = 1; }\n"
BROKEN_WGSL = "struct P { a: u32, }\nfn main( {\n}\n"


def _cold(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty disk caches under `root`, and empty in-memory caches."""
    monkeypatch.setenv("VULKAN_PARITY_CACHE", str(root / "spirv"))
    monkeypatch.setenv("VULKAN_PARITY_REFLECT_CACHE", str(root / "reflect"))
    for module in (spirv_reflection, wgsl_reflection):
        monkeypatch.setattr(module, "_MEMORY", {})
        monkeypatch.setattr(module, "_REFUSED", {})
    monkeypatch.setattr(spirv, "_REFUSED", {})


@pytest.fixture
def kernels(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(glsl folder, wgsl folder): the kernels of OPS, BROKEN's broken in both languages."""
    glsl, wgsl = tmp_path / "glsl", tmp_path / "wgsl"
    shutil.copytree(REPO / "glsl" / "include", glsl / "include")
    wgsl.mkdir()
    for stem in STEMS:  # the same stems in both languages (tests/unit/test_shader_sync.py)
        shutil.copy(REPO / "glsl" / f"{stem}.comp", glsl)
        shutil.copy(REPO / "wgsl" / f"{stem}.wgsl", wgsl)
    (glsl / f"{BROKEN}.comp").write_text(BROKEN_GLSL)
    (wgsl / f"{BROKEN}.wgsl").write_text(BROKEN_WGSL)
    yield glsl, wgsl


def _build_all(glsl: Path, wgsl: Path) -> dict[str, Any]:
    """Every good kernel built on demand, as a graph builds it."""
    out: dict[str, Any] = {}
    for stem in STEMS:
        path = glsl / f"{stem}.comp"
        code = compile_glsl_file(path, (glsl / "include",))
        out[f"{stem}.comp"] = (code, reflect_spirv(code, str(path)))
        source = (wgsl / f"{stem}.wgsl").read_text()
        out[f"{stem}.wgsl"] = reflect_wgsl(source, str(wgsl / f"{stem}.wgsl"))
    return out


def test_warmed_kernels_are_those_built_on_demand(
    kernels: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    glsl, wgsl = kernels
    _cold(tmp_path / "warmed", monkeypatch)
    warmer = KernelWarmer({"vulkan": glsl, "webgpu": wgsl}, OPS, threads=3)
    warmer.wait()
    warmer.close()
    assert len(list((tmp_path / "warmed" / "spirv").glob("*.spv"))) == len(STEMS)
    # Built from the warmed caches without running a single tool.
    real_run = subprocess.run

    def no_tools(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a tool ran after warming: {args[0]}")

    monkeypatch.setattr(subprocess, "run", no_tools)
    warmed = _build_all(glsl, wgsl)
    monkeypatch.setattr(subprocess, "run", real_run)
    _cold(tmp_path / "on-demand", monkeypatch)
    assert _build_all(glsl, wgsl) == warmed


def test_each_kernel_is_built_once_while_a_graph_asks_for_it_too(
    kernels: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    glsl, wgsl = kernels
    _cold(tmp_path, monkeypatch)
    compiled: Counter[str] = Counter()
    reflected: Counter[str] = Counter()
    lock = threading.Lock()
    real_run = subprocess.run
    real_shim = wgsl_reflection._run_shim

    def counting_run(command: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(command[0]).name == "glslc" and "--version" not in command:
            with lock:
                compiled[Path(command[-3]).name] += 1  # [..., source, "-o", out]
        return real_run(command, *args, **kwargs)

    def counting_shim(codes: Any) -> Any:
        with lock:
            reflected.update(codes)
        return real_shim(codes)

    monkeypatch.setattr(subprocess, "run", counting_run)
    monkeypatch.setattr(wgsl_reflection, "_run_shim", counting_shim)
    warmer = KernelWarmer({"vulkan": glsl, "webgpu": wgsl}, OPS, threads=2)
    _build_all(glsl, wgsl)  # the graph's requests, at the same time
    warmer.wait()
    warmer.close()
    assert set(compiled) == {f"{stem}.comp" for stem in (*STEMS, BROKEN)}
    assert max(compiled.values()) == 1, compiled
    assert len(reflected) == len(STEMS) + 1 and max(reflected.values()) == 1


def test_a_kernel_that_does_not_build_is_left_to_the_graph_that_needs_it(
    kernels: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    glsl, wgsl = kernels
    _cold(tmp_path, monkeypatch)
    warmer = KernelWarmer({"vulkan": glsl, "webgpu": wgsl}, OPS)
    warmer.wait()  # the refusals did not end the warming
    warmer.close()
    with pytest.raises(ShaderCompileError) as info:
        compile_glsl_file(glsl / f"{BROKEN}.comp", (glsl / "include",))
    assert f"{BROKEN}.comp:3:" in str(info.value) and "undeclared" in str(info.value)
    with pytest.raises(WgslReflectionError) as wgsl_info:
        reflect_wgsl(BROKEN_WGSL, str(wgsl / f"{BROKEN}.wgsl"))
    assert wgsl_info.value.line == 2
    _build_all(glsl, wgsl)  # the good ones are all there


def test_only_the_kernels_of_the_ops_given_are_warmed(
    kernels: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    glsl, wgsl = kernels
    _cold(tmp_path, monkeypatch)
    warmer = KernelWarmer({"vulkan": glsl, "webgpu": wgsl}, ["rms_norm"])
    warmer.wait()
    warmer.close()
    rms_norm = {spec.glsl for spec in MODELS["rms_norm"].kernels.values()}
    warmed = {p.name.rsplit("-", 1)[0] for p in (tmp_path / "spirv").glob("*.spv")}
    assert warmed == rms_norm
    assert len(list((tmp_path / "reflect" / "wgsl").glob("*.json"))) == len(rms_norm)
