"""The case-family registry: each family's strategy and the op types its cases may contain.

A family is registered by the module that defines it, at import: a single-op family by its
op's module in `harness/ops/`, a multi-op family by its module in `harness/families/`.
`harness.families` imports them all and is where the complete registry is read
(`FAMILIES`, `family_for_op`, `cases`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hypothesis import strategies as st

from graph_format import SIGNATURES
from harness.gen.case import Case

Strategy = Callable[[], st.SearchStrategy[Case]]


@dataclass(frozen=True)
class Family:
    """A case family: its name, how to make its strategy, and every op type its cases may
    contain (`exercises`: what `parity run --ops` resolves an op to a family with;
    tests/unit/test_families.py draws cases of each family and checks it holds;
    `dtype_per_case`: the family draws float16 for a case whose own ops all take it, not
    only when every op it exercises does, as the random graphs do)."""

    name: str
    strategy: Strategy
    exercises: frozenset[str]
    dtype_per_case: bool = False

    def __call__(self) -> st.SearchStrategy[Case]:
        return self.strategy()


# family name -> family, in registration order; `harness.families.FAMILIES` is the complete,
# sorted view.
REGISTERED: dict[str, Family] = {}


def register_family(
    name: str, strategy: Strategy, exercises: Iterable[str], *, dtype_per_case: bool = False
) -> Family:
    """Register the family `name`; returns it.

    Raises:
        ValueError: the name is taken, or an op it exercises has no schema.
    """
    ops = frozenset(exercises)
    unknown = sorted(ops - set(SIGNATURES))
    if unknown or not ops:
        raise ValueError(f"family {name!r} exercises ops {unknown or '(none)'} with no schema")
    if name in REGISTERED:
        raise ValueError(f"two case families are called {name!r}")
    REGISTERED[name] = family = Family(name, strategy, ops, dtype_per_case)
    return family


def family(name: str, exercises: Iterable[str]) -> Callable[[Strategy], Strategy]:
    """Register the decorated strategy factory (no arguments) as family `name`."""

    def decorate(strategy: Strategy) -> Strategy:
        register_family(name, strategy, exercises)
        return strategy

    return decorate
