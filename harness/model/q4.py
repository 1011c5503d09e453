"""The q4gsw weight format of `linear_q4gsw` (docs/design.md §7): quantizer, packer, dequantizer.

Format, exactly as upstream ExecuTorch writes it:
- signed int4 values `q[n, k]` in [-8, 7] (symmetric, zero point 0), one scale per
  (group of `group_size` consecutive k, output column n);
- K is zero-padded to a multiple of 8 (padded slots hold q = 0, i.e. nibble 8);
- bytes `[N, K_pad/2]` uint8, row n = output column n, byte j of a row is
  `((q[n, 2j+1] + 8) << 4) | (q[n, 2j] + 8)`: the low nibble holds the even k;
  read as little-endian u32 words, word `n*(K_pad/8) + k/8` holds k at nibble `k % 8`;
- scales fp32 `[num_groups, N padded to a multiple of 4]` (group-major, padding columns 0),
  `num_groups >= ceil(K / group_size)`;
- dequantized value `W[n, k] = (nibble - 8) * scales[k // group_size, n]`.

This module is the harness's own reading of the format: the float64 reference dequantizes
from the packed bytes with it, and strategies and tests quantize float weights with it.
Neither backend imports it.
"""

from __future__ import annotations

import numpy as np

# Symmetric int4 as torchao's IntxWeightOnly(int4, PerGroup) maps it: scale = amax / 7.5,
# q = clamp(round(w / scale), -8, 7), so both ends of the range are used.
QMIN, QMAX = -8, 7
_HALF_RANGE = (QMAX - QMIN) / 2


def k_padded(k: int) -> int:
    """K rounded up to the multiple of 8 that the packed rows hold."""
    return -(-k // 8) * 8


def n_padded(n: int) -> int:
    """N rounded up to a multiple of 4: the width of the scales tensor."""
    return -(-n // 4) * 4


def num_groups(k: int, group_size: int) -> int:
    """The fewest scale groups that cover K."""
    return -(-k // group_size)


def pack(q: np.ndarray) -> np.ndarray:
    """Pack int4 values `[N, K]` (in [-8, 7]) into q4gsw bytes `[N, K_pad/2]`."""
    q = np.asarray(q)
    if q.ndim != 2:
        raise ValueError(f"pack: q must be [N, K], got shape {q.shape}")
    if q.size and (q.min() < QMIN or q.max() > QMAX):
        raise ValueError(f"pack: values must lie in [{QMIN}, {QMAX}], got [{q.min()}, {q.max()}]")
    n, k = q.shape
    codes = np.full((n, k_padded(k)), 8, np.uint8)  # padded slots: q = 0
    codes[:, :k] = (q.astype(np.int16) + 8).astype(np.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def unpack(packed: np.ndarray, k: int) -> np.ndarray:
    """The int4 values `[N, K]` (as int8) of q4gsw bytes `[N, K_pad/2]`."""
    packed = np.asarray(packed, np.uint8)
    if packed.ndim != 2 or packed.shape[1] * 2 != k_padded(k):
        raise ValueError(
            f"unpack: bytes must be [N, {k_padded(k) // 2}] for K={k}, got {packed.shape}"
        )
    codes = np.empty((packed.shape[0], packed.shape[1] * 2), np.int8)
    codes[:, 0::2] = packed & 0xF
    codes[:, 1::2] = packed >> 4
    return (codes[:, :k] - 8).astype(np.int8)


def layout_scales(scales_ng: np.ndarray, groups: int | None = None) -> np.ndarray:
    """Scales `[N, G]` (torchao's layout) as q4gsw stores them: float32 `[groups, N_pad4]`.

    Args:
        scales_ng: one scale per (column n, group g).
        groups: rows of the result (>= G); extra groups are zero.
    """
    scales_ng = np.asarray(scales_ng, np.float32)
    n, g = scales_ng.shape
    groups = g if groups is None else groups
    if groups < g:
        raise ValueError(f"layout_scales: {groups} groups cannot hold {g}")
    out = np.zeros((groups, n_padded(n)), np.float32)
    out[:g, :n] = scales_ng.T
    return out


def quantize(
    w: np.ndarray, group_size: int, *, groups: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize float weights `[N, K]` symmetrically per group into (bytes, scales).

    Returns:
        packed uint8 `[N, K_pad/2]` and float32 scales `[groups, N_pad4]`, where `groups`
        defaults to ceil(K / group_size). An all-zero group gets scale 0 (and q = 0).
    """
    w = np.asarray(w, np.float64)
    if w.ndim != 2:
        raise ValueError(f"quantize: w must be [N, K], got shape {w.shape}")
    if group_size <= 0:
        raise ValueError(f"quantize: group_size must be > 0, got {group_size}")
    n, k = w.shape
    g = num_groups(k, group_size)
    padded = np.zeros((n, g * group_size))
    padded[:, :k] = w
    blocks = padded.reshape(n, g, group_size)
    scales_ng = (np.abs(blocks).max(axis=2) / _HALF_RANGE).astype(np.float32)
    safe = np.where(scales_ng == 0, 1.0, scales_ng.astype(np.float64))
    q = np.clip(np.rint(blocks / safe[:, :, None]), QMIN, QMAX).astype(np.int8)
    q = q.reshape(n, g * group_size)[:, :k]
    return pack(q), layout_scales(scales_ng, groups)


def dequantize(packed: np.ndarray, scales: np.ndarray, group_size: int, k: int) -> np.ndarray:
    """Float64 weights `[N, K]` from q4gsw bytes and scales `[groups, N_pad4]`."""
    q = unpack(packed, k).astype(np.float64)
    n = q.shape[0]
    group_of_k = np.arange(k) // group_size
    s = np.asarray(scales, np.float64)[group_of_k, :n]  # [K, N]
    return q * s.T


def as_u32_words(packed: np.ndarray) -> np.ndarray:
    """The packed bytes as the little-endian u32 words the kernels read, `[N, K_pad/8]`."""
    packed = np.ascontiguousarray(packed, np.uint8)
    return packed.view("<u4").reshape(packed.shape[0], -1)
