"""The in-memory form of a serialized graph, and its JSON + .npz encoding.

A graph file is a JSON document (format ``vulkan-parity-graph``, version 2; see
docs/graph-format.md) plus an optional ``.npz`` archive holding the constant tensors. Both
backends load it; the harness writes it. Everything here is plain data: loading checks that
the document is well formed and self-consistent (names resolve, kinds match the op
signatures, constants match their declared dtype and dims, ops are in topological order) and
says exactly where it is not. Whether an op accepts its shapes is the business of the
backends, which reject such graphs with `GraphBuildError`.
"""

from __future__ import annotations

import functools
import json
import math
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graph_format.errors import GraphFormatError
from graph_format.signatures import SIGNATURES, ArgSlot, OpSignature

FORMAT_NAME = "vulkan-parity-graph"
FORMAT_VERSION = 2
# Versions this reader understands: 1 is version 2 without float16 (a version 1 file that
# declares a float16 tensor is refused: no writer of version 1 could have made it).
READABLE_VERSIONS = (1, 2)

# Tensors have 1 to MAX_RANK dims: every LLM tensor here fits ([B, S, H, D]), and both runtimes
# describe live sizes in 4-element vectors (WebGPU params, Vulkan metadata UBOs).
MAX_RANK = 4

# Element types a tensor may have, with their numpy spelling. int32 tensors accept int64
# host data (narrowed, range-checked) as upstream ExecuTorch does for token ids. float16
# (IEEE binary16, version 2 on) is for activations, KV caches and float constants.
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
}
# The float element types, and the first version that has each.
FLOAT_DTYPES = ("float32", "float16")
_FIRST_VERSION = {"float16": 2}


