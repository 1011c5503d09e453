"""Kernel manifests: which kernel implements which slot on which backend, and how it binds.

A user's kernel folder holds `kernels.toml` (format `parity-kernels/1`, docs/design.md §9): one
`[<backend>.<slot>]` table per replaced slot names the shader file and maps the kernel's own
declarations (bindings, params members, overrides, specialization and push constants) onto
the slot's interface (`graph_format/ops/<op>.toml`: roles and offered values), with the
dispatch count as an expression over those values. The project's own kernels are described
by the same dataclasses (`builtin_entry`), so a backend binds every kernel through one path:
reflect the kernel, then ask its `KernelEntry` what fills each declaration.

This module is the shared DATA layer: the file format, its frozen dataclasses, a safe
expression evaluator and the rules that fill a kernel's declarations by name. It knows no
backend API; what a kernel declares comes in as plain names and indices from each backend's
own reflection. docs/bring-your-own-kernels.md is the reference for users.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib.util
import math
import re
import sys
import tomllib
import traceback
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, cast

from graph_format.errors import GraphBuildError, GraphFormatError, ParityError
from graph_format.signatures import F16_SUFFIX, SIGNATURES, SLOTS, SlotInterface

MANIFEST_FORMAT = "parity-kernels/1"
MANIFEST_NAME = "kernels.toml"

Backend = Literal["webgpu", "vulkan"]
BACKENDS: tuple[Backend, ...] = ("webgpu", "vulkan")
SourceKind = Literal["wgsl", "glsl", "spirv"]
# What a value of a slot is: a number, or a vector (a vec4<u32> params member); a vector can
# only be passed whole, by a bare name.
Value = int | float | tuple[int | float, ...]
# A dispatch count: 1-D logical workgroups, or an explicit [x, y, z] grid.
Count = int | tuple[int, int, int]

# Names every expression may use besides its slot's values: the per-dimension workgroup
# limit the backend honours (its device's, or a lower one a run asks for).
BUILTIN_NAMES: tuple[str, ...] = ("max_workgroups_per_dim",)
# Binding targets besides a slot's roles: the params uniform packed by member name from the
# values, and (Vulkan) the project's TensorMeta uniform of an op tensor, `<role>.meta`.
PARAMS_TARGET = "params"
META_SUFFIX = ".meta"
# The project's kernels: members matching this are zero padding; their workgroup-size
# override (WGSL) is wg_size; the count is the op's own.
PROJECT_PADDING = r"^_pad"
PROJECT_WORKGROUP_OVERRIDE = "wg_size"
WORKGROUP_SIZE_VALUE = "workgroup_size"
WORKGROUPS_VALUE = "workgroups"
# The causal attention's masked score columns (c > input_pos + s of a scores row): the slots
# that may write them, and the slot that may read them (`masked_columns`, docs/
# bring-your-own-kernels.md "Scratch"). The project's kernels neither write nor read them.
MASK_WRITERS: tuple[str, ...] = ("sdpa_qk", "sdpa_qk_f16")
MASK_READERS: tuple[str, ...] = ("sdpa_softmax",)
MASKED_WRITTEN, MASKED_SKIPPED = "written", "skipped"  # what a qk kernel does with them
MASKED_READ, MASKED_IGNORED = "read", "ignored"  # what a softmax does with them

# |int| above this in an expression is an error: no dispatch or params value is near it, and
# it keeps a hostile manifest from building huge numbers by repeated multiplication.
_INT_LIMIT = 1 << 64
_MAX_EXPRESSION_CHARS = 1000


class ExpressionError(ParityError, ValueError):
    """An expression that is not in the language, or that cannot be evaluated on its values.

    Attributes:
        expression: the expression's text.
        reason: what is wrong, and what was expected.
    """

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"expression {expression!r}: {reason}")
        self.expression = expression
        self.reason = reason


class KernelManifestError(GraphFormatError):
    """A `kernels.toml` that is malformed or does not fit the slots it names (bad input).

    The message is `<file>:<line>: <what>` for a TOML syntax error, else
    `<file>: <backend>.<slot>.<field>: <what>` (what was expected and what arrived).

    Attributes:
        path: the manifest file.
        where: the field (`webgpu.q4gsw_gemv.params.K_bytes`), or None.
        line: the line of a TOML syntax error, or None.
        what: what is wrong.
    """

    def __init__(
        self, path: Path | str, what: str, *, where: str | None = None, line: int | None = None
    ) -> None:
        place = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{place}: {where}: {what}" if where else f"{place}: {what}")
        self.path = str(path)
        self.where = where
        self.line = line
        self.what = what


class KernelRequirementError(GraphBuildError):
    """A kernel's declared limit (`requires`) that a graph breaks at load: an expected refusal
    of the backend running that kernel, not of the contract.

    Attributes:
        slot: the slot.
        requirement: the condition as written in the manifest.
        source: the kernel's file.
    """

    def __init__(self, op: str, slot: str, requirement: str, source: Path | str) -> None:
        super().__init__(
            op, f"{slot}: the kernel {source} requires {requirement}, which this graph breaks"
        )
        self.slot = slot
        self.requirement = requirement
        self.source = str(source)


class KernelInterfaceError(ParityError, ValueError):
    """A kernel's declarations do not fit its entry: a binding no role fills, a params member
    the op does not offer, an override the kernel does not declare. A backend raises it as
    its own KernelBuildError naming the kernel (the message says file, field, what the kernel
    declares and what the op offers).

    Attributes:
        slot: the slot.
        source: the kernel's file.
    """

    def __init__(self, slot: str, source: Path | str, message: str) -> None:
        super().__init__(f"{slot}: {message}")
        self.slot = slot
        self.source = str(source)


# --- expressions -----------------------------------------------------------------------------


def _check_int(expression: str, value: int | float) -> int | float:
    if isinstance(value, int) and abs(value) > _INT_LIMIT:
        raise ExpressionError(expression, f"a value exceeds 2**64 ({value:.3e})")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(expression, f"an intermediate value is {value}")
    return value


class _DomainError(ValueError):
    """An operation or function given values outside its domain; the evaluator names the
    expression (the message says what was given and what is expected)."""


def _div_up(a: int | float, b: int | float) -> int:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return math.ceil(a / b)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _exceeds(shown: str) -> _DomainError:
    return _DomainError(f"a value exceeds 2**64 ({shown})")


def _power(a: int | float, b: int | float) -> int | float:
    """`a ** b`, refused before it is computed when it would pass 2**64 (`9 ** 9 ** 9`
    would take minutes), and for a negative number to a fractional power (a complex)."""
    shown = f"({a!r})" if a < 0 else repr(a)
    shown += f" ** {b!r}" if b >= 0 else f" ** ({b!r})"
    if _is_int(a) and _is_int(b) and b >= 0:
        # |a| >= 2**(bits - 1): past 2**64 for sure when (bits - 1) * b > 64
        if abs(a) > 1 and (abs(int(a)).bit_length() - 1) * b > 64:
            raise _exceeds(shown)
        result: int = int(a) ** int(b)
        if abs(result) > _INT_LIMIT:
            raise _exceeds(shown)
        return result
    if a == 0 and b < 0:
        raise _DomainError("division by zero in **")
    if a < 0 and not float(b).is_integer():
        raise _DomainError(f"{shown}: a negative number to a fractional power")
    try:
        return math.pow(a, b)
    except OverflowError:
        raise _DomainError(f"'**' overflows ({shown})") from None


def _shift(symbol: str) -> Callable[[Any, Any], int]:
    """`<<` or `>>` on integers (as in Python: `>>` floors), with a non-negative count;
    a left shift past 2**64 is refused before it is computed."""

    def apply(a: Any, b: Any) -> int:
        if not (_is_int(a) and _is_int(b)):
            raise _DomainError(f"{symbol!r} takes integers, got {a!r} and {b!r}")
        if b < 0:
            raise _DomainError(f"negative shift count {b} in {symbol}")
        if symbol == ">>":
            return int(a >> b)
        if (a and abs(a).bit_length() + b > 65) or abs(a << b) > _INT_LIMIT:
            raise _exceeds(f"{a} << {b}")
        return int(a << b)

    return apply


def _positive_int(name: str, x: Any) -> int:
    if not _is_int(x) or x < 1:
        raise _DomainError(f"{name}({x!r}): expected a positive integer")
    return int(x)


def _log2(x: Any) -> int:
    """The exponent of a power of two, exactly; any other number is an error (a kernel
    shifting by log2(n) is wrong for any other n)."""
    n = _positive_int("log2", x)
    if n & (n - 1):
        raise _DomainError(
            f"log2({n}): {n} is not a power of two (log2 is exact: use ceil_log2({n}) for "
            "the exponent of the next power of two)"
        )
    return n.bit_length() - 1


def _ceil_log2(x: Any) -> int:
    """The smallest k with 2**k >= x, for a positive integer x."""
    return (_positive_int("ceil_log2", x) - 1).bit_length()


# The divisors the fast-division constants cover: their shift L = ceil_log2(d) stays below
# 32, so a kernel's 32-bit `>> L` is defined.
FASTDIV_MAX_DIVISOR = 1 << 31


def _fastdiv_divisor(name: str, d: Any) -> int:
    if not _is_int(d) or not 1 <= d <= FASTDIV_MAX_DIVISOR:
        raise _DomainError(f"{name}({d!r}): expected an integer divisor 1 <= d <= 2**31")
    return int(d)


def _fastdiv_shift(d: Any) -> int:
    """L of the fast division by d: ceil(log2(d)) (ggml's `init_fastdiv_values` L)."""
    return (_fastdiv_divisor("fastdiv_shift", d) - 1).bit_length()


def _fastdiv_mul(d: Any) -> int:
    """The u32 multiplier mp of the fast division by d, with L = fastdiv_shift(d):
    n // d == (mulhi(n, mp) + n) >> L for every u32 n (mulhi: the high 32 bits of the
    64-bit product), as ggml's `init_fastdiv_values` computes it.

    Why: 2**(L-1) < d <= 2**L; m = 2**32 + mp = floor(2**(32+L) / d) + 1 exceeds
    2**(32+L) / d by e in (0, 1], so n*m / 2**(32+L) = n/d + n*e / 2**(32+L), whose second
    term is below 2**-L <= 1/d for n < 2**32: too small to carry n/d (at most 1 - 1/d
    above floor(n/d)) past the next integer. And floor(n*m / 2**(32+L)) is
    (mulhi(n, mp) + n) >> L, the low 32 bits of n*mp being below one unit of 2**32.
    mp < 2**32 because 2**L - d < d.
    """
    divisor = _fastdiv_divisor("fastdiv_mul", d)
    shift = (divisor - 1).bit_length()
    return ((1 << 32) * ((1 << shift) - divisor)) // divisor + 1


# name -> (function, number of arguments: exact, or minimum when negative)
_FUNCTIONS: dict[str, tuple[Callable[..., int | float], int]] = {
    "ceil": (math.ceil, 1),
    "floor": (math.floor, 1),
    "min": (min, -2),
    "max": (max, -2),
    "div_up": (_div_up, 2),
    "log2": (_log2, 1),
    "ceil_log2": (_ceil_log2, 1),
    "fastdiv_mul": (_fastdiv_mul, 1),
    "fastdiv_shift": (_fastdiv_shift, 1),
}
FUNCTIONS: tuple[str, ...] = tuple(_FUNCTIONS)

_BINARY: dict[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", lambda a, b: a + b),
    ast.Sub: ("-", lambda a, b: a - b),
    ast.Mult: ("*", lambda a, b: a * b),
    ast.Div: ("/", lambda a, b: a / b),
    ast.FloorDiv: ("//", lambda a, b: a // b),
    ast.Mod: ("%", lambda a, b: a % b),
    ast.Pow: ("**", _power),
    ast.LShift: ("<<", _shift("<<")),
    ast.RShift: (">>", _shift(">>")),
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
_LANGUAGE = (
    "integers and floats, value names, a vector value's element (out_sizes[3]), "
    "+ - * / // % ** << >> and unary -, parentheses, and calls of " + ", ".join(FUNCTIONS)
)
_CONDITIONS = "; a condition adds == != < <= > >=, and, or, not"


def _describe(node: ast.AST) -> str:
    """What a refused node is, for the error message."""
    described = {
        ast.Attribute: "attribute access",
        ast.Subscript: "a subscript",
        ast.Lambda: "a lambda",
        ast.Compare: "a comparison",
        ast.BoolOp: "and/or",
        ast.IfExp: "a conditional",
        ast.JoinedStr: "an f-string",
    }
    for kind, text in described.items():
        if isinstance(node, kind):
            return text
    if isinstance(node, ast.Constant):
        return f"the literal {node.value!r}"
    if isinstance(node, ast.BinOp):
        return f"the operator {type(node.op).__name__}"
    return type(node).__name__


def _reads_values(node: ast.expr) -> bool:
    """Whether `node` reads a value name (a function's name is not one)."""
    functions = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return any(isinstance(n, ast.Name) and id(n) not in functions for n in ast.walk(node))


def _divisor(node: ast.expr) -> tuple[ast.expr | None, str]:
    """The divisor of a division (`/`, `//`, `%`, `div_up`), and its symbol; else None."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        symbol = _BINARY[type(node.op)][0]
        if symbol in ("/", "//", "%"):
            return node.right, symbol
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "div_up":
        return node.args[1], "div_up"  # the checker allowed two arguments
    return None, ""


class _Checker(ast.NodeVisitor):
    """Refuses every node outside the language; collects the value names."""

    def __init__(self, text: str, condition: bool) -> None:
        self.text = text
        self.condition = condition
        self.names: set[str] = set()

    def refuse(self, node: ast.AST) -> None:
        allowed = _LANGUAGE + (_CONDITIONS if self.condition else "")
        raise ExpressionError(self.text, f"{_describe(node)} is not allowed; expected {allowed}")

    def generic_visit(self, node: ast.AST) -> None:
        self.refuse(node)

    def visit_Expression(self, node: ast.Expression) -> None:
        self.visit(node.body)

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) not in (int, float):  # bool is an int subclass: refused too
            self.refuse(node)

    def visit_Name(self, node: ast.Name) -> None:
        self.names.add(node.id)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINARY:
            self.refuse(node)
        self.visit(node.left)
        self.visit(node.right)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.value, ast.Name):
            raise ExpressionError(
                self.text,
                f"a subscript of {ast.unparse(node.value)!r} is not allowed: only a value's "
                "name takes one (out_sizes[3])",
            )
        if isinstance(node.slice, ast.Slice):
            raise ExpressionError(
                self.text, "a slice is not allowed; expected one index (out_sizes[3])"
            )
        self.visit(node.value)
        self.visit(node.slice)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, ast.USub | ast.UAdd) and not (
            self.condition and isinstance(node.op, ast.Not)
        ):
            self.refuse(node)
        self.visit(node.operand)

    def visit_Call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name):
            self.refuse(node.func)  # a method, a lambda, a call's result
        assert isinstance(node.func, ast.Name)
        if node.func.id not in _FUNCTIONS:
            raise ExpressionError(
                self.text, f"calls {node.func.id!r}; expected one of {', '.join(FUNCTIONS)}"
            )
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExpressionError(self.text, f"{node.func.id}() takes plain arguments")
        _, arity = _FUNCTIONS[node.func.id]
        if (arity >= 0 and len(node.args) != arity) or (arity < 0 and len(node.args) < -arity):
            wanted = f"{arity}" if arity >= 0 else f"at least {-arity}"
            raise ExpressionError(
                self.text, f"{node.func.id}() takes {wanted} arguments, got {len(node.args)}"
            )
        for arg in node.args:
            self.visit(arg)

    def visit_Compare(self, node: ast.Compare) -> None:
        if not self.condition or any(type(op) not in _COMPARE for op in node.ops):
            self.refuse(node)
        self.visit(node.left)
        for comparator in node.comparators:
            self.visit(comparator)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        if not self.condition:
            self.refuse(node)
        for value in node.values:
            self.visit(value)


@dataclass(frozen=True)
class Expression:
    """An arithmetic expression over a slot's values, compiled once and evaluated many times.

    The language: int and float literals, value names, an element of a vector value
    (`out_sizes[3]`, `out_sizes[-1]`: an integer index, negative from the end),
    `+ - * / // % ** << >>`, unary `-`, parentheses, and `ceil(x)`, `floor(x)`,
    `min(a, b, ...)`, `max(a, b, ...)`, `div_up(a, b)` (= ceil(a / b), exact on ints),
    `log2(x)` (exact: x a power of two), `ceil_log2(x)`, and the fast-division constants
    `fastdiv_mul(d)`, `fastdiv_shift(d)`. `/` is true division (a float); `//`, `%` and
    `>>` floor as in Python; shifts take integers and a non-negative count. A condition
    (`requires`) adds comparisons and `and`/`or`/`not`. Nothing else parses: no attributes,
    slices, other calls or lambdas.

    Attributes:
        text: the expression as written (what equality compares).
        names: the value names it reads.
        condition: whether it is a condition.
    """

    text: str
    condition: bool = False
    names: frozenset[str] = field(init=False, compare=False)
    _tree: ast.Expression = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.text) > _MAX_EXPRESSION_CHARS:
            raise ExpressionError(self.text[:40] + "...", f"longer than {_MAX_EXPRESSION_CHARS}")
        try:
            tree = ast.parse(self.text.strip(), mode="eval")
        except SyntaxError as err:
            raise ExpressionError(self.text, f"not an expression: {err.msg}") from None
        except (RecursionError, MemoryError):
            raise ExpressionError(self.text, "nested too deeply") from None
        checker = _Checker(self.text, self.condition)
        try:
            checker.visit(tree)
        except RecursionError:
            raise ExpressionError(self.text, "nested too deeply") from None
        object.__setattr__(self, "names", frozenset(checker.names))
        object.__setattr__(self, "_tree", tree)
        self._check_constant_parts(tree.body)

    def _check_constant_parts(self, node: ast.expr) -> None:
        """Evaluate every part that reads no value now, so that a division by a constant
        zero or a constant past 2**64 is refused when the manifest is read, not on every
        step of a run (issue 18)."""
        if not _reads_values(node):
            try:
                self._eval(node, {})
            except ExpressionError as err:
                raise ExpressionError(
                    self.text, f"{err.reason} (in {ast.unparse(node)!r}, whatever the values)"
                ) from None
            return
        divisor, symbol = _divisor(node)
        if divisor is not None and not _reads_values(divisor):
            self._check_constant_parts(divisor)
            if self._eval(divisor, {}) == 0:
                raise ExpressionError(
                    self.text,
                    f"division by zero in {symbol} (in {ast.unparse(node)!r}, whatever the values)",
                )
        children = node.args if isinstance(node, ast.Call) else ast.iter_child_nodes(node)
        for child in children:
            if isinstance(child, ast.expr):
                self._check_constant_parts(child)

    @classmethod
    def compile(cls, text: str | int | float, *, condition: bool = False) -> Expression:
        """Parse and check `text` once (a number is taken as its literal).

        Raises:
            ExpressionError: not an expression of the language (the message says what is
                not allowed and what is).
        """
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            raise ExpressionError(repr(text), "expected a string, an integer or a float")
        return cls(text if isinstance(text, str) else repr(text), condition)

    def __str__(self) -> str:
        return self.text

    def evaluate(self, values: Mapping[str, Value]) -> Value | bool:
        """The expression's value for these values (a condition's: a bool).

        Raises:
            ExpressionError: a name without a value, a division by zero, a vector in
                arithmetic, an intermediate value past 2**64.
        """
        body = self._tree.body
        if isinstance(body, ast.Name):  # a bare name may pass a vector through
            return self._lookup(body.id, values)
        try:
            result: Value | bool = self._eval(body, values)
        except ExpressionError as err:
            read = [f"{n}={values[n]}" for n in sorted(self.names) if n in values]
            if not read or "(given:" in err.reason:
                raise
            raise ExpressionError(self.text, f"{err.reason} (at {', '.join(read)})") from None
        return result

    def _lookup(self, name: str, values: Mapping[str, Value]) -> Value:
        try:
            return values[name]
        except KeyError:
            raise ExpressionError(
                self.text, f"no value {name!r} (given: {', '.join(sorted(values))})"
            ) from None

    def _eval(self, node: ast.expr, values: Mapping[str, Value]) -> Any:
        if isinstance(node, ast.Constant):
            return _check_int(self.text, cast(int | float, node.value))  # the checker allowed
        if isinstance(node, ast.Name):
            value = self._lookup(node.id, values)
            if isinstance(value, tuple):
                raise ExpressionError(
                    self.text,
                    f"{node.id!r} is a vector {value}: pass it whole by its bare name, or an "
                    f"element as {node.id}[0]",
                )
            return value
        if isinstance(node, ast.Subscript):
            return self._element(node, values)
        if isinstance(node, ast.BinOp):
            symbol, apply = _BINARY[type(node.op)]
            left, right = self._eval(node.left, values), self._eval(node.right, values)
            if symbol in ("/", "//", "%") and right == 0:
                raise ExpressionError(self.text, f"division by zero in {symbol}")
            try:
                return _check_int(self.text, apply(left, right))
            except _DomainError as err:
                raise ExpressionError(self.text, str(err)) from None
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, values)
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            function, _ = _FUNCTIONS[node.func.id]
            args = [self._eval(a, values) for a in node.args]
            if node.func.id == "div_up" and args[1] == 0:
                raise ExpressionError(self.text, "division by zero in div_up")
            try:
                return _check_int(self.text, function(*args))
            except _DomainError as err:
                raise ExpressionError(self.text, str(err)) from None
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, values)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self._eval(comparator, values)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.BoolOp):
            results = (bool(self._eval(v, values)) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        raise AssertionError(f"unchecked node {ast.dump(node)}")  # _Checker refused it

    def _element(self, node: ast.Subscript, values: Mapping[str, Value]) -> int | float:
        """`name[index]`: one element of a vector value (the checker allowed a name only)."""
        assert isinstance(node.value, ast.Name)
        name = node.value.id
        vector = self._lookup(name, values)
        index = self._eval(node.slice, values)
        if not isinstance(vector, tuple):
            raise ExpressionError(
                self.text,
                f"{name!r} is a scalar ({vector!r}), not a vector: only a vector value takes a "
                "subscript",
            )
        if not _is_int(index):
            raise ExpressionError(
                self.text, f"the index of {name!r} is {index!r}, expected an integer"
            )
        size = len(vector)
        if not -size <= index < size:
            raise ExpressionError(
                self.text,
                f"index {index} is out of range for {name!r}, a vector of {size} values "
                f"(0 to {size - 1}, or {-size} to -1 from the end)",
            )
        return vector[int(index)]

    def evaluate_int(self, values: Mapping[str, Value]) -> int:
        """The value as an int (a count, an override): a float result is an error.

        Raises:
            ExpressionError: as `evaluate`, or a result that is not an int.
        """
        value = self.evaluate(values)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ExpressionError(
                self.text,
                f"gave {value!r}, expected an integer ('/' is true division: use //, ceil() "
                "or div_up())",
            )
        return value


# --- manifest dataclasses --------------------------------------------------------------------


@dataclass(frozen=True)
class AdapterRef:
    """An adapter class named by a manifest (`adapter = "adapters.py:GemvAdapter"`).

    Attributes:
        file: the Python module's path (inside the manifest's folder).
        name: the class's name in it.
    """

    file: Path
    name: str

    def __str__(self) -> str:
        return f"{self.file.name}:{self.name}"


class KernelAdapter(Protocol):
    """A manifest's Python class for what a manifest cannot say (`adapter = "<file>:<Class>"`):
    derived values a kernel reads, private scratch buffers. Both backends use it alike, and
    only when their runtime was built with `allow_adapters=True` (it runs the user's code).

    Attributes:
        provides: the names `values` adds, each filling a params (push) member of its name;
            none of them may be a value the slot offers. Optional (default none).
    """

    provides: ClassVar[tuple[str, ...]]

    def __init__(self, static: Mapping[str, Value]) -> None:
        """Once per op node, at load: the slot's values that are fixed for the graph."""
        ...

    def values(self, values: Mapping[str, Value]) -> Mapping[str, Value]:
        """At each resize of a step that runs the slot: the derived values (exactly the names
        in `provides`), from the op's values (with `max_workgroups_per_dim`)."""
        ...

    def scratch(self) -> Mapping[str, int]:
        """Extra private buffers, role -> bytes (asked once, after `__init__`), bound to a
        kernel binding of the role's name (or `t_<role>`) like the slot's tensors."""
        ...


def adapter_provides(adapter: type[KernelAdapter]) -> tuple[str, ...]:
    """The names an adapter class says its `values` adds (none when it says nothing)."""
    return tuple(getattr(adapter, "provides", ()))


def load_adapter(ref: AdapterRef, interface: SlotInterface | None = None) -> type[KernelAdapter]:
    """Import the adapter class `ref` names, from its file (not from `sys.path`).

    Runs the module's code: callers ask only when the user allowed adapters. Imported once
    per file content (a module `parity_adapter_<hash>`).

    Args:
        interface: the slot it serves, to check that `provides` adds no name the slot offers.

    Raises:
        KernelManifestError: the module does not import (with its traceback), has no such
            class, or the class lacks `values`/`scratch` or has a bad `provides`.
    """
    where = f"adapter {ref}"
    try:
        code = ref.file.read_bytes()
    except OSError as err:
        reason = err.strerror or str(err)
        raise KernelManifestError(ref.file, f"cannot read: {reason}", where=where) from None
    digest = hashlib.sha256(str(ref.file.resolve()).encode() + b"\0" + code).hexdigest()[:16]
    module_name = f"parity_adapter_{digest}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, ref.file)
        if spec is None or spec.loader is None:
            raise KernelManifestError(ref.file, "not a Python module", where=where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and the like look themselves up
        try:
            spec.loader.exec_module(module)
        except BaseException as err:  # the user's code: any failure is bad input
            del sys.modules[module_name]
            if isinstance(err, KeyboardInterrupt):
                raise
            text = "".join(traceback.format_exception(err)).strip()
            raise KernelManifestError(
                ref.file, f"importing it failed:\n{text}", where=where
            ) from None
    found = getattr(module, ref.name, None)
    if not isinstance(found, type):
        classes = sorted(n for n, v in vars(module).items() if isinstance(v, type))
        raise KernelManifestError(
            ref.file,
            f"expected a class {ref.name!r} in {ref.file.name}, got "
            f"{type(found).__name__ if found is not None else 'nothing'} (classes there: "
            f"{', '.join(classes) or 'none'})",
            where=where,
        )
    missing = [m for m in ("values", "scratch") if not callable(getattr(found, m, None))]
    if missing:
        raise KernelManifestError(
            ref.file,
            f"class {ref.name} lacks {' and '.join(missing)}(); an adapter has __init__(static), "
            "values(values) and scratch()",
            where=where,
        )
    provides = getattr(found, "provides", ())
    if not isinstance(provides, tuple | list) or not all(
        isinstance(n, str) and n.isidentifier() for n in provides
    ):
        raise KernelManifestError(
            ref.file,
            f"{ref.name}.provides must be a tuple of value names, got {provides!r}",
            where=where,
        )
    if interface is not None:
        clash = [n for n in provides if n in interface.values or n in BUILTIN_NAMES]
        if clash:
            raise KernelManifestError(
                ref.file,
                f"{ref.name}.provides names {', '.join(clash)}, which slot {interface.name} "
                "offers already; an adapter adds values, never replaces the op's",
                where=where,
            )
    return cast(type[KernelAdapter], found)


@dataclass(frozen=True)
class KernelDispatch:
    """One dispatch of a slot's kernel (a split slot has several, e.g. one per output).

    Attributes:
        bindings: explicit kernel binding (name, or index as an int) -> target: a role of
            the slot, `"params"`, or (Vulkan) `"<op tensor>.meta"`. Bindings not listed
            follow the default rule (`KernelEntry.resolve_bindings`).
        params: explicit params member -> expression; others take the same-name value.
        push: (Vulkan) explicit push-constant member -> expression; others as params.
        count: the logical workgroup count (1-D), or an explicit [x, y, z] grid.
    """

    bindings: dict[str | int, str]
    params: dict[str, Expression]
    push: dict[str, Expression]
    count: Expression | tuple[Expression, Expression, Expression]

    def workgroups(self, values: Mapping[str, Value]) -> Count:
        """The count for these values: an int >= 0, or a grid of three.

        Raises:
            ExpressionError: an expression fails, or gives a float or a negative count.
        """
        exprs = self.count if isinstance(self.count, tuple) else (self.count,)
        counts = [e.evaluate_int(values) for e in exprs]
        for expr, count in zip(exprs, counts, strict=True):
            if count < 0:
                raise ExpressionError(expr.text, f"gave a negative workgroup count {count}")
        if isinstance(self.count, tuple):
            return (counts[0], counts[1], counts[2])
        return counts[0]


def _default_target(
    name: str, backend: Backend, slot: SlotInterface, extra_roles: Collection[str] = ()
) -> str | None:
    """The target a binding called `name` takes by default, or None."""
    for role in (*slot.tensors, *extra_roles):
        if name in (role, f"t_{role}"):
            return role
    if name == PARAMS_TARGET or name in slot.values:  # a uniform of one value: packed too
        return PARAMS_TARGET
    role = name.removesuffix("_meta")
    if backend == "vulkan" and name != role and role in SIGNATURES[slot.op].tensors:
        return role + META_SUFFIX
    return None


@dataclass(frozen=True)
class KernelEntry:
    """How one kernel implements one slot on one backend: a manifest's `[<backend>.<slot>]`
    table, or the project's own kernel (`builtin_entry`).

    Attributes:
        backend: "webgpu" or "vulkan".
        slot: the slot's name (`interface` is its declaration).
        source: the shader file: WGSL, GLSL, or a SPIR-V module.
        kind: "wgsl", "glsl" or "spirv".
        entry: the entry point.
        overrides: (WebGPU) override -> expression, ONLY these are passed; None: the project
            rule (wg_size from `workgroup_size`, every other declared override that names a
            value from that value).
        spec: (Vulkan) specialization constant (name, or id as an int) -> expression, ONLY
            these are set; None: the project rule (local-size spec ids from
            `workgroup_size`, a named constant from the value of its name in lower case).
        padding: params/push members written as zero.
        padding_pattern: a regex: matching members are zero too (the project's `^_pad`).
        fold: the kernel recovers a 1-D workgroup index from a 2-D grid
            (wid.x + wid.y * num_workgroups.x), so a count past the per-dimension limit may
            be folded.
        requires: conditions over the values; a case breaking one is an expected refusal of
            this backend.
        exact: the kernel rounds alike with the kernel the other backend runs for its slot
            (the project's, or that backend's manifest entry, which must say so too): on one
            device, bit-identical outputs on bit-identical inputs, held to by the exact tier
            (docs/oracles.md "Exact equality"). A foreign kernel promises nothing unless
            its manifest says so.
        adapter: a Python class for structural differences, or None.
        defines: (Vulkan GLSL) preprocessor macro -> its text, passed to glslc as
            `-D<name>=<text>` (so a kernel written for a template compiles from its source).
        dispatches: one per dispatch, in order (one unless the manifest splits the slot).
        builtin: the project's own kernel.
        scratch: the scratch roles this section sizes, role -> bytes (an expression over the
            values fixed at load): a scratch role of the op (`part_o`) resized, or a new
            role that the op's kernels on this backend share.
        op_scratch: every scratch size the manifest's sections of this op declare on this
            backend, role -> ((slot, expression), ...): one buffer per role per op node, of
            the largest size (filled in when the manifest is parsed).
        masked_columns: (the causal attention's qk and softmax slots) whether the kernel
            writes ("written") or skips ("skipped") the masked score columns, or reads
            ("read") or ignores ("ignored") them; None: the project's behaviour.
        precision: the arithmetic the kernel computes in, "f32" (the default: f16 tensors
            are loaded to and stored from f32 arithmetic) or "f16" (an f16 slot's kernel
            that computes in f16 too): the harness derives the op's budget for that
            arithmetic (`parse_precision`; docs/oracles.md "Kernels that compute in f16").
    """

    backend: Backend
    slot: str
    source: Path
    kind: SourceKind
    dispatches: tuple[KernelDispatch, ...]
    entry: str = "main"
    overrides: dict[str, Expression] | None = None
    spec: dict[str | int, Expression] | None = None
    padding: tuple[str, ...] = ()
    padding_pattern: str | None = None
    fold: bool = False
    requires: tuple[Expression, ...] = ()
    exact: bool = False
    adapter: AdapterRef | None = None
    defines: dict[str, str] = field(default_factory=dict)
    builtin: bool = False
    scratch: dict[str, Expression] = field(default_factory=dict)
    op_scratch: dict[str, tuple[tuple[str, Expression], ...]] = field(
        default_factory=dict, compare=False
    )
    masked_columns: str | None = None
    precision: str = "f32"

    @property
    def interface(self) -> SlotInterface:
        """The slot's declared interface."""
        return SLOTS[self.slot]

    @property
    def shared_roles(self) -> tuple[str, ...]:
        """The scratch roles the manifest adds to the op on this backend (not roles of the
        slot): a kernel binds them by name like the slot's own roles."""
        own = _op_roles(self.interface.op)
        return tuple(r for r in self.op_scratch if r not in own)

    def expressions(self) -> dict[str, Expression]:
        """Every expression of the entry by its key in the manifest's table (`dispatch`,
        `params.k_bytes`, `dispatch_list[1].push.pass_index`, `requires[0]`, ...)."""
        out: dict[str, Expression] = {}
        for name, expr in (self.overrides or {}).items():
            out[f"overrides.{name}"] = expr
        for key, expr in (self.spec or {}).items():
            out[f"spec.{key}"] = expr
        for i, condition in enumerate(self.requires):
            out[f"requires[{i}]"] = condition
        for role, expr in self.scratch.items():
            out[f"scratch.{role}"] = expr
        for i, dispatch in enumerate(self.dispatches):
            at = f"dispatch_list[{i}]." if len(self.dispatches) > 1 else ""
            for block in ("params", "push"):
                for member, expr in getattr(dispatch, block).items():
                    out[f"{at}{block}.{member}"] = expr
            counts = dispatch.count if isinstance(dispatch.count, tuple) else (dispatch.count,)
            for j, count in enumerate(counts):
                out[f"{at}dispatch" + (f"[{j}]" if len(counts) > 1 else "")] = count
        return out

    def failure_text(self, err: Exception) -> str:
        """`err`'s text, opened by the manifest key of the expression it is about
        (`webgpu.q4gsw_gemm.dispatch: expression ...`) when it is an ExpressionError of
        one of this entry's expressions."""
        if isinstance(err, ExpressionError) and not self.builtin:
            keys = [k for k, e in self.expressions().items() if e.text == err.expression]
            if keys:
                return f"{self.backend}.{self.slot}.{' / '.join(keys)}: {err}"
        return str(err)

    def unmet_requirements(self, values: Mapping[str, Value]) -> list[str]:
        """The `requires` conditions these values break (empty: the kernel takes the case).

        Raises:
            ExpressionError: a condition cannot be evaluated on these values.
        """
        return [r.text for r in self.requires if not r.evaluate(values)]

    def is_padding(self, member: str) -> bool:
        """Whether `member` of the params or push block is written as zero."""
        if member in self.padding:
            return True
        return (
            self.padding_pattern is not None and re.search(self.padding_pattern, member) is not None
        )

    def resolve_members(
        self,
        declared: Sequence[str],
        *,
        dispatch: int = 0,
        block: Literal["params", "push"] = "params",
        extra_values: Collection[str] = (),
        layout: Mapping[str, str] | None = None,
    ) -> dict[str, Expression | None]:
        """What fills each member the kernel's params (or push-constant) block declares:
        its expression, or None for zero padding.

        A member takes, in order: its explicit `params.<member>` (`push.<member>`)
        expression; zero if it is padding; the value of the same name (the op's, or one of
        `extra_values`, the names an adapter adds).

        Args:
            layout: member -> where it lies ("u32 at offset 12"), for the error message.

        Raises:
            KernelInterfaceError: explicit members the block does not declare, or members
                that are neither mapped, padding, nor a value the op (or adapter) offers: all
                of them in one message (a foreign block may hold 20-odd members).
        """
        explicit = getattr(self.dispatches[dispatch], block)
        problems = []
        undeclared = [member for member in explicit if member not in declared]
        if undeclared:
            keys = ", ".join(f"{block}.{member}" for member in undeclared)
            names = ", ".join(repr(member) for member in undeclared)
            problems.append(
                f"{keys}: the {block} block of {self.source} declares no "
                f"member{'s' if len(undeclared) > 1 else ''} {names} (declared: "
                f"{', '.join(declared) or 'none'})"
            )
        resolved: dict[str, Expression | None] = {}
        missing = []
        for member in declared:
            if member in explicit:
                resolved[member] = explicit[member]
            elif self.is_padding(member):
                resolved[member] = None
            elif member in self.interface.values or member in extra_values:
                resolved[member] = Expression.compile(member)
            else:
                missing.append(member)
        if missing:
            shown = ", ".join(
                repr(m) + (f" ({layout[m]})" if layout and m in layout else "") for m in missing
            )
            offered = f"{self.interface.op} offers [{', '.join(self.interface.values)}]"
            if extra_values:
                offered += f", its adapter adds [{', '.join(extra_values)}]"
            if len(missing) == 1:
                problems.append(
                    f"{block} member {shown} of {self.source} has no value; {offered}; map it "
                    f'with {block}.{missing[0]} = "<expression>" or list it in padding'
                )
            else:
                problems.append(
                    f"{block} members {shown} of {self.source} have no value ({len(missing)} "
                    f"of {len(declared)} members); {offered}; map each with "
                    f'{block}.<member> = "<expression>" or list it in padding'
                )
        if problems:
            raise KernelInterfaceError(self.slot, self.source, "; and ".join(problems))
        return resolved

    def resolve_bindings(
        self,
        declared: Sequence[tuple[int, str | None]],
        *,
        dispatch: int = 0,
        extra_roles: Collection[str] = (),
    ) -> dict[int, str]:
        """The target of each binding the kernel declares, as (index, name or None), by
        index: a role, "params" or (Vulkan) "<role>.meta".

        A binding takes, in order: an explicit `bindings` entry by index, then by name; the
        role of its name or of its name minus a `t_` prefix (the slot's roles, then
        `extra_roles`: an adapter's scratch buffers); "params" for a binding named `params`
        or after one of the slot's values (a uniform of one value, such as the project
        GLSL's `input_pos`); (Vulkan) `<tensor>.meta` for a name `<tensor>_meta` of an op
        tensor.

        Raises:
            KernelInterfaceError: an explicit entry the kernel does not declare, or a binding
                no rule fills (the message lists what the kernel declares and the roles).
        """
        explicit = self.dispatches[dispatch].bindings
        names = {name: index for index, name in declared if name is not None}
        indices = {index for index, _ in declared}
        listed = ", ".join(f"{i} {n!r}" if n else str(i) for i, n in declared) or "none"
        roles = [*self.interface.tensors, *extra_roles]
        for key in explicit:
            if key not in (indices if isinstance(key, int) else names):
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"bindings.{key}: {self.source} declares no binding {key!r} "
                    f"(declared: {listed})",
                )
        resolved: dict[int, str] = {}
        for index, name in declared:
            target = explicit.get(index)
            if target is None and name is not None:
                target = explicit.get(name) or _default_target(
                    name, self.backend, self.interface, extra_roles
                )
            if target is None:
                shown = f"{index} ({name!r})" if name else f"{index} (unnamed)"
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"binding {shown} of {self.source} fills no role of the slot (the kernel "
                    f"declares: {listed}; the slot's roles: {', '.join(roles)}; or 'params'); "
                    f'map it with bindings = {{ {name or index} = "<role>" }}',
                )
            resolved[index] = target
        return resolved

    def resolve_overrides(self, declared: Sequence[str]) -> dict[str, Expression]:
        """The overrides to pass, by the name the kernel declares (WebGPU).

        Raises:
            KernelInterfaceError: an override of the entry that the kernel does not declare.
        """
        if self.overrides is None:
            rule = {PROJECT_WORKGROUP_OVERRIDE: WORKGROUP_SIZE_VALUE}
            return {
                name: Expression.compile(rule.get(name, name))
                for name in declared
                if rule.get(name, name) in self.interface.values
            }
        for name in self.overrides:
            if name not in declared:
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"override {name!r} is not declared in {self.source} (declared: "
                    f"{', '.join(declared) or 'none'})",
                )
        return dict(self.overrides)

    def resolve_spec(
        self, declared: Sequence[tuple[int, str | None]], local_size_ids: Iterable[int] = ()
    ) -> dict[int, Expression]:
        """The specialization constants to set, by id (Vulkan). `declared` are the named
        constants as (id, name or None); `local_size_ids` the spec ids of the local size.

        Raises:
            KernelInterfaceError: a constant of the entry that the kernel does not declare.
        """
        local_ids = set(local_size_ids)
        if self.spec is None:
            rule = {i: Expression.compile(WORKGROUP_SIZE_VALUE) for i in sorted(local_ids)}
            for spec_id, name in declared:
                for candidate in (name, name.lower()) if name else ():
                    if spec_id not in rule and candidate in self.interface.values:
                        rule[spec_id] = Expression.compile(candidate)
            return rule
        by_name = {name: spec_id for spec_id, name in declared if name is not None}
        ids = {spec_id for spec_id, _ in declared} | local_ids
        resolved: dict[int, Expression] = {}
        for key, expr in self.spec.items():
            found = key if isinstance(key, int) else by_name.get(key)
            if found is None or found not in ids:
                listed = [f"{i} {n!r}" if n else str(i) for i, n in declared]
                listed += [f"{i} (local size)" for i in sorted(local_ids)]
                raise KernelInterfaceError(
                    self.slot,
                    self.source,
                    f"specialization constant {key!r} is not declared in {self.source} "
                    f"(declared: {', '.join(listed) or 'none'})",
                )
            resolved[found] = expr
        return resolved


