"""`model.json`: what an imported graph is in the model it came from.

Written beside the graph folder's `graph.json` and `graph.npz` by `parity import`. It maps
every project op and value back to its serialized name and id (a finding on `n17_sdpa_with_
kv_cache` or `v74` leads to op 17 and value 74 of the delegate), and records what a model
family needs to run the graph the way the model is used: the inputs' roles and dynamic
bounds, the context length, the vocabulary, the dtypes, and every rewrite with its reason.

Where the bounds come from: the serialized dims (`VkTensor.dims`, equal to the program's
`Tensor.sizes`) are each dynamic dim's maximum. A `.pte` records no minimum (the program
marks a tensor only STATIC or DYNAMIC_BOUND, and the exporter's `Dim(min=...)` is not
serialized); the minimum recorded is 1, the floor of both runtimes (a live dim must be
positive). Which dims move is read from the graph itself: the dims its `sym_size` ops read.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

from harness.importer.convert import ConvertedDocument
from harness.importer.program import SCALAR_TYPES, Method, ProgramTensor
from harness.importer.vkgraph import VkGraph, VkTensor

MODEL_FORMAT = "vulkan-parity-model"
MODEL_VERSION = 1
LAYOUT = (
    "ExecuTorch cff6f4dd (executorch==1.5.1, git 3b606839): program ET12 with extended "
    "header eh00, Vulkan delegate VH00 header (30 bytes), VkGraph version 0"
)
MIN_SOURCE = (
    "not serialized: a .pte marks tensors only STATIC or DYNAMIC_BOUND; 1 is both runtimes' "
    "floor (a live dim must be positive)"
)
MAX_SOURCE = "the serialized dims (VkTensor.dims = the program's Tensor.sizes: the upper bound)"


def model_info(
    source: Path,
    data: bytes,
    methods: tuple[Method, ...],
    method: Method,
    vk: VkGraph,
    document: ConvertedDocument,
) -> dict[str, Any]:
    """The document of `model.json`."""
    metadata = {m.name: m.constant_int for m in methods if m.constant_int is not None}
    roles = _roles(document)
    sizes = _llm_sizes(document, metadata, roles)
    vocab = sizes.get("vocab_size", {}).get("value")
    for name in document.doc["outputs"]:
        logits = vocab is not None and vk.tensor(document.value_ids[name]).dims[-1] == vocab
        roles.setdefault(name, "logits" if logits else "output")
    for name in document.doc["inputs"]:
        roles.setdefault(name, "input")
    inputs = [
        _io(name, vk, document, roles, method.values[method.inputs[i]].tensor)
        for i, name in enumerate(document.doc["inputs"])
    ]
    outputs = [
        _io(name, vk, document, roles, method.values[method.outputs[i]].tensor)
        for i, name in enumerate(document.doc["outputs"])
    ]
    return {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "source": {
            "file": source.name,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "layout": LAYOUT,
            "method": method.name,
            "delegate": method.delegates[0].backend_id,
        },
        "metadata": metadata,
        "inputs": inputs,
        "outputs": outputs,
        "dynamic_bounds": {"min": MIN_SOURCE, "max": MAX_SOURCE},
        **sizes,
        "dtypes": _dtypes(document),
        "ops": document.ops,
        "values": [_value(name, vid, vk) for name, vid in document.value_ids.items()],
        "state": [
            {"name": name, "value_id": document.value_ids[name], "role": roles.get(name, "state")}
            for name in document.state
        ],
        "rewrites": [
            {"what": r.what, "why": r.why, "values": r.values, **({"ops": r.ops} if r.ops else {})}
            for r in document.rewrites
        ],
    }


def _roles(document: ConvertedDocument) -> dict[str, str]:
    """What the graph's special values are, from the slots that read them: the token ids
    (embedding indices), input_pos (read by select_as_symint), the KV caches."""
    roles: dict[str, str] = {}
    by_slot = {
        ("embedding_q4gsw", "indices"): "tokens",
        ("select_as_symint", "x"): "input_pos",
        ("sdpa_with_kv_cache", "k_cache"): "k_cache",
        ("sdpa_with_kv_cache", "v_cache"): "v_cache",
    }
    for op in document.doc["ops"]:
        for slot, arg in op["args"].items():
            role = by_slot.get((op["op"], slot))
            if role and isinstance(arg, str):
                roles.setdefault(arg, role)
    return roles


def _dynamic_dims(name: str, document: ConvertedDocument) -> list[int]:
    """The dims of `name` the graph's sym_size ops read (the dims that move)."""
    dims = set()
    values = {v["name"]: v for v in document.doc["values"]}
    for op in document.doc["ops"]:
        if op["op"] == "sym_size" and op["args"]["x"] == name:
            dims.add(int(values[op["args"]["dim"]]["value"]))
    return sorted(dims)


