"""Bundle files without a device: atomic, content-addressed writing; source hashes; the
input rows the failure page shows around a worst element.

The case is the one kept in tests/regressions/rms-norm-drops-weight (written without
re-running it, so no runtime is needed).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.gen.case import Case
from harness.run.bundle import (
    _input_view,
    existing_bundle,
    load_bundle,
    python_differences,
    source_digests,
    write_bundle,
)
from harness.run.findings import finding_id

KEPT = Path(__file__).resolve().parents[1] / "regressions" / "rms-norm-drops-weight"


def _record() -> dict[str, object]:
    doc = json.loads((KEPT / "bundle.json").read_text())
    return {k: doc[k] for k in ("case_id", "family", "chunk", "divergences", "step_shapes")}


def test_a_bundle_is_written_once_and_names_relative_commands(tmp_path: Path) -> None:
    case = Case.load(KEPT / "case")
    record = _record()
    run = {"seed": 7, "profile": "quick", "budgets": {"max_examples": 2, "chunk_examples": 1}}
    name = finding_id(str(record["case_id"]), [d["signature"] for d in record["divergences"]])
    folder = tmp_path / "run" / "bundles" / name
    write_bundle(folder, case, record, run=run)
    doc = existing_bundle(folder)
    assert doc is not None and doc["id"] == name and doc["shrunk"]
    assert doc["commands"][0] == f"parity replay bundles/{name}"
    assert all(not Path(w).is_absolute() for c in doc["commands"] for w in c.split())
    assert "cd <run folder>" in (folder / "README.md").read_text()
    assert doc["sources"]["python"] == source_digests()["python"]
    # Another chunk (or process) writing the same finding keeps the first bundle.
    write_bundle(folder, case, record, run=run, shrunk=False)
    assert existing_bundle(folder)["shrunk"]  # type: ignore[index]
    assert [p.name for p in folder.parent.iterdir()] == [name]  # no temporary folder left
    assert python_differences(load_bundle(folder)) == []
    assert python_differences(load_bundle(KEPT)) is None  # kept before hashes were recorded


def test_input_rows_around_the_worst_element() -> None:
    out_shape, at = (3, 40), (2, 30)
    x = np.arange(120.0).reshape(3, 40)
    same = _input_view(x, out_shape, at)
    assert same["where"] == "same position" and same["selection"] == "[2, 22:38]"
    assert same["values"][same["highlight"]] == x[2, 30] and len(same["values"]) == 16
    weight = _input_view(np.arange(40.0), out_shape, at)  # rms_norm's weight: broadcast
    assert weight["values"][weight["highlight"]] == 30.0 and weight["length"] == 40
    activations = _input_view(np.ones((3, 8)), out_shape, at)  # linear's x [M, K]
    assert activations["where"] == "same row" and activations["highlight"] is None
    rows = _input_view(np.arange(40 * 4).reshape(40, 4), out_shape, at)  # weight [N, K/2]
    assert rows["where"] == "row of the output's column" and rows["values"] == [120, 121, 122, 123]
    assert _input_view(5, out_shape, at)["values"] == [5]
    assert _input_view((2, 3), out_shape, at)["values"] == [2, 3]