def scratch_sizes(entry: KernelEntry, static: Mapping[str, Value]) -> dict[str, int]:
    """The bytes of each scratch role the manifest sizes for `entry`'s op on its backend:
    the largest size any section of the op declares, on the values fixed at load (the op's
    largest shape; `max_workgroups_per_dim` included). One buffer per role per op node.

    Raises:
        KernelInterfaceError: a size reads a value that changes with the live sizes, fails
            on the values, or is not a whole number of bytes >= 1 (the message names the
            manifest key, the expression and the values it read).
    """
    sizes: dict[str, int] = {}
    for role, declared in entry.op_scratch.items():
        for slot, expr in declared:
            key = f"{entry.backend}.{slot}.scratch.{role}"

            def fail(what: str, key: str = key) -> KernelInterfaceError:
                return KernelInterfaceError(entry.slot, entry.source, f"{key}: {what}")

            live = sorted(expr.names - static.keys() - set(BUILTIN_NAMES))
            if live:
                raise fail(
                    f"{expr.text!r} reads {', '.join(live)}, which change with the live "
                    "sizes; a scratch buffer is allocated once, at load, for the op's largest "
                    f"shape: size it by values fixed at load ({', '.join(sorted(static))})"
                )
            try:
                nbytes = expr.evaluate_int(static)
            except ExpressionError as err:
                raise fail(str(err)) from None
            if nbytes < 1:
                read = ", ".join(f"{n}={static[n]}" for n in sorted(expr.names))
                raise fail(
                    f"{expr.text!r} gives {nbytes} bytes"
                    + (f" (at {read})" if read else "")
                    + "; expected a size of at least 1 byte"
                )
            sizes[role] = max(sizes.get(role, 0), nbytes)
    return sizes


