"""Op signatures of graph format version 1: which arguments and outputs each op type takes.

Each op's signature is its own schema file, `graph_format/ops/<op>.toml` (its `args`: name,
kind and whether optional, in order; its `outputs`: name and kind), read once at import; an
op exists for the format when its file does. This is schema, not behaviour: it lets the
loader reject a malformed graph (an unknown op, a missing or misspelt argument, an argument
of the wrong kind) with an error that says where, before either backend sees it. What an op
computes, how it resizes and how it is dispatched is owned separately by each backend and by
the harness's contract model.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
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
class OpSignature:
    """The arguments and outputs of one op type."""

    op: str
    args: tuple[ArgSlot, ...]
    outputs: tuple[tuple[str, OutputKind], ...]

    def arg(self, name: str) -> ArgSlot | None:
        """The slot called `name`, or None."""
        return next((slot for slot in self.args if slot.name == name), None)


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
    if set(doc) - {"args", "outputs"} or not doc.get("outputs"):
        raise SchemaError(
            f"{path}: expected the keys args and outputs (at least one), got {set(doc)}"
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
    return OpSignature(op, args, outputs)


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


SIGNATURES: dict[str, OpSignature] = load_signatures()
