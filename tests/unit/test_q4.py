"""The harness's q4gsw format (harness/model/q4.py) against the worked 2×8 example of
docs/design.md §7.

The example pins every byte: a misreading of nibble order, padding or scale layout here would
be shared by the reference and could only be caught by the golden vectors otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.model import q4

# docs/design.md §7, the worked example (2×8), gs = 4.
Q = np.array([[-8, -7, -1, 0, 1, 2, 6, 7], [3, -3, 5, -5, 0, 0, -8, 7]], np.int8)
PACKED = np.array([[0x10, 0x87, 0xA9, 0xFE], [0x5B, 0x3D, 0x88, 0xF0]], np.uint8)
WORDS = np.array([[0xFEA98710], [0xF0883D5B]], np.uint32)
SCALES_NG = np.array([[0.5, 0.25], [1.0, 0.125]], np.float32)  # torchao's [N, G]
SCALES = np.array([[0.5, 1.0, 0.0, 0.0], [0.25, 0.125, 0.0, 0.0]], np.float32)  # [G, N_pad4]
DEQUANT = np.array(
    [[-4, -3.5, -0.5, 0, 0.25, 0.5, 1.5, 1.75], [3, -3, 5, -5, 0, 0, -1, 0.875]], np.float64
)


def test_worked_example_bytes() -> None:
    packed = q4.pack(Q)
    assert packed.dtype == np.uint8
    np.testing.assert_array_equal(packed, PACKED)


def test_worked_example_words() -> None:
    np.testing.assert_array_equal(q4.as_u32_words(PACKED), WORDS)
    # Nibble p of word k/8 holds k: read back every value through the word view.
    words = q4.as_u32_words(PACKED)
    for n in range(2):
        for k in range(8):
            assert int((words[n, k // 8] >> (4 * (k % 8))) & 0xF) - 8 == Q[n, k]


def test_worked_example_scales_and_dequant() -> None:
    scales = q4.layout_scales(SCALES_NG)
    np.testing.assert_array_equal(scales, SCALES)
    assert scales.dtype == np.float32
    np.testing.assert_array_equal(q4.unpack(PACKED, 8), Q)
    np.testing.assert_array_equal(q4.dequantize(PACKED, SCALES, 4, 8), DEQUANT)


def test_k_tail_is_zero_padded() -> None:
    q = np.array([[7, -8, 1]], np.int8)  # K = 3 -> K_pad = 8, padded slots are nibble 8
    packed = q4.pack(q)
    np.testing.assert_array_equal(packed, [[0x0F, 0x89, 0x88, 0x88]])
    np.testing.assert_array_equal(q4.unpack(packed, 3), q)


@pytest.mark.parametrize(("n", "k", "gs"), [(13, 60, 20), (4, 64, 64), (5, 8, 8), (3, 17, 5)])
def test_quantize_round_trip(n: int, k: int, gs: int) -> None:
    rng = np.random.default_rng(n * 1000 + k)
    w = rng.standard_normal((n, k))
    packed, scales = q4.quantize(w, gs)
    assert packed.shape == (n, q4.k_padded(k) // 2)
    assert scales.shape == (q4.num_groups(k, gs), q4.n_padded(n))
    assert not scales[:, n:].any(), "padding columns of the scales must be zero"
    back = q4.dequantize(packed, scales, gs, k)
    step = scales[np.arange(k) // gs, :n].T.astype(np.float64)
    # Rounding to the nearest level: at most half a step, plus the clamp of +amax to 7.
    assert np.all(np.abs(back - w) <= step * 0.5 + 1e-12 + (w > 7 * step) * step)
    assert q4.unpack(packed, k).min() >= -8 and q4.unpack(packed, k).max() <= 7


def test_quantize_extra_groups_and_zero_group() -> None:
    w = np.zeros((2, 16))
    w[1, :8] = 1.0
    packed, scales = q4.quantize(w, 8, groups=3)
    assert scales.shape == (3, 4)
    assert scales[0, 0] == 0 and scales[1, 1] == 0 and scales[2].sum() == 0
    # amax / 7.5 maps +amax to 7.5, which rounds to 8 and clamps to 7.
    np.testing.assert_array_equal(q4.unpack(packed, 16), np.where(w > 0, 7, 0))
    np.testing.assert_array_equal(scales[0, :2], np.float32([0.0, 1.0 / 7.5]))


def test_pack_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        q4.pack(np.array([[8]]))
