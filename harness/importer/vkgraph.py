"""The Vulkan delegate's blob: its `VH00` header and the `VK00` `VkGraph` flatbuffer, as data.

The layout read here is ExecuTorch's at commit cff6f4dd (`executorch==1.5.1`, git 3b606839):
`backends/vulkan/serialization/schema.fbs` (namespace `vkgraph`, file identifier `VK00`,
`VkGraph.version` "0") and the header of `runtime/VulkanDelegateHeader.cpp`. The blob is

- bytes 0..30, the header: 4 bytes of padding, magic `VH00` (bytes 4..8, where a flatbuffer
  keeps its identifier), u16 header length (30), u32 flatbuffer offset, u32 flatbuffer
  size, u32 bytes offset, u64 bytes size; each region 16-byte aligned after the header;
- the `VkGraph` flatbuffer at the flatbuffer offset;
- the bytes section at the bytes offset: constants whose `VkBytes.offset` points into it.
  In 1.5.1 every non-empty constant is instead named data: `offset` is UINT64_MAX and
  `named_key` is the sha256 (hex) of its bytes, resolved through `Program.named_data`.

Everything is bounds-checked; values are decoded into small frozen dataclasses.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from harness.importer.flatbuf import (
    BOOL,
    FLOAT64,
    INT8,
    INT32,
    INT64,
    UINT8,
    UINT32,
    UINT64,
    DamagedBuffer,
    FlatTable,
)
from harness.importer.program import UnsupportedProgram

HEADER_MAGIC = b"VH00"
HEADER_LENGTH = 30
GRAPH_IDENTIFIER = b"VK00"
GRAPH_VERSION = "0"
# A `VkBytes.offset` meaning "named data, found by `named_key`".
NAMED_DATA_OFFSET = 2**64 - 1

# VkDataType codes and their names in the schema.
VK_DTYPES = {
    0: "BOOL",
    1: "UINT8",
    2: "INT8",
    3: "INT32",
    4: "FLOAT16",
    5: "FLOAT32",
    6: "FLOAT64",
    7: "INT64",
    127: "UNSET",
}
VK_STORAGE = {0: "BUFFER", 1: "TEXTURE_3D", 2: "TEXTURE_2D", 255: "DEFAULT_STORAGE"}
# GraphTypes, the union of a VkValue, in schema order (0: none).
_VALUE_TYPES = (
    "None",
    "Null",
    "Int",
    "Double",
    "Bool",
    "VkTensor",
    "IntList",
    "DoubleList",
    "BoolList",
    "ValueList",
    "String",
    "SymInt",
)
# Field indices (schema order).
_VERSION, _CHAIN, _VALUES, _INPUTS, _OUTPUTS, _CONSTANTS, _SHADERS = 0, 1, 2, 3, 4, 5, 6
_T_DTYPE, _T_DIMS, _T_CONSTANT, _T_MEM_OBJ, _T_STORAGE, _T_STAGING = 0, 1, 2, 3, 4, 6
_DEFAULT_STORAGE, _UNSET = 255, 127


@dataclass(frozen=True)
class VkTensor:
    """A tensor value: dims are the max bounds; `constant_id` >= 0 for a constant."""

    dtype: str  # VK_DTYPES
    dims: tuple[int, ...]
    constant_id: int
    mem_obj_id: int
    storage: str  # VK_STORAGE
    staging_dtype: str  # VK_DTYPES; UNSET when not given


@dataclass(frozen=True)
class VkScalar:
    """A Null, Int, Double, Bool, String or SymInt value (a SymInt serializes as 0)."""

    kind: str
    value: int | float | bool | str | None = None


@dataclass(frozen=True)
class VkList:
    """An IntList, DoubleList, BoolList (literal items) or ValueList (value ids)."""

    kind: str
    items: tuple[int | float | bool, ...]


VkValue = VkTensor | VkScalar | VkList


@dataclass(frozen=True)
class VkOp:
    """One `OperatorCall`: its serialized name, debug node id and argument value ids
    (positional, in the op's schema order, the output last)."""

    node_id: int
    name: str
    args: tuple[int, ...]


@dataclass(frozen=True)
class VkConstant:
    """A `VkBytes`: bytes in the delegate's own section, or named data (`named_key`)."""

    offset: int
    length: int
    named_key: str | None

    @property
    def is_named(self) -> bool:
        return self.offset == NAMED_DATA_OFFSET


@dataclass(frozen=True)
class VkGraph:
    """A decoded delegate: the graph, and its bytes section for constants stored inline."""

    version: str
    ops: tuple[VkOp, ...]
    values: tuple[VkValue, ...]
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    constants: tuple[VkConstant, ...]
    shader_count: int
    data: bytes  # the header's bytes section

    def tensor(self, value_id: int) -> VkTensor:
        """Value `value_id`, which must be a tensor (DamagedBuffer otherwise)."""
        value = self.value(value_id)
        if not isinstance(value, VkTensor):
            raise DamagedBuffer(f"VkGraph.values[{value_id}]: expected a VkTensor, got {value}")
        return value

    def value(self, value_id: int) -> VkValue:
        """Value `value_id` (DamagedBuffer for an id outside the values)."""
        if not 0 <= value_id < len(self.values):
            raise DamagedBuffer(f"value id {value_id} outside the {len(self.values)} values")
        return self.values[value_id]


def read_delegate(blob: bytes) -> VkGraph:
    """Decode a `VulkanBackend` delegate's processed blob.

    Raises:
        DamagedBuffer: a bad header, identifier or offsets.
        UnsupportedProgram: another VkGraph schema version.
    """
    graph_at, graph_size, data_at, data_size = _header(blob)
    buf = blob[graph_at : graph_at + graph_size]
    root = FlatTable.root(buf, GRAPH_IDENTIFIER, "VkGraph")
    version = root.string(_VERSION)
    if version != GRAPH_VERSION:
        raise UnsupportedProgram(
            f"VkGraph version {version!r}: this importer reads version {GRAPH_VERSION!r} "
            "(ExecuTorch cff6f4dd, executorch==1.5.1)"
        )
    return VkGraph(
        version=version,
        ops=tuple(
            VkOp(t.integer(0, UINT32), t.string(1) or "", t.ints(2, INT32))
            for t in root.tables(_CHAIN)
        ),
        values=tuple(_value(t) for t in root.tables(_VALUES)),
        input_ids=root.ints(_INPUTS, UINT32),
        output_ids=root.ints(_OUTPUTS, UINT32),
        constants=tuple(
            VkConstant(t.integer(0, UINT64), t.integer(1, UINT64), t.string(2))
            for t in root.tables(_CONSTANTS)
        ),
        shader_count=len(root.tables(_SHADERS)),
        data=blob[data_at : data_at + data_size],
    )


def _header(blob: bytes) -> tuple[int, int, int, int]:
    """(flatbuffer offset, flatbuffer size, bytes offset, bytes size) of a VH00 header,
    checked as upstream's `VulkanDelegateHeader::parse` checks them."""
    if len(blob) < HEADER_LENGTH or blob[4:8] != HEADER_MAGIC:
        raise DamagedBuffer(
            f"Vulkan delegate header: expected magic {HEADER_MAGIC.decode()!r} at byte 4 of "
            f"the {len(blob)}-byte blob, found {bytes(blob[4:8])!r}"
        )
    length, graph_at, graph_size, data_at, data_size = struct.unpack_from("<HIIIQ", blob, 8)
    if length != HEADER_LENGTH:
        raise UnsupportedProgram(
            f"Vulkan delegate header length {length}: this importer reads the "
            f"{HEADER_LENGTH}-byte VH00 header (ExecuTorch cff6f4dd, executorch==1.5.1)"
        )
    if (
        graph_at < length
        or graph_size == 0
        or data_at < graph_at + graph_size
        or graph_at + graph_size > len(blob)
        or data_at + data_size > len(blob)
    ):
        raise DamagedBuffer(
            f"Vulkan delegate header: flatbuffer [{graph_at}, +{graph_size}) and bytes "
            f"[{data_at}, +{data_size}) do not fit in order in the {len(blob)}-byte blob"
        )
    return graph_at, graph_size, data_at, data_size


def _value(table: FlatTable) -> VkValue:
    code, member = table.union(0)
    kind = _VALUE_TYPES[code] if code < len(_VALUE_TYPES) else f"<type {code}>"
    if member is None or kind == "Null":
        return VkScalar("Null")
    if kind == "VkTensor":
        return VkTensor(
            dtype=_dtype(member.integer(_T_DTYPE, INT8), member.where),
            dims=member.ints(_T_DIMS, UINT32),
            constant_id=member.integer(_T_CONSTANT, INT32),
            mem_obj_id=member.integer(_T_MEM_OBJ, INT32),
            storage=VK_STORAGE.get(
                member.integer(_T_STORAGE, UINT8, _DEFAULT_STORAGE), "<unknown storage>"
            ),
            staging_dtype=_dtype(member.integer(_T_STAGING, INT8, _UNSET), member.where),
        )
    scalars = {"Int": INT64, "Double": FLOAT64, "Bool": BOOL, "SymInt": INT32}
    if kind in scalars:
        raw = member.scalar(0, scalars[kind])
        return VkScalar(kind, bool(raw) if kind == "Bool" else raw)
    if kind == "String":
        return VkScalar(kind, member.string(0))
    lists = {"IntList": INT64, "DoubleList": FLOAT64, "BoolList": BOOL, "ValueList": INT32}
    if kind in lists:
        return VkList(kind, tuple(member.scalars(0, lists[kind]).tolist()))
    raise DamagedBuffer(f"{table.where}: unknown value type {code}")


def _dtype(code: int, where: str) -> str:
    if code not in VK_DTYPES:
        raise DamagedBuffer(f"{where}: unknown VkDataType {code}")
    return VK_DTYPES[code]
