"""An ExecuTorch program file (`.pte`) as plain data: its methods, delegates and named data.

The layout read here is ExecuTorch's at commit cff6f4dd (2026-08-22), which the PyPI wheel
`executorch==1.5.1` (git 3b606839) writes (`schema/program.fbs`, `schema/scalar_type.fbs`,
`exir/_serialize/_program.py`):

- bytes 0..: the `Program` flatbuffer, file identifier `ET12` (the schema's version; any
  other is refused by name), root table fields in schema order;
- bytes 8..40: the extended header, magic `eh00`, then u32 header length (>= 24), u64
  program size (the flatbuffer's bytes), u64 segment base offset (where the segments start,
  0 when there are none) and, when the length says so, u64 segment data size;
- from the segment base: `Program.segments[i]`, each (offset from the base, size), holding
  delegate blobs stored out of line and the named data (`Program.named_data`: key ->
  segment index).

Only what the importer needs is decoded; everything is bounds-checked (`flatbuf.FlatTable`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from harness.importer.flatbuf import (
    INT8,
    INT32,
    INT64,
    UINT8,
    UINT32,
    UINT64,
    DamagedBuffer,
    FlatTable,
)

PROGRAM_IDENTIFIER = b"ET12"
# `Program.version` as ExecuTorch's emitter writes it (exir/version.py).
PROGRAM_VERSION = 0
EXTENDED_HEADER_MAGIC = b"eh00"
_EXTENDED_HEADER_AT = 8
_EXTENDED_HEADER_MIN_LENGTH = 24  # magic, length, program size, segment base

# Field indices of the tables read (their order in schema/program.fbs; a union is two).
_PROGRAM_VERSION, _PLANS, _INLINE_DATA, _SEGMENTS, _NAMED_DATA = 0, 1, 3, 4, 7
_PLAN_NAME, _PLAN_VALUES, _PLAN_INPUTS, _PLAN_OUTPUTS, _PLAN_CHAINS = 0, 2, 3, 4, 5
_PLAN_OPERATORS, _PLAN_DELEGATES = 6, 7
_CHAIN_INSTRUCTIONS = 2
_TENSOR_SCALAR_TYPE, _TENSOR_SIZES, _TENSOR_DYNAMISM, _TENSOR_EXTRA = 0, 2, 8, 9
_EXTRA_LOCATION = 2
# EValue's union `val` (KernelTypes) and Instruction's `instr_args` (InstructionArguments).
EVALUE_KINDS = (
    "None",
    "Null",
    "Int",
    "Bool",
    "Double",
    "Tensor",
    "String",
    "IntList",
    "DoubleList",
    "BoolList",
    "TensorList",
    "OptionalTensorList",
)
INSTRUCTION_KINDS = ("None", "KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall", "FreeCall")
# executorch_flatbuffer.ScalarType codes the importer names (schema/scalar_type.fbs).
SCALAR_TYPES = {
    0: "BYTE",
    1: "CHAR",
    3: "INT",
    4: "LONG",
    5: "HALF",
    6: "FLOAT",
    7: "DOUBLE",
    11: "BOOL",
}
# TensorShapeDynamism and TensorDataLocation.EXTERNAL.
SHAPE_DYNAMISM = ("STATIC", "DYNAMIC_BOUND", "DYNAMIC_UNBOUND")
_EXTERNAL = 1
# DataLocation of a delegate's processed blob.
_INLINE, _SEGMENT = 0, 1


class UnsupportedProgram(ValueError):
    """A well-formed file of a layout this reader does not read (another schema version)."""


@dataclass(frozen=True)
class ProgramTensor:
    """A tensor EValue of a method: what the CPU side of ExecuTorch sees of it."""

    scalar_type: int  # executorch_flatbuffer.ScalarType
    sizes: tuple[int, ...]  # the max bounds for a dynamic tensor
    dynamism: str  # SHAPE_DYNAMISM
    external: bool  # its data lives in an external file (.ptd)


@dataclass(frozen=True)
class EValue:
    """One value of a method: its kind, and what the importer reads of it."""

    kind: str  # EVALUE_KINDS
    tensor: ProgramTensor | None = None
    int_value: int | None = None


@dataclass(frozen=True)
class Instruction:
    """One instruction of a method's chain: a kernel (a CPU op) or a delegate call."""

    kind: str  # INSTRUCTION_KINDS
    operator: str | None = None  # a KernelCall's `name.overload`
    delegate_index: int | None = None


