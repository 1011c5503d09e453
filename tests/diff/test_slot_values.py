"""Three implementations of each slot's values agree (docs/design.md §9).

Each op offers a kernel of each slot its values by name (the slot interface of
`graph_format/ops/<op>.toml`): the WebGPU resize hook, the Vulkan dispatch node and the
harness's model (`harness.model.slot_values`) each compute them on their own. Over generated
cases of every op family, after every accepted step, all three offer exactly the declared
names for every slot that ran, with equal values. A manifest's dispatch counts and
`requires` are evaluated on these values, so the harness's copy is what checks a foreign
kernel's dispatch log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_format import SLOTS, ParityError, Runtime
from graph_format.kernels import BUILTIN_NAMES, WORKGROUPS_VALUE, Value
from harness.check.contract import ContractModel, ModelStep
from harness.families import FAMILIES
from harness.gen.builder import GraphBuilder
from harness.gen.case import Case
from harness.model import slot_values
from harness.ops import MODELS
from vulkan_ref.graph import DispatchNode
from webgpu_backend.graph import WebGPUGraph

pytestmark = pytest.mark.gpu

# Every op's own family, and random graphs (every op, in other contexts).
OP_FAMILIES = sorted(set(FAMILIES) - {"attention", "dag", "decoder"})

Offered = dict[tuple[str, str], dict[str, Value]]


def _plain(values: Mapping[str, Any]) -> dict[str, Value]:
    """Values without the backend's workgroup limit, vectors as tuples of ints or floats."""
    return {
        name: tuple(value) if isinstance(value, tuple | list) else value
        for name, value in values.items()
        if name not in BUILTIN_NAMES
    }


def _webgpu_values(graph: Any) -> Offered:
    assert isinstance(graph, WebGPUGraph)
    return {
        (d.op, d.kernel): _plain(d.values)
        for d in graph.dispatches
        if d.count  # a skipped slot keeps the values it last ran with
    }


def _vulkan_values(graph: Any) -> Offered:
    offered: Offered = {}
    for node in graph.nodes:
        if isinstance(node, DispatchNode) and node.slot:
            kernel = node.kernels[node.slot]
            values = _plain({**kernel.static, **node.values(graph, node.slot)})
            if values[WORKGROUPS_VALUE]:
                offered[(node.op, node.slot)] = values
    return offered


def _harness_values(case: Case, step: ModelStep, model: ContractModel) -> Offered:
    offered: Offered = {}
    live = model.state
    for node in case.graph.ops:
        for _, slot, _, _, ran in MODELS[node.op].dispatches(node, live):
            if ran:
                offered[(node.name, slot)] = slot_values(node, live, slot)
    assert step.dispatches  # the step ran something
    return offered


def _check_case(runtimes: list[Runtime], case: Case) -> int:
    """Run `case` on both backends and the contract; compare the values after every step
    all three accept. Returns the number of slot values compared."""
    model = ContractModel(case.graph)
    graphs = [rt.load(case.graph) for rt in runtimes]
    compared = 0
    try:
        for inputs in case.steps:
            expected = model.try_step(inputs)
            outcomes = []
            for graph in graphs:
                try:
                    graph.execute(inputs)
                    outcomes.append(True)
                except ParityError:
                    outcomes.append(False)
            if not isinstance(expected, ModelStep) or not all(outcomes):
                continue  # a refused step: no values are offered
            harness = _harness_values(case, expected, model)
            webgpu, vulkan = _webgpu_values(graphs[0]), _vulkan_values(graphs[1])
            assert set(webgpu) == set(vulkan) == set(harness)
            for key, values in harness.items():
                slot = key[1]
                assert set(values) == set(SLOTS[slot].values), key
                assert webgpu[key] == values, (key, "webgpu", webgpu[key], values)
                assert vulkan[key] == values, (key, "vulkan", vulkan[key], values)
                compared += len(values)
    finally:
        for graph in graphs:
            graph.close()
    return compared


@pytest.mark.parametrize("family", OP_FAMILIES)
@given(data=st.data())
def test_three_implementations_offer_the_same_slot_values(
    runtimes: list[Runtime], family: str, data: st.DataObject
) -> None:
    case = data.draw(FAMILIES[family](), label=family)
    _check_case(runtimes, case)


def test_a_refused_step_leaves_the_values_it_handed(runtimes: list[Runtime]) -> None:
    """rms_norm's hook hands 2 rows before the view refuses the step (n disagrees with the
    numel); the next step, back at 1 row, runs no hook, so the values offered must be those
    from before the refused step (WebGPU restored its params but once kept the dict)."""
    b = GraphBuilder()
    x, n = b.input("x", "float32", [1, 2, 2]), b.symint_input("n")
    h = b.op(
        "rms_norm",
        name="norm",
        x=x,
        weight=b.constant("w", np.ones(2, np.float32)),
        eps=b.float(1e-6),
    )
    sizes = [b.int(1), n, b.int(1), b.int(2)]
    b.output(b.op("view_copy", name="split", x=h, sizes=sizes, out_dims=[1, 2, 1, 2]))
    data = np.ones((1, 2, 2), np.float32) * np.arange(1, 3, dtype=np.float32)
    steps = [{"x": data[:, :1], "n": 1}, {"x": data, "n": 1}, {"x": data[:, :1], "n": 1}]
    assert _check_case(runtimes, Case(b.build(), steps, name="refused")) > 0
