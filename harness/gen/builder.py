"""A small fluent builder for `graph_format.Graph`, used by strategies, tests and the CLI.

    b = GraphBuilder()
    x = b.input("x", "float32", [1, 8, 64])
    w = b.constant("w", weights)
    h = b.op("rms_norm", x=x, weight=w, eps=b.float(1e-6))
    b.output(b.op("add", a=x, b=h))
    graph = b.build()

Values are named automatically where the caller does not care (`<op>_<n>.<slot>`); the
result is validated by `Graph.from_json`, so the builder can never produce a graph that the
backends could not load from a file.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graph_format import DTYPES, FLOAT_DTYPES, FORMAT_NAME, FORMAT_VERSION, SIGNATURES, Graph


class GraphBuilder:
    """Accumulates values and ops, then validates them into a `Graph`."""

    def __init__(self) -> None:
        self._values: list[dict[str, Any]] = []
        self._names: set[str] = set()
        self._ops: list[dict[str, Any]] = []
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._constants: dict[str, np.ndarray] = {}
        self._dims: dict[str, tuple[int, ...]] = {}
        self._dtypes: dict[str, str] = {}
        self._counter = 0

    def _add(self, entry: dict[str, Any]) -> str:
        name: str = entry["name"]
        if name in self._names:
            raise ValueError(f"value name {name!r} is used twice")
        self._names.add(name)
        self._values.append(entry)
        if entry["kind"] == "tensor":
            self._dims[name] = tuple(entry["dims"])
            self._dtypes[name] = entry["dtype"]
        return name

    def fresh(self, stem: str) -> str:
        """A value name not used yet, derived from `stem`."""
        name = stem
        while name in self._names:
            self._counter += 1
            name = f"{stem}_{self._counter}"
        return name

    def dims(self, name: str) -> tuple[int, ...]:
        """Max dims of a tensor added so far."""
        return self._dims[name]

    def input(self, name: str, dtype: str, dims: Sequence[int]) -> str:
        """A graph input tensor with max `dims`."""
        self._add({"name": name, "kind": "tensor", "dtype": dtype, "dims": list(dims)})
        self._inputs.append(name)
        return name

    def symint_input(self, name: str) -> str:
        """A SymInt graph input (such as `input_pos`)."""
        self._add({"name": name, "kind": "symint"})
        self._inputs.append(name)
        return name

    def symint(self, name: str | None = None) -> str:
        """A SymInt value written by an op (`sym_size`)."""
        return self._add({"name": self.fresh(name or "sym"), "kind": "symint"})

    def constant(self, name: str, array: np.ndarray) -> str:
        """A constant tensor (weights); stored in the constants archive under `name`."""
        array = np.ascontiguousarray(array)
        dtype = next((k for k, v in DTYPES.items() if v == array.dtype), None)
        if dtype is None:
            raise ValueError(f"constant {name!r}: unsupported dtype {array.dtype}")
        self._constants[name] = array
        return self._add(
            {
                "name": name,
                "kind": "tensor",
                "dtype": dtype,
                "dims": list(array.shape),
                "constant": name,
            }
        )

    def state(
        self,
        name: str,
        dtype: str,
        dims: Sequence[int],
        initial: np.ndarray | None = None,
    ) -> str:
        """A persistent tensor that ops update in place across steps (a KV cache).

        It starts as zeros, or as `initial` (an array of exactly `dtype` and `dims`, stored in
        the constants archive under `name`: the graph format's initial data of a state
        tensor, which both runtimes upload at load and the reference starts from).
        """
        entry: dict[str, Any] = {
            "name": name,
            "kind": "tensor",
            "dtype": dtype,
            "dims": list(dims),
            "state": True,
        }
        if initial is not None:
            array = np.asarray(initial)
            if dtype not in DTYPES or array.dtype != DTYPES[dtype] or array.shape != tuple(dims):
                raise ValueError(
                    f"state {name!r}: initial data must be {dtype}{list(dims)}, got "
                    f"{array.dtype}{list(array.shape)}"
                )
            if name in self._constants:
                raise ValueError(f"state {name!r}: a constant of that name exists already")
            entry["constant"] = name
            self._add(entry)
            self._constants[name] = np.ascontiguousarray(array)
            return name
        return self._add(entry)

    def tensor(self, name: str, dtype: str, dims: Sequence[int]) -> str:
        """An intermediate tensor (written by an op)."""
        return self._add(
            {"name": self.fresh(name), "kind": "tensor", "dtype": dtype, "dims": list(dims)}
        )

    def int(self, value: int, name: str | None = None) -> str:
        """A literal int value."""
        return self._add({"name": self.fresh(name or "int"), "kind": "int", "value": int(value)})

    def float(self, value: float, name: str | None = None) -> str:
        """A literal float value."""
        return self._add(
            {"name": self.fresh(name or "float"), "kind": "float", "value": float(value)}
        )

    def op(
        self,
        op: str,
        *,
        name: str | None = None,
        # `builtins.int`: inside this class, `int` names the method above.
        out_dims: Sequence[builtins.int] | Mapping[str, Sequence[builtins.int]] | None = None,
        out_dtype: str | None = None,
        outputs: dict[str, str] | None = None,
        **args: str | Sequence[str] | None,
    ) -> Any:
        """Add an op; returns its output name (or a tuple of names for several outputs).

        Output tensors are created with `out_dims` (a dict per output for several outputs);
        when `out_dims` is None, a single output takes the dims of the first tensor argument.
        They are of `out_dtype`, by default the dtype of the first float tensor argument
        (float32 when there is none): an op of float16 activations writes float16.
        Pass `outputs` to write into values created beforehand.
        """
        sig = SIGNATURES[op]
        op_name = name or f"{op}_{len(self._ops)}"
        if out_dtype is None:
            floats = (
                self._dtypes[a]
                for a in args.values()
                if isinstance(a, str) and self._dtypes.get(a) in FLOAT_DTYPES
            )
            out_dtype = next(floats, "float32")
        created: dict[str, str] = dict(outputs or {})
        for out, kind in sig.outputs:
            if out in created:
                continue
            if kind == "symint":
                created[out] = self.symint(f"{op_name}.{out}")
                continue
            if isinstance(out_dims, Mapping):
                dims = out_dims[out]
            elif out_dims is not None:
                dims = out_dims
            else:
                first = next(a for a in args.values() if isinstance(a, str) and a in self._dims)
                dims = self._dims[first]
            created[out] = self.tensor(f"{op_name}.{out}", out_dtype, dims)
        self._ops.append(
            {
                "name": op_name,
                "op": op,
                "args": {k: list(v) if isinstance(v, list | tuple) else v for k, v in args.items()},
                "outputs": created,
            }
        )
        names = [created[out] for out, _ in sig.outputs]
        return names[0] if len(names) == 1 else tuple(names)

    def output(self, *names: str) -> None:
        """Mark tensors as graph outputs."""
        self._outputs.extend(names)

    def to_json(self) -> dict[str, Any]:
        """The graph document built so far."""
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "values": self._values,
            "ops": self._ops,
            "inputs": self._inputs,
            "outputs": self._outputs,
        }

    def build(self) -> Graph:
        """Validate and return the graph (GraphFormatError if it is malformed)."""
        return Graph.from_json(self.to_json(), self._constants, source="<builder>")
