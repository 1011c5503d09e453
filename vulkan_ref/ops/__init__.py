"""Vulkan op implementations, one module per op: each adds nodes to the `ComputeGraph`.

An implementation checks what it can at load (`GraphBuildError`), adds its dispatch nodes
with a `resize_fn` that virtual-resizes its outputs from live input sizes, and pickers that
choose shader and global size at run time, as ExecuTorch's `add_*_node` functions do.

Every module of this package is imported here (found by `pkgutil`, not listed), and each
registers its implementations with `@register("<op>", ...)`, as ExecuTorch's
`REGISTER_OPERATORS` does: adding an op is adding its module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from graph_format import SIGNATURES

if TYPE_CHECKING:
    from vulkan_ref.graph import OpImpl

OP_IMPLS: dict[str, OpImpl] = {}


def register(*ops: str) -> Callable[[OpImpl], OpImpl]:
    """Register the decorated function as the implementation of each of `ops`."""

    def decorate(impl: OpImpl) -> OpImpl:
        for op in ops:
            if op not in SIGNATURES:
                raise ValueError(f"{impl.__module__}: op {op!r} has no schema in graph_format")
            if op in OP_IMPLS:
                raise ValueError(
                    f"{impl.__module__}: op {op!r} already has an implementation in "
                    f"{OP_IMPLS[op].__module__}"
                )
            OP_IMPLS[op] = impl
        return impl

    return decorate


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