@dataclass(frozen=True)
class KernelManifest:
    """A parsed `kernels.toml`: the slots it replaces on each backend.

    Attributes:
        path: the manifest file.
        entries: by (backend, slot).
    """

    path: Path
    entries: dict[tuple[Backend, str], KernelEntry]

    @property
    def folder(self) -> Path:
        """The kernel folder: every path of the manifest is relative to it."""
        return self.path.parent

    def entry(self, backend: Backend, slot: str) -> KernelEntry | None:
        """The entry replacing `slot` on `backend`, or None (the project's kernel runs)."""
        return self.entries.get((backend, slot))

    def slots(self, backend: Backend) -> tuple[str, ...]:
        """The slots replaced on `backend`."""
        return tuple(slot for b, slot in self.entries if b == backend)

    def scratch_entry(self, backend: Backend, op: str) -> KernelEntry | None:
        """An entry of `op` on `backend` that carries the op's manifest-sized scratch roles
        (`KernelEntry.op_scratch`, the same on each of them), or None when none is sized."""
        for (b, slot), entry in self.entries.items():
            if b == backend and entry.op_scratch and SLOTS[slot].op == op:
                return entry
        return None

    def files(self) -> tuple[Path, ...]:
        """The manifest and every file it names (shaders, adapter modules): what a bundle
        carries, each once."""
        files = [self.path]
        for entry in self.entries.values():
            files.append(entry.source)
            if entry.adapter is not None:
                files.append(entry.adapter.file)
        return tuple(dict.fromkeys(files))

    def to_doc(self) -> dict[str, Any]:
        """The manifest as TOML data (what `parse_manifest` reads back to an equal one)."""
        doc: dict[str, Any] = {"format": MANIFEST_FORMAT}
        for (backend, slot), entry in self.entries.items():
            doc.setdefault(backend, {})[slot] = _entry_doc(entry, self.folder)
        return doc


