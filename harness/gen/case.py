"""A test case: one graph and the sequence of steps (inputs with live shapes) run on it.

A case saves to a folder that needs nothing but this project to replay: the graph file and
its constants, every step's inputs, and a `case.json` that names them.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from graph_format import Graph, GraphFormatError

StepInputs = dict[str, np.ndarray | int]


@dataclass
class Case:
    """A graph plus the inputs of each step, in order."""

    graph: Graph
    steps: list[StepInputs]
    name: str = "case"
    meta: dict[str, Any] = field(default_factory=dict)

    def step_shapes(self) -> list[dict[str, Any]]:
        """Per step, each input's live dims (tensors) or value (SymInts): a readable summary."""
        return [
            {k: list(v.shape) if isinstance(v, np.ndarray) else int(v) for k, v in step.items()}
            for step in self.steps
        ]

    def save(self, folder: str | Path) -> Path:
        """Write graph.json (+ graph.npz), steps.npz and case.json into `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.graph.save(folder / "graph")
        arrays: dict[str, np.ndarray] = {}
        scalars: list[dict[str, int]] = []
        for i, step in enumerate(self.steps):
            ints: dict[str, int] = {}
            for name, value in step.items():
                if isinstance(value, np.ndarray):
                    arrays[f"{i}/{name}"] = value
                else:
                    ints[name] = int(value)
            scalars.append(ints)
        # As dict[str, Any]: numpy's stub would let a **dict[str, ndarray] reach savez's
        # `allow_pickle: bool` keyword (no key here is called that).
        np.savez(folder / "steps.npz", **cast(dict[str, Any], arrays))
        doc = {
            "name": self.name,
            "meta": self.meta,
            "graph": "graph.json",
            "steps_file": "steps.npz",
            "steps": [
                {"shapes": shapes, "ints": ints}
                for shapes, ints in zip(self.step_shapes(), scalars, strict=True)
            ],
        }
        (folder / "case.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Case:
        """Read a case written by `save`.

        Raises:
            GraphFormatError: the folder is not a case or its files are damaged.
        """
        folder = Path(folder)
        try:
            doc = json.loads((folder / "case.json").read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise GraphFormatError(f"{folder}: not a case folder ({err})") from None
        graph = Graph.load(folder / doc.get("graph", "graph.json"))
        steps: list[StepInputs] = [dict(s.get("ints", {})) for s in doc["steps"]]
        steps_path = folder / doc.get("steps_file", "steps.npz")
        try:
            # Our own handle: np.load leaks its own when the archive is damaged.
            with steps_path.open("rb") as handle, np.load(handle, allow_pickle=False) as npz:
                for key in npz.files:
                    index, name = key.split("/", 1)
                    steps[int(index)][name] = npz[key]
        except (OSError, ValueError, EOFError, IndexError, zipfile.BadZipFile) as err:
            raise GraphFormatError(
                f"{steps_path}: not a readable .npz of step inputs (truncated or damaged?): "
                f"{type(err).__name__}: {err}"
            ) from None
        # Keep each step's inputs in graph order, as they were recorded.
        ordered = [{n: s[n] for n in graph.inputs if n in s} | s for s in steps]
        return cls(graph, ordered, doc.get("name", folder.name), doc.get("meta", {}))
