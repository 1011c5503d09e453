"""Case families: the complete registry, and the families that combine several ops.

The modules of this package define multi-op families (`dag`, `attention`, `decoder`,
`random`); each op's module in `harness/ops/` defines its own. Importing this package
imports both (found by `pkgutil`, never listed), so the registry read here is complete:
`FAMILIES` (by name, sorted), `family_for_op`, `covered_ops` and `cases`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from hypothesis import strategies as st

import harness.ops  # noqa: F401  (every op's module registers its own family at import)
from harness.gen.case import Case
from harness.gen.families import REGISTERED, Family

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

FAMILIES: Mapping[str, Family] = MappingProxyType(dict(sorted(REGISTERED.items())))


def family_for_op(op: str) -> str | None:
    """The family `--ops OP` runs: the op's own, else the most focused one that exercises it.

    Most focused: the fewest op types among the families whose cases contain `op` (so
    view_copy runs `view`, not `decoder`); None when no family exercises it.
    """
    if op in FAMILIES:
        return op
    holders = sorted((len(f.exercises), name) for name, f in FAMILIES.items() if op in f.exercises)
    return holders[0][1] if holders else None


def covered_ops(family: str) -> frozenset[str]:
    """The op types whose required coverage cells family `family` answers for: those it is
    the own family of (`family_for_op`), e.g. `embedding_q4gsw` for `embedding`, `view_copy`
    and `sym_size` for `view`.

    A family that combines ops the others focus on (dag, attention, decoder, random) answers
    for none: its cases are built for the combinations, and reach an op's kernel variants,
    regimes and folds only by chance (harness.run.exitrule). So does a family that is not
    registered (one a test hands the chunk runner).
    """
    found = FAMILIES.get(family)
    if found is None:
        return frozenset()
    return frozenset(op for op in found.exercises if family_for_op(op) == family)


def cases(families: Sequence[str] | None = None) -> st.SearchStrategy[Case]:
    """Cases from the named families (all of them by default)."""
    names = list(families or FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown case families {unknown}; known: {sorted(FAMILIES)}")
    return st.one_of([FAMILIES[n]() for n in names])


__all__ = ["FAMILIES", "Family", "cases", "covered_ops", "family_for_op"]
