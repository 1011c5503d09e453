"""vulkan-parity's harness: contract model, float64 reference, oracles and the `parity` command.

The public API (docs/api.md) is importable from here:

    from harness import single_op_graph, op_budget, open_runtimes, check_case

Names are resolved lazily (PEP 562 module `__getattr__`): importing `harness` or any of its
modules imports neither Hypothesis nor a backend; each name loads its own module the first
time it is used (`check_case` and `assert_parity` bring Hypothesis in, `open_runtimes` a
backend when it opens one).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module that defines it.
_EXPORTS = {
    "GraphBuilder": "harness.builder",
    "Case": "harness.case",
    "single_op_graph": "harness.api",
    "op_budget": "harness.api",
    "OpBudget": "harness.api",
    "run_case": "harness.api",
    "check_case": "harness.api",
    "open_runtime": "harness.backends",
    "open_runtimes": "harness.backends",
    "LockstepRunner": "harness.lockstep",
    "CaseResult": "harness.lockstep",
    "assert_parity": "harness.verdict",
    "DivergenceFound": "harness.verdict",
    "Divergence": "harness.divergence",
    "BugKey": "harness.divergence",
    "ContractModel": "harness.contract",
    "ReferenceEvaluator": "harness.reference",
}

# The same names, spelled out for tools that read `__all__` (tests check the two agree).
__all__ = [
    "BugKey",
    "Case",
    "CaseResult",
    "ContractModel",
    "Divergence",
    "DivergenceFound",
    "GraphBuilder",
    "LockstepRunner",
    "OpBudget",
    "ReferenceEvaluator",
    "assert_parity",
    "check_case",
    "op_budget",
    "open_runtime",
    "open_runtimes",
    "run_case",
    "single_op_graph",
]

if TYPE_CHECKING:
    from harness.api import OpBudget, check_case, op_budget, run_case, single_op_graph
    from harness.backends import open_runtime, open_runtimes
    from harness.builder import GraphBuilder
    from harness.case import Case
    from harness.contract import ContractModel
    from harness.divergence import BugKey, Divergence
    from harness.lockstep import CaseResult, LockstepRunner
    from harness.reference import ReferenceEvaluator
    from harness.verdict import DivergenceFound, assert_parity


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
