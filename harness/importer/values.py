"""The project graph's values, declared from a VkGraph's as the converted ops name them.

Every VkGraph value the converted graph reads becomes one project value named `v<id>` (its
value id in the delegate, so a finding's value leads straight back to the model), declared
the first time an op names it: a tensor with the project dtype of its `VkDataType` and its
serialized (max) dims, a constant with its resolved bytes, a state tensor (a KV cache the
model updates in place), an int or float literal, or a SymInt. `ArgReader` walks one
`OperatorCall`'s positional arguments (the op's schema order, output last) and checks each
against what the project op's slot takes; anything else is a `Refusal` naming the op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.importer.vkgraph import VkGraph, VkList, VkOp, VkScalar, VkTensor

# VkDataType -> project dtype. int64 host tensors are serialized as INT32 by upstream's
# builder (64-bit types downcast); a graph that still says INT64 is narrowed like them.
PROJECT_DTYPES = {
    "FLOAT32": "float32",
    "FLOAT16": "float16",
    "INT32": "int32",
    "INT64": "int32",
    "UINT8": "uint8",
}
_NUMPY = {"FLOAT32": "<f4", "FLOAT16": "<f2", "INT32": "<i4", "INT64": "<i8", "UINT8": "u1"}
MAX_RANK = 4


class Refusal(Exception):
    """Why a model cannot be imported (the file's name is added by the caller)."""


@dataclass
class Rewrite:
    """One thing the import changed from the serialized graph, and why."""

    what: str
    why: str
    values: list[str] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)


class ValueTable:
    """The project values declared so far, their constants, and what was rewritten."""

    def __init__(self, vk: VkGraph, arrays: list[bytes | None], state_ids: set[int]) -> None:
        self.vk = vk
        self.arrays = arrays
        self.state_ids = state_ids
        self.entries: dict[str, dict[str, Any]] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.ids: dict[str, int] = {}
        self.alias: dict[int, int] = {}  # a folded op's output id -> the id it stands for
        self.widened: list[str] = []
        self.narrowed: list[str] = []

    @staticmethod
    def name(value_id: int) -> str:
        return f"v{value_id}"

    def resolve(self, value_id: int) -> int:
        return self.alias.get(value_id, value_id)

    # ------------------------------------------------------------------ declarations

    def tensor(self, value_id: int, where: str, *, widen_f16: bool = False) -> str:
        """Declare tensor `value_id` (once) and return its name."""
        value_id = self.resolve(value_id)
        name = self.name(value_id)
        if name in self.entries:
            return name
        tensor = self.vk.value(value_id)
        if not isinstance(tensor, VkTensor):
            raise Refusal(f"{where}: value {value_id} is a {_kind(tensor)}, not a tensor")
        dtype = self._dtype(tensor, value_id, where)
        if not 1 <= len(tensor.dims) <= MAX_RANK or 0 in tensor.dims:
            raise Refusal(
                f"{where}: value {value_id} has dims {list(tensor.dims)}; the project's "
                f"tensors have 1 to {MAX_RANK} positive dims"
            )
        entry: dict[str, Any] = {"name": name, "kind": "tensor", "dims": list(tensor.dims)}
        if tensor.constant_id >= 0:
            array = self._constant(tensor, value_id, where)
            if widen_f16 and array.dtype == np.float16:
                # f16 -> f32 is exact: every binary16 value is a binary32 value.
                array, dtype = array.astype(np.float32), "float32"
                self.widened.append(name)
            state = value_id in self.state_ids
            if state:
                entry["state"] = True
            if not state or np.any(array):  # a state tensor of zeros needs no initial data
                entry["constant"] = name
                self.constants[name] = array
        elif value_id in self.state_ids:
            raise Refusal(f"{where}: KV cache value {value_id} is not a constant of the delegate")
        entry["dtype"] = dtype
        self._add(name, value_id, entry)
        return name

    def literal(self, value_id: int, kind: str, value: int | float) -> str:
        """Declare the int or float literal `value_id` (a Bool as the int 0 or 1); an Int
        one slot reads as a float is `v<id>_float` beside its int `v<id>`."""
        name = self.name(value_id)
        if name in self.entries and self.entries[name]["kind"] != kind:
            name = f"{name}_{kind}"
        if name not in self.entries:
            self._add(name, value_id, {"name": name, "kind": kind, "value": value})
        return name

    def extra_literal(self, name: str, value_id: int, value: int) -> str:
        """An int literal with no value of its own (an `IntList` item): `v<list id>_<i>`."""
        if name not in self.entries:
            self._add(name, value_id, {"name": name, "kind": "int", "value": value})
        return name

    def symint(self, value_id: int) -> str:
        name = self.name(value_id)
        if name not in self.entries:
            self._add(name, value_id, {"name": name, "kind": "symint"})
        return name

    def _add(self, name: str, value_id: int, entry: dict[str, Any]) -> None:
        self.entries[name] = entry
        self.ids[name] = value_id

    def _dtype(self, tensor: VkTensor, value_id: int, where: str) -> str:
        if tensor.dtype not in PROJECT_DTYPES:
            raise Refusal(
                f"{where}: value {value_id} is {tensor.dtype}; the project's tensors are "
                "FLOAT32, FLOAT16, INT32 (INT64 narrowed) or UINT8"
            )
        if tensor.dtype == "INT64":
            self.narrowed.append(self.name(value_id))
        return PROJECT_DTYPES[tensor.dtype]

    def _constant(self, tensor: VkTensor, value_id: int, where: str) -> np.ndarray:
        """Constant `value_id`'s data as an array of its dtype and dims."""
        if tensor.constant_id >= len(self.arrays):
            raise Refusal(
                f"{where}: value {value_id} names constant {tensor.constant_id} of "
                f"{len(self.arrays)}"
            )
        raw = self.arrays[tensor.constant_id]
        dtype = np.dtype(_NUMPY[tensor.dtype])
        expected = math.prod(tensor.dims) * dtype.itemsize
        if raw is None or len(raw) != expected:
            got = "no bytes" if raw is None else f"{len(raw)} bytes"
            raise Refusal(
                f"{where}: constant {tensor.constant_id} (value {value_id}, {tensor.dtype}"
                f"{list(tensor.dims)}) needs {expected} bytes, it has {got}"
            )
        array = np.frombuffer(raw, dtype).reshape(tensor.dims)
        if tensor.dtype == "INT64":
            array = array.astype(np.int32)  # range-checked by the caller's dtype rule
        return array.astype(array.dtype.newbyteorder("="))


