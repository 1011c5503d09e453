"""`parity list`: the case families, ops and kernel slots (their files and interfaces),
profiles and adapters."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from graph_format import SLOTS, BackendUnavailable
from harness.check.backends import ALL_BACKENDS, open_runtime
from harness.families import FAMILIES, family_for_op
from harness.gen.blocks import F16_SHARE, family_dtypes
from harness.model import OpModel, model_dtypes
from harness.run import console
from harness.run.bundle import (
    REPO_SHADER_DIRS,
)
from harness.run.profiles import PROFILES


def _op_kernels(models: Mapping[str, OpModel]) -> dict[str, dict[str, dict[str, Any]]]:
    """Op -> slot -> its project kernels' files (and which are missing) and its interface."""
    ops = {}
    for op, model in sorted(models.items()):
        ops[op] = {
            name: {
                "wgsl": f"wgsl/{spec.wgsl}.wgsl",
                "glsl": f"glsl/{spec.glsl}.comp",
                "missing": [
                    p
                    for p in (
                        REPO_SHADER_DIRS["webgpu"] / f"{spec.wgsl}.wgsl",
                        REPO_SHADER_DIRS["vulkan"] / f"{spec.glsl}.comp",
                    )
                    if not p.exists()
                ],
                # The slot's interface (graph_format/ops/<op>.toml): what a kernel of it binds
                # and reads; a manifest maps a foreign kernel onto these names.
                "tensors": list(SLOTS[name].tensors),
                "values": dict(SLOTS[name].doc),
            }
            for name, spec in model.kernels.items()
        }
    return ops


def _adapters() -> dict[str, Any]:
    """Every backend (each WebGPU implementation, then Vulkan): its adapter, or why none."""
    adapters: dict[str, Any] = {}
    for backend in ALL_BACKENDS:
        try:
            adapters[backend] = {"available": True, **open_runtime(backend).info()}
        except BackendUnavailable as err:
            adapters[backend] = {"available": False, "reason": str(err)}
    return adapters


def list_command(args: argparse.Namespace) -> int:
    """Print (or, with --json, dump) what can run here; returns 0."""
    from harness.ops import MODELS

    doc = _list_doc(MODELS)
    if args.json:
        console.out(json.dumps(doc, indent=1, default=str))
        return 0
    _print_list(doc)
    return 0


def _list_doc(models: Mapping[str, OpModel]) -> dict[str, Any]:
    """What `parity list --json` prints."""
    ops = _op_kernels(models)
    adapters = _adapters()
    doc: dict[str, Any] = {
        "families": {
            name: {
                "own_op": name if name in models else None,
                "ops": sorted(family.exercises),
                # The dtypes its cases are drawn in (float16 for F16_SHARE of them, or of
                # those whose own ops all take it).
                "dtypes": list(
                    family_dtypes(
                        [op for op in family.exercises if "float16" in model_dtypes(op)]
                        if family.dtype_per_case
                        else family.exercises
                    )
                ),
                "dtype_per_case": family.dtype_per_case,
            }
            for name, family in FAMILIES.items()
        },
        "ops": {
            op: {k: {**v, "missing": [str(p) for p in v["missing"]]} for k, v in kernels.items()}
            for op, kernels in ops.items()
        },
        "op_families": {op: family_for_op(op) for op in ops},
        # The float dtypes each op's kernels take (float16: its `_f16` slots).
        "op_dtypes": {op: list(model_dtypes(op)) for op in ops},
        "profiles": {
            p.name: {
                "max_examples": p.max_examples,
                "chunk_examples": p.chunk_examples,
                "database": p.keep_database,
                "steer": p.steer,
                "derandomize": p.derandomize,
                "fold_every": p.fold_every,
                "fold_limit": p.fold_limit,
            }
            for p in PROFILES.values()
        },
        "adapters": adapters,
        "validation": os.environ.get("VULKAN_PARITY_VALIDATION", "1"),
    }
    return doc


def _print_list(doc: Mapping[str, Any]) -> None:
    """`parity list`'s text: families, ops and their slots, profiles, adapters."""
    console.out("Case families (parity run --families):")
    for name, entry in doc["families"].items():
        dtypes = entry["dtypes"]
        which = "the cases whose ops all take it" if entry["dtype_per_case"] else "cases"
        share = f"  (float16 in {F16_SHARE:.0%} of {which})" if "float16" in dtypes else ""
        console.out(f"  {name}{share}")
    console.out("Ops and kernel slots (parity run --ops; roles and values a kernel binds):")
    for op, kernels in doc["ops"].items():
        dtypes = ", ".join(doc["op_dtypes"][op])
        console.out(f"  {op}  (runs family {doc['op_families'][op]}; {dtypes})")
        for name, k in kernels.items():
            missing = f"  MISSING {', '.join(k['missing'])}" if k["missing"] else ""
            console.out(f"    {name:<22} {k['wgsl']:<28} {k['glsl']}{missing}")
            console.out(f"      roles:  {', '.join(k['tensors'])}")
            console.out(f"      values: {', '.join(k['values'])}")
    console.out("Profiles (parity run --profile):")
    for name, p in doc["profiles"].items():
        console.out(
            f"  {name:<8} {p['max_examples']} examples/family in chunks of {p['chunk_examples']}"
            + (", example database" if p["database"] else "")
            + (", target() on utilization" if p["steer"] else "")
            + (
                f", one chunk in {p['fold_every']} under {p['fold_limit']} workgroups/dim"
                if p["fold_limit"]
                else ""
            )
        )
    console.out("Adapters:")
    for backend, info in doc["adapters"].items():
        if info["available"]:
            driver = info.get("driver_info") or info.get("driver")
            console.out(
                f"  {backend:<13} {info.get('adapter')} | driver {driver} | {info.get('api')}"
                + f" | {info.get('max_workgroups_per_dim')} workgroups/dim"
                + (
                    f" | validation {'on' if info.get('validation') else 'off'}"
                    if backend == "vulkan"
                    else ""
                )
                + f" | f16 {'yes' if info.get('shader_f16') else 'no (f16 cases unavailable)'}"
            )
        else:
            console.out(f"  {backend:<13} UNAVAILABLE: {info['reason']}")
