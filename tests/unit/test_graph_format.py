"""The graph format: round trips, and errors that say what is wrong and where."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graph_format import (
    ADAPTER_VARIABLE,
    SIGNATURES,
    SLOTS,
    BackendUnavailable,
    Graph,
    GraphFormatError,
    SlotInterface,
    pick_adapter,
)
from graph_format.signatures import SHARED_DOCS, SchemaError, index_slots, parse_signature
from harness.gen.builder import GraphBuilder


def _graph() -> Graph:
    b = GraphBuilder()
    x = b.input("x", "float32", [2, 8, 16])
    w = b.constant("w", np.arange(16, dtype=np.float32))
    h = b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6, "eps"))
    b.output(b.op("add", a=x, b=h))
    return b.build()


def test_save_load_round_trip(tmp_path: Path) -> None:
    graph = _graph()
    path = graph.save(tmp_path / "g")
    loaded = Graph.load(path)
    assert loaded.to_json() == graph.to_json()
    np.testing.assert_array_equal(loaded.constants["w"], graph.constants["w"])


def _half_graph() -> Graph:
    """A float16 graph: activation, constant and a KV-cache-like state tensor."""
    b = GraphBuilder()
    x = b.input("x", "float16", [2, 8, 16])
    w = b.constant("w", np.linspace(-2, 2, 16).astype(np.float16))
    b.state("cache", "float16", [4, 16], np.full((4, 16), 0.5, np.float16))
    b.output(b.op("add", a=x, b=w))
    return b.build()


def test_float16_round_trips_through_json_and_npz(tmp_path: Path) -> None:
    graph = _half_graph()
    path = graph.save(tmp_path / "g")
    doc = json.loads(path.read_text())
    assert doc["version"] == 2
    assert [v["dtype"] for v in doc["values"] if v["kind"] == "tensor"][:3] == ["float16"] * 3
    loaded = Graph.load(path)
    assert loaded.to_json() == graph.to_json()
    assert loaded.float_dtypes() == {"float16"}
    for name in ("w", "cache"):
        assert loaded.constants[name].dtype == np.float16
        np.testing.assert_array_equal(loaded.constants[name], graph.constants[name])
    assert loaded.tensor("x").nbytes == 2 * 8 * 16 * 2


def test_a_version_1_graph_still_loads(tmp_path: Path) -> None:
    """Files written before float16 existed (version 1) read as they did."""
    doc = _doc()
    doc["version"] = 1
    graph = Graph.from_json(doc, CONSTANTS)
    assert graph.float_dtypes() == {"float32"}
    assert graph.to_json()["version"] == 2  # written anew in the current version


def test_a_float16_constant_must_be_float16_data() -> None:
    """float32 data under a float16 constant is refused by name, not converted."""
    doc = copy.deepcopy(_half_graph().to_json())
    with pytest.raises(GraphFormatError) as info:
        Graph.from_json(
            doc, {"w": np.zeros(16, np.float32), "cache": np.zeros((4, 16), np.float16)}
        )
    assert "values[1].constant: array 'w' must be float16[16], but it is float32[16]" in str(
        info.value
    )


def _doc() -> dict[str, Any]:
    return copy.deepcopy(_graph().to_json())


CONSTANTS = {"w": np.arange(16, dtype=np.float32)}


@pytest.mark.parametrize(
    ("mutate", "where", "what"),
    [
        (lambda d: d.update(version=3), "version", "understands versions 1, 2, got 3"),
        (lambda d: d.update(version=True), "version", "got True"),
        (
            lambda d: d.update(version=1) or d["values"][0].update(dtype="float16"),
            "values[0].dtype",
            "float16 needs format version 2; the file says version 1",
        ),
        (lambda d: d["values"][1].update(dtype="float16"), "values[1].constant", "float16[16]"),
        (lambda d: d.update(format="onnx"), "format", "'vulkan-parity-graph'"),
        (lambda d: d["values"][0].update(dims=[2, 0, 16]), "values[0].dims", "positive ints"),
        (lambda d: d["values"][0].update(dims=[1, 1, 2, 8, 16]), "values[0].dims", "1 to 4"),
        (lambda d: d["values"][0].update(dtype="float64"), "values[0].dtype", "float64"),
        (lambda d: d["values"][1].update(dims=[15]), "values[1].constant", "float32[15]"),
        (lambda d: d["ops"][0].update(op="conv2d"), "ops[0].op", "unknown op 'conv2d'"),
        (
            lambda d: d["ops"][0]["args"].update(weight="w2"),
            "ops[0].args.weight",
            "unknown value 'w2'",
        ),
        (lambda d: d["ops"][0]["args"].update(bias="w"), "ops[0].args.bias", "no argument 'bias'"),
        (lambda d: d["ops"][0]["args"].pop("eps"), "ops[0].args.eps", "is required"),
        (lambda d: d["ops"][0]["args"].update(eps="x"), "ops[0].args.eps", "must name a float"),
        (lambda d: d["ops"].reverse(), "ops[0].args.b", "read before anything writes it"),
        (lambda d: d["ops"][1]["outputs"].update(out="x"), "ops[1].outputs.out", "already written"),
        (lambda d: d.update(outputs=["w"]), "outputs[0]", "not written by any op"),
        (lambda d: d["values"].append(dict(d["values"][0])), "values[5].name", "duplicate"),
    ],
)
def test_malformed_graph_is_located(mutate: Any, where: str, what: str) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(GraphFormatError) as info:
        Graph.from_json(doc, CONSTANTS, source="g.json")
    message = str(info.value)
    assert message.startswith(f"g.json: {where}:"), message
    assert what in message, message


def test_unreadable_files_are_reported(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GraphFormatError, match="not valid JSON"):
        Graph.load(bad)
    with pytest.raises(GraphFormatError, match="cannot be read"):
        Graph.load(tmp_path / "missing.json")
    doc = _doc() | {"constants_file": "nowhere.npz"}
    (tmp_path / "g.json").write_text(json.dumps(doc))
    with pytest.raises(GraphFormatError, match=r"nowhere\.npz"):
        Graph.load(tmp_path / "g.json")


def _args_graph() -> Graph:
    """A graph whose ops pass every kind of argument: tensors, an int, an absent optional,
    a size list of an int literal and a SymInt."""
    b = GraphBuilder()
    x = b.input("x", "float32", [2, 8])
    weight = b.constant("weight", np.zeros((4, 4), np.uint8))
    scales = b.constant("scales", np.ones((1, 4), np.float32))
    y = b.op(
        "linear_q4gsw",
        name="linear",
        x=x,
        weight=weight,
        scales=scales,
        group_size=b.int(8, "gs"),
        out_dims=[2, 4],
    )
    rows = b.op("sym_size", name="rows", x=y, dim=b.int(0, "zero"))
    b.output(b.op("view_copy", name="view", x=y, sizes=[rows, b.int(4, "four")], out_dims=[2, 4]))
    return b.build()


def test_arg_accessors_return_what_the_slot_holds() -> None:
    graph = _args_graph()
    linear, rows, view = graph.ops
    assert linear.arg("x") == "x"
    assert linear.arg("group_size") == "gs"
    assert linear.optional_arg("bias") is None
    assert linear.optional_arg("weight") == "weight"
    assert rows.arg("dim") == "zero"
    assert view.size_list("sizes") == (rows.outputs["out"], "four")


@pytest.mark.parametrize(
    ("op", "call", "error", "what"),
    [
        (0, lambda n: n.arg("bias"), TypeError, "'bias' must name one value, it holds nothing"),
        (0, lambda n: n.arg("eps"), KeyError, "has no argument 'eps'"),
        (0, lambda n: n.size_list("x"), TypeError, "'x' must be a size list, it holds the value"),
        (2, lambda n: n.arg("sizes"), TypeError, "it holds the size list"),
        (2, lambda n: n.optional_arg("sizes"), TypeError, "one value or nothing"),
    ],
)
def test_arg_accessors_refuse_the_wrong_kind_of_slot(
    op: int, call: Any, error: type[Exception], what: str
) -> None:
    node = _args_graph().ops[op]
    with pytest.raises(error) as info:
        call(node)
    message = str(info.value)
    assert f"op {node.name!r} ({node.op})" in message, message
    assert what in message, message


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("args = [", "not TOML"),
        ('outputs = [{ name = "out", kind = "tensor" }]\nextra = 1', "expected the keys"),
        (
            'args = [{ name = "x", kind = "tensr" }]\noutputs = [{ name = "o", kind = "tensor" }]',
            "kind 'tensr'",
        ),
        (
            'args = [{ name = "x", kind = "tensor" }]\noutputs = [{ name = "x", kind = "tensor" }]',
            "used twice",
        ),
        ('args = [{ kind = "tensor" }]\noutputs = [{ name = "o", kind = "tensor" }]', "a name"),
        (
            'args = [{ name = "x", kind = "int", opt = true }]\n'
            'outputs = [{ name = "o", kind = "tensor" }]',
            "unknown keys",
        ),
    ],
)
def test_a_malformed_op_schema_names_its_file(text: str, what: str) -> None:
    with pytest.raises(SchemaError, match=what) as info:
        parse_signature("my_op", text, "graph_format/ops/my_op.toml")
    assert str(info.value).startswith("graph_format/ops/my_op.toml: ")


def test_a_schema_file_is_an_op_s_signature() -> None:
    signature = SIGNATURES["linear_q4gsw"]
    assert [(a.name, a.kind, a.optional) for a in signature.args][-2:] == [
        ("bias", "tensor", True),
        ("accumulate_bits", "int", True),
    ]
    assert signature.outputs == (("out", "tensor"),)


_SLOT_OP = (
    'args = [{ name = "x", kind = "tensor" }]\noutputs = [{ name = "out", kind = "tensor" }]\n'
)


@pytest.mark.parametrize(
    ("slot", "where", "what"),
    [
        ("slots = 1", "slots", "expected a table of [slots.<name>] tables"),
        (
            '[slots.k]\ntensors = ["out"]\ndoc.n = "n"',
            "slots.k",
            "expected the keys ['tensors', 'values'] (and doc), missing ['values']",
        ),
        (
            '[slots.k]\ntensors = ["out"]\nvalues = ["n"]\ndoc.n = "n"\nkernel = "k"',
            "slots.k",
            "unknown ['kernel']",
        ),
        ('[slots.k]\ntensors = []\nvalues = ["n"]\ndoc.n = "n"', "slots.k.tensors", "non-empty"),
        (
            '[slots.k]\ntensors = ["out"]\nvalues = ["n", "n"]\ndoc.n = "n"',
            "slots.k.values",
            "names ['n'] are listed twice",
        ),
        (
            '[slots.k]\ntensors = ["out"]\nvalues = ["n-1"]\ndoc.n = "n"',
            "slots.k.values",
            "a non-empty list of names",
        ),
        (
            '[slots.k]\ntensors = ["out"]\nvalues = ["n"]\ndoc.n = "n"\ndoc.m = "m"',
            "slots.k.doc.m",
            "'m' is not one of the slot's values ['n']",
        ),
        (
            '[slots.k]\ntensors = ["out"]\nvalues = ["n", "m"]\ndoc.n = "n"',
            "slots.k",
            "values ['m'] have no doc line",
        ),
        (
            '[slots.k]\ntensors = ["out"]\nvalues = ["n"]\ndoc.n = ""',
            "slots.k.doc.n",
            "expected one line",
        ),
    ],
)
def test_a_malformed_slot_names_its_file_and_key(slot: str, where: str, what: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_signature("my_op", _SLOT_OP + slot, "graph_format/ops/my_op.toml")
    assert str(info.value).startswith(f"graph_format/ops/my_op.toml: {where}: "), info.value
    assert what in str(info.value)


def test_a_value_is_documented_once_for_every_slot_that_offers_it() -> None:
    """The op's `[doc]` holds for each slot, a slot's own line overrides it for that slot, and
    workgroup_size / workgroups are documented for every op."""
    text = (
        _SLOT_OP + '[doc]\nn = "live n"\n[slots.k]\ntensors = ["out"]\n'
        'values = ["n", "workgroups"]\n[slots.k_f16]\ntensors = ["out"]\nvalues = ["n"]\n'
        '[slots.k_vec4]\ntensors = ["out"]\nvalues = ["n"]\ndoc.n = "live n / 4 texels"\n'
    )
    slots = parse_signature("my_op", text, "my_op.toml").slots
    assert slots["k"].doc == {"n": "live n", "workgroups": SHARED_DOCS["workgroups"]}
    assert slots["k_f16"].doc == {"n": "live n"}
    assert slots["k_vec4"].doc == {"n": "live n / 4 texels"}


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            '[doc]\nn = "live n"\n[slots.k]\ntensors = ["out"]\nvalues = ["n"]\ndoc.n = "live n"',
            "slots.k.doc.n: repeats the doc it inherits; drop it (say it once)",
        ),
        (
            f'[slots.k]\ntensors = ["out"]\nvalues = ["workgroups"]\n'
            f'doc.workgroups = "{SHARED_DOCS["workgroups"]}"',
            "slots.k.doc.workgroups: repeats the doc it inherits",
        ),
        (
            f'[doc]\nworkgroups = "{SHARED_DOCS["workgroups"]}"\n'
            '[slots.k]\ntensors = ["out"]\nvalues = ["workgroups"]',
            "doc.workgroups: repeats the doc every op shares",
        ),
        (
            '[doc]\nn = "n"\nm = "m"\n[slots.k]\ntensors = ["out"]\nvalues = ["n"]',
            "doc: values ['m'] are offered by none of the op's slots",
        ),
        ('[doc]\nn = 1\n[slots.k]\ntensors = ["out"]\nvalues = ["n"]', "doc.n: expected one line"),
    ],
)
def test_a_doc_said_twice_or_for_nothing_is_a_schema_error(text: str, what: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_signature("my_op", _SLOT_OP + text, "graph_format/ops/my_op.toml")
    assert str(info.value).startswith(f"graph_format/ops/my_op.toml: {what}")


def test_a_slot_is_declared_once_over_all_ops() -> None:
    slot = '[slots.k]\ntensors = ["out"]\nvalues = ["n"]\ndoc.n = "n"\n'
    one, two = (parse_signature(op, _SLOT_OP + slot, f"{op}.toml") for op in ("a", "b"))
    assert index_slots({"a": one})["k"] == SlotInterface("a", "k", ("out",), ("n",), {"n": "n"})
    with pytest.raises(
        SchemaError, match=r"ops/b\.toml: slots\.k: slot 'k' is already declared by op 'a'"
    ):
        index_slots({"a": one, "b": two})


def test_every_slot_parses_with_a_doc_line_per_value() -> None:
    assert set(SLOTS) == {s for sig in SIGNATURES.values() for s in sig.slots}
    for name, slot in SLOTS.items():
        assert SIGNATURES[slot.op].slots[name] is slot
        assert list(slot.doc) == list(slot.values)
        assert "workgroups" in slot.values and "workgroup_size" in slot.values
        assert "max_workgroups_per_dim" not in slot.values  # every expression's own name
    assert SIGNATURES["sym_size"].slots == {}  # no kernel: a host-side op
    assert SLOTS["q4gsw_gemv"].doc["k_words"].startswith("K in u32 words")
    assert SIGNATURES["sdpa_with_kv_cache"].tensors == ("q", "k", "v", "k_cache", "v_cache", "out")


def test_the_adapter_variable_picks_an_adapter_by_index_or_spreads_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ranked = ["gpu0", "gpu1", "gpu2", "lavapipe"]  # three GPUs of the best kind, then a CPU

    def pick(value: str | None) -> str:
        if value is None:
            monkeypatch.delenv(ADAPTER_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(ADAPTER_VARIABLE, value)
        return pick_adapter("vulkan", ranked, 3, str)

    assert pick(None) == "gpu0"  # the runtime's own preference
    assert pick("3") == "lavapipe"  # an index into the whole ranked list
    assert [pick(f"spread:{k}") for k in range(5)] == ["gpu0", "gpu1", "gpu2", "gpu0", "gpu1"]
    with pytest.raises(BackendUnavailable, match=r"=4 asks for adapter 4, but there are 4: 0: gpu"):
        pick("4")
    with pytest.raises(BackendUnavailable, match=r"neither an adapter index nor spread:K"):
        pick("gpu")
