"""`parity import` (in process, no device): the folder it writes, and every refusal: one line
naming the file and what is wrong, exit status 2, nothing written. Damaged files are made
from a committed model in tmp_path; what no export shows is written by tests/pte_writer.py.
Any corruption of a file is a refusal or a graph, never a traceback (Hypothesis)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_format import Graph
from harness.importer import ImportRefused, import_pte
from harness.importer.program import Delegate, EValue, Instruction, Method, read_program
from harness.importer.refusals import delegation_problem, the_method
from harness.run.cli import main
from tests.importer_support import MODELS_DIR, mutated
from tests.pte_writer import FLOAT64, VkSpec, tensor, write_pte

FFN = MODELS_DIR / "ffn_block.pte"


def run_import(
    capsys: pytest.CaptureFixture[str], model: Path, out: Path, *extra: str
) -> tuple[int, str, list[str]]:
    status = main(["import", str(model), "--out", str(out), *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err.splitlines()


def assert_refused(
    capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path, *fragments: str
) -> str:
    out = tmp_path / "imported"
    status, stdout, err = run_import(capsys, model, out)
    assert status == 2 and not stdout, (status, stdout, err)
    (line,) = err
    assert line.startswith(f"parity import: {model}: "), line
    for fragment in fragments:
        assert fragment in line, line
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    return line


# ---------------------------------------------------------------------------- the folder


def test_import_writes_a_graph_folder_and_model_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "ffn"
    status, stdout, err = run_import(capsys, FFN, out)
    assert (status, err) == (0, [])
    assert stdout.startswith(f"{FFN}: 12 ops, inputs v7, outputs v29 -> {out}")
    assert sorted(p.name for p in out.iterdir()) == ["graph.json", "graph.npz", "model.json"]
    graph = Graph.load(out / "graph.json")
    expected = import_pte(FFN).graph
    assert graph.to_json() == expected.to_json()
    for name, array in expected.constants.items():
        np.testing.assert_array_equal(graph.constants[name], array)
    info = json.loads((out / "model.json").read_text())
    assert info["format"] == "vulkan-parity-model" and info["source"]["file"] == FFN.name
    assert [op["name"] for op in info["ops"]] == [op.name for op in graph.ops]


def test_an_earlier_import_is_replaced_only_when_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "ffn"
    assert run_import(capsys, FFN, out)[0] == 0
    before = (out / "model.json").read_bytes()
    status, _, err = run_import(capsys, FFN, out)
    assert status == 2 and err == [
        f"parity import: {out}: holds an earlier import; pass --force to replace it"
    ]
    assert run_import(capsys, FFN, out, "--force")[0] == 0
    assert (out / "model.json").read_bytes() == before
    (out / "notes.txt").write_text("mine")
    status, _, err = run_import(capsys, FFN, out, "--force")
    assert status == 2 and "holds other files (notes.txt)" in err[0]
    assert (out / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------------------- refusals


def test_several_delegates_with_cpu_ops_between(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    line = assert_refused(capsys, MODELS_DIR / "refuse_cpu_ops_between.pte", tmp_path)
    assert line.endswith(
        "3 delegates and CPU ops aten::cumsum.out between them: only a single delegate "
        "holding the whole method can be checked"
    )


def test_an_op_outside_the_table_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert_refused(
        capsys, MODELS_DIR / "refuse_op_outside_table.pte", tmp_path, "aten.tanh.default"
    )


def _program_size(data: bytearray) -> int:
    return int(struct.unpack_from("<Q", data, 16)[0])


def _external(data: bytearray) -> None:
    """The program's copy of one named key changed: the delegate's key is then not in the
    file, as when the weights were saved to a .ptd."""
    key = next(iter(read_program(bytes(data)).named_data)).encode()
    at = data.find(key)
    assert 0 < at < _program_size(data)
    data[at] = ord("0") if data[at] != ord("0") else ord("1")


def _weight_flipped(data: bytearray) -> None:
    segment = max(read_program(bytes(data)).named_data.values(), key=len)
    at = data.find(segment)
    assert at > _program_size(data)
    data[at + 100] ^= 0x10


def _header_length_32(data: bytearray) -> None:
    """The VH00 header claims 32 bytes (a layout after the 30-byte one read here)."""
    at = data.find(b"VH00")
    assert at > 0 and data.find(b"VH00", at + 1) < 0
    data[at + 4 : at + 6] = struct.pack("<H", 32)


DAMAGE: dict[str, tuple[Callable[[bytearray], None], str]] = {
    "truncated half": (lambda d: d.__delitem__(slice(len(d) // 2, None)), "damaged file: "),
    "truncated to 6 bytes": (lambda d: d.__delitem__(slice(6, None)), "too short"),
    "bad identifier": (lambda d: d.__setitem__(slice(4, 8), b"XY12"), "file identifier"),
    "bad extended header": (lambda d: d.__setitem__(slice(8, 12), b"zz00"), "extended header"),
    "root offset outside": (
        lambda d: d.__setitem__(slice(0, 4), struct.pack("<I", 0xFFFFFFF0)),
        "outside the",
    ),
    "weight changed": (_weight_flipped, "sha256"),
    "external data": (_external, "external data (a .ptd file)"),
    "another delegate header": (_header_length_32, "Vulkan delegate header length 32"),
    "another program schema": (
        lambda d: d.__setitem__(slice(4, 8), b"ET13"),
        "program schema 'ET13': this importer reads ET12",
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_file_is_one_line(
    damage: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    change, fragment = DAMAGE[damage]
    assert_refused(capsys, mutated(FFN, tmp_path, change), tmp_path, fragment)


def _sigmoid(**changes: object) -> VkSpec:
    spec = VkSpec(
        values=[tensor([1, 4]), tensor([1, 4])],
        ops=[("aten.sigmoid.default", [0, 1])],
        inputs=[0],
        outputs=[1],
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


WRITTEN = {
    "custom shaders": (_sigmoid(shaders=2), "2 custom shader blobs"),
    "another VkGraph version": (_sigmoid(version="1"), "VkGraph version '1': this importer"),
    "add with alpha 2": (
        VkSpec(
            values=[tensor([1, 4]), tensor([1, 4]), ("int", 2), tensor([1, 4])],
            ops=[("aten.add.Tensor", [0, 1, 2, 3])],
            inputs=[0, 1],
            outputs=[3],
        ),
        "op 0 aten.add.Tensor (node 0): alpha is Int 2",
    ),
    "a float64 tensor": (
        VkSpec(
            values=[tensor([1, 4], FLOAT64), tensor([1, 4], FLOAT64)],
            ops=[("aten.sigmoid.default", [0, 1])],
            inputs=[0],
            outputs=[1],
        ),
        "is FLOAT64",
    ),
}


@pytest.mark.parametrize("case", WRITTEN)
def test_what_the_importer_cannot_take_is_one_line(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec, fragment = WRITTEN[case]
    model = tmp_path / "written.pte"
    model.write_bytes(write_pte(spec))
    assert_refused(capsys, model, tmp_path, fragment)


def test_a_written_graph_imports_with_its_own_constant_bytes(tmp_path: Path) -> None:
    """The writer itself is right (a graph it writes imports), and a constant in the
    delegate's own bytes section is read from there."""
    weight = np.arange(4, dtype=np.float32) - 1.5
    spec = VkSpec(
        values=[tensor([1, 4]), tensor([4], constant_id=0), tensor([1, 4])],
        ops=[("aten.mul.Tensor", [0, 1, 2])],
        inputs=[0],
        outputs=[2],
        constants=[weight.tobytes()],
    )
    model = tmp_path / "mul.pte"
    model.write_bytes(write_pte(spec))
    graph = import_pte(model).graph
    assert [op.op for op in graph.ops] == ["mul"]
    np.testing.assert_array_equal(graph.constants["v1"], weight)


