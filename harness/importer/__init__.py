"""Import an ExecuTorch `.pte` holding one Vulkan delegate as a project graph folder.

`import_pte(path)` reads the program (`program.py`), checks that one `VulkanBackend`
delegate holds the whole method (`refusals.py`), decodes its `VkGraph` (`vkgraph.py`),
finds and checks every constant's bytes (`named_data.py`), converts the graph op by op
(`convert.py`, `optable.py`, `values.py`) and describes it (`modelinfo.py`); `write_import`
writes the folder: `graph.json` + `graph.npz` (the graph format's own writer) and
`model.json`. Torch-free: the tables are read with the `flatbuffers` runtime (`flatbuf.py`),
from the layout of ExecuTorch cff6f4dd (`executorch==1.5.1`), and any other is refused.

This layer imports only `graph_format`, numpy and flatbuffers (tests/unit/
test_architecture.py): a model file becomes a graph like any other, and everything above
(run, replay, bundles, `--kernels`) sees nothing but the graph.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graph_format import Graph
from harness.importer.convert import convert
from harness.importer.flatbuf import DamagedBuffer
from harness.importer.modelinfo import model_info
from harness.importer.named_data import resolve_constants
from harness.importer.program import Method, UnsupportedProgram, read_program
from harness.importer.refusals import ImportRefused, delegation_problem, the_method
from harness.importer.values import Refusal
from harness.importer.vkgraph import VkGraph, read_delegate

__all__ = ["OUTPUT_FILES", "ImportRefused", "ImportedModel", "import_pte", "write_import"]

# What an import writes into its folder (graph.npz only when the graph has constants).
GRAPH_STEM = "graph"
MODEL_FILE = "model.json"
OUTPUT_FILES = (f"{GRAPH_STEM}.json", f"{GRAPH_STEM}.npz", MODEL_FILE)


@dataclass(frozen=True)
class ImportedModel:
    """A converted model: its project graph and its `model.json` document."""

    graph: Graph
    info: dict[str, Any]


def import_pte(path: Path) -> ImportedModel:
    """Read and convert the model at `path`; nothing is written.

    Raises:
        ImportRefused: the file cannot be read, is damaged, is of another layout, or holds
            what the importer refuses (docs/executorch-models.md); one line naming it.
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ImportRefused(str(path), f"cannot be read: {err.strerror}") from None
    try:
        return _import(path, data)
    except DamagedBuffer as err:
        raise ImportRefused(str(path), f"damaged file: {err}") from None
    except (UnsupportedProgram, Refusal) as err:
        raise ImportRefused(str(path), str(err)) from None


def _import(path: Path, data: bytes) -> ImportedModel:
    program = read_program(data)
    method = the_method(program.methods)
    if isinstance(method, str):
        raise Refusal(method)
    problem = delegation_problem(method)
    if problem:
        raise Refusal(problem)
    _check_no_external_tensors(method)
    vk = read_delegate(method.delegates[0].blob)
    _check_interface(method, vk)
    converted = convert(vk, resolve_constants(vk, program.named_data), str(path))
    info = model_info(path, data, program.methods, method, vk, converted.document)
    return ImportedModel(converted.graph, info)


def _check_no_external_tensors(method: Method) -> None:
    external = [i for i, v in enumerate(method.values) if v.tensor and v.tensor.external]
    if external:
        raise Refusal(
            f"method {method.name}: tensors {external} live in external data (a .ptd file), "
            "which the importer does not read; export with the weights inside the .pte"
        )


def _check_interface(method: Method, vk: VkGraph) -> None:
    """The delegate's inputs and outputs are the method's, in order and at the same sizes
    (the delegate holds the whole method, so the graph keeps the model's interface)."""
    for kind, program_ids, graph_ids in (
        ("inputs", method.inputs, vk.input_ids),
        ("outputs", method.outputs, vk.output_ids),
    ):
        program_sizes = [_program_sizes(method, i) for i in program_ids]
        graph_sizes = [tuple(vk.tensor(i).dims) for i in graph_ids]
        if program_sizes != graph_sizes:
            raise Refusal(
                f"the delegate's {kind} {graph_sizes} are not the method's {program_sizes}: "
                "the delegate does not hold the whole method"
            )


def _program_sizes(method: Method, index: int) -> tuple[int, ...] | None:
    """The sizes of the method's value `index` (None: not a tensor)."""
    if not 0 <= index < len(method.values):
        raise DamagedBuffer(
            f"method {method.name}: value index {index} outside its {len(method.values)} values"
        )
    tensor = method.values[index].tensor
    return None if tensor is None else tuple(tensor.sizes)


def write_import(model: ImportedModel, out: Path, *, force: bool = False) -> Path:
    """Write `model` as the graph folder `out` (graph.json, graph.npz, model.json).

    A new folder, or an empty one; with `force`, an earlier import's folder (holding
    nothing but its files), whose files are replaced. The files are written into a
    temporary folder beside `out` first, so a failure leaves `out` as it was.

    Raises:
        ImportRefused: `out` holds something else (or anything, without `force`).
        OSError: the disk would not take the files (the caller reports it).
    """
    if out.exists():
        if not out.is_dir():
            raise ImportRefused(str(out), "exists and is not a folder")
        present = sorted(p.name for p in out.iterdir())
        others = [name for name in present if name not in OUTPUT_FILES]
        if others:
            raise ImportRefused(
                str(out),
                f"holds other files ({', '.join(others[:3])}); import into a new or empty folder",
            )
        if present and not force:
            raise ImportRefused(str(out), "holds an earlier import; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Beside `out` (the same filesystem: a rename), named for this process.
    staging = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        model.graph.save(staging / GRAPH_STEM)
        (staging / MODEL_FILE).write_text(json.dumps(model.info, indent=1) + "\n")
        if not out.exists():
            staging.rename(out)
            return out
        for name in OUTPUT_FILES:
            if (staging / name).exists():
                os.replace(staging / name, out / name)
            else:
                (out / name).unlink(missing_ok=True)
        return out
    finally:
        shutil.rmtree(staging, ignore_errors=True)
