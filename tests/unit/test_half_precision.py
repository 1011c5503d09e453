"""Half-precision plumbing without a device: the f16 store budget, the precision of an op
and its budget in an f16 graph, bug keys and expectations that name the precision, the
coverage cells a device without f16 is not asked to fill, and the per-case dtype draw."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_format import FLOAT_DTYPES, Graph, OpNode, dtype_slot
from harness.check.coverage import available_cells, dtype_regime, is_half_precision_cell
from harness.check.divergence import BugKey, Divergence, Kind
from harness.gen import blocks
from harness.gen.builder import GraphBuilder
from harness.model import local_budget, model_for, op_dtype
from harness.model.numerics import SAFETY, SUBNORMAL_HALF_SPACING16, U16, f16_store
from harness.run.expectations import Expectation


def test_f16_store_bounds_the_rounding_of_computed_values() -> None:
    """A value within its compute budget of the reference, rounded to f16, stays within
    `f16_store`; rounding alone takes up to u16 (1/SAFETY of the store term) of it."""
    rng = np.random.default_rng(7)
    reference = np.concatenate(
        [rng.standard_normal(4000) * 10.0 ** rng.integers(-9, 4, 4000), [0.0, 2.0**-20, 65000.0]]
    )
    compute = 1e-6 * np.abs(reference)
    computed = reference + compute / SAFETY * rng.uniform(-1, 1, reference.size)
    stored = computed.astype(np.float16).astype(np.float64)
    budget = f16_store(compute, reference)
    assert np.all(np.abs(stored - reference) <= budget)
    # The bound is tight to within SAFETY: rounding errors reach past half of it.
    rounding = np.abs(reference.astype(np.float16).astype(np.float64) - reference)
    assert np.max(rounding / (U16 * np.abs(reference) + SUBNORMAL_HALF_SPACING16)) > 0.5


def test_f16_store_needs_its_absolute_term_below_the_smallest_normal() -> None:
    """Below 2^-14 relative error cannot bound the rounding: the 2^-25 term does."""
    tiny = np.array([3.1e-7, 1.3e-6, 5.5e-8])
    error = np.abs(tiny.astype(np.float16).astype(np.float64) - tiny)
    assert np.all(error > SAFETY * U16 * tiny)  # relative alone fails
    assert np.all(error <= f16_store(0.0, tiny))


def _add_graph(dtype: str) -> tuple[Graph, OpNode]:
    b = GraphBuilder()
    x = b.input("x", dtype, [3, 8])
    y = b.input("y", dtype, [3, 8])
    b.output(b.op("add", a=x, b=y))
    graph = b.build()
    return graph, graph.ops[0]


def test_an_op_of_float16_tensors_runs_in_float16_and_its_outputs_pay_the_store() -> None:
    half, node = _add_graph("float16")
    full, full_node = _add_graph("float32")
    assert op_dtype(half, node) == "float16" and op_dtype(full, full_node) == "float32"
    rng = np.random.default_rng(0)
    args = {"a": rng.standard_normal((3, 8)), "b": rng.standard_normal((3, 8))}
    model = model_for("add")
    outputs = model.reference(node, args)
    compute = model.budget(node, args, outputs)["out"]
    np.testing.assert_array_equal(local_budget(full, full_node, args, outputs)["out"], compute)
    np.testing.assert_array_equal(
        local_budget(half, node, args, outputs)["out"], f16_store(compute, outputs["out"])
    )


def test_op_dtype_is_worked_out_once_per_graph_and_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step asks for every op's precision several times: the answer is remembered
    per graph and node, goes with its graph, and a node of another graph of the same name
    gets its own answer."""
    half, node = _add_graph("float16")
    full, full_node = _add_graph("float32")
    # a node of the same name that is not `half`'s: its arguments name no f16 tensor there
    foreign = dataclasses.replace(node, args={"a": "elsewhere", "b": "elsewhere"}, outputs={})
    looked_up: list[str] = []
    real = Graph._node_dtype
    monkeypatch.setattr(Graph, "_node_dtype", lambda g, n: looked_up.append(n.name) or real(g, n))
    for _ in range(3):
        assert op_dtype(half, node) == "float16"
        assert op_dtype(full, full_node) == "float32"
        assert op_dtype(half, foreign) == "float32"  # not `half`'s own node: never cached
    assert looked_up.count(node.name) == 2 + 3  # once per graph, then the foreign node
    held = weakref.ref(half)
    del half, node
    gc.collect()
    assert held() is None  # what was remembered went with the graph


def test_a_model_s_half_budget_replaces_the_default_store(monkeypatch: pytest.MonkeyPatch) -> None:
    half, node = _add_graph("float16")
    model = model_for("add")
    monkeypatch.setattr(
        type(model), "half_budget", lambda self, n, a, o, b: {"out": b["out"] * 0}, raising=False
    )
    args = {"a": np.ones((3, 8)), "b": np.ones((3, 8))}
    outputs = model.reference(node, args)
    assert not np.any(local_budget(half, node, args, outputs)["out"])


def test_the_builder_writes_an_op_s_output_in_its_input_s_float_type() -> None:
    half, node = _add_graph("float16")
    assert half.tensor(node.outputs["out"]).dtype == "float16"


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (BugKey("rms_norm", "numeric", "webgpu", "x10"), "rms_norm|numeric|webgpu|x10"),
        (
            BugKey("rms_norm", "numeric", "webgpu", "x10", "float16"),
            "rms_norm@float16|numeric|webgpu|x10",
        ),
        (BugKey("add", "crash", "vulkan", "", "float16"), "add@float16|crash|vulkan"),
    ],
)
def test_a_bug_key_names_a_half_precision_op_and_reads_back(key: BugKey, text: str) -> None:
    assert str(key) == text
    assert BugKey.parse(text) == key


