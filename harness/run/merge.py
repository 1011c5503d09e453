"""`parity merge --out OUT SHARD_DIR...`: shards of one plan joined into one report.

Every shard must come from the same plan (its digest), each (device, shard index) once;
bundles of the same finding are copied once per device, records keep their shard as
`source`. OUT must be new, empty or an earlier merge (`--force` replaces anything else).
Shards are only read (under a shared lock: a read-only filesystem will do); an OUT the disk
will not take is one line naming the file (`OutputError`, exit 2).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from harness.run import console
from harness.run.bundle import (
    existing_bundle,
    rewrite_commands,
)
from harness.run.console import UsageError
from harness.run.exitrule import summary_lines
from harness.run.records import (
    CASES_FILE,
    RUN_FILE,
    CaseRecord,
    ChunkRecord,
    MergeMeta,
    RecordError,
    RecordWriter,
    RunMeta,
    read_records,
    read_run_meta,
    write_json,
    writing,
)
from harness.run.report import RunData, load_run, merged_meta, render_report
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
    # Shared: merging only reads the shards (on a read-only filesystem too); a run still
    # writing one holds it exclusively, and is named.
    locks = [RunFolderLock(d, command_line(), shared=True) for d in shard_dirs if d.is_dir()]
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
        meta: RunMeta | MergeMeta | None = read_run_meta(out / RUN_FILE)
    except RecordError:
        meta = None
    if isinstance(meta, MergeMeta) or force:
        return
    what = "a run folder" if meta is not None else "not empty"
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
    _check_plans(shards, runs)
    _check_shard_set(shards, runs, allow_missing)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunFolderError(f"--out {out}: cannot create it: {err.strerror or err}") from None
    with RunFolderLock(out, command_line()):
        return _write_merge(out, shards, runs)


def _check_plans(shards: list[RunData], runs: list[RunMeta]) -> None:
    """Every shard ran the first shard's plan (seed, families, budgets)."""
    first = runs[0]
    for data, run in zip(shards, runs, strict=True):
        if run.plan_digest != first.plan_digest:
            raise UsageError(
                f"{data.path}: a shard of another plan (seed {run.seed}, families "
                f"{run.families}, budgets {_budgets(run)}); expected the plan of "
                f"{shards[0].path} (seed {first.seed}, families {first.families}, "
                f"budgets {_budgets(first)})"
            )


def _check_shard_set(shards: list[RunData], runs: list[RunMeta], allow_missing: bool) -> None:
    """Each device's shards once each, and all of them (or a warning per device missing
    some, with `allow_missing`)."""
    from harness.run.summary import device_label

    seen: dict[tuple[str, int], Path] = {}
    count = runs[0].shard.count
    for data, run in zip(shards, runs, strict=True):
        key = (device_label(run.adapters), run.shard.index)
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


def _budgets(run: RunMeta) -> str:
    b = run.budgets
    return f"{b.max_examples} examples in chunks of {b.chunk_examples}"


def _write_merge(out: Path, shards: list[RunData], runs: list[RunMeta]) -> int:
    for name in ("bundles", "failures", "cases"):
        if (out / name).is_dir():
            with writing(out / name):
                shutil.rmtree(out / name)
    with writing(out / CASES_FILE):
        (out / CASES_FILE).unlink(missing_ok=True)
    writer = RecordWriter(out / CASES_FILE)
    try:
        for source, data in enumerate(shards):
            renames = _copy_bundles(data.path, out, source, runs[source])
            for record in read_records(data.path / CASES_FILE):
                record.source = source
                if isinstance(record, ChunkRecord):
                    for f in record.findings:
                        f.bundle = renames.get(f.bundle or "", f.bundle)
                elif isinstance(record, CaseRecord) and record.provisional_bundle:
                    bundle = record.provisional_bundle
                    record.provisional_bundle = renames.get(bundle, bundle)
                writer.write(record)
    finally:
        writer.close()
    write_json(out / RUN_FILE, merged_meta(runs, [str(d.path) for d in shards]))
    summary = render_report(out)
    t = summary.totals
    console.err(
        f"parity merge: {len(shards)} shards, {t.cases} cases, {t.findings} findings "
        f"({t.unexpected_findings} unexpected); {out / 'index.html'}"
    )
    for line in summary_lines(summary):
        console.err(f"parity merge: {line}")
    return summary.exit_status


def _copy_bundles(src: Path, out: Path, source: int, run: RunMeta) -> dict[str, str]:
    """Copy a shard's bundles into the merged folder, their commands rendered again for
    it (`run`: the shard's run.json); returns renamed relative paths."""
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
        _copy_whole(bundle, out / "bundles" / name)
        if existing_bundle(out / "bundles" / name) is not None:
            rewrite_commands(out / "bundles" / name, run, out)
    return renames


def _copy_whole(src: Path, dest: Path) -> None:
    """Copy a folder whole or not at all: into a temporary folder, renamed into place (so a
    full disk leaves no half bundle; `shutil.copytree` would go on past a failed file).

    Raises:
        OutputError: the disk would not take it, naming `dest`.
    """
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with writing(dest):
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for path in sorted(src.rglob("*")):
                target = tmp / path.relative_to(src)
                if path.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
            tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _same_device(bundle: Path, other: Path) -> bool:
    from harness.run.summary import device_label

    def device(folder: Path) -> str | None:
        doc = existing_bundle(folder)
        return device_label(doc.run.adapters) if doc else None

    return device(bundle) == device(other) is not None
