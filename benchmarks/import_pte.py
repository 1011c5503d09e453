"""Time of importing an ExecuTorch `.pte`: `python -m benchmarks.import_pte` (measured,
never asserted; issue 27: a 2-layer model in under 1 s).

For each committed model of tests/data/models/ (the 2-layer Llama first), each phase of an
import, repeated `--repeats` times in this process (median, wall and CPU time): reading the
program (`read_program`), decoding the delegate (`read_delegate`), finding and checking the
constants (`resolve_constants`: a sha256 of every constant), converting (`convert_document`),
validating as a project graph (`Graph.from_json`, which needs every project op's schema: a
model whose ops this checkout lacks says so and skips it), describing it (`model_info`) and
writing the folder (`write_import`, into a temporary folder). Then the whole `parity import`
command in a fresh process (`--cold` runs, wall time: Python's start and imports included),
which is what a user waits for.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graph_format import SIGNATURES, Graph
from harness.importer import ImportedModel, write_import
from harness.importer.convert import convert_document
from harness.importer.modelinfo import model_info
from harness.importer.named_data import resolve_constants
from harness.importer.program import read_program
from harness.importer.vkgraph import read_delegate

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "tests" / "data" / "models"
DEFAULT_MODELS = ("llama_rope", "llama_hf_rope_gqa", "llama_rope_gqa_f16", "ffn_block")


def timed(repeats: int, call: Callable[[], Any]) -> tuple[dict[str, float], Any]:
    """Median wall and CPU milliseconds of `repeats` calls, and the last call's result."""
    walls, cpus = [], []
    result = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    ms = {"wall_ms": 1e3 * statistics.median(walls), "cpu_ms": 1e3 * statistics.median(cpus)}
    return ms, result


def phases(name: str, repeats: int) -> dict[str, Any]:
    """Each phase of importing model `name`, timed."""
    path = MODELS / f"{name}.pte"
    data = path.read_bytes()
    row: dict[str, Any] = {"model": name, "bytes": len(data)}
    row["read_program"], program = timed(repeats, lambda: read_program(data))
    (method,) = [m for m in program.methods if m.instructions]
    blob = method.delegates[0].blob
    row["read_delegate"], vk = timed(repeats, lambda: read_delegate(blob))
    row["ops"] = len(vk.ops)
    row["resolve_constants"], arrays = timed(
        repeats, lambda: resolve_constants(vk, program.named_data)
    )
    row["convert_document"], document = timed(repeats, lambda: convert_document(vk, arrays))
    missing = sorted({op["op"] for op in document.ops} - set(SIGNATURES))
    row["model_info"], info = timed(
        repeats, lambda: model_info(path, data, program.methods, method, vk, document)
    )
    if missing:
        row["skipped"] = f"graph validation and writing need the project ops {missing}"
        return row
    row["graph_from_json"], graph = timed(
        repeats, lambda: Graph.from_json(document.doc, document.constants, source=str(path))
    )
    with tempfile.TemporaryDirectory() as tmp:
        model = ImportedModel(graph, info)
        row["write_import"], _ = timed(
            repeats, lambda: write_import(model, Path(tmp) / "out", force=True)
        )
    return row


def cold(name: str, runs: int) -> dict[str, float] | str:
    """Median wall seconds of `parity import` in a fresh process."""
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            command = [sys.executable, "-m", "harness.cli", "import", str(MODELS / f"{name}.pte")]
            start = time.perf_counter()
            done = subprocess.run(
                [*command, "--out", f"{tmp}/{i}"], capture_output=True, text=True, cwd=REPO
            )
            walls.append(time.perf_counter() - start)
            if done.returncode != 0:
                return done.stderr.strip().splitlines()[-1]
    return {"wall_s": statistics.median(walls), "runs": runs}


def total_ms(row: dict[str, Any]) -> float:
    return sum(v["wall_ms"] for v in row.values() if isinstance(v, dict))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--repeats", type=int, default=20, help="in-process repeats per phase")
    parser.add_argument("--cold", type=int, default=3, help="fresh-process runs per model")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        row = phases(name, args.repeats)
        row["in_process_total_ms"] = total_ms(row)
        row["cold_parity_import"] = cold(name, args.cold)
        rows.append(row)
    cpu = platform.processor() or platform.machine()
    machine = f"{platform.node()} ({cpu}, Python {platform.python_version()})"
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=1))
        return 0
    print(f"machine: {machine}; medians of {args.repeats} (in process), {args.cold} (cold)")
    for row in rows:
        steps = ", ".join(
            f"{k} {v['wall_ms']:.1f} ms"
            for k, v in row.items()
            if isinstance(v, dict) and "wall_ms" in v
        )
        print(f"{row['model']} ({row['bytes']} B, {row['ops']} ops): {steps}")
        total, cold_run = row["in_process_total_ms"], row["cold_parity_import"]
        print(f"  in process: {total:.1f} ms; cold parity import: {cold_run}")
        if "skipped" in row:
            print(f"  {row['skipped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
