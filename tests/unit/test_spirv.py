"""GLSL compilation: errors carry file, line and the compiler's message; the cache is by content."""

from __future__ import annotations

from pathlib import Path

import pytest

import vulkan_ref.spirv as spirv
from vulkan_ref.spirv import ShaderCompileError, compile_glsl


def test_compile_error_names_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.comp").write_text(
        "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undeclared = 1; }\n"
    )
    monkeypatch.setenv("VULKAN_PARITY_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ShaderCompileError) as info:
        compile_glsl("broken", glsl_dir=tmp_path)
    message = str(info.value)
    assert "broken.comp:3:" in message and "undeclared" in message


def test_cache_is_keyed_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { }\n"
    (tmp_path / "k.comp").write_text(source)
    monkeypatch.setenv("VULKAN_PARITY_CACHE", str(tmp_path / "cache"))
    first = compile_glsl("k", glsl_dir=tmp_path)
    assert len(list((tmp_path / "cache").glob("k-*.spv"))) == 1
    assert compile_glsl("k", glsl_dir=tmp_path) == first
    (tmp_path / "k.comp").write_text(source.replace("{ }", "{ barrier(); }"))
    compile_glsl("k", glsl_dir=tmp_path)
    assert len(list((tmp_path / "cache").glob("k-*.spv"))) == 2


def test_missing_shader_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        compile_glsl("nope", glsl_dir=tmp_path)


def test_cache_lives_in_the_users_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VULKAN_PARITY_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert spirv.cache_dir() == tmp_path / "home" / ".cache" / "vulkan-parity" / "spirv"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert spirv.cache_dir() == tmp_path / "xdg" / "vulkan-parity" / "spirv"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # invalid by the XDG spec
    assert spirv.cache_dir() == tmp_path / "home" / ".cache" / "vulkan-parity" / "spirv"
    monkeypatch.setenv("VULKAN_PARITY_CACHE", str(tmp_path / "mine"))
    assert spirv.cache_dir() == tmp_path / "mine"
    checkout = Path(spirv.__file__).resolve().parents[1]
    monkeypatch.delenv("VULKAN_PARITY_CACHE")
    assert checkout not in spirv.cache_dir().parents


def test_a_cache_that_cannot_be_written_only_costs_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "k.comp").write_text(
        "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { }\n"
    )
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("VULKAN_PARITY_CACHE", str(tmp_path / "not-a-folder" / "cache"))
    assert (
        compile_glsl("k", glsl_dir=tmp_path)[:4] == b"\x03\x02\x23\x07"
    )  # the SPIR-V magic number
