"""Op signatures of graph format version 1: which arguments and outputs each op type takes.

This table is schema, not behaviour: it lets the loader reject a malformed graph (an unknown
op, a missing or misspelt argument, an argument of the wrong kind) with an error that says
where, before either backend sees it. What an op computes, how it resizes and how it is
dispatched is owned separately by each backend and by the harness's contract model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

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


def _sig(op: str, args: list[ArgSlot], outputs: list[tuple[str, OutputKind]]) -> OpSignature:
    return OpSignature(op, tuple(args), tuple(outputs))


_T: Final = "tensor"  # Final: typed as the literal, so it fits ArgKind and OutputKind

SIGNATURES: dict[str, OpSignature] = {
    sig.op: sig
    for sig in [
        _sig(
            "rms_norm",
            [ArgSlot("x", _T), ArgSlot("weight", _T), ArgSlot("eps", "float")],
            [("out", _T)],
        ),
        _sig("add", [ArgSlot("a", _T), ArgSlot("b", _T)], [("out", _T)]),
        _sig("mul", [ArgSlot("a", _T), ArgSlot("b", _T)], [("out", _T)]),
        _sig("sigmoid", [ArgSlot("x", _T)], [("out", _T)]),
        _sig("silu", [ArgSlot("x", _T)], [("out", _T)]),
        _sig("silu_mul", [ArgSlot("gate", _T), ArgSlot("up", _T)], [("out", _T)]),
        _sig(
            "linear_q4gsw",
            [
                ArgSlot("x", _T),
                ArgSlot("weight", _T),
                ArgSlot("scales", _T),
                ArgSlot("group_size", "int"),
                ArgSlot("bias", _T, optional=True),
            ],
            [("out", _T)],
        ),
        _sig(
            "embedding_q4gsw",
            [
                ArgSlot("weight", _T),
                ArgSlot("scales", _T),
                ArgSlot("group_size", "int"),
                ArgSlot("indices", _T),
            ],
            [("out", _T)],
        ),
        _sig(
            "apply_rotary_emb",
            [
                ArgSlot("xq", _T),
                ArgSlot("xk", _T),
                ArgSlot("freqs_cos", _T),
                ArgSlot("freqs_sin", _T),
            ],
            [("xq_out", _T), ("xk_out", _T)],
        ),
        _sig(
            "apply_rotary_emb_hf",
            [
                ArgSlot("xq", _T),
                ArgSlot("xk", _T),
                ArgSlot("cos", _T),
                ArgSlot("sin", _T),
                ArgSlot("start_pos", "int_or_sym"),
            ],
            [("xq_out", _T), ("xk_out", _T)],
        ),
        _sig("view_copy", [ArgSlot("x", _T), ArgSlot("sizes", "size_list")], [("out", _T)]),
        _sig("sym_size", [ArgSlot("x", _T), ArgSlot("dim", "int")], [("out", "symint")]),
        _sig(
            "sdpa_with_kv_cache",
            [
                ArgSlot("q", _T),
                ArgSlot("k", _T),
                ArgSlot("v", _T),
                ArgSlot("k_cache", _T),
                ArgSlot("v_cache", _T),
                ArgSlot("input_pos", "int_or_sym"),
                ArgSlot("scale", "float", optional=True),
            ],
            [("out", _T)],
        ),
    ]
}
