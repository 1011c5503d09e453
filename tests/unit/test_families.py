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
    resolved = {op: family_for_op(op) for op in MODELS}
    assert resolved == {
        **{op: op for op in MODELS if op in FAMILIES},
        "apply_rotary_emb": "rope",
        "apply_rotary_emb_hf": "rope_hf",
        "embedding_q4gsw": "embedding",
        "view_copy": "view",
        "sym_size": "view",
        "sdpa_with_kv_cache": "sdpa",
    }
    assert family_for_op("no_such_op") is None
