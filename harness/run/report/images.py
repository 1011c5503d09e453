"""Small PNG images and SVG plots for the report, written without an imaging library.

Heatmaps of error/budget utilization over a tensor (rows = leading dims flattened, columns =
last dim), strips of a buffer's allocation for the slack canary map, and, for one row of a
tensor, inline SVG line plots of a backend's output against the float64 reference and its
budget band, and of |error| against the budget per element. Images are embedded
as `data:` URIs, so a failure page is one file, and are downsampled by max-pooling so a large
tensor stays a small image (the worst element of each block stays visible).
"""

from __future__ import annotations

import base64
import html
import math
import struct
import zlib

import numpy as np

from harness.model.numerics import class_mismatch, utilization_map

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


# ---------------------------------------------------------------------------- row plots

# Most elements a row plot shows: a longer row is cut to a window around its worst element.
MAX_PLOT_POINTS = 512
# Each backend's line colour (colour-blind safe); the reference is black, the budget orange.
# Okabe-Ito colours, told apart with colour-blindness.
BACKEND_COLORS = {
    "webgpu": "#0072b2",
    "webgpu-dawn": "#e69f00",
    "webgpu-chrome": "#56b4e9",
    "vulkan": "#009e73",
}
_PLOT_W, _PLOT_H = 384, 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 8, 8, 18


