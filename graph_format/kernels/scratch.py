"""Scratch buffers a manifest sizes (shared by the slots of one op), and the causal
attention's masked columns that a qk kernel writes and a softmax reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from graph_format.kernels.binding import KernelEntry
from graph_format.kernels.errors import ExpressionError, KernelInterfaceError
from graph_format.kernels.expressions import Expression
from graph_format.kernels.format import BUILTIN_NAMES, MASKED_READ, MASKED_WRITTEN, Backend, Value
from graph_format.signatures import SLOTS


def scratch_sizes(entry: KernelEntry, static: Mapping[str, Value]) -> dict[str, int]:
    """The bytes of each scratch role the manifest sizes for `entry`'s op on its backend:
    the largest size any section of the op declares, on the values fixed at load (the op's
    largest shape; `max_workgroups_per_dim` included). One buffer per role per op node.

    Raises:
        KernelInterfaceError: a size reads a value that changes with the live sizes, fails
            on the values, or is not a whole number of bytes >= 1 (the message names the
            manifest key, the expression and the values it read).
    """
    sizes: dict[str, int] = {}
    for role, declared in entry.op_scratch.items():
        for slot, expr in declared:
            key = f"{entry.backend}.{slot}.scratch.{role}"

            def fail(what: str, key: str = key) -> KernelInterfaceError:
                return KernelInterfaceError(entry.slot, entry.source, f"{key}: {what}")

            live = sorted(expr.names - static.keys() - set(BUILTIN_NAMES))
            if live:
                raise fail(
                    f"{expr.text!r} reads {', '.join(live)}, which change with the live "
                    "sizes; a scratch buffer is allocated once, at load, for the op's largest "
                    f"shape: size it by values fixed at load ({', '.join(sorted(static))})"
                )
            try:
                nbytes = expr.evaluate_int(static)
            except ExpressionError as err:
                raise fail(str(err)) from None
            if nbytes < 1:
                read = ", ".join(f"{n}={static[n]}" for n in sorted(expr.names))
                raise fail(
                    f"{expr.text!r} gives {nbytes} bytes"
                    + (f" (at {read})" if read else "")
                    + "; expected a size of at least 1 byte"
                )
            sizes[role] = max(sizes.get(role, 0), nbytes)
    return sizes


def masked_columns_unwritten(qk: KernelEntry, softmax: KernelEntry) -> str | None:
    """Why this qk kernel cannot run before this softmax (a requirement the graph breaks:
    the softmax reads masked columns the qk kernel leaves unwritten), or None."""
    if softmax.masked_columns == MASKED_READ and qk.masked_columns != MASKED_WRITTEN:
        by = "the project's kernel" if qk.builtin else str(qk.source)
        return (
            f"{qk.slot} writing the masked columns it reads ({qk.slot} runs {by}, which "
            f'does not: replace it with one that says masked_columns = "{MASKED_WRITTEN}")'
        )
    return None


def _share_scratch(
    entries: dict[tuple[Backend, str], KernelEntry],
) -> dict[tuple[Backend, str], KernelEntry]:
    """Each entry with every scratch size its op's sections declare on its backend."""
    by_op: dict[tuple[Backend, str], dict[str, list[tuple[str, Expression]]]] = {}
    for (backend, slot), entry in entries.items():
        for role, expr in entry.scratch.items():
            by_op.setdefault((backend, SLOTS[slot].op), {}).setdefault(role, []).append(
                (slot, expr)
            )
    out: dict[tuple[Backend, str], KernelEntry] = {}
    for (backend, slot), entry in entries.items():
        declared = by_op.get((backend, SLOTS[slot].op), {})
        op_scratch = {role: tuple(sizes) for role, sizes in declared.items()}
        out[(backend, slot)] = replace(entry, op_scratch=op_scratch) if op_scratch else entry
    return out