def _exprs_doc(exprs: Mapping[Any, Expression]) -> dict[str, str]:
    return {str(key): expr.text for key, expr in exprs.items()}


def _dispatch_doc(dispatch: KernelDispatch) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if dispatch.bindings:
        doc["bindings"] = {str(k): v for k, v in dispatch.bindings.items()}
    if dispatch.params:
        doc["params"] = _exprs_doc(dispatch.params)
    if dispatch.push:
        doc["push"] = _exprs_doc(dispatch.push)
    count = dispatch.count
    doc["dispatch"] = [e.text for e in count] if isinstance(count, tuple) else count.text
    return doc


def _entry_doc(entry: KernelEntry, folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "file" if entry.kind == "wgsl" else entry.kind: entry.source.relative_to(folder).as_posix()
    }
    if entry.entry != "main":
        doc["entry"] = entry.entry
    if entry.overrides:
        doc["overrides"] = _exprs_doc(entry.overrides)
    if entry.spec:
        doc["spec"] = _exprs_doc(entry.spec)
    if entry.padding:
        doc["padding"] = list(entry.padding)
    if entry.fold:
        doc["fold"] = True
    if entry.exact:
        doc["exact"] = True
    if entry.requires:
        doc["requires"] = [r.text for r in entry.requires]
    if entry.defines:
        doc["defines"] = dict(entry.defines)
    if entry.scratch:
        doc["scratch"] = _exprs_doc(entry.scratch)
    if entry.masked_columns is not None:
        doc["masked_columns"] = entry.masked_columns
    if entry.precision != PRECISIONS[0]:
        doc["precision"] = entry.precision
    if entry.adapter is not None:
        doc["adapter"] = f"{entry.adapter.file.relative_to(folder).as_posix()}:{entry.adapter.name}"
    if len(entry.dispatches) == 1:
        doc.update(_dispatch_doc(entry.dispatches[0]))
    else:
        doc["dispatch_list"] = [_dispatch_doc(d) for d in entry.dispatches]
    return doc