def plot_window(length: int, worst: int, most: int = MAX_PLOT_POINTS) -> tuple[int, int]:
    """[start, stop) of at most `most` elements of a row of `length`, around `worst`."""
    if length <= most:
        return 0, length
    start = min(max(0, worst - most // 2), length - most)
    return start, start + most


def _fmt(v: float) -> str:
    return f"{v:.4g}"


class _Frame:
    """A plot's coordinate frame: element index -> x, value -> y."""

    def __init__(self, start: int, count: int, lo: float, hi: float) -> None:
        if not hi > lo:  # one value (or none): a range around it
            pad = abs(lo) * 0.1 or 1.0
            lo, hi = lo - pad, hi + pad
        self.start, self.count, self.lo, self.hi = start, count, lo, hi

    def x(self, i: int) -> float:
        width = _PLOT_W - _LEFT - _RIGHT
        if self.count < 2:
            return _LEFT + width / 2
        return _LEFT + (i - self.start) * width / (self.count - 1)

    def y(self, v: float) -> float:
        height = _PLOT_H - _TOP - _BOTTOM
        v = min(max(v, self.lo), self.hi)
        return _TOP + (self.hi - v) * height / (self.hi - self.lo)

    def axes(self, low_label: str, high_label: str) -> list[str]:
        bottom = _PLOT_H - _BOTTOM
        last = self.start + self.count - 1
        return [
            f'<rect x="{_LEFT}" y="{_TOP}" width="{_PLOT_W - _LEFT - _RIGHT}" '
            f'height="{bottom - _TOP}" fill="none" stroke="#999"/>',
            f'<text x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end">{high_label}</text>',
            f'<text x="{_LEFT - 4}" y="{bottom}" text-anchor="end">{low_label}</text>',
            f'<text x="{_LEFT}" y="{_PLOT_H - 4}">{self.start}</text>',
            f'<text x="{_PLOT_W - _RIGHT}" y="{_PLOT_H - 4}" text-anchor="end">{last}</text>',
        ]


def _points(frame: _Frame, values: np.ndarray, finite: np.ndarray) -> str:
    return " ".join(
        f"{frame.x(frame.start + i):.1f},{frame.y(float(v)):.1f}"
        for i, (v, ok) in enumerate(zip(values, finite, strict=True))
        if ok
    )


def _svg(title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_PLOT_W}" height="{_PLOT_H}" '
        f'viewBox="0 0 {_PLOT_W} {_PLOT_H}" font-size="10" font-family="sans-serif" '
        f'role="img"><title>{title}</title>' + "".join(body) + "</svg>"
    )


def values_plot(
    actual: np.ndarray, reference: np.ndarray, budget: np.ndarray, backend: str, start: int = 0
) -> str:
    """An SVG line plot of one row: the backend's output (coloured), the float64 reference
    (black) and the band reference ± budget (shaded) per element, `start` the index of the
    first; a non-finite output is a red mark on the top edge."""
    act, ref, bud = (np.asarray(a, np.float64).ravel() for a in (actual, reference, budget))
    backend = html.escape(backend)  # it goes into the page as markup
    band_lo, band_hi = ref - np.abs(bud), ref + np.abs(bud)
    shown = np.concatenate([band_lo, band_hi, act])
    shown = shown[np.isfinite(shown)]
    frame = _Frame(
        start,
        act.size,
        float(shown.min()) if shown.size else 0.0,
        float(shown.max()) if shown.size else 0.0,
    )
    color = BACKEND_COLORS.get(backend, "#cc79a7")
    ok_ref = np.isfinite(band_lo) & np.isfinite(band_hi)
    upper = _points(frame, band_hi, ok_ref).split()
    lower = _points(frame, band_lo, ok_ref).split()
    body = frame.axes(_fmt(frame.lo), _fmt(frame.hi))
    if upper:
        body.append(
            f'<polygon class="band" points="{" ".join(upper + lower[::-1])}" '
            'fill="#e69f00" fill-opacity="0.3" stroke="none"/>'
        )
    body.append(
        f'<polyline class="reference" points="{_points(frame, ref, np.isfinite(ref))}" '
        'fill="none" stroke="#000" stroke-width="1"/>'
    )
    body.append(
        f'<polyline class="output" data-backend="{backend}" '
        f'points="{_points(frame, act, np.isfinite(act))}" fill="none" stroke="{color}" '
        'stroke-width="1.5"/>'
    )
    for i in np.flatnonzero(~np.isfinite(act)):
        body.append(
            f'<circle class="nonfinite" cx="{frame.x(start + int(i)):.1f}" cy="{_TOP}" r="3" '
            f'fill="#d55e00"><title>element {start + int(i)}: {act[i]}</title></circle>'
        )
    return _svg(f"{backend} output, float64 reference and reference ± budget", body)


def error_plot(
    actual: np.ndarray, reference: np.ndarray, budget: np.ndarray, backend: str, start: int = 0
) -> str:
    """An SVG plot of one row's |output − reference| (coloured) against its budget (orange)
    per element, on a log scale; an element over budget (or non-finite where the
    reference is not) is a red dot of class `over`."""
    act, ref, bud = (np.asarray(a, np.float64).ravel() for a in (actual, reference, budget))
    backend = html.escape(backend)  # it goes into the page as markup
    util = utilization_map(act, ref, bud)
    with np.errstate(invalid="ignore"):
        err = np.abs(act - ref)
    # As the oracle judges them (`class_mismatch`): another class is infinitely wrong, the
    # same non-finite class no error.
    special = ~np.isfinite(act) | ~np.isfinite(ref)
    err = np.where(class_mismatch(act, ref), np.inf, np.where(special, 0.0, err))
    positive = np.concatenate([err, np.abs(bud)])
    positive = positive[np.isfinite(positive) & (positive > 0)]
    floor = float(positive.min()) / 10 if positive.size else 1e-12
    top = float(positive.max()) if positive.size else 1.0
    frame = _Frame(start, act.size, math.log10(floor), math.log10(max(top, floor * 10)))
    color = BACKEND_COLORS.get(backend, "#cc79a7")

    def logs(values: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log10(np.clip(values, floor, None))
        return out

    body = frame.axes(_fmt(10**frame.lo), _fmt(10**frame.hi))
    ok_bud = np.isfinite(bud)
    body.append(
        f'<polyline class="budget" points="{_points(frame, logs(np.abs(bud)), ok_bud)}" '
        'fill="none" stroke="#e69f00" stroke-width="1.5"/>'
    )
    body.append(
        f'<polyline class="error" data-backend="{backend}" '
        f'points="{_points(frame, logs(err), np.isfinite(err))}" fill="none" '
        f'stroke="{color}" stroke-width="1"/>'
    )
    for i in np.flatnonzero(~(util <= 1.0)):  # NaN counts as over
        value = err[i] if np.isfinite(err[i]) else 10**frame.hi
        body.append(
            f'<circle class="over" cx="{frame.x(start + int(i)):.1f}" '
            f'cy="{frame.y(float(np.log10(max(value, floor)))):.1f}" r="2.5" fill="#d55e00">'
            f"<title>element {start + int(i)}: |error| {_fmt(float(err[i]))}, budget "
            f"{_fmt(float(bud[i]))}</title></circle>"
        )
    return _svg(f"{backend} |output − reference| and budget (log scale)", body)
