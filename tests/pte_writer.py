"""A tiny writer of `.pte` files for the importer's tests, with the `flatbuffers` Builder.

It writes the layout `harness/importer` reads (ExecuTorch cff6f4dd, executorch==1.5.1),
from the same facts, for what no exported model shows: custom shaders in the delegate,
another schema version, an argument the project op cannot take, constants in the
delegate's own bytes section. One method `forward` whose one `VulkanBackend` delegate
(inline) holds the whole graph; its inputs and outputs are the graph's.

    spec = VkSpec(values=[tensor([1, 4]), tensor([1, 4])], ops=[("aten.sigmoid.default", [0, 1])],
                  inputs=[0], outputs=[1])
    data = write_pte(spec)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import flatbuffers

# VkDataType and GraphTypes codes (backends/vulkan/serialization/schema.fbs).
FLOAT32, FLOAT64, INT32, UINT8 = 5, 6, 3, 1
_GRAPH_TYPES = {"null": 1, "int": 2, "double": 3, "bool": 4, "tensor": 5, "ints": 6, "values": 9}
_SYMINT = 11
_PREPEND = {
    "u8": "PrependUint8Slot",
    "i8": "PrependInt8Slot",
    "bool": "PrependBoolSlot",
    "i32": "PrependInt32Slot",
    "u32": "PrependUint32Slot",
    "i64": "PrependInt64Slot",
    "u64": "PrependUint64Slot",
    "f64": "PrependFloat64Slot",
}
_ELEMENT = {
    "u8": (1, "PrependUint8"),
    "i32": (4, "PrependInt32"),
    "u32": (4, "PrependUint32"),
    "i64": (8, "PrependInt64"),
}


def tensor(dims: list[int], dtype: int = FLOAT32, constant_id: int = -1) -> tuple[Any, ...]:
    return ("tensor", dims, dtype, constant_id)


@dataclass
class VkSpec:
    """A VkGraph: values (`tensor(...)`, ("int", v), ("double", v), ("bool", v), ("null",),
    ("symint",), ("values", [ids]), ("ints", [v])), ops (name, arg ids), inputs, outputs,
    constants (bytes in the delegate's own section) and a count of shader blobs."""

    values: list[tuple[Any, ...]]
    ops: list[tuple[str, list[int]]]
    inputs: list[int]
    outputs: list[int]
    constants: list[bytes] = field(default_factory=list)
    shaders: int = 0
    version: str = "0"


def _table(b: Any, fields: dict[int, tuple[str, Any]]) -> int:
    b.StartObject(max(fields) + 1 if fields else 0)
    for index, (kind, value) in fields.items():
        if kind == "offset":
            b.PrependUOffsetTRelativeSlot(index, value, 0)
        else:
            getattr(b, _PREPEND[kind])(index, value, 0)
    return int(b.EndObject())


def _vector(b: Any, kind: str, items: list[Any]) -> int:
    if kind == "offset":
        b.StartVector(4, len(items), 4)
        for item in reversed(items):
            b.PrependUOffsetTRelative(item)
    else:
        width, prepend = _ELEMENT[kind]
        b.StartVector(width, len(items), width)
        for item in reversed(items):
            getattr(b, prepend)(item)
    return int(b.EndVector())


def _value(b: Any, value: tuple[Any, ...]) -> int:
    kind = value[0]
    if kind == "tensor":
        _, dims, dtype, constant_id = value
        member = _table(
            b,
            {0: ("i8", dtype), 1: ("offset", _vector(b, "u32", dims)), 2: ("i32", constant_id)},
        )
        code = _GRAPH_TYPES["tensor"]
    elif kind == "symint":
        member, code = _table(b, {0: ("i32", 0)}), _SYMINT
    else:
        scalar = {"int": "i64", "double": "f64", "bool": "bool"}
        if kind in scalar:
            member = _table(b, {0: (scalar[kind], value[1])})
        elif kind == "null":
            member = _table(b, {})
        else:
            items = _vector(b, "i32" if kind == "values" else "i64", list(value[1]))
            member = _table(b, {0: ("offset", items)})
        code = _GRAPH_TYPES[kind]
    return _table(b, {0: ("u8", code), 1: ("offset", member)})


def vk_graph(spec: VkSpec) -> bytes:
    """The VK00 flatbuffer of `spec`."""
    b = flatbuffers.Builder(1024)
    b.ForceDefaults(True)
    ops = []
    for name, args in spec.ops:
        ops.append(
            _table(
                b,
                {
                    0: ("u32", len(ops)),
                    1: ("offset", b.CreateString(name)),
                    2: ("offset", _vector(b, "i32", args)),
                },
            )
        )
    values = [_value(b, v) for v in spec.values]
    offset = 0
    constants = []
    for data in spec.constants:
        constants.append(_table(b, {0: ("u64", offset), 1: ("u64", len(data))}))
        offset += -(-len(data) // 16) * 16
    shaders = [_table(b, {0: ("u64", 0), 1: ("u64", 0)}) for _ in range(spec.shaders)]
    root = _table(
        b,
        {
            0: ("offset", b.CreateString(spec.version)),
            1: ("offset", _vector(b, "offset", ops)),
            2: ("offset", _vector(b, "offset", values)),
            3: ("offset", _vector(b, "u32", spec.inputs)),
            4: ("offset", _vector(b, "u32", spec.outputs)),
            5: ("offset", _vector(b, "offset", constants)),
            6: ("offset", _vector(b, "offset", shaders)),
        },
    )
    b.Finish(root, file_identifier=b"VK00")
    return bytes(b.Output())


def _pad16(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 16)


def delegate_blob(spec: VkSpec) -> bytes:
    """The VH00 header, the VkGraph and the bytes section."""
    graph = vk_graph(spec)
    section = b"".join(_pad16(c) for c in spec.constants)
    graph_at = 32
    data_at = graph_at + len(_pad16(graph))
    header = b"\0\0\0\0VH00" + struct.pack(
        "<HIIIQ", 30, graph_at, len(graph), data_at, len(section)
    )
    return _pad16(header) + _pad16(graph) + section


def write_pte(spec: VkSpec, *, identifier: bytes = b"ET12") -> bytes:
    """A whole program: `forward` = one inline VulkanBackend delegate of `spec`."""
    b = flatbuffers.Builder(1024)
    b.ForceDefaults(True)
    evalues = []
    for value_id in [*spec.inputs, *spec.outputs]:
        _, dims, dtype, _ = spec.values[value_id]
        scalar = {FLOAT32: 6, FLOAT64: 7, INT32: 3, UINT8: 0}[dtype]
        sizes = _vector(b, "i32", dims)
        member = _table(b, {0: ("i8", scalar), 2: ("offset", sizes)})
        evalues.append(_table(b, {0: ("u8", 5), 1: ("offset", member)}))
    n_in = len(spec.inputs)
    call = _table(b, {0: ("i32", 0), 1: ("offset", _vector(b, "i32", list(range(len(evalues)))))})
    instruction = _table(b, {0: ("u8", 2), 1: ("offset", call)})
    chain = _table(b, {2: ("offset", _vector(b, "offset", [instruction]))})
    processed = _table(b, {0: ("i8", 0), 1: ("u32", 0)})
    delegate = _table(b, {0: ("offset", b.CreateString("VulkanBackend")), 1: ("offset", processed)})
    plan = _table(
        b,
        {
            0: ("offset", b.CreateString("forward")),
            2: ("offset", _vector(b, "offset", evalues)),
            3: ("offset", _vector(b, "i32", list(range(n_in)))),
            4: ("offset", _vector(b, "i32", list(range(n_in, len(evalues))))),
            5: ("offset", _vector(b, "offset", [chain])),
            7: ("offset", _vector(b, "offset", [delegate])),
        },
    )
    inline = _table(b, {0: ("offset", _vector(b, "u8", list(delegate_blob(spec))))})
    root = _table(
        b,
        {
            0: ("u32", 0),
            1: ("offset", _vector(b, "offset", [plan])),
            3: ("offset", _vector(b, "offset", [inline])),
        },
    )
    b.Finish(root, file_identifier=identifier)
    flat = bytes(b.Output())
    # The extended header goes after the root offset and identifier; everything behind it
    # moves 32 bytes on, so the root offset (the one absolute offset) does too.
    header = b"eh00" + struct.pack("<IQQQ", 32, len(flat) + 32, 0, 0)
    (root_offset,) = struct.unpack_from("<I", flat, 0)
    return struct.pack("<I", root_offset + 32) + flat[4:8] + header + flat[8:]
