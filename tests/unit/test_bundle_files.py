"""Bundle files without a device: atomic, content-addressed writing; source hashes; the
input rows the failure page shows around a worst element.

The case is the one kept in tests/regressions/rms-norm-drops-weight (written without
re-running it, so no runtime is needed).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from harness.gen.case import Case
from harness.run.bundle import (
    existing_bundle,
    load_bundle,
    python_differences,
    source_digests,
    write_bundle,
)
from harness.run.evidence import _input_view
from harness.run.findings import finding_id
from harness.run.plan import Shard
from harness.run.records import BUNDLE_FORMAT, Budgets, CaseRecord, RunMeta, read_bundle_doc
from harness.run.report import images

KEPT = Path(__file__).resolve().parents[1] / "regressions" / "rms-norm-drops-weight"


def _record() -> CaseRecord:
    """The case record of the kept bundle (format /1), from what its bundle.json holds."""
    doc = read_bundle_doc(KEPT / "bundle.json")
    assert doc.case_id and doc.family and doc.chunk and doc.step_shapes
    return CaseRecord(
        chunk=doc.chunk,
        family=doc.family,
        seq=0,
        case_id=doc.case_id,
        ops=["rms_norm"],
        step_shapes=doc.step_shapes,
        steps=len(doc.step_shapes),
        unexpected=len(doc.divergences),
        divergences=doc.divergences,
    )


def test_a_bundle_is_written_once_and_names_relative_commands(tmp_path: Path) -> None:
    case = Case.load(KEPT / "case")
    record = _record()
    run = RunMeta(seed=7, profile="quick", budgets=Budgets(2, 1), shard=Shard(1, 1))
    name = finding_id(record.case_id, record.bug)
    folder = tmp_path / "run" / "bundles" / name
    write_bundle(folder, case, record, run=run)
    doc = existing_bundle(folder)
    assert doc is not None and doc.id == name and doc.shrunk
    assert doc.format == BUNDLE_FORMAT and doc.bug == record.bug
    assert doc.commands[0] == f"parity replay bundles/{name}"
    assert all(not Path(w).is_absolute() for c in doc.commands for w in c.split())
    assert "cd <run folder>" in (folder / "README.md").read_text()
    assert doc.sources["python"] == source_digests()["python"]
    # Another chunk (or process) writing the same finding keeps the first bundle.
    write_bundle(folder, case, record, run=run, shrunk=False)
    kept = existing_bundle(folder)
    assert kept is not None and kept.shrunk
    assert [p.name for p in folder.parent.iterdir()] == [name]  # no temporary folder left
    assert python_differences(load_bundle(folder)) == []
    assert python_differences(load_bundle(KEPT)) is None  # kept before hashes were recorded


def test_input_rows_around_the_worst_element() -> None:
    out_shape, at = (3, 40), (2, 30)
    x = np.arange(120.0).reshape(3, 40)
    same = _input_view("x", "x", x, out_shape, at)
    assert same.where == "same position" and same.selection == "[2, 22:38]"
    assert same.highlight is not None and same.values[same.highlight] == x[2, 30]
    assert len(same.values) == 16 and (same.slot, same.name) == ("x", "x")
    weight = _input_view("w", "w", np.arange(40.0), out_shape, at)  # rms_norm's weight
    assert weight.highlight is not None and weight.values[weight.highlight] == 30.0
    assert weight.length == 40
    activations = _input_view("x", "x", np.ones((3, 8)), out_shape, at)  # linear's x [M, K]
    assert activations.where == "same row" and activations.highlight is None
    rows = _input_view("w", "w", np.arange(40 * 4).reshape(40, 4), out_shape, at)  # [N, K/2]
    assert rows.where == "row of the output's column" and rows.values == [120, 121, 122, 123]
    assert _input_view("n", "n", 5, out_shape, at).values == [5]
    assert _input_view("s", "s", (2, 3), out_shape, at).values == [2, 3]


def test_the_evidence_takes_the_oracle_s_rule_not_the_report_s() -> None:
    """One utilization rule (`numerics.utilization_map`, `compare` per element): what a bundle
    writes does not read the report's drawing code (its worst element came from
    `report/images.utilization`, a second copy of the rule), and the report has no rule of
    its own left."""
    for module in ("bundle", "evidence"):
        path = Path(__file__).resolve().parents[2] / "harness" / "run" / f"{module}.py"
        imported = {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert not {m for m in imported if m.startswith("harness.run.report")}, module
    assert not hasattr(images, "utilization")
