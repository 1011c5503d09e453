"""A Vulkan delegate's `VkGraph` converted into the project's graph format.

The conversion keeps the model's graph as it is: one project op per serialized op (the
table of `optable.RULES`), in the chain's order, every value named `v<id>` after its value
id, the dims the serialized max bounds, the inputs and outputs in the delegate's order
(tokens, input_pos; the logits). What it changes is recorded as a `Rewrite` with its reason:
`et_vk.prepack` folded away (a constant's placement on the device: its readers read the
constant), KV caches (constants an op updates in place) made state tensors, float16 q4
scales widened to float32 (exact; the project's q4 ops take float32 scales), INT64 tensors
narrowed to int32 as upstream's runtimes narrow them.

`convert_document` builds the JSON document and its constants; `convert` validates it
with the format's own reader (`Graph.from_json`), which needs every project op's schema.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graph_format import FORMAT_NAME, FORMAT_VERSION, SIGNATURES, Graph, GraphFormatError
from harness.importer.optable import KNOWN_OPS, PREPACK, RULES, STATE_SLOTS
from harness.importer.values import ArgReader, Refusal, Rewrite, ValueTable
from harness.importer.vkgraph import VkGraph, VkTensor


@dataclass
class ConvertedDocument:
    """The converted graph's JSON document and constants, and how each part maps back."""

    doc: dict[str, Any]
    constants: dict[str, np.ndarray]
    # Per project op: its name, project op, serialized name, chain index and node id.
    ops: list[dict[str, Any]]
    # Project value name -> VkGraph value id.
    value_ids: dict[str, int]
    rewrites: list[Rewrite] = field(default_factory=list)
    state: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Converted:
    """A converted, validated graph and the document it came from."""

    graph: Graph
    document: ConvertedDocument


def unknown_ops(graph: VkGraph) -> str | None:
    """Why `graph` holds ops outside the table (each serialized name, with its first op
    index and count), or None."""
    counts = Counter(op.name for op in graph.ops if op.name not in KNOWN_OPS)
    if not counts:
        return None
    first = {name: next(i for i, op in enumerate(graph.ops) if op.name == name) for name in counts}
    listed = ", ".join(f"{name} (op {first[name]}, x{n})" for name, n in counts.items())
    return (
        f"ops outside the importer's table: {listed}; it maps {len(KNOWN_OPS)} serialized "
        "names (docs/executorch-models.md)"
    )


def state_ids(graph: VkGraph) -> set[int]:
    """The values the graph's ops update in place (KV caches): project state tensors."""
    ids = set()
    for op in graph.ops:
        for position in STATE_SLOTS.get(op.name, ()):
            if position < len(op.args):
                ids.add(op.args[position])
    return ids


def convert_document(graph: VkGraph, arrays: list[bytes | None]) -> ConvertedDocument:
    """Convert `graph` (its constants' bytes `arrays`) into a graph document.

    Raises:
        Refusal: an op outside the table, custom shaders, an argument the project op
            cannot take, a value of a kind or dtype the project has no form for.
    """
    problem = unknown_ops(graph)
    if problem:
        raise Refusal(problem)
    if graph.shader_count:
        raise Refusal(
            f"the delegate carries {graph.shader_count} custom shader blobs (VkGraph.shaders): "
            "the importer checks the project's kernels, not shaders it cannot read"
        )
    table = ValueTable(graph, arrays, state_ids(graph))
    inputs = [table.tensor(i, f"graph input {n}") for n, i in enumerate(graph.input_ids)]
    ops: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    folded: list[dict[str, Any]] = []
    for index, op in enumerate(graph.ops):
        record = {"serialized": op.name, "chain_index": index, "node_id": op.node_id}
        if op.name == PREPACK:
            folded.append({**record, "value": _fold_prepack(table, op.args, index)})
            continue
        reader = ArgReader(table, op, index)
        project_op = RULES[op.name](reader)
        reader.done()
        name = f"n{index}_{project_op}"
        ops.append({"name": name, "op": project_op, "args": reader.args, "outputs": reader.outputs})
        records.append({"name": name, "op": project_op, **record})
    outputs = [table.tensor(i, f"graph output {n}") for n, i in enumerate(graph.output_ids)]
    doc = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "values": list(table.entries.values()),
        "ops": ops,
        "inputs": inputs,
        "outputs": outputs,
    }
    state = [n for n, e in table.entries.items() if e.get("state")]
    return ConvertedDocument(
        doc, table.constants, records, dict(table.ids), _rewrites(table, folded, state), state
    )


def convert(graph: VkGraph, arrays: list[bytes | None], source: str) -> Converted:
    """`convert_document`, validated as a project graph.

    Raises:
        Refusal: as `convert_document`; or a project op this checkout has no schema for.
    """
    document = convert_document(graph, arrays)
    missing = sorted({op["op"] for op in document.ops} - set(SIGNATURES))
    if missing:
        serialized = sorted({op["serialized"] for op in document.ops if op["op"] in missing})
        raise Refusal(
            f"{', '.join(serialized)} map onto the project ops {', '.join(missing)}, which "
            "this checkout does not have (graph_format/ops/<op>.toml)"
        )
    try:
        converted = Graph.from_json(document.doc, document.constants, source=source)
    except GraphFormatError as err:
        raise Refusal(f"the converted graph is not well formed: {err}") from None
    return Converted(converted, document)


def _fold_prepack(table: ValueTable, args: tuple[int, ...], index: int) -> str:
    """Fold `prepack(constant, out)`: every reader of out reads the constant."""
    where = f"op {index} {PREPACK}"
    if len(args) != 2:
        raise Refusal(f"{where}: {len(args)} arguments, expected (constant, out)")
    source = table.vk.value(args[0])
    if not isinstance(source, VkTensor) or source.constant_id < 0:
        raise Refusal(f"{where}: value {args[0]} is not a constant tensor")
    target = table.vk.value(args[1])
    if not isinstance(target, VkTensor) or target.dims != source.dims:
        raise Refusal(f"{where}: output value {args[1]} is not a tensor of the constant's dims")
    table.alias[args[1]] = table.resolve(args[0])
    return table.name(table.resolve(args[0]))


def _rewrites(table: ValueTable, folded: list[dict[str, Any]], state: list[str]) -> list[Rewrite]:
    rewrites = []
    if folded:
        rewrites.append(
            Rewrite(
                f"{PREPACK} folded away",
                "it places a constant on the device (a copy); its readers read the constant",
                values=[f["value"] for f in folded],
                ops=folded,
            )
        )
    if state:
        rewrites.append(
            Rewrite(
                "KV caches made state tensors",
                "constants the model updates in place (sdpa_with_kv_cache's k_cache, v_cache, "
                "a mutable buffer); zeros unless the file holds other data",
                values=state,
            )
        )
    if table.widened:
        rewrites.append(
            Rewrite(
                "q4 scales widened from float16 to float32",
                "exact (every binary16 value is a binary32 value); the project's q4 ops take "
                "float32 scales",
                values=table.widened,
            )
        )
    if table.narrowed:
        rewrites.append(
            Rewrite(
                "INT64 tensors narrowed to int32",
                "as both upstream runtimes narrow 64-bit host tensors",
                values=table.narrowed,
            )
        )
    return rewrites
