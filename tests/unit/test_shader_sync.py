"""Shader files against the harness's kernel contracts: names, binding order, access, types.

"Check, don't generate" (wgpu-py's codegen rule): every kernel the contract names has a WGSL
and a GLSL file whose storage bindings match it one for one, and no shader file is orphaned.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.model import Binding, KernelSpec
from harness.ops import MODELS
from vulkan_ref.spirv import GLSL_DIR, compile_glsl
from webgpu_backend.shaders import WGSL_DIR

WGSL_BINDING = re.compile(
    r"@group\(0\)\s*@binding\((\d+)\)\s*var<(storage|uniform)(?:,\s*(read_write|read))?>\s*"
    r"(\w+)\s*:\s*(array<(.+)>|\w+)\s*;"
)
GLSL_BINDING = re.compile(
    r"layout\(set\s*=\s*0,\s*binding\s*=\s*(\d+)(?:,[^)]*)?\)\s*(readonly|writeonly)?\s*"
    r"(buffer|uniform)\s+\w+\s*\{\s*([^}]*)\}"
)
GLSL_ARRAY = re.compile(r"^(\w+)\s+t_(\w+)\[\]\s*;$")
GLSL_TYPES = {
    "float": "f32",
    "int": "i32",
    "uint": "u32",
    "vec2": "vec2<f32>",
    "vec4": "vec4<f32>",
    "ivec4": "vec4<i32>",
    "uvec4": "vec4<u32>",
    "float16_t": "f16",
    "f16vec2": "vec2<f16>",
    "f16vec4": "vec4<f16>",
}

KERNELS: dict[str, tuple[str, KernelSpec]] = {
    name: (op, spec) for op, model in MODELS.items() for name, spec in model.kernels.items()
}


def _wgsl_bindings(text: str) -> list[tuple[int, str, Binding | None]]:
    out = []
    for index, space, access, name, _, element in WGSL_BINDING.findall(text):
        binding = Binding(name, access or "read", element) if space == "storage" else None
        out.append((int(index), space, binding))
    return sorted(out, key=lambda b: b[0])


def _glsl_bindings(text: str) -> list[tuple[int, str, Binding | None]]:
    out = []
    for index, qualifier, kind, body in GLSL_BINDING.findall(text):
        binding = None
        if kind == "buffer":
            match = GLSL_ARRAY.match(body.strip())
            assert match, f"storage block at binding {index} must hold one `T t_<name>[]`"
            element = GLSL_TYPES.get(match.group(1), match.group(1))
            access = "read" if qualifier == "readonly" else "read_write"
            binding = Binding(match.group(2), access, element)
        out.append((int(index), kind, binding))
    return sorted(out, key=lambda b: b[0])


def _check(path: Path, found: list[tuple[int, str, Binding | None]], spec: KernelSpec) -> None:
    indices = [i for i, _, _ in found]
    assert indices == list(range(len(found))), f"{path}: bindings must be 0..n-1, got {indices}"
    storage = [b for _, kind, b in found if b is not None]
    assert storage == list(spec.tensors), (
        f"{path}: tensor bindings {storage} do not match kernel {spec.name!r}: {list(spec.tensors)}"
    )
    kinds = [kind for _, kind, _ in found]
    first_ubo = kinds.index("uniform") if "uniform" in kinds else len(kinds)
    assert all(k == "uniform" for k in kinds[first_ubo:]), f"{path}: UBOs must follow tensors"


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_wgsl_matches_contract(kernel: str) -> None:
    op, spec = KERNELS[kernel]
    path = WGSL_DIR / f"{spec.wgsl}.wgsl"
    text = path.read_text()
    assert text.startswith("// op: "), f"{path}: the first line must name the op"
    assert op in text.splitlines()[0], f"{path}: the header must name op {op!r}"
    _check(path, _wgsl_bindings(text), spec)
    assert "override wg_size" in text, f"{path}: the workgroup size must be the override wg_size"


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_glsl_matches_contract(kernel: str) -> None:
    op, spec = KERNELS[kernel]
    path = GLSL_DIR / f"{spec.glsl}.comp"
    text = path.read_text()
    header = next(line for line in text.splitlines() if line.startswith("// op: "))
    assert op in header, f"{path}: the header must name op {op!r}"
    _check(path, _glsl_bindings(text), spec)
    assert "local_size_x_id = 0" in text, f"{path}: the local size must be spec constant 0"


@pytest.mark.parametrize("stem", sorted({spec.glsl for _, spec in KERNELS.values()}))
def test_glsl_compiles(stem: str) -> None:
    assert compile_glsl(stem)[:4] == b"\x03\x02\x23\x07"  # the SPIR-V magic number


def test_no_orphan_shaders() -> None:
    wgsl = {p.stem for p in WGSL_DIR.glob("*.wgsl")}
    glsl = {p.stem for p in GLSL_DIR.glob("*.comp")}
    used_wgsl = {spec.wgsl for _, spec in KERNELS.values()}
    used_glsl = {spec.glsl for _, spec in KERNELS.values()}
    assert wgsl == used_wgsl, (
        f"WGSL files without a kernel: {wgsl - used_wgsl}; missing: {used_wgsl - wgsl}"
    )
    assert glsl == used_glsl, (
        f"GLSL files without a kernel: {glsl - used_glsl}; missing: {used_glsl - glsl}"
    )
