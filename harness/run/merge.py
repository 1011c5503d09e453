"""`parity merge --out OUT SHARD_DIR...`: shards of one plan joined into one report.

Every shard must come from the same plan (its digest), each (device, shard index) once;
bundles of the same finding are copied once per device, records keep their shard as
`source`. OUT must be new, empty or an earlier merge (`--force` replaces anything else).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from harness.run import console
from harness.run.bundle import (
    existing_bundle,
)
from harness.run.console import UsageError
from harness.run.records import (
    CASES_FILE,
    RUN_FILE,
    RecordWriter,
    read_records,
    write_json,
)
from harness.run.report import MERGE_FORMAT, load_run, merged_meta, render_report
from harness.run.runlock import LOCK_FILES, RunFolderLock, command_line
from harness.run.session import RunFolderError


def merge_command(args: argparse.Namespace) -> int:
    """Merge the shards `args.shards` into `args.out`; returns the exit status."""
    if args.out is None:
        raise UsageError(
            "--out OUT is required: `parity merge --out OUT SHARD_DIR...` (the merged folder "
            "is no longer the first positional argument)"
        )
    out = Path(args.out)
    shard_dirs = [Path(d) for d in args.shards]
    if any(d.resolve() == out.resolve() for d in shard_dirs):
        raise UsageError(f"--out {out}: is one of the shards; merge into another folder")
    _check_merge_out(out, args.force)
    locks = [RunFolderLock(d, command_line()) for d in shard_dirs if d.is_dir()]
    try:
        for lock in locks:
            lock.acquire()
        return _merge_into(out, shard_dirs, args.allow_missing)
    finally:
        for lock in locks:
            lock.release()


def _check_merge_out(out: Path, force: bool) -> None:
    """Refuse an OUT that holds anything but an earlier merge, unless forced."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    if not out.is_dir() or all(p.name in LOCK_FILES for p in out.iterdir()):
        return
    try:
        fmt = json.loads((out / RUN_FILE).read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        fmt = None
    if fmt == MERGE_FORMAT or force:
        return
    what = "a run folder" if fmt else "not empty"
    raise UsageError(
        f"--out {out}: {what} and not an earlier merge's output; refusing to write into it "
        "(pick a new folder, or pass --force to replace its report files)"
    )


def _merge_into(out: Path, shard_dirs: list[Path], allow_missing: bool) -> int:
    shards = [load_run(d) for d in shard_dirs]
    runs = []
    for data in shards:
        if data.merged:
            raise UsageError(f"{data.path}: is a merged report; merge shard folders instead")
        runs.append(data.runs[0])
    first = runs[0]
    for data, run in zip(shards, runs, strict=True):
        if run.get("plan_digest") != first.get("plan_digest"):
            raise UsageError(
                f"{data.path}: a shard of another plan (seed {run.get('seed')}, families "
                f"{run.get('families')}, budgets {run.get('budgets')}); expected the plan of "
                f"{shards[0].path} (seed {first.get('seed')}, families {first.get('families')}, "
                f"budgets {first.get('budgets')})"
            )
    from harness.run.summary import device_label

    seen: dict[tuple[str, int], Path] = {}
    count = int(first["shard"]["count"])
    for data, run in zip(shards, runs, strict=True):
        key = (device_label(run.get("adapters", {})), int(run["shard"]["index"]))
        if key in seen:
            raise UsageError(
                f"{data.path}: shard {key[1]}/{count} on {key[0]} is also in {seen[key]}"
            )
        seen[key] = data.path
    for device in sorted({d for d, _ in seen}):
        missing = sorted(set(range(1, count + 1)) - {i for d, i in seen if d == device})
        if missing and not allow_missing:
            raise UsageError(
                f"shards {missing} of {count} on {device} are missing; pass them, or "
                "--allow-missing to merge what is there"
            )
        if missing:
            console.err(
                f"parity merge: warning: shards {missing} of {count} on {device} are missing"
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunFolderError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    with RunFolderLock(out, command_line()):
        return _write_merge(out, shards, runs)


def _write_merge(out: Path, shards: list[Any], runs: list[dict[str, Any]]) -> int:
    for name in ("bundles", "failures", "cases"):
        if (out / name).is_dir():
            shutil.rmtree(out / name)
    (out / CASES_FILE).unlink(missing_ok=True)
    writer = RecordWriter(out / CASES_FILE)
    try:
        for source, data in enumerate(shards):
            renames = _copy_bundles(data.path, out, source)
            for record in read_records(data.path / CASES_FILE):
                record["source"] = source
                for f in record.get("findings", []) if record["record"] == "chunk" else []:
                    if f.get("bundle") in renames:
                        f["bundle"] = renames[f["bundle"]]
                if record.get("provisional_bundle") in renames:
                    record["provisional_bundle"] = renames[record["provisional_bundle"]]
                writer.write(record)
    finally:
        writer.close()
    write_json(out / RUN_FILE, merged_meta(runs, [str(d.path) for d in shards]))
    summary = render_report(out)
    t = summary["totals"]
    console.err(
        f"parity merge: {len(shards)} shards, {t['cases']} cases, {t['findings']} findings "
        f"({t['unexpected_findings']} unexpected); {out / 'index.html'}"
    )
    return int(summary["exit_status"])


def _copy_bundles(src: Path, out: Path, source: int) -> dict[str, str]:
    """Copy a shard's bundles into the merged folder; returns renamed relative paths."""
    renames: dict[str, str] = {}
    if not (src / "bundles").is_dir():
        return renames
    for bundle in sorted((src / "bundles").iterdir()):
        name = bundle.name
        if name.startswith("."):
            continue  # a bundle still being written when its shard was killed
        if (out / "bundles" / name).exists():
            if _same_device(bundle, out / "bundles" / name):
                continue  # the same finding (bundles are named by case and bug) from a shard
            renames[f"bundles/{name}"] = f"bundles/{name}-s{source}"  # on another device
            name = f"{name}-s{source}"
        shutil.copytree(bundle, out / "bundles" / name)
    return renames


def _same_device(bundle: Path, other: Path) -> bool:
    from harness.run.summary import device_label

    def device(folder: Path) -> str | None:
        doc = existing_bundle(folder)
        return device_label(doc.get("run", {}).get("adapters") or {}) if doc else None

    return device(bundle) == device(other) is not None