@dataclass(frozen=True)
class Delegate:
    """A backend delegate of a method: its backend id and its processed blob."""

    backend_id: str
    blob: bytes


@dataclass(frozen=True)
class Method:
    """One execution plan (a method such as `forward`)."""

    name: str
    values: tuple[EValue, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    instructions: tuple[Instruction, ...]
    delegates: tuple[Delegate, ...]

    @property
    def constant_int(self) -> int | None:
        """The Int a metadata method returns (`get_max_context_len`), or None when the
        method computes anything."""
        if self.instructions or len(self.outputs) != 1:
            return None
        value = self.values[self.outputs[0]]
        return value.int_value if value.kind == "Int" else None


@dataclass(frozen=True)
class Program:
    """A whole `.pte`: its methods and its named data (key -> bytes)."""

    methods: tuple[Method, ...]
    named_data: dict[str, bytes] = field(default_factory=dict)


def read_program(data: bytes) -> Program:
    """Decode a `.pte` file's bytes.

    Raises:
        DamagedBuffer: truncated, a bad identifier or header, offsets outside the file.
        UnsupportedProgram: another program schema version.
    """
    if len(data) >= 8 and data[4:8] != PROGRAM_IDENTIFIER and data[4:6] == b"ET":
        raise UnsupportedProgram(
            f"program schema {data[4:8].decode(errors='replace')!r}: this importer reads "
            f"{PROGRAM_IDENTIFIER.decode()} (ExecuTorch cff6f4dd, executorch==1.5.1)"
        )
    root = FlatTable.root(data, PROGRAM_IDENTIFIER, "Program")
    segment_base = _segment_base(data)
    version = root.integer(_PROGRAM_VERSION, UINT32)
    if version != PROGRAM_VERSION:
        raise UnsupportedProgram(
            f"Program.version {version}: this importer reads version {PROGRAM_VERSION} "
            "(ExecuTorch cff6f4dd, executorch==1.5.1)"
        )
    segments = [_segment(data, segment_base, t) for t in root.tables(_SEGMENTS)]
    inline = [bytes(t.scalars(0, UINT8)) for t in root.tables(_INLINE_DATA)]
    named = {}
    for entry in root.tables(_NAMED_DATA):
        key = entry.string(0) or ""
        named[key] = _indexed(segments, entry.integer(1, UINT32), f"{entry.where}.segment_index")
    methods = tuple(_method(plan, inline, segments) for plan in root.tables(_PLANS))
    return Program(methods, named)


def _segment_base(data: bytes) -> int:
    """The extended header's segment base offset (0: the file has no segments)."""
    header = data[_EXTENDED_HEADER_AT : _EXTENDED_HEADER_AT + 32]
    if len(header) < _EXTENDED_HEADER_MIN_LENGTH or header[:4] != EXTENDED_HEADER_MAGIC:
        raise DamagedBuffer(
            f"extended header: expected magic {EXTENDED_HEADER_MAGIC.decode()!r} at byte "
            f"{_EXTENDED_HEADER_AT}, found {bytes(header[:4])!r}"
        )
    length, program_size, segment_base = struct.unpack_from("<IQQ", header, 4)
    if length < _EXTENDED_HEADER_MIN_LENGTH:
        raise DamagedBuffer(f"extended header: length {length} < {_EXTENDED_HEADER_MIN_LENGTH}")
    if program_size > len(data):
        raise DamagedBuffer(
            f"extended header: program size {program_size} > the file's {len(data)} bytes"
        )
    if segment_base and not program_size <= segment_base <= len(data):
        raise DamagedBuffer(
            f"extended header: segment base {segment_base} outside [{program_size}, {len(data)}]"
        )
    return int(segment_base)


def _segment(data: bytes, base: int, table: FlatTable) -> bytes:
    offset, size = table.integer(0, UINT64), table.integer(1, UINT64)
    start = base + offset
    if not base or start + size > len(data):
        raise DamagedBuffer(
            f"{table.where}: segment bytes [{start}, {start + size}) lie outside the "
            f"{len(data)}-byte file"
        )
    return data[start : start + size]


def _indexed(items: list[bytes], index: int, where: str) -> bytes:
    if not 0 <= index < len(items):
        raise DamagedBuffer(f"{where}: index {index} outside the {len(items)} entries")
    return items[index]


def _method(plan: FlatTable, inline: list[bytes], segments: list[bytes]) -> Method:
    operators = _operator_names(plan)
    instructions: list[Instruction] = []
    for chain in plan.tables(_PLAN_CHAINS):
        instructions += [_instruction(t, operators) for t in chain.tables(_CHAIN_INSTRUCTIONS)]
    return Method(
        name=plan.string(_PLAN_NAME) or "",
        values=tuple(_evalue(t) for t in plan.tables(_PLAN_VALUES)),
        inputs=plan.ints(_PLAN_INPUTS, INT32),
        outputs=plan.ints(_PLAN_OUTPUTS, INT32),
        instructions=tuple(instructions),
        delegates=tuple(_delegate(t, inline, segments) for t in plan.tables(_PLAN_DELEGATES)),
    )


def _operator_names(plan: FlatTable) -> list[str]:
    names = []
    for op in plan.tables(_PLAN_OPERATORS):
        name, overload = op.string(0) or "", op.string(1) or ""
        names.append(f"{name}.{overload}" if overload else name)
    return names


def _instruction(table: FlatTable, operators: list[str]) -> Instruction:
    code, args = table.union(0)
    kind = INSTRUCTION_KINDS[code] if code < len(INSTRUCTION_KINDS) else f"<type {code}>"
    if kind == "KernelCall" and args is not None:
        index = args.integer(0, INT32)
        if not 0 <= index < len(operators):
            raise DamagedBuffer(
                f"{args.where}.op_index: {index} outside the {len(operators)} operators"
            )
        return Instruction(kind, operator=operators[index])
    if kind == "DelegateCall" and args is not None:
        return Instruction(kind, delegate_index=args.integer(0, INT32))
    return Instruction(kind)


def _evalue(table: FlatTable) -> EValue:
    code, value = table.union(0)
    kind = EVALUE_KINDS[code] if code < len(EVALUE_KINDS) else f"<type {code}>"
    if kind == "Tensor" and value is not None:
        extra = value.table(_TENSOR_EXTRA)
        dynamism = value.integer(_TENSOR_DYNAMISM, INT8)
        return EValue(
            kind,
            tensor=ProgramTensor(
                scalar_type=value.integer(_TENSOR_SCALAR_TYPE, INT8),
                sizes=value.ints(_TENSOR_SIZES, INT32),
                dynamism=SHAPE_DYNAMISM[dynamism] if 0 <= dynamism < 3 else f"<{dynamism}>",
                external=extra is not None and extra.integer(_EXTRA_LOCATION, INT8) == _EXTERNAL,
            ),
        )
    if kind == "Int" and value is not None:
        return EValue(kind, int_value=value.integer(0, INT64))
    return EValue(kind)


def _delegate(table: FlatTable, inline: list[bytes], segments: list[bytes]) -> Delegate:
    backend_id = table.string(0) or ""
    processed = table.table(1)
    if processed is None:
        raise DamagedBuffer(f"{table.where}: delegate {backend_id!r} has no processed data")
    location, index = processed.integer(0, INT8), processed.integer(1, UINT32)
    if location == _INLINE:
        blob = _indexed(inline, index, f"{processed.where}.index (inline data)")
    elif location == _SEGMENT:
        blob = _indexed(segments, index, f"{processed.where}.index (segment)")
    else:
        raise DamagedBuffer(f"{processed.where}.location: {location} is neither INLINE nor SEGMENT")
    return Delegate(backend_id, blob)
