"""WebGPU op builders, one module per op: each records dispatches and registers resize hooks.

A builder validates what it can at load (dtypes, ranks, formats: `GraphBuildError`), records
its kernel slots with `WebGPUGraph.add_kernel` (tensors by role, the values fixed for the
graph) and registers a hook on every value it reads, which hands each slot the values of the
step (`Dispatch.set`: its count among them) and sets its outputs' `cur_dims`. A module never
packs params: the runtime packs each kernel's own declaration from those values.

Every module of this package is imported here (found by `pkgutil`, not listed), and each
registers its builders with `@register("<op>", ...)`: adding an op is adding its module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from graph_format import SIGNATURES

if TYPE_CHECKING:
    from webgpu_backend.graph import OpBuilder

OP_BUILDERS: dict[str, OpBuilder] = {}


def register(*ops: str) -> Callable[[OpBuilder], OpBuilder]:
    """Register the decorated function as the builder of each of `ops`."""

    def decorate(build: OpBuilder) -> OpBuilder:
        for op in ops:
            if op not in SIGNATURES:
                raise ValueError(f"{build.__module__}: op {op!r} has no schema in graph_format")
            if op in OP_BUILDERS:
                raise ValueError(
                    f"{build.__module__}: op {op!r} already has a builder in "
                    f"{OP_BUILDERS[op].__module__}"
                )
            OP_BUILDERS[op] = build
        return build

    return decorate


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
