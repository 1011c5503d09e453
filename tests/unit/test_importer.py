"""The `.pte` importer on the committed ExecuTorch models (no device, no torch): what the
reader finds in them, how each serialized op and value maps onto the project graph, what is
rewritten and recorded, and the FFN block's imported graph against its PyTorch eager goldens.

The Llama exports map onto four project ops that branch pte-ops adds; the tests that need
their schemas (a validated graph, its reference) say so and skip until they exist, the rest
check the conversion document, which needs no schema.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from harness.check.reference import ReferenceEvaluator
from harness.importer import import_pte
from harness.importer.modelinfo import model_info
from harness.importer.optable import KNOWN_OPS, PREPACK, RULES
from harness.importer.program import read_program
from harness.importer.values import ArgReader, ValueTable
from harness.importer.vkgraph import VkScalar, VkTensor
from harness.model.numerics import compare
from tests.importer_support import (
    IMPORTABLE,
    LLAMAS,
    MODELS_DIR,
    REFUSED,
    golden_steps,
    goldens,
    model_params,
    read_model,
)

# The serialized op names and counts of the 2-layer Llama, as the reference
# (shared/reference/executorch-pte.md) lists them for an export_llm Llama.
LLAMA_ROPE_OPS = {
    "aten.view_copy.default": 16,
    "et_vk.linear_q4gsw.default": 15,
    "et_vk.rms_norm.default": 5,
    "aten.add.Tensor": 4,
    "aten.mul.Tensor": 4,
    "et_vk.apply_rotary_emb.default": 2,
    "sdpa_with_kv_cache.default": 2,
    "aten.sigmoid.default": 2,
    "aten.slice_copy.Tensor": 2,
    "et_vk.select_as_symint.default": 2,
    PREPACK: 2,
    "sym_size.int": 1,
    "et_vk.embedding_q4gsw.default": 1,
    "add": 1,
    "aten.select_copy.int": 1,
}


@pytest.mark.parametrize("name", [*IMPORTABLE, *REFUSED])
def test_every_committed_model_reads(name: str) -> None:
    program = read_program((MODELS_DIR / f"{name}.pte").read_bytes())
    computing = [m for m in program.methods if m.instructions]
    assert [m.name for m in computing] == ["forward"]
    assert all(d.backend_id == "VulkanBackend" for d in computing[0].delegates)


def test_the_two_layer_llama_is_what_the_reference_describes() -> None:
    model = read_model("llama_rope")
    vk = model.vk
    assert vk.version == "0" and vk.shader_count == 0
    assert Counter(op.name for op in vk.ops) == LLAMA_ROPE_OPS
    tokens, input_pos = (vk.tensor(i) for i in vk.input_ids)
    assert (tokens.dtype, tokens.dims) == ("INT32", (1, 15))  # int64 host tensors as INT32
    assert (input_pos.dtype, input_pos.dims) == ("INT32", (1,))
    (logits,) = (vk.tensor(i) for i in vk.output_ids)
    assert (logits.dtype, logits.dims) == ("FLOAT32", (1, 128))
    # Every SymInt is serialized as 0; every activation is TEXTURE_3D.
    symints = [v for v in vk.values if isinstance(v, VkScalar) and v.kind == "SymInt"]
    assert len(symints) == 4 and {v.value for v in symints} == {0}
    metadata = {m.name: m.constant_int for m in model.program.methods if m.constant_int}
    assert metadata == {
        "get_max_seq_len": 16,
        "get_max_context_len": 32,
        "get_n_layers": 2,
        "get_vocab_size": 128,
    }


@pytest.mark.parametrize("name", IMPORTABLE)
def test_every_constant_is_found_by_its_sha256(name: str) -> None:
    model = read_model(name)
    named = [c for c in model.vk.constants if c.is_named]
    assert named and len(named) == len(model.vk.constants)  # 1.5.1: all named data
    assert [len(a or b"") for a in model.arrays] == [c.length for c in model.vk.constants]


@pytest.mark.parametrize("name", IMPORTABLE)
def test_each_serialized_op_maps_onto_one_project_op_in_order(name: str) -> None:
    model = read_model(name)
    vk, doc = model.vk, model.document
    assert {op.name for op in vk.ops} <= KNOWN_OPS
    # One project op per serialized op but the folded prepacks, in the chain's order, each
    # recorded with its serialized name and id.
    kept = [i for i, op in enumerate(vk.ops) if op.name != PREPACK]
    assert [r["chain_index"] for r in doc.ops] == kept
    for record, op in zip(doc.ops, doc.doc["ops"], strict=True):
        serialized = vk.ops[record["chain_index"]]
        assert record["serialized"] == serialized.name
        assert record["node_id"] == serialized.node_id
        assert op["name"] == record["name"] == f"n{record['chain_index']}_{op['op']}"
        reader = ArgReader(ValueTable(vk, model.arrays, set()), serialized, 0)
        assert RULES[serialized.name](reader) == op["op"]
    # Inputs and outputs in the model's order; every tensor at its serialized max dims.
    assert doc.doc["inputs"] == [f"v{i}" for i in vk.input_ids]
    assert doc.doc["outputs"] == [f"v{i}" for i in vk.output_ids]
    for value in doc.doc["values"]:
        source = vk.value(doc.value_ids[value["name"]])
        if isinstance(source, VkTensor):
            assert value["dims"] == list(source.dims)


@pytest.mark.parametrize("name", IMPORTABLE)
def test_silu_stays_mul_of_sigmoid(name: str) -> None:
    """SiLU arrives as mul(x, sigmoid(x)) and is not fused into silu."""
    ops = read_model(name).document.doc["ops"]
    sigmoids = [op for op in ops if op["op"] == "sigmoid"]
    assert sigmoids and not [op for op in ops if op["op"] in ("silu", "silu_mul")]
    for sigmoid in sigmoids:
        x, y = sigmoid["args"]["x"], sigmoid["outputs"]["out"]
        assert any(op["op"] == "mul" and {op["args"]["a"], op["args"]["b"]} == {x, y} for op in ops)


@pytest.mark.parametrize("name", LLAMAS)
def test_the_last_token_select_is_the_model_s_own_select_copy(name: str) -> None:
    doc = read_model(name).document.doc
    values = {v["name"]: v for v in doc["values"]}
    (select,) = [op for op in doc["ops"] if op["op"] == "select_copy"]
    assert values[select["args"]["dim"]]["value"] == 1
    assert values[select["args"]["index"]]["value"] == -1
    assert not any("select" in r.what for r in read_model(name).document.rewrites)


@pytest.mark.parametrize("name", LLAMAS)
def test_kv_caches_are_state_tensors_and_prepack_is_folded(name: str) -> None:
    model = read_model(name)
    doc = model.document
    values = {v["name"]: v for v in doc.doc["values"]}
    caches = [
        op["args"][slot]
        for op in doc.doc["ops"]
        if op["op"] == "sdpa_with_kv_cache"
        for slot in ("k_cache", "v_cache")
    ]
    assert sorted(doc.state) == sorted(caches)
    for cache in caches:
        entry = values[cache]
        assert entry["state"] is True and "constant" not in entry  # zeros: no initial data
        assert len(entry["dims"]) == 4 and entry["dims"][0] == 1
    (folded,) = [r for r in doc.rewrites if PREPACK in r.what]
    assert len(folded.ops) == Counter(op.name for op in model.vk.ops)[PREPACK]
    # Nothing reads a prepack's output: its readers read the constant.
    outputs = {f"v{model.vk.ops[f['chain_index']].args[1]}" for f in folded.ops}
    assert not outputs & set(values)


def test_the_f16_model_widens_its_q4_scales_exactly() -> None:
    model = read_model("llama_rope_gqa_f16")
    doc = model.document
    (widened,) = [r for r in doc.rewrites if "widened" in r.what]
    q4_ops = [op for op in doc.doc["ops"] if op["op"] in ("linear_q4gsw", "embedding_q4gsw")]
    assert sorted(widened.values) == sorted({op["args"]["scales"] for op in q4_ops})
    for name in widened.values:
        tensor = model.vk.value(doc.value_ids[name])
        assert isinstance(tensor, VkTensor) and tensor.dtype == "FLOAT16"
        raw = np.frombuffer(model.arrays[tensor.constant_id] or b"", "<f2")
        assert doc.constants[name].dtype == np.float32
        np.testing.assert_array_equal(doc.constants[name].ravel(), raw.astype(np.float32))
    floats = {v["dtype"] for v in doc.doc["values"] if v.get("dtype", "").startswith("float")}
    assert floats == {"float16", "float32"}  # float32: the widened scales only
    info = model_info(model.path, model.data, model.program.methods, model.method, model.vk, doc)
    assert info["dtypes"]["q4_scales"] == "widened"


@pytest.mark.parametrize("name", LLAMAS)
def test_model_info_says_what_the_model_family_needs(name: str) -> None:
    model = read_model(name)
    info = model_info(
        model.path, model.data, model.program.methods, model.method, model.vk, model.document
    )
    tokens, input_pos = info["inputs"]
    assert (tokens["role"], tokens["dtype"], tokens["program"]["scalar_type"]) == (
        "tokens",
        "int32",
        "LONG",
    )
    assert tokens["dynamic"] == [{"dim": 1, "min": 1, "max": 15}]
    assert (input_pos["role"], input_pos["dynamic"]) == ("input_pos", [])
    (logits,) = info["outputs"]
    assert logits["role"] == "logits"
    metadata = info["metadata"]
    assert info["context_length"]["value"] == metadata["get_max_context_len"]
    assert info["vocab_size"]["value"] == metadata["get_vocab_size"]
    assert info["max_tokens"]["value"] == metadata["get_max_seq_len"] - 1
    assert info["source"]["delegate"] == "VulkanBackend"
    assert {v["name"] for v in info["values"]} == set(model.document.value_ids)


def test_the_ffn_block_imports_and_agrees_with_pytorch_eager() -> None:
    """The imported graph's float64 reference against PyTorch's eager outputs, within the
    end-to-end bound of a float32 implementation (eager is one)."""
    model = import_pte(MODELS_DIR / "ffn_block.pte")
    graph = model.graph
    (x,), (out,) = graph.inputs, graph.outputs
    assert model.info["inputs"][0]["dynamic"] == [{"dim": 1, "min": 1, "max": 16}]
    reference = ReferenceEvaluator(graph)
    want = _golden_outputs("ffn_block")
    for index, step in enumerate(golden_steps("ffn_block", (x,))):
        values, bounds, _ = reference.step(step)
        cmp = compare(want[index], values[out], bounds[out])
        assert cmp.ok, f"step {index}: {cmp}"
        assert bounds[out].max() < 1e-2 * np.abs(want[index]).max()  # a bound that bites


@pytest.mark.parametrize("name", model_params(("llama_rope", "llama_hf_rope_gqa")))
def test_a_float32_llama_agrees_with_pytorch_eager(name: str) -> None:
    """The schedule (prefill, decodes, a chunk) through the imported graph's reference, KV
    caches carried between steps, within the end-to-end bound."""
    graph = import_pte(MODELS_DIR / f"{name}.pte").graph
    (out,) = graph.outputs
    reference = ReferenceEvaluator(graph)
    want = _golden_outputs(name)
    for index, step in enumerate(golden_steps(name, graph.inputs)):
        values, bounds, _ = reference.step(step)
        cmp = compare(want[index], values[out], bounds[out])
        assert cmp.ok, f"step {index}: {cmp}"


def _golden_outputs(name: str) -> list[np.ndarray]:
    arrays = goldens(name)
    return [arrays[f"step{i}.out"] for i in range(len(arrays["schedule"]))]
