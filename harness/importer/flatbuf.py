"""Checked, typed access to the tables of a flatbuffer, through the `flatbuffers` package.

The `flatbuffers` runtime (`flatbuffers.table.Table`) finds a table's fields through its
vtable and decodes scalars and vectors, but trusts every offset: on a damaged file it reads
past the end (a short, silent string), wraps around, or fails with whatever `struct` says.
`FlatTable` checks each position against the buffer before the library reads it and raises
`DamagedBuffer` naming the table, the field and what is out of place, so that a truncated or
corrupted `.pte` is one line, never a traceback or a wrong value.

A table's fields are addressed by their index in the schema (the order they are declared
in, counting a union field as two: its type, then its value), as the schema compiler
numbers them: field i's vtable entry is at byte 4 + 2 i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flatbuffers import number_types
from flatbuffers.table import Table

# A uoffset (a forward offset to a table, vector or string) and a vector's length: 4 bytes.
_UOFFSET = number_types.UOffsetTFlags
_SOFFSET = number_types.SOffsetTFlags
_VOFFSET = number_types.VOffsetTFlags


class DamagedBuffer(ValueError):
    """A flatbuffer whose offsets, lengths or identifier are not what the schema needs."""


@dataclass(frozen=True)
class Scalar:
    """A scalar field type: its flatbuffers flags, and how it reads in messages."""

    name: str
    flags: type

    @property
    def width(self) -> int:
        return int(self.flags.bytewidth)  # type: ignore[attr-defined]  # untyped flags class


BOOL = Scalar("bool", number_types.BoolFlags)
INT8 = Scalar("byte", number_types.Int8Flags)
UINT8 = Scalar("ubyte", number_types.Uint8Flags)
INT32 = Scalar("int", number_types.Int32Flags)
UINT32 = Scalar("uint", number_types.Uint32Flags)
INT64 = Scalar("long", number_types.Int64Flags)
UINT64 = Scalar("ulong", number_types.Uint64Flags)
FLOAT64 = Scalar("double", number_types.Float64Flags)

_NUMPY = {
    "bool": np.dtype(np.bool_),
    "byte": np.dtype("<i1"),
    "ubyte": np.dtype("<u1"),
    "int": np.dtype("<i4"),
    "uint": np.dtype("<u4"),
    "long": np.dtype("<i8"),
    "ulong": np.dtype("<u8"),
    "double": np.dtype("<f8"),
}


class FlatTable:
    """One table of a flatbuffer: its fields by schema index, every read bounds-checked.

    `where` names the table in messages (`Program.execution_plan[0].delegates[1]`).
    """

    __slots__ = ("_size", "_table", "where")

    def __init__(self, buf: bytes, pos: int, where: str) -> None:
        self.where = where
        self._size = len(buf)
        _need(pos, 4, self._size, where, "table")
        table = Table(buf, pos)
        vtable = pos - int(table.Get(_SOFFSET, pos))
        _need(vtable, 4, self._size, where, "vtable")
        vtable_size = int(table.Get(_VOFFSET, vtable))
        object_size = int(table.Get(_VOFFSET, vtable + 2))
        if vtable_size < 4 or vtable_size % 2:
            raise DamagedBuffer(f"{where}: vtable size {vtable_size} is not an even size >= 4")
        _need(vtable, vtable_size, self._size, where, "vtable")
        _need(pos, object_size, self._size, where, "table")
        self._table = table

    @classmethod
    def root(cls, buf: bytes, identifier: bytes, what: str) -> FlatTable:
        """The root table of `buf`, whose file identifier (bytes 4..8) must be `identifier`."""
        if len(buf) < 8:
            raise DamagedBuffer(f"{what}: {len(buf)} bytes, too short for a flatbuffer")
        found = bytes(buf[4:8])
        if found != identifier:
            raise DamagedBuffer(
                f"{what}: file identifier {found!r}, expected {identifier.decode()!r}"
            )
        return cls(buf, int(Table(buf, 0).Get(_UOFFSET, 0)), what)

    # ------------------------------------------------------------------ fields

    def _field(self, index: int) -> int:
        """The absolute position of field `index`, or 0 when the table leaves it out."""
        offset = int(self._table.Offset(4 + 2 * index))
        return self._table.Pos + offset if offset else 0

    def has(self, index: int) -> bool:
        """Whether field `index` is present (not left at its default)."""
        return self._field(index) != 0

    def scalar(self, index: int, kind: Scalar, default: int | float | bool = 0) -> int | float:
        """Scalar field `index` (its schema default when absent)."""
        pos = self._field(index)
        if not pos:
            return default
        _need(pos, kind.width, self._size, self._name(index), kind.name)
        value: int | float = self._table.Get(kind.flags, pos)
        return value

    def integer(self, index: int, kind: Scalar, default: int = 0) -> int:
        """Integer (or bool, enum) field `index`."""
        return int(self.scalar(index, kind, default))

    def string(self, index: int) -> str | None:
        """String field `index` (UTF-8), or None when absent."""
        start, length = self._vector(index, 1)
        if start is None:
            return None
        raw = bytes(self._table.Bytes[start : start + length])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DamagedBuffer(f"{self._name(index)}: string is not UTF-8") from None

    def table(self, index: int) -> FlatTable | None:
        """Table field `index`, or None when absent."""
        pos = self._field(index)
        if not pos:
            return None
        return FlatTable(self._table.Bytes, self._follow(pos, self._name(index)), self._name(index))

    def tables(self, index: int) -> list[FlatTable]:
        """Vector-of-tables field `index` (empty when absent)."""
        start, length = self._vector(index, 4)
        if start is None:
            return []
        name = self._name(index)
        return [
            FlatTable(
                self._table.Bytes, self._follow(start + 4 * i, f"{name}[{i}]"), f"{name}[{i}]"
            )
            for i in range(length)
        ]

    def scalars(self, index: int, kind: Scalar) -> np.ndarray:
        """Vector-of-scalars field `index` as a read-only numpy array (empty when absent)."""
        start, length = self._vector(index, kind.width)
        if start is None:
            return np.zeros(0, _NUMPY[kind.name])
        return np.frombuffer(self._table.Bytes, _NUMPY[kind.name], length, start)

    def ints(self, index: int, kind: Scalar) -> tuple[int, ...]:
        """Vector-of-integers field `index` as Python ints."""
        return tuple(int(v) for v in self.scalars(index, kind))

    def union(self, index: int) -> tuple[int, FlatTable | None]:
        """Union field `index` (its type at `index`, its value at `index + 1`): the member's
        type code (0: none) and table."""
        code = self.integer(index, UINT8)
        if code == 0:
            return 0, None
        value = self.table(index + 1)
        if value is None:
            raise DamagedBuffer(f"{self._name(index)}: union of type {code} without a value")
        return code, value

    # ------------------------------------------------------------------ helpers

    def _name(self, index: int) -> str:
        return f"{self.where} field {index}"

    def _follow(self, pos: int, name: str) -> int:
        """The target of the uoffset stored at `pos`."""
        _need(pos, 4, self._size, name, "offset")
        target = pos + int(self._table.Get(_UOFFSET, pos))
        _need(target, 4, self._size, name, "offset target")
        return target

    def _vector(self, index: int, width: int) -> tuple[int | None, int]:
        """(first element's position, length) of vector or string field `index`, checked
        to lie inside the buffer; (None, 0) when absent."""
        pos = self._field(index)
        if not pos:
            return None, 0
        name = self._name(index)
        target = self._follow(pos, name)
        length = int(self._table.Get(_UOFFSET, target))
        _need(target + 4, length * width, self._size, name, f"vector of {length}")
        return target + 4, length


def _need(pos: int, size: int, total: int, where: str, what: str) -> None:
    """Refuse a region [pos, pos + size) that is not inside a buffer of `total` bytes."""
    if pos < 0 or size < 0 or pos + size > total:
        raise DamagedBuffer(
            f"{where}: {what} at bytes [{pos}, {pos + size}) lies outside the {total}-byte buffer"
        )