def _method(instructions: list[Instruction], delegates: list[str]) -> Method:
    return Method(
        "forward",
        (EValue("Null"),),
        (),
        (),
        tuple(instructions),
        tuple(Delegate(d, b"") for d in delegates),
    )


DELEGATE = Instruction("DelegateCall", delegate_index=0)
CPU = Instruction("KernelCall", operator="aten::cumsum.out")


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (_method([DELEGATE], ["VulkanBackend"]), None),
        (_method([CPU], []), "no VulkanBackend delegate (the method runs on the CPU)"),
        (
            _method([DELEGATE, CPU], ["VulkanBackend"]),
            "1 delegate and CPU ops aten::cumsum.out beside it",
        ),
        (_method([DELEGATE, DELEGATE], ["VulkanBackend"] * 2), "2 delegates: only a single"),
        (_method([DELEGATE], ["XnnpackBackend"]), "delegates of XnnpackBackend"),
    ],
)
def test_only_one_vulkan_delegate_holding_the_method_is_imported(
    method: Method, expected: str | None
) -> None:
    problem = delegation_problem(method)
    assert problem == expected if expected is None else expected in (problem or "")


def test_one_method_is_imported() -> None:
    one = _method([DELEGATE], ["VulkanBackend"])
    other = Method("prefill", one.values, (), (), one.instructions, one.delegates)
    assert the_method([one]) is one
    assert the_method([one, other]) == (
        "2 methods hold ops (forward, prefill): only a single method can be checked"
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    flips=st.lists(
        st.tuples(st.integers(0, FFN.stat().st_size - 1), st.integers(1, 255)), max_size=6
    ),
    cut=st.one_of(st.none(), st.integers(0, FFN.stat().st_size - 1)),
)
def test_any_damage_is_a_refusal_or_a_graph(
    flips: list[tuple[int, int]], cut: int | None, tmp_path: Path
) -> None:
    def change(data: bytearray) -> None:
        for at, mask in flips:
            data[at] ^= mask
        if cut is not None:
            del data[cut:]

    model = mutated(FFN, tmp_path, change)
    try:
        import_pte(model)
    except ImportRefused as err:
        assert "\n" not in str(err) and str(err).startswith(f"{model}: ")
