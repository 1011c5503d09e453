"""SPIR-V reflection (vulkan_ref/reflection.py through spirv-cross): every shipped GLSL kernel
(compiled by vulkan_ref/spirv.py) reflects and agrees with the project's declarations (the
contract's KernelSpec bindings: order, `t_<role>` names, access, element types; the
TensorMeta UBO vulkan_ref/tensor.py writes, spec ids from 3 on as vulkan_ref/pipeline.py
maps them, rms_norm's push constant); a precompiled module given directly reflects, with
names when it kept them; offsets follow std140/std430; errors name the file; the cache
spares the second process."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from graph_format import KernelBuildError
from harness.model import KernelSpec
from harness.ops import MODELS
from tests.reflection_support import DATA
from vulkan_ref import reflection
from vulkan_ref.binding import binding_name
from vulkan_ref.reflection import (
    Block,
    ReflectionUnavailable,
    SpirvReflection,
    SpirvReflectionError,
    reflect_glsl_kernel,
    reflect_spirv,
    reflect_spirv_file,
)
from vulkan_ref.spirv import GLSL_DIR
from vulkan_ref.tensor import _META

KERNELS: dict[str, tuple[str, KernelSpec]] = {
    name: (op, spec) for op, model in MODELS.items() for name, spec in model.kernels.items()
}
GLSL_TO_WGSL = {
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
_FORMAT_TYPES = {"I": "uint", "i": "int", "f": "float"}


def _scalar_words(block: Block) -> list[tuple[int, str]]:
    """(offset, GLSL scalar type) of each 4-byte scalar of a block without arrays."""
    out = []
    for m in block.members:
        assert not m.array, m
        if m.members:
            nested = Block(None, 0, m.members)
            out += [(m.offset + o, t) for o, t in _scalar_words(nested)]
        elif m.type in _FORMAT_TYPES.values():
            out.append((m.offset, m.type))
        else:  # uvec4 / ivec4 / vec4
            scalar = {"u": "uint", "i": "int"}.get(m.type[0], "float")
            out += [(m.offset + 4 * i, scalar) for i in range(int(m.type[-1]))]
    return out


def _meta_words() -> list[tuple[int, str]]:
    """The TensorMeta layout vulkan_ref/tensor.py packs, as (offset, type)."""
    return [(4 * i, _FORMAT_TYPES[c]) for i, c in enumerate(_expand(_META.format))]


def _expand(fmt: str) -> str:
    out, count = "", ""
    for c in fmt.lstrip("<"):
        if c.isdigit():
            count += c
        else:
            out += c * int(count or 1)
            count = ""
    return out


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_shipped_kernels_agree_with_the_projects_declarations(kernel: str) -> None:
    _, spec = KERNELS[kernel]
    found = reflect_glsl_kernel(spec.glsl)
    assert (found.entry_point, found.stage) == ("main", "comp")
    assert found.name == str(GLSL_DIR / f"{spec.glsl}.comp")
    # Tensors first, in the contract's order, then UBOs (an unused UBO is not in the module:
    # glslc -O drops rms_norm's OutMeta at binding 3).
    tensors = [b for b in found.bindings if b.kind == "storage_buffer"]
    assert [b.binding for b in tensors] == list(range(len(spec.tensors)))
    assert all(b.binding >= len(tensors) for b in found.bindings[len(tensors) :])
    for b, declared in zip(tensors, spec.tensors, strict=True):
        # Named as the runtime binds it to its role (`t_<role>`, vulkan_ref.binding).
        assert binding_name(b) == f"t_{declared.name}", (kernel, b.binding, binding_name(b))
        assert b.block is not None and len(b.block.members) == 1
        (array,) = b.block.members
        assert array.array == (0,), f"{kernel} binding {b.binding}: not one runtime array"
        assert GLSL_TO_WGSL[array.type] == declared.element
        assert (b.access == "read") == (declared.access == "read")
    # Every UBO is a TensorMeta as vulkan_ref/tensor.py writes it, or one int (graph.int_ubo).
    for b in found.bindings[len(tensors) :]:
        assert b.kind == "uniform_buffer" and b.block is not None
        words = _scalar_words(b.block)
        assert words in (_meta_words(), [(0, "int")], [(0, "uint")]), (kernel, b.binding, words)
        assert b.block.size <= _META.size
    # The project's convention (docs/adding-an-op.md): the local size is spec constant 0, an
    # op's own constants run from 3 on (the runtime sets each by the id reflection reports).
    assert found.local_size[0].spec_id == 0 and found.local_size[0].value == 1
    assert [d.spec_id for d in found.local_size[1:]] == [None, None]
    ids = [s.id for s in found.spec_constants]
    assert ids == [0, *range(3, 3 + len(ids) - 1)]
    # rms_norm pushes eps (one float, packed from the value eps by its member name).
    if spec.glsl.startswith("rms_norm"):
        push = found.push_constants
        assert push is not None and push.size == 4
        assert [(m.offset, m.type) for m in push.members] == [(0, "float")]
    # The position rope pushes theta_base, freq_scale and has_freq_factors.
    elif spec.glsl.startswith("rotary_emb_pos"):
        push = found.push_constants
        assert push is not None and push.size == 12
        members = [(m.name, m.offset, m.type) for m in push.members]
        assert members == [
            ("theta_base", 0, "float"),
            ("freq_scale", 4, "float"),
            ("has_freq_factors", 8, "uint"),
        ]
    else:
        assert found.push_constants is None


def _check_foreign(found: SpirvReflection, named: bool) -> None:
    """What foreign.comp declares, worked out by hand from the std140/std430 rules."""
    assert found.has_debug_names is named
    assert [(d.value, d.spec_id) for d in found.local_size] == [(1, 7), (4, None), (1, 9)]
    constants = [(s.id, s.type, s.default) for s in found.spec_constants]
    assert constants == [(3, "float", 0.25), (4, "bool", True), (7, "uint", 32), (9, "int", 1)]
    meta = found.binding(2, set=1)
    assert (meta.kind, meta.access, meta.block.size) == ("uniform_buffer", "read", 148)  # type: ignore[union-attr]
    layout = [
        (m.type, m.offset, m.size, m.array, m.array_stride, m.matrix_stride)
        for m in meta.block.members  # type: ignore[union-attr]
    ]
    assert layout == [
        ("uvec4", 0, 16, (), None, None),
        ("vec3", 16, 12, (), None, None),
        ("float", 28, 4, (), None, None),  # fills vec3's tail
        ("float", 32, 48, (3,), 16, None),  # std140: array stride rounds up to 16
        ("Inner" if named else "struct", 80, 16, (), None, None),  # a struct aligns to 16
        ("mat3", 96, 44, (), None, 16),  # columns 16 apart; ends after the third's z
        ("uint", 144, 4, (), None, None),
    ]
    inner = meta.block.members[4]  # type: ignore[union-attr]
    assert [(m.type, m.offset) for m in inner.members] == [("vec3", 0), ("float", 12)]
    out, inp, both = found.binding(0), found.binding(1), found.binding(3)
    assert (out.access, inp.access, both.access) == ("write", "read", "read_write")
    assert [(m.type, m.offset, m.array, m.array_stride) for m in out.block.members] == [  # type: ignore[union-attr]
        ("float16_t", 0, (0,), 2)
    ]
    assert [(m.type, m.offset, m.size, m.array_stride) for m in inp.block.members] == [  # type: ignore[union-attr]
        ("uint", 0, 4, None),
        ("vec3", 16, None, 16),  # std430 still aligns vec3 to 16
    ]
    assert [(m.type, m.offset, m.size, m.array_stride) for m in both.block.members] == [  # type: ignore[union-attr]
        ("float", 0, 12, 4),  # std430: no rounding of the array stride
        ("vec2", 16, None, 8),
    ]
    assert (inp.block.size, both.block.size) == (16, 16)  # type: ignore[union-attr]
    push = found.push_constants
    assert push is not None and push.size == 16
    assert [(m.type, m.offset) for m in push.members] == [
        ("uint", 0),
        ("float", 4),
        ("ivec2", 8),
    ]
    if named:
        assert [s.name for s in found.spec_constants] == ["SCALE", "FAST", "BLOCK", "DEPTH"]
        assert [b.name for b in found.bindings] == ["t_out", "t_in", "t_both", "meta_u"]
        assert [m.name for m in meta.block.members] == [  # type: ignore[union-attr]
            "sizes", "v3", "s", "arr", "inner", "m", "tail",
        ]  # fmt: skip
        assert (meta.block.name, push.name) == ("Meta", "PC")  # type: ignore[union-attr]
    else:
        assert {s.name for s in found.spec_constants} == {None}
        assert {b.name for b in found.bindings} == {None} and push.name is None


@pytest.mark.parametrize("optimized", [False, True])
def test_a_precompiled_module_given_directly(tmp_path: Path, optimized: bool) -> None:
    """SPIR-V compiled outside the project (glslc by hand, with and without -O, which strips
    the debug names) reflects from its file."""
    spv = tmp_path / "foreign.spv"
    flags = ["-O"] if optimized else []
    subprocess.run(
        ["glslc", "-fshader-stage=compute", "--target-env=vulkan1.1", *flags,
         str(DATA / "foreign.comp"), "-o", str(spv)],
        check=True,
    )  # fmt: skip
    found = reflect_spirv_file(spv)
    assert found.name == str(spv)
    _check_foreign(found, named=not optimized)


def test_not_spirv_is_an_error_naming_the_file() -> None:
    with pytest.raises(SpirvReflectionError, match=r"kernels/x\.spv: cannot reflect kernel 'x'"):
        reflect_spirv(b"#version 450\nvoid main() {}\n", "kernels/x.spv")
    with pytest.raises(SpirvReflectionError, match="not a SPIR-V module: magic 0x"):
        reflect_spirv(bytes(64), "zeros.spv")


def test_spirv_cross_refusals_carry_its_whole_message() -> None:
    header = struct.pack("<5I", 0x07230203, 0x00010300, 0, 10, 0)
    with pytest.raises(SpirvReflectionError) as caught:
        reflect_spirv(header, "empty.spv")
    error = caught.value
    assert isinstance(error, KernelBuildError) and error.backend == "vulkan"
    assert "spirv-cross exited 1:" in str(error)
    assert "There is no entry point in the SPIR-V module." in str(error)
    truncated = header + struct.pack("<I", (9 << 16) | 5)  # an OpName past the end
    with pytest.raises(SpirvReflectionError, match="malformed SPIR-V: instruction at word 5"):
        reflect_spirv(truncated, "cut.spv")


def test_missing_spirv_cross_is_a_setup_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflection.shutil, "which", lambda name: None)
    monkeypatch.setattr(reflection, "_MEMORY", {})
    reflection._spirv_cross.cache_clear()
    try:
        with pytest.raises(ReflectionUnavailable, match="install Debian's 'spirv-cross'"):
            reflect_glsl_kernel("view_copy")
    finally:
        reflection._spirv_cross.cache_clear()


def test_a_second_reflection_spawns_no_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VULKAN_PARITY_REFLECT_CACHE", str(tmp_path))
    monkeypatch.setattr(reflection, "_MEMORY", {})
    calls = []
    real = subprocess.run

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(reflection.subprocess, "run", counting)
    first = reflect_glsl_kernel("silu_mul")
    assert len(calls) == 1
    assert reflect_glsl_kernel("silu_mul") is first and len(calls) == 1
    assert len(list((tmp_path / "spirv").glob("*.json"))) == 1
    monkeypatch.setattr(reflection, "_MEMORY", {})  # a new process: the disk answers
    assert reflect_glsl_kernel("silu_mul") == first and len(calls) == 1
