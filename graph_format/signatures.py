"""Op signatures of the graph format (versions 1 and 2 alike): which arguments and outputs
each op type takes, and the interface of each of its kernel slots.

Each op's signature is its own schema file, `graph_format/ops/<op>.toml` (its `args`: name,
kind and whether optional, in order; its `outputs`: name and kind; its `slots`), read once at
import; an op exists for the format when its file does. This is schema, not behaviour: it
lets the loader reject a malformed graph (an unknown op, a missing or misspelt argument, an
argument of the wrong kind) with an error that says where, before either backend sees it.
What an op computes, how it resizes and how it is dispatched is owned separately by each
backend and by the harness's contract model.

A slot (docs/design.md §9) is one kernel variant of an op as the contract knows it (`add_flat`,
`q4gsw_gemv`): a kernel of it binds the slot's tensors by role and reads the values the op
offers it by name. `[slots.<slot>]` declares `tensors` (roles, outputs first, scratch buffers
too) and `values` (every name the op offers: params members, overrides, specialization and
push constants, `workgroup_size`, the dispatch count `workgroups`). Each value has a one-line
doc, written once: the op's `[doc]` table documents a value for every slot that offers it,
a slot's own `doc.<value>` overrides that for the slot alone (where its meaning differs), and
`workgroup_size` and `workgroups` mean the same in every op (`SHARED_DOCS`). Each
implementation computes the values itself; only the names are shared.

A half-precision variant of a slot is a slot of its own, named `<slot>_f16` (`dtype_slot`):
its own kernel files, declared in the same op's schema file; each backend picks it by the
tensors' dtype when it builds the op, and the contract names it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal, get_args

# What an argument slot accepts:
#   tensor     the name of a tensor value
#   int        the name of an int value
#   float      the name of a float value
#   int_or_sym the name of an int value or a SymInt value
#   size_list  a JSON list whose items name int or SymInt values
ArgKind = Literal["tensor", "int", "float", "int_or_sym", "size_list"]

# What an output slot produces.
OutputKind = Literal["tensor", "symint"]


@dataclass(frozen=True)
class ArgSlot:
    """One named argument of an op."""

    name: str
    kind: ArgKind
    optional: bool = False  # an optional argument may be JSON null or left out


@dataclass(frozen=True)
class SlotInterface:
    """What a kernel of one slot may bind and read: the contract between op and kernel.

    Attributes:
        op: the op type the slot belongs to.
        name: the slot's name, unique over all ops (the harness's kernel variant name).
        tensors: the roles a kernel binds, in the project's binding order (outputs first).
        values: every name the op offers a kernel of this slot, in declaration order.
        doc: a one-line description of each value, with its unit where units matter.
    """

    op: str
    name: str
    tensors: tuple[str, ...]
    values: tuple[str, ...]
    doc: dict[str, str]


@dataclass(frozen=True)
class OpSignature:
    """The arguments, outputs and kernel slots of one op type."""

    op: str
    args: tuple[ArgSlot, ...]
    outputs: tuple[tuple[str, OutputKind], ...]
    slots: dict[str, SlotInterface] = field(default_factory=dict)

    def arg(self, name: str) -> ArgSlot | None:
        """The slot called `name`, or None."""
        return next((slot for slot in self.args if slot.name == name), None)

    @property
    def tensors(self) -> tuple[str, ...]:
        """The names of the op's tensor arguments and outputs (each has live metadata)."""
        return tuple(a.name for a in self.args if a.kind == "tensor") + tuple(
            name for name, kind in self.outputs if kind == "tensor"
        )


SCHEMA_DIR = "ops"  # inside the graph_format package


class SchemaError(ValueError):
    """A schema file of `graph_format/ops/` is malformed (a bug of the package, not of a graph)."""


def _slot(path: str, entry: Any, kinds: tuple[str, ...], keys: set[str]) -> dict[str, Any]:
    """One `{ name = ..., kind = ... }` entry, checked."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise SchemaError(f"{path}: each slot needs a name, got {entry!r}")
    if entry.get("kind") not in kinds:
        raise SchemaError(
            f"{path}: slot {entry['name']!r} has kind {entry.get('kind')!r}; "
            f"expected one of {kinds}"
        )
    if set(entry) - keys:
        raise SchemaError(f"{path}: slot {entry['name']!r} has unknown keys {set(entry) - keys}")
    return entry


def parse_signature(op: str, text: str, path: str) -> OpSignature:
    """The signature of `op` from the text of its schema file (`path` names it in errors).

    Raises:
        SchemaError: the file is not TOML, or a slot is malformed or named twice.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SchemaError(f"{path}: not TOML: {err}") from None
    # `outputs` may be empty only for an op that updates state in place (update_cache).
    if set(doc) - {"args", "outputs", "slots", "doc"} or not isinstance(doc.get("outputs"), list):
        raise SchemaError(
            f"{path}: expected the keys args, outputs (a list; empty for an op that only "
            f"updates state), slots and doc, got {sorted(doc)}"
        )
    args = tuple(
        ArgSlot(e["name"], e["kind"], bool(e.get("optional", False)))
        for e in (
            _slot(path, e, get_args(ArgKind), {"name", "kind", "optional"})
            for e in doc.get("args", [])
        )
    )
    outputs = tuple(
        (e["name"], e["kind"])
        for e in (_slot(path, e, get_args(OutputKind), {"name", "kind"}) for e in doc["outputs"])
    )
    names = [a.name for a in args] + [name for name, _ in outputs]
    if len(set(names)) != len(names):
        raise SchemaError(f"{path}: a slot name is used twice in {names}")
    slots = doc.get("slots", {})
    if not isinstance(slots, dict):
        raise SchemaError(f"{path}: slots: expected a table of [slots.<name>] tables")
    op_docs = _doc_lines(path, "doc", doc.get("doc", {}))
    for value, text in op_docs.items():
        if SHARED_DOCS.get(value) == text:
            raise SchemaError(f"{path}: doc.{value}: repeats the doc every op shares; drop it")
    interfaces = {
        name: _slot_interface(path, op, name, table, op_docs) for name, table in slots.items()
    }
    offered = {value for interface in interfaces.values() for value in interface.values}
    unused = [value for value in op_docs if value not in offered]
    if unused:
        raise SchemaError(f"{path}: doc: values {unused} are offered by none of the op's slots")
    return OpSignature(op, args, outputs, interfaces)


