"""Case families declare the op types their cases contain, and `--ops` resolves from that."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from harness.families import FAMILIES, family_for_op
from harness.gen.case import Case
from harness.ops import MODELS


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_cases_contain_only_the_ops_it_declares(name: str) -> None:
    family = FAMILIES[name]
    assert family.exercises <= set(MODELS), family.exercises - set(MODELS)
    seen: set[str] = set()

    @settings(
        max_examples=8,
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=family())
    def draw(case: Case) -> None:
        ops = {node.op for node in case.graph.ops}
        assert ops <= family.exercises, f"{name} drew {sorted(ops - family.exercises)}, undeclared"
        seen.update(ops)

    draw()
    assert seen, f"{name} drew no op at all"


def test_every_op_resolves_to_the_family_that_exercises_it_most_directly() -> None:
    for op in MODELS:
        family = family_for_op(op)
        assert family is not None and op in FAMILIES[family].exercises, op
        if op not in FAMILIES:  # else the op's own family
            fewest = min(len(f.exercises) for f in FAMILIES.values() if op in f.exercises)
            assert len(FAMILIES[family].exercises) == fewest, (op, family)
    assert {op: family_for_op(op) for op in ("rms_norm", "view_copy", "sym_size")} == {
        "rms_norm": "rms_norm",
        "view_copy": "view",
        "sym_size": "view",
    }
    assert family_for_op("apply_rotary_emb") == "rope"
    assert family_for_op("sdpa_with_kv_cache") == "sdpa"
    assert family_for_op("no_such_op") is None
