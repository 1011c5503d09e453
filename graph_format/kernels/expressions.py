"""The manifest's expression language: a safe evaluator of arithmetic over a slot's values
(dispatch counts, params members, overrides, `requires` conditions, scratch sizes)."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from graph_format.kernels.errors import ExpressionError
from graph_format.kernels.format import Value

# |int| above this in an expression is an error: no dispatch or params value is near it, and
# it keeps a hostile manifest from building huge numbers by repeated multiplication.
_INT_LIMIT = 1 << 64
_MAX_EXPRESSION_CHARS = 1000


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
            return self._scalar(node.id, values)
        if isinstance(node, ast.Subscript):
            return self._element(node, values)
        if isinstance(node, ast.BinOp):
            return self._binary(node, values)
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, values)
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.Call):
            return self._call(node, values)
        if isinstance(node, ast.Compare):
            return self._compare(node, values)
        if isinstance(node, ast.BoolOp):
            results = (bool(self._eval(v, values)) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        raise AssertionError(f"unchecked node {ast.dump(node)}")  # _Checker refused it

    def _scalar(self, name: str, values: Mapping[str, Value]) -> int | float:
        """A value read by name in arithmetic: a vector passes only whole, by a bare name."""
        value = self._lookup(name, values)
        if isinstance(value, tuple):
            raise ExpressionError(
                self.text,
                f"{name!r} is a vector {value}: pass it whole by its bare name, or an "
                f"element as {name}[0]",
            )
        return value

    def _binary(self, node: ast.BinOp, values: Mapping[str, Value]) -> Any:
        symbol, apply = _BINARY[type(node.op)]
        left, right = self._eval(node.left, values), self._eval(node.right, values)
        if symbol in ("/", "//", "%") and right == 0:
            raise ExpressionError(self.text, f"division by zero in {symbol}")
        try:
            return _check_int(self.text, apply(left, right))
        except _DomainError as err:
            raise ExpressionError(self.text, str(err)) from None

    def _call(self, node: ast.Call, values: Mapping[str, Value]) -> int | float:
        assert isinstance(node.func, ast.Name)
        function, _ = _FUNCTIONS[node.func.id]
        args = [self._eval(a, values) for a in node.args]
        if node.func.id == "div_up" and args[1] == 0:
            raise ExpressionError(self.text, "division by zero in div_up")
        try:
            return _check_int(self.text, function(*args))
        except _DomainError as err:
            raise ExpressionError(self.text, str(err)) from None

    def _compare(self, node: ast.Compare, values: Mapping[str, Value]) -> bool:
        """A chain `a < b <= c`, as in Python: each comparison on the previous right side."""
        left = self._eval(node.left, values)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self._eval(comparator, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

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
