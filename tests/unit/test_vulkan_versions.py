"""What a Vulkan kernel is built with and which SPIR-V the runtime takes (issue 21, item 5):
GLSL `defines` in a manifest entry (passed to glslc as -D, part of the SPIR-V's cache key),
and the SPIR-V version read from a module's header and refused, in one line that names the
fix, when it is newer than the runtime's Vulkan version accepts."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import tomli_w

import vulkan_ref.spirv as spirv
from graph_format.kernels import MANIFEST_NAME, KernelManifestError, parse_manifest
from vulkan_ref.spirv import (
    SPIRV_OF_VULKAN,
    TARGET_ENV,
    VULKAN_API,
    compile_glsl_file,
    spirv_version,
    spirv_version_error,
)

MANIFEST = """\
format = "parity-kernels/1"

[vulkan.rms_norm]
glsl = "rms.comp"
defines = { BLOCK = 64, MODE = "fast", EMPTY = "" }
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("rms.comp", "rms.spv", "rms.wgsl"):
        (tmp_path / name).write_text("")
    (tmp_path / MANIFEST_NAME).write_text(MANIFEST)
    return tmp_path


def test_a_glsl_entry_reads_its_defines_and_round_trips(folder: Path) -> None:
    manifest = parse_manifest(MANIFEST, folder / MANIFEST_NAME)
    entry = manifest.entry("vulkan", "rms_norm")
    assert entry is not None
    assert entry.defines == {"BLOCK": "64", "MODE": "fast", "EMPTY": ""}
    again = parse_manifest(tomli_w.dumps(manifest.to_doc()), folder / MANIFEST_NAME)
    assert again == manifest


@pytest.mark.parametrize(
    ("old", "new", "where", "what"),
    [
        ('glsl = "rms.comp"', 'spirv = "rms.spv"', "vulkan.rms_norm.defines", "glslc -D"),
        (
            '[vulkan.rms_norm]\nglsl = "rms.comp"',
            '[webgpu.rms_norm]\nfile = "rms.wgsl"',
            "webgpu.rms_norm.defines",
            "not a webgpu key: WGSL has no preprocessor",
        ),
        ("BLOCK = 64", '"2X" = 64', "vulkan.rms_norm.defines.2X", "a macro name"),
        ("BLOCK = 64", "GL_BLOCK = 64", "vulkan.rms_norm.defines.GL_BLOCK", "reserved"),
        ("BLOCK = 64", "BLOCK = true", "vulkan.rms_norm.defines.BLOCK", "got boolean True"),
        ('MODE = "fast"', 'MODE = "a\\nb"', "vulkan.rms_norm.defines.MODE", "one line"),
        (
            'defines = { BLOCK = 64, MODE = "fast", EMPTY = "" }',
            "defines = 3",
            "vulkan.rms_norm.defines",
            "expected a table",
        ),
    ],
)
def test_bad_defines_name_the_field(
    folder: Path, old: str, new: str, where: str, what: str
) -> None:
    assert old in MANIFEST
    text = MANIFEST.replace(old, new, 1)
    with pytest.raises(KernelManifestError) as info:
        parse_manifest(text, folder / MANIFEST_NAME)
    message = str(info.value)
    assert message.startswith(f"{folder / MANIFEST_NAME}: {where}: "), message
    assert what in message, message


SOURCE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Out { uint v[]; } o;
void main() { o.v[0] = BLOCK; }
"""


def test_defines_reach_glslc_and_its_cache_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VULKAN_PARITY_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "k.comp"
    path.write_text(SOURCE)
    with pytest.raises(spirv.ShaderCompileError, match="BLOCK"):
        compile_glsl_file(path)
    a = compile_glsl_file(path, defines={"BLOCK": "3u"})
    b = compile_glsl_file(path, defines={"BLOCK": "5u"})
    assert a != b
    assert len(list((tmp_path / "cache").glob("k-*.spv"))) == 2


def _module(major: int, minor: int) -> bytes:
    return struct.pack("<5I", 0x07230203, (major << 16) | (minor << 8), 0, 1, 0)


def test_the_spirv_version_is_read_from_the_header() -> None:
    assert spirv_version(_module(1, 5)) == (1, 5)
    swapped = struct.pack(">5I", 0x07230203, 0x00010300, 0, 1, 0)  # big-endian words
    assert spirv_version(swapped) == (1, 3)
    assert spirv_version(b"not spir-v at all") is None
    assert spirv_version(b"") is None


def test_the_runtime_accepts_what_its_vulkan_version_accepts() -> None:
    # Vulkan 1.1 consumes SPIR-V 1.0 to 1.3 (the Vulkan spec's SPIR-V environment appendix);
    # glslc targets the same version the runtime requests.
    assert VULKAN_API == (1, 1)
    assert SPIRV_OF_VULKAN[VULKAN_API] == (1, 3)
    assert TARGET_ENV == "vulkan1.1"
    assert f"--target-env={TARGET_ENV}" in spirv.BASE_FLAGS


def test_a_newer_module_is_refused_in_one_line_naming_the_fix() -> None:
    assert spirv_version_error(_module(1, 3), Path("k/rms.spv"), VULKAN_API) is None
    assert spirv_version_error(_module(1, 0), Path("k/rms.spv"), VULKAN_API) is None
    message = spirv_version_error(_module(1, 5), Path("k/rms.spv"), VULKAN_API)
    assert message is not None and "\n" not in message
    assert message.startswith("k/rms.spv is SPIR-V 1.5")
    assert "accepts SPIR-V 1.0 to 1.3 (Vulkan 1.1," in message
    assert "glslc --target-env=vulkan1.1" in message
    # On a device of Vulkan 1.0 only, 1.0 is the highest.
    older = spirv_version_error(_module(1, 3), Path("k/rms.spv"), (1, 0))
    assert older is not None and "accepts SPIR-V 1.0 to 1.0 (Vulkan 1.0," in older