def _kind(value: object) -> str:
    if isinstance(value, VkScalar | VkList):
        return value.kind
    return type(value).__name__


class ArgReader:
    """One serialized op's arguments, read in order into a project op's slots."""

    def __init__(self, table: ValueTable, op: VkOp, index: int) -> None:
        self.table = table
        self.op = op
        self.where = f"op {index} {op.name} (node {op.node_id})"
        self._next = 0
        self.args: dict[str, Any] = {}
        self.outputs: dict[str, str] = {}

    def fail(self, what: str) -> Refusal:
        return Refusal(f"{self.where}: {what}")

    def _take(self, slot: str) -> tuple[int, object]:
        if self._next >= len(self.op.args):
            raise self.fail(
                f"{len(self.op.args)} arguments, too few for its schema (missing {slot})"
            )
        value_id = self.op.args[self._next]
        self._next += 1
        return value_id, self.table.vk.value(self.table.resolve(value_id))

    def peek_id(self) -> int:
        """The next argument's value id, unread."""
        return self.op.args[self._next] if self._next < len(self.op.args) else -1

    # ------------------------------------------------------------------ inputs

    def tensor(self, slot: str, *, widen_f16: bool = False) -> str:
        value_id, _ = self._take(slot)
        name = self.table.tensor(value_id, f"{self.where} {slot}", widen_f16=widen_f16)
        self.args[slot] = name
        return name

    def integer(self, slot: str) -> int:
        """An Int argument (a Bool reads as 0 or 1), passed to the project op's int slot."""
        value_id, value = self._take(slot)
        number = self._int_value(slot, value)
        self.args[slot] = self.table.literal(value_id, "int", number)
        return number

    def int_or_sym(self, slot: str) -> None:
        value_id, value = self._take(slot)
        if isinstance(value, VkScalar) and value.kind == "SymInt":
            self.args[slot] = self.table.symint(value_id)
        else:
            self.args[slot] = self.table.literal(value_id, "int", self._int_value(slot, value))

    def floating(self, slot: str, *, optional: bool = False) -> None:
        value_id, value = self._take(slot)
        if optional and isinstance(value, VkScalar) and value.kind == "Null":
            return
        if not isinstance(value, VkScalar) or value.kind not in ("Double", "Int"):
            raise self.fail(f"{slot} must be a Double, it is a {_kind(value)}")
        assert isinstance(value.value, int | float)
        self.args[slot] = self.table.literal(value_id, "float", float(value.value))

    def optional_tensor(self, slot: str) -> None:
        value = self.table.vk.value(self.table.resolve(self.peek_id()))
        if isinstance(value, VkScalar) and value.kind == "Null":
            self._take(slot)
            return
        self.tensor(slot)

    def size_list(self, slot: str) -> None:
        value_id, value = self._take(slot)
        if not isinstance(value, VkList) or value.kind not in ("ValueList", "IntList"):
            raise self.fail(f"{slot} must be a list of ints and SymInts, it is {_kind(value)}")
        names = []
        for i, item in enumerate(value.items):
            if value.kind == "IntList":
                names.append(self.table.extra_literal(f"v{value_id}_{i}", value_id, int(item)))
                continue
            member = self.table.vk.value(int(item))
            if isinstance(member, VkScalar) and member.kind == "SymInt":
                names.append(self.table.symint(int(item)))
            else:
                names.append(self.table.literal(int(item), "int", self._int_value(slot, member)))
        self.args[slot] = names

    def expect(self, slot: str, allowed: tuple[object, ...], why: str) -> None:
        """An argument the project op has no slot for, which must hold one of `allowed`
        (None: Null) for the conversion to compute what the model computes."""
        _, value = self._take(slot)
        got = value.value if isinstance(value, VkScalar) else value
        if got not in allowed:
            raise self.fail(f"{slot} is {_describe(value)}: {why}")

    def skip(self, slot: str) -> None:
        """An argument upstream's runtimes ignore too (sdpa_with_kv_cache's seq_len)."""
        self._take(slot)

    # ------------------------------------------------------------------ outputs

    def output(self, slot: str) -> None:
        value_id, _ = self._take(slot)
        self.outputs[slot] = self.table.tensor(value_id, f"{self.where} {slot}")

    def outputs_list(self, *slots: str) -> None:
        _, value = self._take("outputs")
        if not isinstance(value, VkList) or value.kind != "ValueList":
            raise self.fail(f"its outputs must be a ValueList, not {_kind(value)}")
        if len(value.items) != len(slots):
            raise self.fail(f"{len(value.items)} outputs, expected {len(slots)} ({slots})")
        for slot, item in zip(slots, value.items, strict=True):
            self.outputs[slot] = self.table.tensor(int(item), f"{self.where} {slot}")

    def sym_output(self, slot: str) -> None:
        value_id, value = self._take(slot)
        if not isinstance(value, VkScalar) or value.kind != "SymInt":
            raise self.fail(f"{slot} must be a SymInt, it is {_kind(value)}")
        self.outputs[slot] = self.table.symint(value_id)

    def done(self) -> None:
        if self._next != len(self.op.args):
            raise self.fail(f"{len(self.op.args)} arguments, more than its schema's {self._next}")

    def _int_value(self, slot: str, value: object) -> int:
        if isinstance(value, VkScalar) and value.kind in ("Int", "Bool"):
            assert isinstance(value.value, int)
            return int(value.value)
        raise self.fail(f"{slot} must be an Int, it is {_describe(value)}")


def _describe(value: object) -> str:
    if isinstance(value, VkScalar):
        return value.kind if value.value is None else f"{value.kind} {value.value!r}"
    return f"a {_kind(value)}"