def builtin_entry(backend: Backend, slot: str, source: Path) -> KernelEntry:
    """The implicit manifest entry of the project's own kernel of `slot` in `source`.

    Params and push members by the same-name value, members matching `^_pad` zero, bindings
    by the default rule, overrides and specialization constants by the project rule (see
    `KernelEntry`), one dispatch of the op's own `workgroups` count, folded when past the
    per-dimension limit (every project kernel recovers its 1-D index).

    Raises:
        KeyError: `slot` is not a slot of any op.
    """
    if slot not in SLOTS:
        raise KeyError(f"no slot {slot!r}; known: {sorted(SLOTS)}")
    return KernelEntry(
        backend=backend,
        slot=slot,
        source=source,
        kind="wgsl" if backend == "webgpu" else "glsl",
        dispatches=(KernelDispatch({}, {}, {}, Expression.compile(WORKGROUPS_VALUE)),),
        overrides=None if backend == "webgpu" else {},
        spec=None if backend == "vulkan" else {},
        padding_pattern=PROJECT_PADDING,
        fold=True,
        builtin=True,
    )


# --- parsing ---------------------------------------------------------------------------------

_SOURCE_KEYS: dict[Backend, tuple[str, ...]] = {"webgpu": ("file",), "vulkan": ("glsl", "spirv")}
_COMMON_KEYS = (
    "entry",
    "params",
    "padding",
    "bindings",
    "dispatch",
    "fold",
    "requires",
    "exact",
    "scratch",
    "masked_columns",
    "precision",
)
_SECTION_KEYS: dict[Backend, tuple[str, ...]] = {
    "webgpu": ("file", *_COMMON_KEYS, "overrides", "adapter", "dispatch_list", "extends"),
    "vulkan": (
        "glsl",
        "spirv",
        *_COMMON_KEYS,
        "spec",
        "push",
        "defines",
        "adapter",
        "dispatch_list",
        "extends",
    ),
}
EXTENDS_KEY = "extends"
# The tables of a section that an extending section merges member by member (its other
# keys replace the inherited ones whole).
_MEMBER_TABLES = ("params", "push", "spec", "overrides", "bindings", "defines", "scratch")
_DISPATCH_KEYS: dict[Backend, tuple[str, ...]] = {
    "webgpu": ("bindings", "params", "dispatch"),
    "vulkan": ("bindings", "params", "push", "dispatch"),
}
# A key of the other backend, and what to write instead.
_WRONG_BACKEND = {
    ("webgpu", "glsl"): 'a webgpu kernel is WGSL: file = "<name>.wgsl"',
    ("webgpu", "spirv"): 'a webgpu kernel is WGSL: file = "<name>.wgsl"',
    ("webgpu", "spec"): 'WGSL has overrides: overrides = { <name> = "<expression>" }',
    ("webgpu", "push"): "WGSL has no push constants: use params.<member>",
    ("webgpu", "defines"): 'WGSL has no preprocessor: use overrides = { <name> = "<expression>" }',
    ("vulkan", "file"): 'a vulkan kernel is glsl = "<name>.comp" or spirv = "<name>.spv"',
    ("vulkan", "overrides"): "Vulkan has specialization constants: spec.<name-or-id>",
}