def test_the_same_failure_in_f16_and_f32_is_two_bugs() -> None:
    f32 = Divergence(0, Kind.NUMERIC, "webgpu", "m", op_type="rms_norm", factor=30.0)
    f16 = Divergence(
        0, Kind.NUMERIC, "webgpu", "m", op_type="rms_norm", factor=30.0, dtype="float16"
    )
    explicit = Divergence(
        0, Kind.NUMERIC, "webgpu", "m", op_type="rms_norm", factor=30.0, dtype="float32"
    )
    assert f32.bug_key() != f16.bug_key()
    assert f32.bug_key() == explicit.bug_key()  # float32 is the key's default, not a new key
    with pytest.raises(ValueError, match="op_type@float16"):
        BugKey.parse("rms_norm@bfloat16|numeric|webgpu")


def test_an_expectation_can_name_the_precision() -> None:
    entry = Expectation("e", "*", "*", "r", "l", op="rms_norm", dtype="float16")
    assert entry.covers(BugKey("rms_norm", "numeric", "webgpu", "x10", "float16"))
    assert not entry.covers(BugKey("rms_norm", "numeric", "webgpu", "x10"))
    fp32 = Expectation("e", "*", "*", "r", "l", dtype="float32")
    assert fp32.covers(BugKey("rms_norm", "numeric", "webgpu", "x10"))


def test_half_precision_cells_are_required_only_where_both_devices_offer_f16() -> None:
    required = {"rms_norm": ("size=1", "rms_norm", "rms_norm_f16", dtype_regime("float16"))}
    both = {"webgpu": {"shader_f16": True}, "vulkan": {"shader_f16": True}}
    one = {"webgpu": {"shader_f16": True}, "vulkan": {"shader_f16": False}}
    old: dict[str, dict[str, bool]] = {"webgpu": {}, "vulkan": {}}  # written before f16
    assert available_cells(required, both) == required
    for adapters in (one, old):
        assert available_cells(required, adapters) == {"rms_norm": ("size=1", "rms_norm")}
    assert is_half_precision_cell(dtype_slot("add_flat", "float16"))
    assert not is_half_precision_cell(dtype_slot("add_flat", "float32"))


def test_a_family_draws_f16_only_when_every_op_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without f16 kernels the draw is no draw at all (the fp32 cases stay as they were);
    with them a quarter of the cases are f16."""
    assert blocks.family_dtypes(["add", "sym_size"]) == FLOAT_DTYPES
    assert blocks.family_dtypes(["sym_size"]) == FLOAT_DTYPES  # reads dims only
    linear = type(model_for("linear_q4gsw"))
    monkeypatch.setattr(linear, "dtypes", ("float32",), raising=False)  # an op without f16
    assert blocks.family_dtypes(["add", "linear_q4gsw"]) == ("float32",)
    assert repr(blocks.case_dtypes(["add", "linear_q4gsw"])) == "just('float32')"
    monkeypatch.setattr(linear, "dtypes", FLOAT_DTYPES, raising=False)
    assert blocks.family_dtypes(["add", "linear_q4gsw"]) == FLOAT_DTYPES
    drawn: list[str] = []

    @settings(max_examples=400, derandomize=True, database=None)
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        drawn.append(data.draw(blocks.case_dtypes(["add"])))

    draw()
    share = drawn.count("float16") / len(drawn)
    assert 0.15 < share < 0.35, share


def test_f16_data_are_the_f32_data_rounded() -> None:
    f32 = blocks.float_array(np.random.default_rng(3), [4, 5])
    f16 = blocks.float_array(np.random.default_rng(3), [4, 5], dtype="float16")
    assert f16.dtype == np.float16
    np.testing.assert_array_equal(f16, f32.astype(np.float16))


def test_a_record_keeps_the_precision_of_its_divergence_and_why_a_case_was_unavailable() -> None:
    from harness.run.records import CaseRecord, DivergenceRecord, from_json, plain

    record = DivergenceRecord("numeric", "webgpu", 0, op_type="rms_norm", factor=30.0)
    half = DivergenceRecord(
        "numeric", "webgpu", 0, op_type="rms_norm", factor=30.0, dtype="float16"
    )
    assert str(record.bug) == "rms_norm|numeric|webgpu|x10"
    assert str(half.bug) == "rms_norm@float16|numeric|webgpu|x10"
    assert from_json(DivergenceRecord, plain(half.to_json())).bug == half.bug
    case = CaseRecord("f/0", "f", 0, "0" * 12, [], [], 0, 0, [], unavailable="vulkan: f16 ...")
    assert from_json(CaseRecord, plain(case.to_json())).unavailable == "vulkan: f16 ..."


def test_random_graphs_draw_float16_only_where_every_op_takes_it() -> None:
    """The random family draws its precision per graph: some graphs come in float16, and each
    of those holds only ops with f16 kernels (never fused_sdpa or update_cache), its q4
    scales kept float32."""
    from hypothesis import HealthCheck, given, settings

    from harness.families.random import random_graph_cases
    from harness.gen.case import Case
    from harness.model import model_dtypes

    halves: list[Case] = []

    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(random_graph_cases())
    def draw(case: Case) -> None:
        if case.meta.get("dtype") == "float16":
            halves.append(case)

    draw()
    assert halves
    for case in halves:
        graph = case.graph
        assert all("float16" in model_dtypes(node.op) for node in graph.ops)
        for node in graph.ops:
            if node.op in ("linear_q4gsw", "embedding_q4gsw"):
                assert graph.tensor(node.arg("scales")).dtype == "float32"
