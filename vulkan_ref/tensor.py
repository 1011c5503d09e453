"""Vulkan tensors: a device-local slot at the max size plus a metadata UBO of live sizes.

Both come from the graph's arena (`vulkan_ref.pool`): the slot is placed in the graph's
device block once every op is built, the UBO at once (it is written here).

As in ExecuTorch's `vTensor`, `virtual_resize` changes the live sizes inside the fixed
allocation and rewrites the metadata UBO at once; shaders read live sizes from that UBO.
Unlike upstream (docs/design.md §8.10: it checks the old padded sizes), the new sizes
themselves are checked: the rank must stay, and every dim must lie in [1, max].

Metadata UBO layout (std140, `glsl/include/tensor_meta.glslh`):
    uvec4 sizes;    // WHCN order: sizes.x is the innermost (last) dim; padded with 1
    uvec4 strides;  // WHCN element strides of the contiguous layout; padded with numel
    uint ndim;
    uint numel;
"""

from __future__ import annotations

import math
import struct

from graph_format import ResizeError
from vulkan_ref.pool import Arena

META_NBYTES = 48
_META = struct.Struct("<4I4I2I")


def whcn_meta(sizes: tuple[int, ...]) -> bytes:
    """The metadata UBO contents for live `sizes` (PyTorch order)."""
    numel = math.prod(sizes)
    whcn = list(reversed(sizes)) + [1] * (4 - len(sizes))
    strides: list[int] = []
    stride = 1
    for size in whcn[: len(sizes)]:
        strides.append(stride)
        stride *= size
    strides += [numel] * (4 - len(strides))
    return _META.pack(*whcn, *strides, len(sizes), numel).ljust(META_NBYTES, b"\0")


class VTensor:
    """A tensor value with live `sizes` inside a fixed allocation of `max_sizes`."""

    def __init__(
        self,
        arena: Arena,
        name: str,
        dtype: str,
        itemsize: int,
        max_sizes: tuple[int, ...],
        *,
        is_constant: bool = False,
        is_state: bool = False,
    ) -> None:
        self.name = name
        self.dtype = dtype
        self.itemsize = itemsize
        self.max_sizes = max_sizes
        self.sizes = max_sizes
        self.is_constant = is_constant
        self.is_state = is_state
        self.buffer = arena.storage(name, math.prod(max_sizes) * itemsize)
        self.meta = arena.uniform(META_NBYTES)
        self.meta.write(0, whcn_meta(self.sizes))

    @property
    def numel(self) -> int:
        """Live element count."""
        return math.prod(self.sizes)

    @property
    def nbytes(self) -> int:
        """Live bytes."""
        return self.numel * self.itemsize

    def validate(self, sizes: tuple[int, ...]) -> None:
        """Raise ResizeError unless `sizes` fits this tensor's allocation dim by dim."""
        if len(sizes) != len(self.max_sizes):
            raise ResizeError(self.name, None, len(sizes), len(self.max_sizes), "rank")
        for dim, size in enumerate(sizes):
            if size < 1:
                raise ResizeError(self.name, dim, size, 1, "nonpositive")
            if size > self.max_sizes[dim]:
                raise ResizeError(self.name, dim, size, self.max_sizes[dim], "above_max")

    def virtual_resize(self, sizes: tuple[int, ...]) -> bool:
        """Set live sizes and rewrite the metadata UBO; returns whether anything changed."""
        self.validate(sizes)
        if sizes == self.sizes:
            return False
        self.sizes = sizes
        self.meta.write(0, whcn_meta(sizes))
        return True
