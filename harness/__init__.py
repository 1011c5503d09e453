"""vulkan-parity's harness: contract model, float64 reference, oracles and the `parity` command.

The public API (docs/api.md) is importable from here:

    from harness import single_op_graph, op_budget, open_runtimes, check_case

Names are resolved lazily (PEP 562 module `__getattr__`): importing `harness` imports
neither Hypothesis nor a backend; each name loads its own module the first time it is used.
`GraphBuilder` and `Case` need neither; the names that need the op models (`single_op_graph`,
`op_budget`, `op_budgets`, `run_case`, `check_case`, the decoder's `build_decoder` and
`decoder_case`, ...) load the op registry `harness.ops`, whose modules also register their
Hypothesis case families; `open_runtimes` loads a backend when it opens one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module that defines it.
_EXPORTS = {
    "GraphBuilder": "harness.gen.builder",
    "Case": "harness.gen.case",
    "single_op_graph": "harness.api",
    "op_budget": "harness.api",
    "op_budgets": "harness.api",
    "OpBudget": "harness.api",
    "run_case": "harness.api",
    "check_case": "harness.api",
    "open_runtime": "harness.check.backends",
    "open_runtimes": "harness.check.backends",
    "LockstepRunner": "harness.check.lockstep",
    "CaseResult": "harness.check.lockstep",
    "assert_parity": "harness.check.verdict",
    "DivergenceFound": "harness.check.verdict",
    "Divergence": "harness.check.divergence",
    "BugKey": "harness.check.divergence",
    "ContractModel": "harness.check.contract",
    "ReferenceEvaluator": "harness.check.reference",
    "DecoderConfig": "harness.families.decoder",
    "DecoderWeights": "harness.families.decoder",
    "build_decoder": "harness.families.decoder",
    "decoder_case": "harness.families.decoder",
    "decoder_step": "harness.families.decoder",
    "half_precision": "harness.gen.half",
}

# The same names, spelled out for tools that read `__all__` (tests check the two agree).
__all__ = [
    "BugKey",
    "Case",
    "CaseResult",
    "ContractModel",
    "DecoderConfig",
    "DecoderWeights",
    "Divergence",
    "DivergenceFound",
    "GraphBuilder",
    "LockstepRunner",
    "OpBudget",
    "ReferenceEvaluator",
    "assert_parity",
    "build_decoder",
    "check_case",
    "decoder_case",
    "decoder_step",
    "half_precision",
    "op_budget",
    "op_budgets",
    "open_runtime",
    "open_runtimes",
    "run_case",
    "single_op_graph",
]

if TYPE_CHECKING:
    from harness.api import (
        OpBudget,
        check_case,
        op_budget,
        op_budgets,
        run_case,
        single_op_graph,
    )
    from harness.check.backends import open_runtime, open_runtimes
    from harness.check.contract import ContractModel
    from harness.check.divergence import BugKey, Divergence
    from harness.check.lockstep import CaseResult, LockstepRunner
    from harness.check.reference import ReferenceEvaluator
    from harness.check.verdict import DivergenceFound, assert_parity
    from harness.families.decoder import (
        DecoderConfig,
        DecoderWeights,
        build_decoder,
        decoder_case,
        decoder_step,
    )
    from harness.gen.builder import GraphBuilder
    from harness.gen.case import Case
    from harness.gen.half import half_precision


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
