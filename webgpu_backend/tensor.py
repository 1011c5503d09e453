"""WebGPU tensors: a storage slot at the max size, with live dims that change in place.

The slot is a range of one of the runtime's pooled buffers (`webgpu_backend.pool`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graph_format import ResizeError
from webgpu_backend.pool import Slot

Dims = tuple[int, ...]


def storage_size(nbytes: int) -> int:
    """Bytes to allocate for `nbytes` of data: WebGPU wants sizes that are multiples of 4, > 0."""
    return max(4, (nbytes + 3) // 4 * 4)


@dataclass
class WebGPUTensor:
    """A tensor value: `dims` is the max (allocation) shape, `cur_dims` the live one."""

    name: str
    dtype: str
    elem_size: int
    dims: Dims
    cur_dims: Dims
    slot: Slot
    is_constant: bool = False
    is_state: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes at the max dims."""
        return math.prod(self.dims) * self.elem_size

    @property
    def cur_numel(self) -> int:
        """Elements at the live dims."""
        return math.prod(self.cur_dims)

    @property
    def cur_nbytes(self) -> int:
        """Bytes at the live dims."""
        return self.cur_numel * self.elem_size

    @property
    def alloc_nbytes(self) -> int:
        """Bytes actually allocated (not counting the guard after them)."""
        return self.slot.size

    def check_dims(self, dims: Dims) -> None:
        """Reject a live shape that changes the rank, has a dim < 1 or above its max.

        Raises:
            ResizeError: naming this tensor, the dim, the value and the limit.
        """
        if len(dims) != len(self.dims):
            raise ResizeError(self.name, None, len(dims), len(self.dims), "rank")
        for d, (size, limit) in enumerate(zip(dims, self.dims, strict=True)):
            if size < 1:
                raise ResizeError(self.name, d, size, 1, "nonpositive")
            if size > limit:
                raise ResizeError(self.name, d, size, limit, "above_max")
