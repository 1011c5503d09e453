"""Shader files against the harness's kernel contracts: every kernel the contract names has a
WGSL and a GLSL file, no shader file is orphaned, and each file's header names its op.

What a kernel declares (binding order, names, access, element types, the workgroup size's
override or specialization constant, that the GLSL compiles) is checked through the path the
runtimes take, their reflection: tests/unit/test_wgsl_reflection.py and
tests/unit/test_spirv_reflection.py.
"""

from __future__ import annotations

from harness.model import KernelSpec
from harness.ops import MODELS
from vulkan_ref.spirv import GLSL_DIR
from webgpu_backend.shaders import WGSL_DIR

KERNELS: dict[str, tuple[str, KernelSpec]] = {
    name: (op, spec) for op, model in MODELS.items() for name, spec in model.kernels.items()
}


HEADER = "// op: "


def header_ops(lines: list[str]) -> list[str]:
    """The ops the first `// op: <op> | <op>, kernel ...` line of a shader names."""
    header = next((line for line in lines if line.startswith(HEADER)), HEADER)
    return header.removeprefix(HEADER).partition(",")[0].split(" | ")


def test_each_shader_names_its_op_in_its_header() -> None:
    """docs/adding-an-op.md §4: `// op: <op>, kernel <name> — contract: ...` (a kernel shared
    by ops names each: `// op: add | mul, kernels ...`), the first line of the WGSL and the
    first after the `#version` and `#extension` lines of the GLSL."""
    problems = []
    for op, spec in KERNELS.values():
        wgsl, glsl = WGSL_DIR / f"{spec.wgsl}.wgsl", GLSL_DIR / f"{spec.glsl}.comp"
        for path, lines in [
            (wgsl, wgsl.read_text().splitlines()[:1]),
            (glsl, glsl.read_text().splitlines()),
        ]:
            if op not in header_ops(lines):
                problems.append(f"{path}: its header names ops {header_ops(lines)}, not {op!r}")
    assert not problems, "\n".join(problems)


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


def test_a_kernel_spec_names_its_shader_once() -> None:
    """Both files derive from the kernel's name, or from `shader` where ops share a kernel;
    an override renames one side only."""
    assert (KernelSpec("rms_norm", ()).wgsl, KernelSpec("rms_norm", ()).glsl) == ("rms_norm",) * 2
    shared = KernelSpec("add_flat", (), shader="binary_flat")
    assert (shared.wgsl, shared.glsl) == ("binary_flat", "binary_flat")
    apart = KernelSpec("k", (), glsl_shader="k_glsl")
    assert (apart.wgsl, apart.glsl) == ("k", "k_glsl")
