"""Half-precision twins of cases built in float32.

A family that draws its dtype last (so that its shape draws stay where they were) builds its
case in float32 and, for a float16 draw, turns it into its half-precision twin here: every
float32 tensor of the graph (inputs, constants, state, op outputs) becomes float16 except
those named in `keep` (q4gsw scales stay float32), and the constants and step inputs of the
converted tensors are rounded to f16 once. That is what `blocks.float_array(..., dtype=
"float16")` gives from the same generator calls, so a case's f16 data are its f32 data
rounded, whichever way a family builds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import numpy as np

from graph_format import Graph, TensorValue
from harness.gen.case import Case, StepInputs


def half_precision(case: Case, keep: Collection[str] | None = None) -> Case:
    """The float16 twin of a float32 `case`, with `meta["dtype"]` set to "float16".

    Every float32 tensor (inputs, constants, state, op outputs) becomes float16, and the
    constants, initial state and step inputs of those tensors are rounded to f16 once.

    Args:
        keep: tensors that stay float32 (default: the q4gsw scales, the tensors any op
            takes in its `scales` argument, which the q4gsw ops read in float32 in an f16
            graph too).
    """
    graph = case.graph
    if keep is None:
        keep = {s for n in graph.ops if isinstance(s := n.args.get("scales"), str)}
    halved = {
        name
        for name, value in graph.values.items()
        if isinstance(value, TensorValue) and value.dtype == "float32" and name not in keep
    }
    values = {
        name: dataclasses.replace(graph.tensor(name), dtype="float16") if name in halved else value
        for name, value in graph.values.items()
    }
    constants = dict(graph.constants)
    for name in halved:
        constant = graph.tensor(name).constant
        if constant is not None:
            constants[constant] = np.asarray(constants[constant]).astype(np.float16)
    steps: list[StepInputs] = [
        {
            name: value.astype(np.float16)
            if name in halved and isinstance(value, np.ndarray)
            else value
            for name, value in step.items()
        }
        for step in case.steps
    ]
    # Through the format's own validation, as every built graph goes.
    doc = dataclasses.replace(graph, values=values, constants=constants).to_json()
    half = Graph.from_json(doc, constants, source="<half_precision>")
    return Case(half, steps, name=case.name, meta={**case.meta, "dtype": "float16"})
