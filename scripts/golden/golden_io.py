"""The write step the golden generators share (run by hand, with PyTorch: tests/golden/README.md).

A generator replaces its own cases in `tests/golden/golden.npz` and `manifest.json` and
leaves every other case's arrays as they were; the archive is checked readable before it
replaces the old one.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np


def write_golden(
    npz_path: Path,
    manifest_path: Path,
    manifest: dict[str, Any],
    old: Mapping[str, np.ndarray],
    kept: Mapping[str, np.ndarray],
    ours: Callable[[str], bool],
) -> None:
    """Write `kept` (every array to keep) and `manifest`, asserting that each array of `old`
    not `ours` is kept unchanged (value and dtype)."""
    for key, value in old.items():  # nothing else changes
        if not ours(key):
            assert np.array_equal(kept[key], value) and kept[key].dtype == value.dtype, key
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **kept)
    with zipfile.ZipFile(buffer) as check:  # readable before it replaces the old file
        assert set(check.namelist()) == {f"{k}.npy" for k in kept}
    npz_path.write_bytes(buffer.getvalue())
    manifest_path.write_text(json.dumps(manifest, indent=1))
