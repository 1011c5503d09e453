"""Small PNG images for the report, written without an imaging library.

Heatmaps of error/budget utilization over a tensor (rows = leading dims flattened, columns =
last dim) and strips of a buffer's allocation for the slack canary map. Images are embedded
as `data:` URIs, so a failure page is one file, and are downsampled by max-pooling so a large
tensor stays a small image (the worst element of each block stays visible).
"""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np

MAX_ROWS = 128
MAX_COLS = 256


def png(rgb: np.ndarray) -> bytes:
    """Encode an (H, W, 3) uint8 array as PNG."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def data_uri(image: bytes) -> str:
    """A `data:image/png;base64,...` URI."""
    return "data:image/png;base64," + base64.b64encode(image).decode()


def as_2d(values: np.ndarray) -> np.ndarray:
    """Rows = product of the leading dims, columns = the last dim."""
    a = np.asarray(values)
    if a.ndim == 0:
        return a.reshape(1, 1)
    if a.ndim == 1:
        return a.reshape(1, -1)
    return a.reshape(-1, a.shape[-1])


def pool_max(a: np.ndarray, max_rows: int = MAX_ROWS, max_cols: int = MAX_COLS) -> np.ndarray:
    """Downsample a 2-D array by taking the max of each block (NaN counts as largest)."""
    rows, cols = a.shape
    fr, fc = -(-rows // max_rows), -(-cols // max_cols)
    if fr == 1 and fc == 1:
        return a
    padded = np.full((-(-rows // fr) * fr, -(-cols // fc) * fc), -np.inf)
    padded[:rows, :cols] = np.where(np.isnan(a), np.inf, a)
    pooled: np.ndarray = padded.reshape(padded.shape[0] // fr, fr, padded.shape[1] // fc, fc).max(
        axis=(1, 3)
    )
    return pooled


def utilization(actual: np.ndarray, reference: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """|actual - reference| / budget per element; inf where the budget is 0 and error is not,
    and inf where actual is non-finite but the reference is finite."""
    act = np.asarray(actual, np.float64)
    ref = np.asarray(reference, np.float64)
    bud = np.asarray(budget, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(act - ref)
        util = np.where(bud > 0, err / np.where(bud > 0, bud, 1.0), np.where(err > 0, np.inf, 0))
    bad = ~np.isfinite(act) & np.isfinite(ref)
    util = np.where(bad, np.inf, util)
    same_nonfinite = ~np.isfinite(act) & ~np.isfinite(ref)
    return np.where(same_nonfinite, 0.0, util)


def heatmap(util: np.ndarray) -> bytes:
    """A PNG of utilization: white (0) to orange (1, the budget's edge) to dark red (>= 100);
    purple for non-finite."""
    a = pool_max(as_2d(util))
    rgb = np.zeros((*a.shape, 3), np.uint8)
    finite = np.isfinite(a)
    low = np.clip(np.where(finite, a, 0), 0, 1)
    # 0..1: white -> orange; 1..100 (log): orange -> dark red.
    high = np.clip(np.log10(np.clip(np.where(finite, a, 1), 1, None)) / 2, 0, 1)
    rgb[..., 0] = np.where(a <= 1, 255, 255 - 140 * high)
    rgb[..., 1] = np.where(a <= 1, 255 - 115 * low, 140 - 140 * high)
    rgb[..., 2] = np.where(a <= 1, 255 - 255 * low, 0)
    rgb[~finite] = (110, 0, 150)
    return png(rgb)


CANARY_COLORS = {0: (200, 200, 200), 1: (170, 220, 170), 2: (200, 0, 40)}


def canary_strip(state: np.ndarray, width: int = 64) -> bytes:
    """A PNG of an allocation's words wrapped at `width`: grey live, green intact slack, red
    written slack."""
    s = np.asarray(state, np.uint8).ravel()
    rows = max(1, -(-s.size // width))
    padded = np.full(rows * width, 255, np.uint8)
    padded[: s.size] = s
    grid = padded.reshape(rows, width)
    if rows > MAX_ROWS:  # keep the worst state of each block of rows
        grid = pool_max(np.where(grid == 255, -1, grid).astype(float), MAX_ROWS, width)
        grid = np.where(grid < 0, 255, grid).astype(np.uint8)
    rgb = np.full((*grid.shape, 3), 255, np.uint8)
    for value, color in CANARY_COLORS.items():
        rgb[grid == value] = color
    return png(rgb)