# A section's `precision`: the arithmetic its kernel computes in (the first is the default).
PRECISIONS = ("f32", "f16")


def parse_precision(path: Path, where: str, section: Mapping[str, Any], slot: SlotInterface) -> str:
    """A section's `precision = "f32" | "f16"` ("f32" when absent). "f16" says the kernel
    computes in f16 arithmetic, not only loads and stores f16, so it belongs to an f16
    slot (`<slot>_f16`, whose tensors are f16): a kernel of an f32 slot computing in f16
    would round its f32 inputs, which no budget covers.

    Raises:
        KernelManifestError: another value, or "f16" on a slot of f32 tensors (one line
            naming the file and the key).
    """
    value = section.get("precision", PRECISIONS[0])
    key = f"{where}.precision"
    if value not in PRECISIONS:
        raise KernelManifestError(
            path,
            f"expected {' or '.join(repr(p) for p in PRECISIONS)} (the arithmetic the kernel "
            f"computes in), got {_shown(value)}",
            where=key,
        )
    if value != PRECISIONS[0] and not slot.name.endswith(F16_SUFFIX):
        twins = [s for s in SIGNATURES[slot.op].slots if s.endswith(F16_SUFFIX)]
        raise KernelManifestError(
            path,
            f"precision = {value!r} is for a kernel of an f16 slot (of {slot.op}: "
            f"{', '.join(twins) or 'none'}); slot {slot.name} loads and stores f32, and a "
            "kernel rounding its f32 inputs to f16 has no budget",
            where=key,
        )
    return cast(str, value)


