"""Errors shared by the graph format and both runtimes.

Both backends raise these classes so that the harness can check that they reject the same
inputs for the same reason (docs/design.md §6). They carry structured fields as well as a
message, so a comparison never depends on wording.
"""

from __future__ import annotations

from collections.abc import Sequence


class ParityError(Exception):
    """Base class of every error this project raises on purpose.

    Attributes:
        live: set by a runtime that refuses a step: the live dims of every tensor and the
            value of every SymInt it held at the moment of the refusal, before restoring the
            graph. An op's check may refuse because a value produced upstream was wrong (a
            `sym_size` that read stale dims, consumed by a `view_copy`); comparing these
            values with the contract's lets the harness name the op that produced it.
            None when not recorded.
    """

    live: dict[str, tuple[int, ...] | int] | None = None


class GraphFormatError(ParityError, ValueError):
    """A graph file is malformed; the message names the file, the JSON location and the fault."""


class GraphBuildError(ParityError, ValueError):
    """A well-formed graph that a backend cannot build (an op rejects its shapes or formats).

    Attributes:
        op: the op name in the graph.
        tensor: the offending tensor, when there is one.
    """

    def __init__(self, op: str, message: str, *, tensor: str | None = None) -> None:
        super().__init__(f"op {op!r}: {message}")
        self.op = op
        self.tensor = tensor


class ResizeError(ParityError, ValueError):
    """A requested live shape is invalid for a tensor; the graph is left unchanged.

    Attributes:
        tensor: the tensor's name.
        dim: the offending dim index, or None for a rank change.
        value: the requested size (the requested rank for a rank change).
        limit: the bound it broke (the max size, 1, or the allocated rank).
        reason: "rank", "nonpositive" or "above_max".
    """

    def __init__(self, tensor: str, dim: int | None, value: int, limit: int, reason: str) -> None:
        if reason == "rank":
            text = f"tensor {tensor!r}: rank must stay {limit}, got rank {value}"
        elif reason == "nonpositive":
            text = f"tensor {tensor!r}: dim {dim} must be >= 1, got {value}"
        else:
            text = f"tensor {tensor!r}: dim {dim} = {value} exceeds its max {limit}"
        super().__init__(text)
        self.tensor = tensor
        self.dim = dim
        self.value = value
        self.limit = limit
        self.reason = reason

    def key(self) -> tuple[str, int | None, str]:
        """What two backends must agree on when they both reject a resize."""
        return (self.tensor, self.dim, self.reason)


class InputError(ParityError, ValueError):
    """Execute inputs that are invalid beyond their shape; the graph is left unchanged.

    Examples: a missing input, a host dtype that cannot be converted, a token id outside the
    vocabulary, `input_pos + S` past the end of the KV cache, co-inputs whose live shapes
    disagree.

    Attributes:
        subject: the input, tensor or op the fault is about.
        reason: a short machine-readable reason shared by both backends.
    """

    def __init__(self, subject: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.subject = subject
        self.reason = reason

    def key(self) -> tuple[str, str]:
        """What two backends must agree on when they both reject an input."""
        return (self.subject, self.reason)


class PropagationError(ParityError, RuntimeError):
    """The resize engine did not converge (a cycle or a hook that keeps changing shapes).

    Attributes:
        ops: the ops whose resize hooks still ran in the last pass, in graph order.
        values: the tensors and SymInts still changing after the last pass.
    """

    def __init__(
        self, message: str, *, ops: Sequence[str] = (), values: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.ops = list(ops)
        self.values = list(values)


class OpError(ParityError, RuntimeError):
    """An op's own code raised an exception no runtime raises on purpose (a `StopIteration`
    in a resize hook, a `KeyError` in the code that packs a kernel's values, an
    `AttributeError` while the op builds): a bug in that op's implementation. The runtime's
    resize engine (and its loader) wraps the exception in this one, so that the finding
    names the op whose code raised; the original is its `__cause__`. A step that raises
    it leaves the graph as it was, as any refusal does.

    Attributes:
        backend: the runtime ("webgpu", "vulkan").
        op: the op's name in the graph.
        op_type: its type.
        stage: where its code ran: "load" (building the op) or "resize" (its resize hook,
            the choice of its kernel and the values handed to it).
        error: the original exception as `Type: message`.
    """

    def __init__(
        self, backend: str, op: str, op_type: str, stage: str, error: BaseException
    ) -> None:
        self.backend = backend
        self.op = op
        self.op_type = op_type
        self.stage = stage
        self.error = f"{type(error).__name__}: {error}"
        super().__init__(f"{backend}: op {op!r} ({op_type}) raised at {stage}: {self.error}")


class KernelBuildError(ParityError, RuntimeError):
    """A kernel's shader did not compile or validate on a backend (never the contract's
    doing: every shipped kernel must build).

    Attributes:
        backend: the runtime that built it ("webgpu", "vulkan").
        kernel: the kernel (shader file stem).
        shader: the path of the shader file it was built from.
        compiler: the compiler's or validator's whole output (naga's "Caused by" chain
            with line and column; glslc's `file:line: error: ...` lines; the Vulkan
            validation layer's messages about the shader module or pipeline), never cut.
        op: the op whose dispatch needed the kernel, when known.
    """

    def __init__(
        self, backend: str, kernel: str, shader: str, compiler: str, *, op: str | None = None
    ) -> None:
        self.backend = backend
        self.kernel = kernel
        self.shader = shader
        self.compiler = compiler.strip()
        self.op = op
        super().__init__(self._text())

    def _text(self) -> str:
        needed = f" (needed by op {self.op!r})" if self.op else ""
        head = f"{self.backend}: kernel {self.kernel!r} from {self.shader} does not build"
        return f"{head}{needed}:\n{self.compiler}"

    def for_op(self, op: str) -> KernelBuildError:
        """The same error naming the op whose dispatch needed the kernel."""
        self.op = op
        self.args = (self._text(),)
        return self


class KernelValuesError(KernelBuildError):
    """A kernel built, but its manifest's expressions fail on one step's values (a division
    by zero, a value past 2**64), or give a value its params or push member cannot hold (past
    a u32): the manifest's doing, and no compiler ran. `compiler` holds the reason, naming
    the expression or the member and the values."""

    def _text(self) -> str:
        needed = f" (needed by op {self.op!r})" if self.op else ""
        head = f"{self.backend}: kernel {self.kernel!r} from {self.shader}"
        return f"{head}: its manifest fails on this step's values{needed}:\n{self.compiler}"


class DeviceError(ParityError, RuntimeError):
    """The device or API reported an error while executing (validation error, device lost).

    Attributes:
        messages: the messages the API or the validation layer produced.
    """

    def __init__(self, backend: str, messages: list[str]) -> None:
        super().__init__(f"{backend}: " + "; ".join(messages))
        self.backend = backend
        self.messages = messages


class BackendUnavailable(ParityError, RuntimeError):
    """No device or driver for a backend; the message says what to install."""


class FeatureUnavailable(ParityError, RuntimeError):
    """The device lacks an optional feature the graph needs (float16 tensors need f16 shader
    arithmetic and 16-bit storage-buffer access): the graph is refused at load. Not a
    set-up error and not a divergence: the harness reports the case as unavailable, with
    the reason, and runs the rest.

    Attributes:
        backend: the runtime that refused.
        feature: what is missing (`f16`).
        reason: why, in the device's terms.
    """

    def __init__(self, backend: str, feature: str, reason: str) -> None:
        super().__init__(f"{backend}: {feature} unavailable: {reason}")
        self.backend = backend
        self.feature = feature
        self.reason = reason
