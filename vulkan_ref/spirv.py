"""GLSL -> SPIR-V with glslc, cached by content: `glsl/<kernel>.comp` compiled once per source.

Shaders may come from another folder laid out like `glsl/` (`<kernel>.comp` plus
`include/`), such as a repro bundle's own copies; `compile_glsl` takes that folder, and
`compile_glsl_file` any file (a user's kernel, with its own folder searched for includes).

Kernels are compiled with `-O -g`: optimized, with their debug names kept, so that reflection
(`vulkan_ref.reflection`) sees the names of bindings, block members and specialization
constants and a kernel is bound by those names. `-g` adds only debug instructions: for every
project kernel the module stripped of them (`spirv-opt --strip-debug --compact-ids`) is
byte-identical to the `-O` one, so the driver compiles the same code (docs/reflection.md).

The cache key covers everything that changes the binary (the source and every file it
includes, the defines, the flags and the compiler's version), so the cache never needs
invalidating. Entries are written atomically, so parallel test workers can share it. Within a
process, threads may compile at once (`vulkan_ref.reflection.warm_glsl` does, in a pool): a
source is compiled once, a second thread asking for it waits for the first.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from graph_format import BackendUnavailable, KernelBuildError

GLSL_DIR = Path(__file__).resolve().parents[1] / "glsl"
INCLUDE_DIR = GLSL_DIR / "include"
# The Vulkan API version the runtime requests (`VkApplicationInfo.apiVersion`,
# vulkan_ref.instance): the version its device is used at, whatever newer one the device
# offers, so a kernel behaves alike on every device; glslc compiles the project's kernels and
# a manifest's GLSL for the same version.
VULKAN_API = (1, 1)
TARGET_ENV = f"vulkan{VULKAN_API[0]}.{VULKAN_API[1]}"
# The newest SPIR-V each Vulkan version consumes (the Vulkan spec's appendix "Vulkan
# Environment for SPIR-V": 1.0 takes SPIR-V 1.0, 1.1 takes up to 1.3, 1.2 up to 1.5, 1.3
# and 1.4 up to 1.6); every older SPIR-V version is accepted too.
SPIRV_OF_VULKAN = {(1, 0): (1, 0), (1, 1): (1, 3), (1, 2): (1, 5), (1, 3): (1, 6), (1, 4): (1, 6)}
BASE_FLAGS = ("-fshader-stage=compute", f"--target-env={TARGET_ENV}", "-O", "-g")
FLAGS = (*BASE_FLAGS, "-I", str(INCLUDE_DIR))
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


class ShaderCompileError(KernelBuildError):
    """glslc rejected a shader; the message carries the file, line and compiler text."""

    def __init__(self, path: Path, returncode: int, stderr: str) -> None:
        super().__init__(
            "vulkan", path.stem, str(path), f"glslc exited {returncode}:\n{stderr.strip()}"
        )
        self.path = path
        self.returncode = returncode
        self.stderr = stderr


# Sources glslc refused in this process, by cache key: a broken kernel is refused again at
# once (a search that shrinks a case with it loads the graph hundreds of times). Kept for the
# process, as the SPIR-V cache on disk is: the key covers every input (each file's bytes,
# the defines, the flags, the compiler's version), so the answer is the same for any runtime
# (docs/design.md §2.2).
_REFUSED: dict[str, tuple[Path, int, str]] = {}
# One lock per cache key, so that two threads never run glslc on the same source.
_KEYS_LOCK = threading.Lock()
_KEY_LOCKS: dict[str, threading.Lock] = {}


_SPIRV_MAGIC = 0x07230203


def spirv_version(code: bytes) -> tuple[int, int] | None:
    """The (major, minor) SPIR-V version in a module's header (its second word: 0x00MMmm00),
    in either byte order; None when `code` is not SPIR-V (no magic number)."""
    if len(code) < 8:
        return None
    for order in "<>":
        magic, version = struct.unpack_from(f"{order}2I", code)
        if magic == _SPIRV_MAGIC:
            return (version >> 16) & 0xFF, (version >> 8) & 0xFF
    return None


def spirv_version_error(code: bytes, path: Path, api: tuple[int, int]) -> str | None:
    """One line saying that the module at `path` is of a SPIR-V version newer than Vulkan
    `api` accepts, naming both and the glslc `--target-env` that builds one it accepts;
    None when the version is accepted (or `code` is no SPIR-V: reflection says so)."""
    found = spirv_version(code)
    newest = SPIRV_OF_VULKAN.get(api, max(SPIRV_OF_VULKAN.values()))
    if found is None or found <= newest:
        return None
    return (
        f"{path} is SPIR-V {found[0]}.{found[1]}; this runtime accepts SPIR-V 1.0 to "
        f"{newest[0]}.{newest[1]} (Vulkan {api[0]}.{api[1]}, the version it uses the device "
        f"at): build it with glslc --target-env=vulkan{api[0]}.{api[1]}"
    )


def _key_lock(key: str) -> threading.Lock:
    with _KEYS_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def cache_dir() -> Path:
    """Where compiled SPIR-V is kept: $VULKAN_PARITY_CACHE, else the user's cache folder
    ($XDG_CACHE_HOME, or ~/.cache, then `vulkan-parity/spirv`), never inside the checkout
    (which may be read-only, or a package installed for many users)."""
    env = os.environ.get("VULKAN_PARITY_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG base directory spec: a relative $XDG_CACHE_HOME is invalid and ignored.
    root = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return root / "vulkan-parity" / "spirv"


@functools.cache  # the tool on PATH and its version: the process's environment
def _glslc() -> tuple[str, str]:
    exe = shutil.which("glslc")
    if exe is None:
        raise BackendUnavailable("vulkan: glslc not found on PATH; install Debian's 'glslc'")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return exe, version.stdout.strip()


def _sources(
    path: Path, include_dirs: Sequence[Path], seen: dict[Path, bytes] | None = None
) -> dict[Path, bytes]:
    """The bytes of a shader and, recursively, of every file it includes (looked up next to
    the including file, then in `include_dirs`, as glslc does), by path."""
    seen = seen if seen is not None else {}
    if path in seen:
        return seen
    text = path.read_bytes()
    seen[path] = text
    for name in _INCLUDE.findall(text.decode(errors="replace")):
        for folder in (path.parent, *include_dirs):
            if (folder / name).is_file():
                _sources(folder / name, include_dirs, seen)
                break
    return seen


def include_files(path: Path, include_dirs: Sequence[Path] = ()) -> list[Path]:
    """Every file the shader at `path` includes, recursively (not the shader itself)."""
    return [p for p in _sources(path, include_dirs) if p != path]


def compile_glsl(
    kernel: str,
    defines: Mapping[str, int | str] | None = None,
    glsl_dir: Path | None = None,
) -> bytes:
    """SPIR-V of `<glsl_dir>/<kernel>.comp` built with `defines`, from the cache when possible.

    `glsl_dir` defaults to the repo's `glsl/`; includes resolve in its `include/`.

    Raises:
        FileNotFoundError: there is no such shader file.
        ShaderCompileError: glslc rejected it.
        BackendUnavailable: glslc is not installed.
    """
    root = glsl_dir or GLSL_DIR
    return compile_glsl_file(root / f"{kernel}.comp", (root / "include",), defines)


def compile_glsl_file(
    path: Path,
    include_dirs: Sequence[Path] = (),
    defines: Mapping[str, int | str] | None = None,
) -> bytes:
    """SPIR-V of the GLSL compute shader at `path`, from the cache when possible; includes
    resolve next to the file, then in `include_dirs`.

    Raises:
        FileNotFoundError: there is no such shader file.
        ShaderCompileError: glslc rejected it.
        BackendUnavailable: glslc is not installed.
    """
    if not path.exists():
        raise FileNotFoundError(f"no GLSL shader {path.name!r}: expected {path}")
    flags: tuple[str, ...] = BASE_FLAGS
    for folder in include_dirs:
        flags += ("-I", str(folder))
    define_flags = tuple(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))
    exe, version = _glslc()
    digest = hashlib.sha256()
    sources = _sources(path, include_dirs).values()
    for part in (*sources, *(f.encode() for f in (*define_flags, *flags)), version.encode()):
        digest.update(hashlib.sha256(part).digest())
    key = digest.hexdigest()[:24]
    with _key_lock(key):
        return _compile(exe, path, flags, define_flags, key)


def _compile(
    exe: str, path: Path, flags: tuple[str, ...], define_flags: tuple[str, ...], key: str
) -> bytes:
    """The SPIR-V of cache key `key`: from the cache, or compiled by glslc (and cached)."""
    cached = cache_dir() / f"{path.stem}-{key}.spv"
    if cached.exists():
        return cached.read_bytes()
    if key in _REFUSED:
        raise ShaderCompileError(*_REFUSED[key])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        proc = subprocess.run(
            [exe, *flags, *define_flags, str(path), "-o", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            _REFUSED[key] = (path, proc.returncode, proc.stderr)
            raise ShaderCompileError(path, proc.returncode, proc.stderr)
        spirv = out.read_bytes()
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            staged = cached.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(out, staged)
            os.replace(staged, cached)
        except OSError:
            pass  # a cache that cannot be written (a read-only home) only costs time
    return spirv