class _Parser:
    """Checks one manifest's data; every error names the file and the field."""

    def __init__(self, path: Path, check_files: bool, text: str = "") -> None:
        self.path = path
        self.folder = path.parent
        self.check_files = check_files
        self.text = text

    def fail(self, where: str | None, what: str) -> KernelManifestError:
        return KernelManifestError(self.path, what, where=where)

    def table(self, where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {_shown(value)}")
        return value

    def keys(self, where: str, table: Mapping[str, Any], allowed: Sequence[str]) -> None:
        for key in table:
            if key not in allowed:
                hint = _suggest(key, allowed)
                raise self.fail(
                    f"{where}.{key}" if where else key,
                    f"unknown key {key!r}{hint}; expected one of {', '.join(allowed)}",
                )

    def manifest(self, doc: dict[str, Any]) -> KernelManifest:
        if "format" not in doc:
            raise self.fail(
                "format", f'missing; the first line must be format = "{MANIFEST_FORMAT}"'
            )
        if doc["format"] != MANIFEST_FORMAT:
            raise self.fail(
                "format",
                f"expected {MANIFEST_FORMAT!r}, got {_shown(doc['format'])} (this version "
                f"reads {MANIFEST_FORMAT} only)",
            )
        self.keys("", doc, ("format", *BACKENDS))
        # The scratch roles each op's sections add, by (backend, op): any section of the
        # op may bind them, so they are known before a section's bindings are checked.
        self.shared: dict[tuple[Backend, str], set[str]] = {}
        for backend in BACKENDS:
            sections = doc.get(backend, {})
            for slot, section in sections.items() if isinstance(sections, dict) else ():
                declared = section.get("scratch") if isinstance(section, dict) else None
                if slot in SLOTS and isinstance(declared, dict):
                    roles = self.shared.setdefault((backend, SLOTS[slot].op), set())
                    roles.update(r for r in declared if r not in _op_roles(SLOTS[slot].op))
        entries: dict[tuple[Backend, str], KernelEntry] = {}
        for backend in BACKENDS:
            sections = self.table(backend, doc.get(backend, {}))
            for slot in sections:
                if slot not in SLOTS:
                    raise self.fail(
                        f"{backend}.{slot}",
                        f"unknown slot {slot!r}{_suggest(slot, SLOTS)}; expected a slot of "
                        "`parity list` (graph_format/ops/*.toml)",
                    )
            resolved: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}
            for slot in sections:
                section, inherited = self.extended(backend, sections, slot, resolved, ())
                try:
                    entries[(backend, slot)] = self.entry(backend, SLOTS[slot], section)
                except KernelManifestError as err:
                    raise _inherited(err, f"{backend}.{slot}.", inherited) from None
        if not entries:
            raise self.fail(None, "names no slot; expected [webgpu.<slot>] or [vulkan.<slot>]")
        self.check_masked_columns(entries)
        return KernelManifest(self.path, _share_scratch(entries))

    def check_masked_columns(self, entries: Mapping[tuple[Backend, str], KernelEntry]) -> None:
        """A softmax that reads the masked columns runs only after qk kernels writing them:
        every qk slot the manifest replaces on that backend says so, and one at least (a qk
        precision left to the project is refused per graph: `masked_columns_unwritten`)."""
        for (backend, slot), entry in entries.items():
            if slot not in MASK_READERS or entry.masked_columns != MASKED_READ:
                continue
            replaced = [w for w in MASK_WRITERS if (backend, w) in entries]
            for writer in replaced or MASK_WRITERS[:1]:
                found = entries.get((backend, writer))
                if found is None or found.masked_columns != MASKED_WRITTEN:
                    runs = f"{backend}.{writer}" if found else f"the project's {writer} kernel"
                    raise self.fail(
                        f"{backend}.{slot}.masked_columns",
                        f"{MASKED_READ!r}: the softmax reads the masked columns of each "
                        f"scores row, which {runs} does not write (only its masked_columns = "
                        f'"{MASKED_WRITTEN}" does); replace {writer} on {backend} with a '
                        f'kernel that writes them and says masked_columns = "{MASKED_WRITTEN}", '
                        "or read only the unmasked columns",
                    )

    def extended(
        self,
        backend: Backend,
        sections: Mapping[str, Any],
        slot: str,
        resolved: dict[str, tuple[dict[str, Any], dict[str, str]]],
        chain: tuple[str, ...],
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Section `slot` with what it `extends` merged in, and where each inherited key
        (`file`, `params.n_rows`) comes from (the slot of the section that wrote it).

        The section named by `extends` (of the same backend, itself resolved first) gives
        every key; the section's own keys replace them, except that the member tables
        (`params`, `push`, `spec`, `overrides`, `bindings`) merge member by member and a
        source key (`file`, `glsl`, `spirv`) replaces every inherited source key.
        """
        if slot in resolved:
            return resolved[slot]
        section = self.table(f"{backend}.{slot}", sections[slot])
        if EXTENDS_KEY not in section:
            resolved[slot] = (section, {})
            return resolved[slot]
        where = f"{backend}.{slot}.{EXTENDS_KEY}"
        line = _key_line(self.text, backend, slot, EXTENDS_KEY)
        target = section[EXTENDS_KEY]
        others = [s for s in sections if s != slot]
        expected = (
            f"expected the slot of another [{backend}.<slot>] section: "
            f"{', '.join(others) or 'none in this manifest'}"
        )
        if not isinstance(target, str):
            raise KernelManifestError(
                self.path, f"{expected}, got {_shown(target)}", where=where, line=line
            )
        backend_of, dot, named = target.rpartition(".")
        if dot and backend_of != backend:
            raise KernelManifestError(
                self.path,
                f"a section extends one of its own backend: [{backend}.<slot>], got "
                f"{target!r} (a {backend} kernel's keys do not fit another backend)",
                where=where,
                line=line,
            )
        if named not in sections:
            raise KernelManifestError(
                self.path,
                f"no section [{backend}.{named}] in this manifest{_suggest(named, others)}; "
                + expected,
                where=where,
                line=line,
            )
        path = (*chain, slot)
        if named in path:
            start = path[path.index(named) :]
            raise KernelManifestError(
                self.path,
                f"extends a section that extends it: {backend}.{' -> '.join((*start, named))}",
                where=f"{backend}.{named}.{EXTENDS_KEY}",
                line=_key_line(self.text, backend, named, EXTENDS_KEY),
            )
        base, base_from = self.extended(backend, sections, named, resolved, path)
        merged = {
            k: dict(v) if k in _MEMBER_TABLES and isinstance(v, dict) else v
            for k, v in base.items()
        }
        inherited = {key: base_from.get(key, named) for key in _section_keys(base)}
        own = {k: v for k, v in section.items() if k != EXTENDS_KEY}
        if any(k in own for k in _SOURCE_KEYS[backend]):
            for key in _SOURCE_KEYS[backend]:
                merged.pop(key, None)
                inherited.pop(key, None)
        for key, value in own.items():
            if (
                key in _MEMBER_TABLES
                and isinstance(value, dict)
                and isinstance(merged.get(key), dict)
            ):
                merged[key] = {**merged[key], **value}
                for member in value:
                    inherited.pop(f"{key}.{member}", None)
            else:
                merged[key] = value
                inherited = {k: v for k, v in inherited.items() if k.split(".")[0] != key}
        resolved[slot] = (merged, inherited)
        return resolved[slot]

    def entry(self, backend: Backend, slot: SlotInterface, section: Any) -> KernelEntry:
        where = f"{backend}.{slot.name}"
        section = self.table(where, section)
        for key in section:
            if (backend, key) in _WRONG_BACKEND:
                raise self.fail(
                    f"{where}.{key}", f"not a {backend} key: {_WRONG_BACKEND[(backend, key)]}"
                )
        self.keys(where, section, _SECTION_KEYS[backend])
        given = [k for k in _SOURCE_KEYS[backend] if k in section]
        if len(given) != 1:
            keys = " or ".join(f"{k} = ..." for k in _SOURCE_KEYS[backend])
            raise self.fail(
                where,
                f"expected exactly one of {keys}, got "
                + (" and ".join(given) if given else "none"),
            )
        source_key = given[0]
        source = self.file(f"{where}.{source_key}", section[source_key])
        kind: SourceKind = "wgsl" if source_key == "file" else cast(SourceKind, source_key)
        entry_point = section.get("entry", "main")
        if not isinstance(entry_point, str) or not entry_point.isidentifier():
            raise self.fail(
                f"{where}.entry", f"expected a function name, got {_shown(entry_point)}"
            )

        overrides = self.exprs(where, "overrides", section, slot) if backend == "webgpu" else {}
        spec = (
            {_name_or_index(k): e for k, e in self.exprs(where, "spec", section, slot).items()}
            if backend == "vulkan"
            else {}
        )
        padding = section.get("padding", [])
        if not isinstance(padding, list) or not all(isinstance(p, str) for p in padding):
            raise self.fail(
                f"{where}.padding", f"expected a list of member names, got {_shown(padding)}"
            )
        fold = section.get("fold", False)
        if not isinstance(fold, bool):
            raise self.fail(f"{where}.fold", f"expected true or false, got {_shown(fold)}")
        exact = section.get("exact", False)
        if not isinstance(exact, bool):
            raise self.fail(f"{where}.exact", f"expected true or false, got {_shown(exact)}")
        requires = section.get("requires", [])
        if not isinstance(requires, list):
            raise self.fail(
                f"{where}.requires", f"expected a list of conditions, got {_shown(requires)}"
            )
        conditions = tuple(
            self.expr(f"{where}.requires[{i}]", text, slot, condition=True)
            for i, text in enumerate(requires)
        )
        adapter = (
            self.adapter(f"{where}.adapter", section["adapter"]) if "adapter" in section else None
        )
        defines = self.defines(f"{where}.defines", section, kind)
        scratch = self.scratch(backend, where, section, slot)
        masked = self.masked_columns(where, section, slot)
        precision = parse_precision(self.path, where, section, slot)

        shared = self.dispatch(backend, where, section, slot, fallback=None)
        if "dispatch_list" in section:
            items = section["dispatch_list"]
            if not isinstance(items, list) or not items:
                raise self.fail(
                    f"{where}.dispatch_list",
                    f"expected [[{where}.dispatch_list]] tables, one per dispatch, got "
                    f"{_shown(items)}",
                )
            dispatches = tuple(
                self.dispatch(
                    backend,
                    f"{where}.dispatch_list[{i}]",
                    self.table(f"{where}.dispatch_list[{i}]", item),
                    slot,
                    fallback=shared,
                    keys=_DISPATCH_KEYS[backend],
                )
                for i, item in enumerate(items)
            )
        else:
            dispatches = (shared,)
        for i, d in enumerate(dispatches):
            if fold and isinstance(d.count, tuple):
                index = f".dispatch_list[{i}]" if "dispatch_list" in section else ""
                raise self.fail(
                    f"{where}{index}.dispatch",
                    "fold = true folds a 1-D count; an [x, y, z] grid is dispatched as written",
                )
        return KernelEntry(
            backend=backend,
            slot=slot.name,
            source=source,
            kind=kind,
            dispatches=dispatches,
            entry=entry_point,
            overrides=overrides if backend == "webgpu" else {},
            spec=spec if backend == "vulkan" else {},
            padding=tuple(padding),
            fold=fold,
            requires=conditions,
            adapter=adapter,
            exact=exact,
            defines=defines,
            scratch=scratch,
            masked_columns=masked,
            precision=precision,
        )

    def scratch(
        self, backend: Backend, where: str, section: Mapping[str, Any], slot: SlotInterface
    ) -> dict[str, Expression]:
        """`scratch.<role> = "<bytes>"`: a scratch role of the op resized, or a new one."""
        sized = self.exprs(where, "scratch", section, slot)
        where = f"{where}.scratch"
        op = SIGNATURES[slot.op]
        own = sorted(_op_roles(slot.op) - set(op.tensors))
        for role in sized:
            if role in op.tensors or role == PARAMS_TARGET or not role.isidentifier():
                what = (
                    f"a tensor of op {slot.op}, which the graph sizes"
                    if role in op.tensors
                    else "not a role name"
                )
                raise self.fail(
                    f"{where}.{role}",
                    f"{role!r} is {what}; expected a scratch role of the op "
                    f"({', '.join(own) or 'none'}) or a new name",
                )
            if role not in slot.tensors and role in own:
                raise self.fail(
                    f"{where}.{role}",
                    f"{role!r} is a scratch role of other slots of {slot.op}, not of "
                    f"{slot.name} (its roles: {', '.join(slot.tensors)}); size it in the "
                    "section of a slot that binds it",
                )
        return sized

    def masked_columns(
        self, where: str, section: Mapping[str, Any], slot: SlotInterface
    ) -> str | None:
        """`masked_columns`: what a causal qk kernel writes, or a softmax reads."""
        if "masked_columns" not in section:
            return None
        value = section["masked_columns"]
        where = f"{where}.masked_columns"
        if slot.name in MASK_WRITERS:
            allowed = (MASKED_WRITTEN, MASKED_SKIPPED)
        elif slot.name in MASK_READERS:
            allowed = (MASKED_READ, MASKED_IGNORED)
        else:
            raise self.fail(
                where,
                f"slot {slot.name} has no masked columns; the key belongs to the causal "
                f"attention's qk ({', '.join(MASK_WRITERS)}) and softmax "
                f"({', '.join(MASK_READERS)}) sections",
            )
        if value not in allowed:
            raise self.fail(
                where, f"expected {' or '.join(repr(a) for a in allowed)}, got {_shown(value)}"
            )
        return cast(str, value)

    def dispatch(
        self,
        backend: Backend,
        where: str,
        table: Mapping[str, Any],
        slot: SlotInterface,
        *,
        fallback: KernelDispatch | None,
        keys: Sequence[str] | None = None,
    ) -> KernelDispatch:
        """A dispatch from `table`'s keys; a split's entry inherits the section's."""
        if keys is not None:
            self.keys(where, table, keys)
        bindings = dict(fallback.bindings) if fallback else {}
        bindings.update(self.bindings(backend, where, table, slot))
        params = dict(fallback.params) if fallback else {}
        params.update(self.exprs(where, "params", table, slot))
        push = dict(fallback.push) if fallback else {}
        if backend == "vulkan":
            push.update(self.exprs(where, "push", table, slot))
        if "dispatch" in table:
            count = self.count(f"{where}.dispatch", table["dispatch"], slot)
        elif fallback is not None:
            count = fallback.count
        else:
            count = Expression.compile(WORKGROUPS_VALUE)
        return KernelDispatch(bindings, params, push, count)

    def count(
        self, where: str, value: Any, slot: SlotInterface
    ) -> Expression | tuple[Expression, Expression, Expression]:
        if isinstance(value, list):
            if len(value) != 3:
                raise self.fail(
                    where, f"expected one expression or [x, y, z], got {len(value)} items"
                )
            x, y, z = (self.expr(f"{where}[{i}]", v, slot) for i, v in enumerate(value))
            return (x, y, z)
        return self.expr(where, value, slot)

    def bindings(
        self, backend: Backend, where: str, table: Mapping[str, Any], slot: SlotInterface
    ) -> dict[str | int, str]:
        where = f"{where}.bindings"
        raw = self.table(where, table.get("bindings", {}))
        metas = SIGNATURES[slot.op].tensors
        shared = sorted(self.shared.get((backend, slot.op), ()))
        targets = [*slot.tensors, *shared, PARAMS_TARGET]
        if backend == "vulkan":
            targets += [t + META_SUFFIX for t in metas]
        out: dict[str | int, str] = {}
        for key, target in raw.items():
            if not isinstance(target, str) or target not in targets:
                roles = ", ".join([*slot.tensors, *shared])
                expected = f"a role of slot {slot.name} ({roles}) or 'params'"
                if backend == "vulkan":
                    expected += f", or '<tensor>.meta' of an op tensor ({', '.join(metas)})"
                elif isinstance(target, str) and target.endswith(META_SUFFIX):
                    expected += " (WebGPU kernels have no metadata buffers)"
                raise self.fail(f"{where}.{key}", f"expected {expected}, got {_shown(target)}")
            out[_name_or_index(key)] = target
        return out

    def exprs(
        self, where: str, key: str, table: Mapping[str, Any], slot: SlotInterface
    ) -> dict[str, Expression]:
        raw = self.table(f"{where}.{key}", table.get(key, {}))
        return {name: self.expr(f"{where}.{key}.{name}", text, slot) for name, text in raw.items()}

    def expr(
        self, where: str, text: Any, slot: SlotInterface, *, condition: bool = False
    ) -> Expression:
        try:
            expr = Expression.compile(text, condition=condition)
        except ExpressionError as err:
            raise self.fail(where, str(err)) from None
        for name in sorted(expr.names):
            if name not in slot.values and name not in BUILTIN_NAMES:
                raise self.fail(
                    where,
                    f"{expr.text!r} reads {name!r}{_suggest(name, slot.values)}, which slot "
                    f"{slot.name} does not offer; expected one of {', '.join(slot.values)} "
                    f"(or {', '.join(BUILTIN_NAMES)})",
                )
        return expr

    def file(self, where: str, value: Any, *, suffix: str | None = None) -> Path:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"expected a file name, got {_shown(value)}")
        path = self.folder / value
        if Path(value).is_absolute() or ".." in Path(value).parts:
            raise self.fail(where, f"expected a path inside the manifest's folder, got {value!r}")
        if suffix is not None and path.suffix != suffix:
            raise self.fail(where, f"expected a {suffix} file, got {value!r}")
        if self.check_files and not path.is_file():
            raise self.fail(where, f"no file {value!r} in {self.folder}")
        return path

    def defines(self, where: str, section: Mapping[str, Any], kind: SourceKind) -> dict[str, str]:
        """A GLSL kernel's preprocessor macros, each as the text glslc's -D gives it."""
        if "defines" not in section:
            return {}
        raw = self.table(where, section["defines"])
        if kind != "glsl":
            raise self.fail(
                where,
                "defines are passed to glslc -D when it compiles a glsl = ... kernel; a SPIR-V "
                "module is compiled already (build it with them)",
            )
        out: dict[str, str] = {}
        for name, value in raw.items():
            at = f"{where}.{name}"
            if not _MACRO.fullmatch(name):
                raise self.fail(at, f"expected a macro name ([A-Za-z_][A-Za-z0-9_]*), got {name!r}")
            if name.startswith("GL_") or "__" in name:
                raise self.fail(at, f"{name!r} is reserved in GLSL (names with GL_ or __)")
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise self.fail(
                    at, f"expected a string, an integer or a float, got {_shown(value)}"
                )
            text = value if isinstance(value, str) else repr(value)
            if "\n" in text or "\r" in text:
                raise self.fail(at, f"expected one line of macro text, got {text!r}")
            out[name] = text
        return out

    def adapter(self, where: str, value: Any) -> AdapterRef:
        module, _, name = value.partition(":") if isinstance(value, str) else ("", "", "")
        if not module or not name.isidentifier():
            raise self.fail(where, f'expected "<module>.py:<Class>", got {_shown(value)}')
        return AdapterRef(self.file(where, module, suffix=".py"), name)


