"""What the `dawn` implementation needs installed, and the environment of its host process.

scripts/setup.sh installs two things for it, and this module is how the runtime finds them:

- the npm package `webgpu` (Dawn and Tint, prebuilt as `dist/<platform>-<arch>/dawn.node`)
  in `.cache/node`, at the version pinned in `webgpu_backend/gpu/host/versions.json` (the
  one place that pins it: setup.sh, this module and the node host read it there);
- where the machine's own Vulkan drivers give Dawn no adapter (Debian bookworm's lavapipe,
  Mesa 22.3.6, lacks `shaderUniform*ArrayDynamicIndexing`, which Dawn requires), Mesa 25's
  lavapipe from `bookworm-backports`, unpacked into `.cache/mesa/root` with an ICD manifest
  `.cache/mesa/lvp_icd.json` beside it. Nothing of the system changes: only the dawn host
  process is pointed at that manifest (`dawn_environment`); the Vulkan runtime and wgpu keep
  the system's driver (docs/benchmarks.md, "Mesa 25 lavapipe for every runtime?", says why).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from webgpu_backend import reflection
from webgpu_backend.gpu import DRIVER_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
# The one file that pins the npm packages of the remote implementations.
VERSIONS = Path(__file__).with_name("host") / "versions.json"
# Where scripts/setup.sh unpacks a lavapipe for dawn when the system's drivers give it none.
MESA_DIR = ROOT / ".cache" / "mesa"


def pinned_webgpu_version() -> str:
    """The npm `webgpu` version pinned in `versions.json`.

    Raises:
        ValueError: the file has no string `webgpu` entry.
    """
    pins = json.loads(VERSIONS.read_text())
    version = pins.get("webgpu") if isinstance(pins, dict) else None
    if not isinstance(version, str):
        raise ValueError(f"{VERSIONS}: expected a string entry 'webgpu', got {pins!r}")
    return version


def webgpu_package() -> Path:
    """The installed npm `webgpu` package's folder (read when asked: tests move
    `reflection.NODE_PREFIX`)."""
    return reflection.NODE_PREFIX / "node_modules" / "webgpu"


def installed_webgpu_version() -> str | None:
    """The installed npm `webgpu`'s version, or None when it is not installed."""
    manifest = webgpu_package() / "package.json"
    if not manifest.exists():
        return None
    version = json.loads(manifest.read_text()).get("version")
    return version if isinstance(version, str) else None


def private_icd(mesa_dir: Path | None = None) -> Path | None:
    """The ICD manifest of the lavapipe setup.sh unpacked for dawn, or None when there is
    none or it is incomplete (its `library_path`, absolute or relative to the manifest as
    the Vulkan loader reads it, names no file)."""
    icd = (MESA_DIR if mesa_dir is None else mesa_dir) / "lvp_icd.json"
    try:
        library = json.loads(icd.read_text())["ICD"]["library_path"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(library, str) or not (icd.parent / library).is_file():
        return None
    return icd


def dawn_environment(
    base: Mapping[str, str] | None = None, mesa_dir: Path | None = None
) -> dict[str, str]:
    """The environment of the dawn host process: `base` (default: this process's) with the
    Vulkan loader pointed at the private lavapipe when setup.sh unpacked one, else `base`
    unchanged (a machine whose own driver Dawn accepts: Mesa >= 24 or a GPU). Only the dawn
    host gets this: the Vulkan runtime and wgpu run in this process on the system's driver.
    """
    env = dict(os.environ if base is None else base)
    icd = private_icd(mesa_dir)
    if icd is not None:
        # The private manifest replaces every driver variable: VK_DRIVER_FILES wins over
        # VK_ICD_FILENAMES in loaders from 1.3.207 on, so an inherited one must not stay.
        for name in DRIVER_VARIABLES:
            env.pop(name, None)
        env["VK_ICD_FILENAMES"] = str(icd)
    return env