SLOT_KEYS = ("tensors", "values")  # required; `doc` is optional

# The doc of the values every slot of every op offers, written once here.
SHARED_DOCS = {
    "workgroup_size": "invocations per workgroup of the project's kernel design (its wg_size "
    "override, local_size_x_id 0)",
    "workgroups": "the logical workgroup count of this dispatch (1-D; 0: the op skips the slot "
    "this step)",
}


def _doc_lines(path: str, where: str, docs: Any) -> dict[str, str]:
    """A `doc.<value> = "..."` table, checked: one non-empty line per value."""
    if not isinstance(docs, dict):
        raise SchemaError(f'{path}: {where}: expected doc.<value> = "..." lines')
    for value, text in docs.items():
        if not isinstance(text, str) or not text.strip() or "\n" in text:
            raise SchemaError(f"{path}: {where}.{value}: expected one line, got {text!r}")
    return docs


def _names(path: str, key: str, entry: Any) -> tuple[str, ...]:
    """A non-empty list of distinct identifiers at `key`, checked."""
    if (
        not isinstance(entry, list)
        or not entry
        or not all(isinstance(n, str) and n.isidentifier() for n in entry)
    ):
        raise SchemaError(f"{path}: {key}: expected a non-empty list of names, got {entry!r}")
    if len(set(entry)) != len(entry):
        twice = sorted({n for n in entry if entry.count(n) > 1})
        raise SchemaError(f"{path}: {key}: names {twice} are listed twice")
    return tuple(entry)


def _slot_interface(
    path: str, op: str, name: str, table: Any, op_docs: dict[str, str]
) -> SlotInterface:
    """One `[slots.<name>]` table, checked, its values' docs resolved (its own, else the op's
    `[doc]`, else `SHARED_DOCS`); errors name the file and the key."""
    where = f"slots.{name}"
    if not isinstance(table, dict):
        raise SchemaError(f"{path}: {where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - {*SLOT_KEYS, "doc"})
    missing = [key for key in SLOT_KEYS if key not in table]
    if unknown or missing:
        raise SchemaError(
            f"{path}: {where}: expected the keys {list(SLOT_KEYS)} (and doc), "
            + (f"unknown {unknown}" if unknown else f"missing {missing}")
        )
    tensors = _names(path, f"{where}.tensors", table["tensors"])
    values = _names(path, f"{where}.values", table["values"])
    own = _doc_lines(path, f"{where}.doc", table.get("doc", {}))
    for value, text in own.items():
        if value not in values:
            raise SchemaError(
                f"{path}: {where}.doc.{value}: {value!r} is not one of the slot's values "
                f"{list(values)}"
            )
        if text == op_docs.get(value, SHARED_DOCS.get(value)):
            raise SchemaError(
                f"{path}: {where}.doc.{value}: repeats the doc it inherits; drop it (say it once)"
            )
    docs = {**SHARED_DOCS, **op_docs, **own}
    undocumented = [v for v in values if v not in docs]
    if undocumented:
        raise SchemaError(
            f"{path}: {where}: values {undocumented} have no doc line (give the op's "
            "doc.<value>, or the slot's own)"
        )
    return SlotInterface(op, name, tensors, values, {v: docs[v] for v in values})


def load_signatures() -> dict[str, OpSignature]:
    """Every op's signature, from the schema files of `graph_format/ops/`, by op name."""
    folder = resources.files("graph_format") / SCHEMA_DIR
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    return {
        f.name.removesuffix(".toml"): parse_signature(
            f.name.removesuffix(".toml"), f.read_text(), f"graph_format/{SCHEMA_DIR}/{f.name}"
        )
        for f in files
    }


def index_slots(signatures: dict[str, OpSignature]) -> dict[str, SlotInterface]:
    """Every op's slots by slot name.

    Raises:
        SchemaError: two ops declare a slot of the same name (a manifest names slots alone).
    """
    slots: dict[str, SlotInterface] = {}
    for signature in signatures.values():
        for name, interface in signature.slots.items():
            if name in slots:
                raise SchemaError(
                    f"graph_format/{SCHEMA_DIR}/{signature.op}.toml: slots.{name}: slot "
                    f"{name!r} is already declared by op {slots[name].op!r}"
                )
            slots[name] = interface
    return slots


SIGNATURES: dict[str, OpSignature] = load_signatures()
SLOTS: dict[str, SlotInterface] = index_slots(SIGNATURES)


# The name suffix of a slot's half-precision variant (`rms_norm` -> `rms_norm_f16`).
F16_SUFFIX = "_f16"


def dtype_slot(slot: str, dtype: str) -> str:
    """The slot of the variant of `slot` for tensors of element type `dtype`: `slot` itself
    for float32 (and the integer types), `<slot>_f16` for float16. Whether that slot exists is
    for the caller to check (`SLOTS`)."""
    return slot + F16_SUFFIX if dtype == "float16" else slot