def _section_keys(section: Mapping[str, Any]) -> list[str]:
    """A section's keys, a member table's by member (`file`, `params.n_rows`)."""
    return [
        f"{key}.{member}" if member is not None else key
        for key, value in section.items()
        for member in (value if key in _MEMBER_TABLES and isinstance(value, dict) else [None])
    ]


def _inherited(
    err: KernelManifestError, prefix: str, inherited: Mapping[str, str]
) -> KernelManifestError:
    """`err` saying which section wrote the key it is about, when an extending section
    inherited it (`... (inherited from [webgpu.add_broadcast])`)."""
    if not inherited or err.where is None or not err.where.startswith(prefix):
        return err
    key = err.where.removeprefix(prefix)
    top = re.split(r"[.\[]", key, maxsplit=1)[0]
    source = inherited.get(key) or inherited.get(top)
    if source is None:
        return err
    backend = prefix.split(".")[0]
    return KernelManifestError(
        err.path,
        f"{err.what} (inherited from [{backend}.{source}])",
        where=err.where,
        line=err.line,
    )


def _key_line(text: str, backend: str, slot: str, key: str) -> int | None:
    """The line of `key` in the `[backend.slot]` table of a manifest's text (or of a
    dotted `backend.slot.key` / inline-table form naming both), for an error; None when
    not found."""
    lines = text.splitlines()
    header = re.compile(
        rf'^\s*\[\s*"?{re.escape(backend)}"?\s*\.\s*"?{re.escape(slot)}"?\s*\]\s*(#.*)?$'
    )
    assignment = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=')
    inside = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("["):
            inside = header.match(line) is not None
        elif inside and assignment.match(line):
            return number
    loose = re.compile(rf"\b{re.escape(slot)}\b.*\b{re.escape(key)}\s*=")
    return next((n for n, line in enumerate(lines, 1) if loose.search(line)), None)


# A preprocessor macro's name, as GLSL's grammar has it.
_MACRO = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def masked_columns_unwritten(qk: KernelEntry, softmax: KernelEntry) -> str | None:
    """Why this qk kernel cannot run before this softmax (a requirement the graph breaks:
    the softmax reads masked columns the qk kernel leaves unwritten), or None."""
    if softmax.masked_columns == MASKED_READ and qk.masked_columns != MASKED_WRITTEN:
        by = "the project's kernel" if qk.builtin else str(qk.source)
        return (
            f"{qk.slot} writing the masked columns it reads ({qk.slot} runs {by}, which "
            f'does not: replace it with one that says masked_columns = "{MASKED_WRITTEN}")'
        )
    return None


def _op_roles(op: str) -> set[str]:
    """Every role of every slot of `op`: its tensors and its own scratch buffers."""
    return {role for s in SIGNATURES[op].slots.values() for role in s.tensors}


def _share_scratch(
    entries: dict[tuple[Backend, str], KernelEntry],
) -> dict[tuple[Backend, str], KernelEntry]:
    """Each entry with every scratch size its op's sections declare on its backend."""
    by_op: dict[tuple[Backend, str], dict[str, list[tuple[str, Expression]]]] = {}
    for (backend, slot), entry in entries.items():
        for role, expr in entry.scratch.items():
            by_op.setdefault((backend, SLOTS[slot].op), {}).setdefault(role, []).append(
                (slot, expr)
            )
    out: dict[tuple[Backend, str], KernelEntry] = {}
    for (backend, slot), entry in entries.items():
        declared = by_op.get((backend, SLOTS[slot].op), {})
        op_scratch = {role: tuple(sizes) for role, sizes in declared.items()}
        out[(backend, slot)] = replace(entry, op_scratch=op_scratch) if op_scratch else entry
    return out


def _name_or_index(key: str) -> str | int:
    """A binding or spec-constant key: a decimal number is an index (TOML keys are text)."""
    return int(key) if key.isdecimal() else key


def _shown(value: Any) -> str:
    """A value as the user wrote it, with its TOML type."""
    kinds = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return f"{kinds.get(type(value), 'table')} {value!r}"


def _suggest(word: str, choices: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for a near miss (another case, a typo), else ""."""
    choices = list(choices)
    close = [c for c in choices if c.lower() == word.lower()]
    close = close or difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_manifest(text: str, path: Path, *, check_files: bool = True) -> KernelManifest:
    """The manifest in `text`, read from `path` (its folder holds the files it names).

    Args:
        check_files: check that every named file exists (off for a manifest read out of a
            bundle's index before its files are unpacked).

    Raises:
        KernelManifestError: bad TOML (with its line), an old or unknown format, an unknown
            key, backend or slot, a role or value the slot lacks, a bad expression, a missing
            file. The message names the file and the field.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        found = re.search(r"at line (\d+)", str(err))
        raise KernelManifestError(
            path, f"not valid TOML: {err}", line=int(found.group(1)) if found else None
        ) from None
    return _Parser(path, check_files, text).manifest(doc)


def load_manifest(location: Path) -> KernelManifest:
    """The manifest of a kernel folder (its `kernels.toml`), or of a manifest file.

    Raises:
        KernelManifestError: unreadable, or as `parse_manifest`.
    """
    path = location / MANIFEST_NAME if location.is_dir() else location
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise KernelManifestError(path, f"cannot read the manifest: {reason}") from None
    return parse_manifest(text, path)