@dataclass(frozen=True)
class TensorValue:
    """A tensor allocated at its maximum dims; its live dims change at run time.

    `constant` names an array in the constants archive (weights); `state` marks a persistent
    tensor that ops update in place across executes (a KV cache), initialized from
    `constant` when given and to zeros otherwise. Neither kind is ever resized.
    """

    name: str
    dtype: str
    dims: tuple[int, ...]
    constant: str | None = None
    state: bool = False

    @property
    def is_float(self) -> bool:
        """Whether its elements are floats (`FLOAT_DTYPES`)."""
        return self.dtype in FLOAT_DTYPES

    @property
    def numel(self) -> int:
        """Element count at the maximum dims."""
        return math.prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes at the maximum dims."""
        return self.numel * DTYPES[self.dtype].itemsize


@dataclass(frozen=True)
class SymIntValue:
    """A symbolic int: a graph input (such as `input_pos`) or the output of `sym_size`."""

    name: str


@dataclass(frozen=True)
class ScalarValue:
    """A literal int or float argument."""

    name: str
    kind: str  # "int" | "float"
    value: int | float


Value = TensorValue | SymIntValue | ScalarValue

# An op argument: a value name, a list of value names (size lists) or None (absent optional).
Arg = str | tuple[str, ...] | None


@dataclass(frozen=True)
class OpNode:
    """One op of the graph: its unique name, its type and its named arguments and outputs."""

    name: str
    op: str
    args: Mapping[str, Arg]
    outputs: Mapping[str, str]

    def arg(self, slot: str) -> str:
        """The value name passed in single-value argument `slot` (a tensor, int, float or
        int-or-SymInt slot; for an optional one, use `optional_arg`).

        Raises:
            KeyError: the op has no argument `slot`.
            TypeError: `slot` holds a size list, or nothing (an absent optional argument).
        """
        arg = self._slot(slot)
        if not isinstance(arg, str):
            raise TypeError(
                f"op {self.name!r} ({self.op}): argument {slot!r} must name one value, "
                f"it holds {_describe(arg)}"
            )
        return arg

    def optional_arg(self, slot: str) -> str | None:
        """The value name passed in optional argument `slot`, or None when it was left out.

        Raises:
            KeyError: the op has no argument `slot`.
            TypeError: `slot` holds a size list.
        """
        arg = self._slot(slot)
        if isinstance(arg, tuple):
            raise TypeError(
                f"op {self.name!r} ({self.op}): argument {slot!r} must name one value or "
                f"nothing, it holds {_describe(arg)}"
            )
        return arg

    def size_list(self, slot: str) -> tuple[str, ...]:
        """The value names (ints and SymInts) passed in size-list argument `slot`.

        Raises:
            KeyError: the op has no argument `slot`.
            TypeError: `slot` does not hold a size list.
        """
        arg = self._slot(slot)
        if not isinstance(arg, tuple):
            raise TypeError(
                f"op {self.name!r} ({self.op}): argument {slot!r} must be a size list, "
                f"it holds {_describe(arg)}"
            )
        return arg

    def _slot(self, slot: str) -> Arg:
        if slot not in self.args:
            raise KeyError(
                f"op {self.name!r} ({self.op}) has no argument {slot!r}; it takes {list(self.args)}"
            )
        return self.args[slot]

    def tensor_args(self, graph: Graph) -> Iterator[tuple[str, TensorValue]]:
        """(slot, tensor) for every argument that names a tensor."""
        for slot, arg in self.args.items():
            if isinstance(arg, str) and isinstance(graph.values[arg], TensorValue):
                yield slot, graph.tensor(arg)


def _describe(arg: Arg) -> str:
    """How an argument reads in an error message."""
    if arg is None:
        return "nothing (an absent optional argument)"
    if isinstance(arg, tuple):
        return f"the size list {list(arg)}"
    return f"the value {arg!r}"


@dataclass(frozen=True)
class Graph:
    """A complete, validated graph. Build one with `Graph.from_json` or `harness.gen.builder`."""

    values: Mapping[str, Value]
    ops: tuple[OpNode, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)

    def tensor(self, name: str) -> TensorValue:
        """The tensor value called `name` (KeyError/TypeError if it is not one)."""
        value = self.values[name]
        if not isinstance(value, TensorValue):
            raise TypeError(f"value {name!r} is a {type(value).__name__}, not a tensor")
        return value

    def tensors(self) -> Iterator[TensorValue]:
        """Every tensor value, in declaration order."""
        return (v for v in self.values.values() if isinstance(v, TensorValue))

    def float_dtypes(self) -> frozenset[str]:
        """The float element types its tensors use (`float16` marks a half-precision graph,
        which needs a device with f16 shaders and 16-bit storage on both backends)."""
        return frozenset(t.dtype for t in self.tensors() if t.is_float)

    def op_dtype(self, node: OpNode) -> str:
        """The precision `node` runs in: `float16` when any float tensor it reads or writes
        is float16 (its kernels are then the `_f16` slots), else `float32`. Worked out once
        per graph for its own nodes (a graph is immutable, and every step of a case asks
        for every op's precision several times); a node that is not the graph's own (by
        identity) on every call."""
        known = self._op_dtypes.get(node.name)
        if known is not None and known[0] is node:
            return known[1]
        return self._node_dtype(node)

    @functools.cached_property
    def _op_dtypes(self) -> dict[str, tuple[OpNode, str]]:
        # Held by the graph (`cached_property` writes the instance's __dict__, past the
        # frozen dataclass's __setattr__), so it goes with the graph.
        return {op.name: (op, self._node_dtype(op)) for op in self.ops}

    def _node_dtype(self, node: OpNode) -> str:
        for arg in node.args.values():
            for name in arg if isinstance(arg, tuple) else (arg,) if arg is not None else ():
                if self._is_half(name):
                    return "float16"
        return "float16" if any(self._is_half(n) for n in node.outputs.values()) else "float32"

    def _is_half(self, name: str) -> bool:
        value = self.values.get(name)
        return isinstance(value, TensorValue) and value.dtype == "float16"

    def scalar(self, name: str) -> int | float:
        """The literal value of the int or float value called `name`."""
        value = self.values[name]
        if not isinstance(value, ScalarValue):
            raise TypeError(f"value {name!r} is a {type(value).__name__}, not an int or float")
        return value.value

    def producer(self, value_name: str) -> OpNode | None:
        """The op that writes `value_name`, or None for inputs and constants."""
        for node in self.ops:
            if value_name in node.outputs.values():
                return node
        return None

    def initial_data(self, tensor: TensorValue) -> np.ndarray | None:
        """The data a constant or state tensor starts with (zeros for a plain state tensor)."""
        if tensor.constant is not None:
            return self.constants[tensor.constant]
        if tensor.state:
            return np.zeros(tensor.dims, DTYPES[tensor.dtype])
        return None

    # ------------------------------------------------------------------ encoding

    def to_json(self) -> dict[str, Any]:
        """The JSON document of this graph (constants are stored separately)."""
        values: list[dict[str, Any]] = []
        for v in self.values.values():
            if isinstance(v, TensorValue):
                entry: dict[str, Any] = {
                    "name": v.name,
                    "kind": "tensor",
                    "dtype": v.dtype,
                    "dims": list(v.dims),
                }
                if v.constant is not None:
                    entry["constant"] = v.constant
                if v.state:
                    entry["state"] = True
            elif isinstance(v, SymIntValue):
                entry = {"name": v.name, "kind": "symint"}
            else:
                entry = {"name": v.name, "kind": v.kind, "value": v.value}
            values.append(entry)
        ops = [
            {
                "name": n.name,
                "op": n.op,
                "args": {k: list(a) if isinstance(a, tuple) else a for k, a in n.args.items()},
                "outputs": dict(n.outputs),
            }
            for n in self.ops
        ]
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "values": values,
            "ops": ops,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
        }

    def save(self, path: str | Path) -> Path:
        """Write `<path>.json` (and `<path>.npz` when there are constants); return the JSON path."""
        path = Path(path)
        json_path = path.with_suffix(".json")
        doc = self.to_json()
        if self.constants:
            npz_path = path.with_suffix(".npz")
            # No pickles: `load` refuses them, so an object array fails here, not at load.
            arrays = {k: np.asarray(a) for k, a in self.constants.items()}
            np.savez(npz_path, allow_pickle=False, **arrays)
            doc["constants_file"] = npz_path.name
        json_path.write_text(json.dumps(doc, indent=1) + "\n")
        return json_path

    @classmethod
    def load(cls, path: str | Path) -> Graph:
        """Read and validate a graph from its JSON file (and the .npz it names)."""
        json_path = Path(path)
        try:
            doc = json.loads(json_path.read_text())
        except json.JSONDecodeError as err:
            raise GraphFormatError(
                f"{json_path}: not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
            ) from None
        except OSError as err:
            raise GraphFormatError(f"{json_path}: cannot be read: {err.strerror}") from None
        constants: dict[str, np.ndarray] = {}
        if isinstance(doc, dict) and doc.get("constants_file"):
            npz_path = json_path.parent / str(doc["constants_file"])
            try:
                # Our own handle: np.load leaks its own when the archive is damaged.
                with npz_path.open("rb") as handle, np.load(handle, allow_pickle=False) as archive:
                    constants = {k: archive[k] for k in archive.files}
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
                raise GraphFormatError(
                    f"{npz_path}: constants_file of {json_path.name} cannot be read (truncated "
                    f"or damaged?): {type(err).__name__}: {err}"
                ) from None
        return cls.from_json(doc, constants, source=str(json_path))

    @classmethod
    def from_json(
        cls,
        doc: Any,
        constants: Mapping[str, np.ndarray] | None = None,
        *,
        source: str = "<graph>",
    ) -> Graph:
        """Validate a parsed JSON document (plus constants) and build the graph.

        Raises:
            GraphFormatError: naming the source, the JSON location and what is wrong.
        """
        return _Parser(source, constants or {}).parse(doc)


class _Parser:
    """Validates a graph document, reporting the first problem with its JSON path."""

    def __init__(self, source: str, constants: Mapping[str, np.ndarray]) -> None:
        self.source = source
        self.constants = constants
        self.version = FORMAT_VERSION

    def fail(self, where: str, message: str) -> GraphFormatError:
        return GraphFormatError(f"{self.source}: {where}: {message}")

    def parse(self, doc: Any) -> Graph:
        self.parse_header(doc)
        values = self.parse_values(doc["values"])
        written: dict[str, str] = {}  # value name -> where it was produced
        for name, value in values.items():
            if isinstance(value, TensorValue) and (value.constant is not None or value.state):
                # A state tensor is state, initial data or not: a graph may list it as an output.
                written[name] = "state" if value.state else "a constant"
            elif isinstance(value, ScalarValue):
                written[name] = "a literal"
        inputs = self.parse_inputs(doc["inputs"], values, written)
        ops: list[OpNode] = []
        op_names: set[str] = set()
        for i, entry in enumerate(doc["ops"]):
            node = self.parse_op(f"ops[{i}]", entry, values, written)
            if node.name in op_names:
                raise self.fail(f"ops[{i}].name", f"duplicate op name {node.name!r}")
            op_names.add(node.name)
            ops.append(node)
        outputs = self.parse_outputs(doc["outputs"], values, written)
        return Graph(values, tuple(ops), tuple(inputs), tuple(outputs), dict(self.constants))

    def parse_header(self, doc: Any) -> None:
        """The document's format and version, and its four lists."""
        if not isinstance(doc, dict):
            raise self.fail("document", f"must be a JSON object, got {type(doc).__name__}")
        if doc.get("format") != FORMAT_NAME:
            raise self.fail("format", f"must be {FORMAT_NAME!r}, got {doc.get('format')!r}")
        version = doc.get("version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise self.fail(
                "version",
                f"this reader understands versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}, got {version!r}",
            )
        self.version = int(version)
        for key in ("values", "ops", "inputs", "outputs"):
            if not isinstance(doc.get(key), list):
                raise self.fail(key, f"must be a list, got {type(doc.get(key)).__name__}")

    def parse_values(self, entries: list[Any]) -> dict[str, Value]:
        values: dict[str, Value] = {}
        for i, entry in enumerate(entries):
            value = self.parse_value(f"values[{i}]", entry)
            if value.name in values:
                raise self.fail(f"values[{i}].name", f"duplicate value name {value.name!r}")
            values[value.name] = value
        return values

    def parse_outputs(
        self, entries: list[Any], values: Mapping[str, Value], written: Mapping[str, str]
    ) -> list[str]:
        outputs: list[str] = []
        for i, name in enumerate(entries):
            where = f"outputs[{i}]"
            value = self.lookup(where, name, values)
            if not isinstance(value, TensorValue):
                raise self.fail(where, f"graph outputs must be tensors; {name!r} is not")
            if name not in written or written[name] in ("a constant", "a literal"):
                raise self.fail(where, f"output {name!r} is not written by any op or input")
            outputs.append(name)
        if not outputs:
            raise self.fail("outputs", "a graph needs at least one output")
        return outputs

    def lookup(self, where: str, name: Any, values: Mapping[str, Value]) -> Value:
        if not isinstance(name, str):
            raise self.fail(where, f"must be a value name (string), got {name!r}")
        if name not in values:
            raise self.fail(where, f"refers to unknown value {name!r}")
        return values[name]

    def parse_value(self, where: str, entry: Any) -> Value:
        if not isinstance(entry, dict):
            raise self.fail(where, f"must be an object, got {type(entry).__name__}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(f"{where}.name", f"must be a non-empty string, got {name!r}")
        kind = entry.get("kind")
        if kind == "tensor":
            return self.parse_tensor(where, name, entry)
        if kind == "symint":
            return SymIntValue(name)
        if kind in ("int", "float"):
            raw = entry.get("value")
            if not isinstance(raw, bool):  # JSON true/false are not numbers here
                if kind == "int" and isinstance(raw, int):
                    return ScalarValue(name, kind, int(raw))
                if kind == "float" and isinstance(raw, int | float) and math.isfinite(raw):
                    return ScalarValue(name, kind, float(raw))
            raise self.fail(f"{where}.value", f"must be a finite {kind}, got {raw!r}")
        raise self.fail(f"{where}.kind", f"must be one of tensor, symint, int, float; got {kind!r}")

    def parse_tensor(self, where: str, name: str, entry: dict[str, Any]) -> TensorValue:
        dtype = entry.get("dtype")
        if dtype not in DTYPES:
            raise self.fail(f"{where}.dtype", f"must be one of {sorted(DTYPES)}, got {dtype!r}")
        if self.version < _FIRST_VERSION.get(dtype, 1):
            raise self.fail(
                f"{where}.dtype",
                f"{dtype} needs format version {_FIRST_VERSION[dtype]}; the file says "
                f"version {self.version}",
            )
        dims = entry.get("dims")
        if (
            not isinstance(dims, list)
            or not 1 <= len(dims) <= MAX_RANK
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)
        ):
            raise self.fail(
                f"{where}.dims",
                f"must be a list of 1 to {MAX_RANK} positive ints, got {dims!r}",
            )
        constant = entry.get("constant")
        state = entry.get("state", False)
        if not isinstance(state, bool):
            raise self.fail(f"{where}.state", f"must be true or false, got {state!r}")
        if constant is not None:
            if not isinstance(constant, str):
                raise self.fail(f"{where}.constant", f"must be a string, got {constant!r}")
            if constant not in self.constants:
                raise self.fail(
                    f"{where}.constant", f"array {constant!r} is missing from the constants"
                )
            array = self.constants[constant]
            if array.dtype != DTYPES[dtype] or tuple(array.shape) != tuple(dims):
                raise self.fail(
                    f"{where}.constant",
                    f"array {constant!r} must be {dtype}{list(dims)}, "
                    f"but it is {array.dtype}{list(array.shape)}",
                )
        return TensorValue(name, dtype, tuple(dims), constant, state)

    def parse_inputs(
        self, entries: list[Any], values: Mapping[str, Value], written: dict[str, str]
    ) -> list[str]:
        inputs: list[str] = []
        for i, name in enumerate(entries):
            where = f"inputs[{i}]"
            value = self.lookup(where, name, values)
            if isinstance(value, ScalarValue):
                raise self.fail(where, f"{name!r} is a literal {value.kind}, not an input")
            if name in written:
                raise self.fail(where, f"{name!r} is {written[name]} and cannot be an input")
            written[name] = "a graph input"
            inputs.append(name)
        return inputs

    def parse_op(
        self, where: str, entry: Any, values: Mapping[str, Value], written: dict[str, str]
    ) -> OpNode:
        if not isinstance(entry, dict):
            raise self.fail(where, f"must be an object, got {type(entry).__name__}")
        name, op = entry.get("name"), entry.get("op")
        if not isinstance(name, str) or not name:
            raise self.fail(f"{where}.name", f"must be a non-empty string, got {name!r}")
        if not isinstance(op, str) or op not in SIGNATURES:
            raise self.fail(f"{where}.op", f"unknown op {op!r}; known ops: {sorted(SIGNATURES)}")
        sig = SIGNATURES[op]
        raw_args = entry.get("args", {})
        if not isinstance(raw_args, dict):
            raise self.fail(f"{where}.args", "must be an object")
        for key in raw_args:
            if sig.arg(key) is None:
                raise self.fail(
                    f"{where}.args.{key}",
                    f"{op} has no argument {key!r}; it takes {[s.name for s in sig.args]}",
                )
        args: dict[str, Arg] = {}
        for slot in sig.args:
            args[slot.name] = self.parse_arg(
                f"{where}.args.{slot.name}", slot, raw_args.get(slot.name), values, written
            )

        outputs = self.parse_op_outputs(where, name, sig, entry.get("outputs"), values, written)
        return OpNode(name, op, args, outputs)

    def parse_op_outputs(
        self,
        where: str,
        name: str,
        sig: OpSignature,
        raw_outputs: Any,
        values: Mapping[str, Value],
        written: dict[str, str],
    ) -> dict[str, str]:
        """An op's outputs: exactly its schema's, each a value of its kind written once."""
        if not isinstance(raw_outputs, dict):
            raise self.fail(f"{where}.outputs", "must be an object")
        expected = [out for out, _ in sig.outputs]
        if sorted(raw_outputs) != sorted(expected):
            raise self.fail(
                f"{where}.outputs", f"{sig.op} writes {expected}, got {sorted(raw_outputs)}"
            )
        outputs: dict[str, str] = {}
        for out, kind in sig.outputs:
            out_where = f"{where}.outputs.{out}"
            target = self.lookup(out_where, raw_outputs[out], values)
            want = TensorValue if kind == "tensor" else SymIntValue
            if not isinstance(target, want):
                raise self.fail(out_where, f"must name a {kind} value, {target.name!r} is not")
            if target.name in written:
                raise self.fail(
                    out_where, f"{target.name!r} is already written by {written[target.name]}"
                )
            written[target.name] = f"op {name!r}"
            outputs[out] = target.name
        return outputs

    def parse_arg(
        self,
        where: str,
        slot: ArgSlot,
        raw: Any,
        values: Mapping[str, Value],
        written: dict[str, str],
    ) -> Arg:
        if raw is None:
            if slot.optional:
                return None
            raise self.fail(where, "is required")
        if slot.kind == "size_list":
            if not isinstance(raw, list) or not raw:
                raise self.fail(where, f"must be a non-empty list of value names, got {raw!r}")
            items = []
            for j, item in enumerate(raw):
                value = self.lookup(f"{where}[{j}]", item, values)
                self.check_arg_kind(f"{where}[{j}]", "int_or_sym", value, written)
                items.append(value.name)
            return tuple(items)
        value = self.lookup(where, raw, values)
        self.check_arg_kind(where, slot.kind, value, written)
        return value.name

    def check_arg_kind(self, where: str, kind: str, value: Value, written: dict[str, str]) -> None:
        ok = {
            "tensor": isinstance(value, TensorValue),
            "int": isinstance(value, ScalarValue) and value.kind == "int",
            "float": isinstance(value, ScalarValue) and value.kind == "float",
            "int_or_sym": isinstance(value, SymIntValue)
            or (isinstance(value, ScalarValue) and value.kind == "int"),
        }[kind]
        if not ok:
            raise self.fail(where, f"must name a {kind} value, {value.name!r} is not one")
        if value.name not in written:
            raise self.fail(
                where,
                f"{value.name!r} is read before anything writes it "
                "(ops must be listed in topological order)",
            )
