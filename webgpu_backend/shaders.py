"""The one place that knows where WGSL kernels live: `wgsl/<kernel>.wgsl` at the repo root.

A graph may be built from another folder of WGSL files with the same names (a repro
bundle's own copies, or a planted bug in a test); `load_wgsl` takes that folder. It reads the
file on every call: each runtime keeps what it read (`binding.KernelCatalog`).
"""

from __future__ import annotations

from pathlib import Path

WGSL_DIR = Path(__file__).resolve().parents[1] / "wgsl"


class ShaderNotFound(FileNotFoundError):
    """A kernel name with no WGSL file."""


def load_wgsl(kernel: str, directory: Path | None = None) -> str:
    """The source of kernel `kernel`, from `directory` (default: the repo's `wgsl/`).

    Raises:
        ShaderNotFound: naming the path that was expected.
    """
    path = (directory or WGSL_DIR) / f"{kernel}.wgsl"
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ShaderNotFound(f"no WGSL shader for kernel {kernel!r}: expected {path}") from None
