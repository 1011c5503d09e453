"""JSON to records: one type-driven reader (`from_json`) for every record class.

It checks every field against its type hint and names what is wrong as `field <where> must
be <type>, got <what>` or `field <where> is missing`, `<where>` the path to it (`timeline[0].
model.dispatches[0].'kernel'`). Hints it reads: str, int, float ("inf", "-inf", "nan" as
`plain` writes them), bool, Any, unions (the first member the value's JSON type fits), list[X],
dict[str, X], dataclasses, `BugKey` (its text form), and a divergence's `Details` (the class
its `kind` names, `harness.check.divergence.DETAILS`). A field's JSON name is its own, or
its metadata's `json` (`Repeatability.kind` is written `class`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from typing import TYPE_CHECKING, Any, TypeVar, cast

from harness.check.divergence import DETAILS, BugKey, Details

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# A record class: `from_json` builds any dataclass.
T = TypeVar("T", bound="DataclassInstance")

_NON_FINITE = ("inf", "-inf", "nan")
_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
_NAMES |= {list: "a list", dict: "an object", type(None): "null"}


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """A `cls` dataclass from JSON data, every field checked against its type hint (see the
    module docstring). A field without a default is required; keys that are not fields are
    ignored.

    Raises:
        ValueError: `field <where><name> is missing` or `field ... must be <type>, got ...`.
    """
    if not isinstance(data, dict):
        raise ValueError(
            f"{where.rstrip('.') or 'record'} must be a JSON object, got {_seen(data)}"
        )
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json", f.name)
        if not f.init:
            continue
        if key not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"field {where}{key!r} is missing")
            continue
        hint = _hints(cls)[f.name]
        if hint is Details:  # the class of its divergence's kind
            hint = DETAILS.get(str(data.get("kind")), Details)
        values[f.name] = _read(hint, data[key], f"{where}{key!r}", f"{where}{key}.")
    return cls(**values)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A record class's field types, resolved once."""
    return typing.get_type_hints(cls)


def _read(hint: Any, value: Any, label: str, where: str) -> Any:
    """`value` read as `hint`: `label` names it in a message, `where` prefixes what is in it."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        options = typing.get_args(hint)
        chosen = next((o for o in options if _fits(o, value)), None)
        if chosen is None:
            raise _wrong(label, " or ".join(_wanted(o) for o in options), value)
        return _read(chosen, value, label, where)
    if not _fits(hint, value):
        raise _wrong(label, _wanted(hint), value)
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        head = where[:-1]
        return [_read(item, v, f"{head}[{i}]", f"{head}[{i}].") for i, v in enumerate(value)]
    if origin is dict:
        item = typing.get_args(hint)[1]
        return {str(k): _read(item, v, f"{where}{k}", f"{where}{k}.") for k, v in value.items()}
    if hint is BugKey:  # a dataclass written as its text form
        try:
            return BugKey.parse(value)
        except ValueError:
            raise _wrong(label, _wanted(hint), value) from None
    if dataclasses.is_dataclass(hint):
        return from_json(cast(Any, hint), value, where)
    return float(value) if hint is float else value


def _fits(hint: Any, value: Any) -> bool:
    """Whether `value`'s JSON type is one `hint` reads (what is inside it is read later)."""
    origin = typing.get_origin(hint) or hint
    if hint is Any:
        return True
    if hint is BugKey:
        return isinstance(value, str)
    if origin in (dict, list) or dataclasses.is_dataclass(origin):
        return isinstance(value, dict if origin is not list else list)
    if hint is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number or value in _NON_FINITE
    if hint in (str, int, bool, type(None)):
        return isinstance(value, hint) and (hint is bool or not isinstance(value, bool))
    raise TypeError(f"records: no JSON reading for {hint!r}")  # a bug in a record class


def _wanted(hint: Any) -> str:
    if hint is BugKey:
        return "a bug key op_type[@float16]|kind|blame[|band]"
    origin = typing.get_origin(hint) or hint
    return _NAMES.get(dict if dataclasses.is_dataclass(origin) else origin, str(hint))


def _seen(value: Any) -> str:
    """A JSON value's type in words."""
    if isinstance(value, bool):
        return "a boolean"
    return _NAMES.get(type(value), type(value).__name__)


def _wrong(label: str, wanted: str, value: Any) -> ValueError:
    shown = json.dumps(value)[:40]
    return ValueError(f"field {label} must be {wanted}, got {_seen(value)} {shown}")