def _io(
    name: str,
    vk: VkGraph,
    document: ConvertedDocument,
    roles: dict[str, str],
    program: ProgramTensor | None,
) -> dict[str, Any]:
    """One graph input or output: its role, dtypes, max dims and dynamic bounds."""
    value_id = document.value_ids[name]
    tensor = vk.tensor(value_id)
    entry = next(v for v in document.doc["values"] if v["name"] == name)
    dynamic = _dynamic_dims(name, document)
    record: dict[str, Any] = {
        "name": name,
        "value_id": value_id,
        "role": roles[name],
        "dtype": entry["dtype"],
        "serialized_dtype": tensor.dtype,
        "staging_dtype": tensor.staging_dtype,
        "dims": list(tensor.dims),
        "dynamic": [{"dim": d, "min": 1, "max": tensor.dims[d]} for d in dynamic],
    }
    if program is not None:
        record["program"] = {
            "scalar_type": SCALAR_TYPES.get(program.scalar_type, str(program.scalar_type)),
            "sizes": list(program.sizes),
            "dynamism": program.dynamism,
        }
        if program.dynamism != "STATIC" and not dynamic:
            # Marked dynamic, but no op of the graph reads a size of it: every dim above 1
            # may move as far as the graph can tell.
            record["dynamic"] = [
                {"dim": d, "min": 1, "max": n} for d, n in enumerate(tensor.dims) if n > 1
            ]
            record["dynamic_note"] = "DYNAMIC_BOUND, no sym_size reads it: every dim > 1"
    return record


def _llm_sizes(
    document: ConvertedDocument, metadata: dict[str, int], roles: dict[str, str]
) -> dict[str, Any]:
    """The context length (KV cache rows), the vocabulary and the longest prompt, each
    with where it was read."""
    values = {v["name"]: v for v in document.doc["values"]}
    sizes: dict[str, Any] = {}
    caches = [n for n, r in roles.items() if r in ("k_cache", "v_cache")]
    if caches:
        rows = sorted({values[n]["dims"][1] for n in caches})
        sizes["context_length"] = {
            "value": rows[0],
            "source": "the KV caches' dim 1 ([1, C, H_kv, D])",
            "metadata": metadata.get("get_max_context_len"),
        }
    embeddings = [op for op in document.doc["ops"] if op["op"] == "embedding_q4gsw"]
    if embeddings:
        sizes["vocab_size"] = {
            "value": values[embeddings[0]["args"]["weight"]]["dims"][0],
            "source": "the embedding's rows",
            "metadata": metadata.get("get_vocab_size"),
        }
    tokens = [n for n, r in roles.items() if r == "tokens"]
    if tokens:
        sizes["max_tokens"] = {
            "value": values[tokens[0]]["dims"][-1],
            "source": "the token input's max dim (the exporter's token_dim: max_seq_len - 1)",
            "metadata": metadata.get("get_max_seq_len"),
        }
    return sizes


def _dtypes(document: ConvertedDocument) -> dict[str, Any]:
    tensors = [v for v in document.doc["values"] if v["kind"] == "tensor"]
    floats = sorted({v["dtype"] for v in tensors if v["dtype"].startswith("float")})
    widened = any("widened" in r.what for r in document.rewrites)
    return {
        "float": floats,
        "tensors": dict(Counter(v["dtype"] for v in tensors)),
        "q4_scales": "widened" if widened else "float32",
    }


def _value(name: str, value_id: int, vk: VkGraph) -> dict[str, Any]:
    value = vk.value(value_id)
    if isinstance(value, VkTensor):
        return {
            "name": name,
            "value_id": value_id,
            "kind": "VkTensor",
            "dtype": value.dtype,
            "storage": value.storage,
            **(_constant(value, vk) if value.constant_id >= 0 else {}),
        }
    return {"name": name, "value_id": value_id, "kind": getattr(value, "kind", "?")}


def _constant(tensor: VkTensor, vk: VkGraph) -> dict[str, Any]:
    """Where a constant's bytes were found (its sha256 was checked against a named key)."""
    constant = vk.constants[tensor.constant_id]
    where: dict[str, Any] = {"constant_id": tensor.constant_id, "bytes": constant.length}
    if constant.is_named:
        where["named_key"] = constant.named_key
    else:
        where["offset"] = constant.offset
    return where
