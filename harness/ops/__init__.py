"""Every op's harness module, one per op (or per small family of ops sharing their math).

An op's module holds its contract model (check, resize, dispatches, reference, budget,
regimes), its case-family strategy and its random-graph generator, and registers each at
import: the model with `harness.model.register`, the family with
`harness.gen.families.family`, the generator with `harness.gen.graphgen.generator`.
Importing this package imports every module in it (found by `pkgutil`, never listed), so
`MODELS` and `model_for` read from here are complete.
"""

from __future__ import annotations

import importlib
import pkgutil

from harness.model import MODELS, model_for

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["MODELS", "model_for"]
