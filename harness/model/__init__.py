"""The op-model framework: what the harness's model of an op is, and the registry of them.

The harness's model of an op is the third implementation of docs/design.md §2, independent of
both backends. Each op's module in `harness/ops/` defines it and registers it here with
`register(op, model)` when imported (`harness.ops` imports every such module). Each model
subclasses `OpModel`, whose optional hooks (`dtypes`, `pr_regimes`, `probe_reference`,
`half_budget`, `regime_size`, `regimes`, `check_host`) have defaults; a model holds
- `check`: what a backend must refuse at load (`GraphBuildError` with the same op and tensor);
- `resize`: output live dims (and SymInts) from input live dims, or the rejection both
  backends must raise (`ResizeError`/`InputError` with the same key);
- `dispatches`: the exact dispatch slots of the op's kernel design (kernel variant,
  workgroup size, logical workgroup count, ran or skipped) for the live dims;
- `kernel_values`: what the op offers a kernel of each of its slots by name (the slot
  interface of `graph_format/ops/<op>.toml`), computed here independently of both backends;
  `slot_values` adds `workgroups` from `dispatches` (what a manifest's expressions read);
- `reference`: the op's math in float64;
- `budget`: per output element, the rounding error a correct float32 implementation may
  make from exact inputs (propagation through the graph is the reference evaluator's);
- `activations` and `required_regimes`: which tensor slots carry a model's data, and the
  coverage regimes a nightly run must reach (class attributes); optionally `pr_regimes`,
  those of them (the long paths: a GEMV's main loop, a long decode) that a pr run of the
  op's family must reach too (harness/run/profiles.py);
- `dtypes` (optional class attribute, default `("float32",)`): the float element types the
  op's kernels take; an op offers `"float16"` when it has its f16 kernel slots
  (`<slot>_f16`, graph_format's `dtype_slot`), and only then do case families draw f16
  for it (harness/gen/blocks.py, `family_dtype`).

Half precision: an op whose float tensors are float16 (`op_dtype`) loads f16, computes as
its docs say (f32 unless the slot says otherwise) and stores f16. `local_budget` is the one
place budgets are taken from: `budget` for the f32 computation, then for an f16 op the
rounding of every output to f16 (`harness.model.numerics.f16_store`), or the model's own
`half_budget(node, args, outputs, budgets)` where that differs (a copy stores exactly; an
f16-accumulating kernel rounds more; state it writes in f16). A manifest kernel that
computes in f16 (`precision = "f16"`) has its op's budget derived in f16 arithmetic:
`local_budget(..., arithmetic)`, whose derivations read the arithmetic's constants
(`harness.model.numerics.arithmetic`); `kernel_arithmetic` says which ops compute in it.

The model reads its node's arguments through graph_format's typed accessors
(`OpNode.arg`, `optional_arg`, `size_list`) and the readers here (`tensors`,
`optional_tensor`, `int_literal`, `LiveState.of`/`int_arg`/`ints`), never `node.args` raw.

An op may also define `probe_reference(node, args)`: its reference of many argument sets
at once, each `activations` slot and each state slot it updates carrying one extra leading
axis (the reference evaluator's random-sign probes, harness/check/reference.py), outputs
and state updated along it. Each probe's results must equal `reference` on that probe's
arguments bit for bit (the evaluator subtracts them from the unprobed outputs, where one
differing last bit is noise far above the propagated error): an op whose math broadcasts
over leading dims and reduces only over trailing ones aliases it to `reference`; one that
reshapes or aligns ranks (view_copy, add) or multiplies matrices (one product per probe,
linear_q4gsw) says how. Without it the evaluator calls `reference` once per probe.
Work an op derives from constants (a q4 dequantization) is done once per case with
`harness.model.constants.remember`.

An op that validates host data (token ids against the vocabulary) also defines
`check_host(node, live)`: it reads `live.host` and raises the `InputError` both backends
raise from their `_check_inputs`, before any resize. `ContractModel.step` runs every op's
`check_host` (in graph order) after the per-input checks and before the first `resize`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from graph_format import (
    FLOAT_DTYPES,
    SIGNATURES,
    Dims,
    Graph,
    GraphBuildError,
    OpNode,
    ResizeError,
    TensorValue,
)
from graph_format.kernels import WORKGROUPS_VALUE, Value
from graph_format.signatures import SLOTS
from harness.model.numerics import (
    ARITHMETICS,
    F32,
    RIGOROUS,
    SHORTEST_TIGHTER_SUM,
    STATISTICAL,
    Arithmetic,
    error_model,
    f16_store,
    longest_sum,
)

Grid = tuple[int, int, int]
# (op, kernel, workgroup size, logical workgroup count, ran)
ExpectedDispatch = tuple[str, str, Grid, Grid, bool]
# What an op's reference and budget receive per argument slot: float64 arrays for tensors,
# ints for ints and SymInts, floats for floats, tuples of ints for size lists, None if absent.
Args = dict[str, Any]


@dataclass(frozen=True)
class Binding:
    """A storage-buffer binding of a kernel, identical in its WGSL and its GLSL file.

    `element` uses WGSL spelling (f32, i32, u32, f16, vec4<f32>, vec4<u32>); the GLSL side
    spells it float, int, uint, float16_t, vec4, uvec4. Binding indices are positions:
    outputs first.
    """

    name: str
    access: str  # "read" | "read_write"
    element: str


@dataclass(frozen=True)
class KernelSpec:
    """One kernel variant: the shader files that implement it and their tensor bindings.

    Named once: `name` is the kernel's key in its op's table, and its shader stem unless
    `shader` names another (a kernel shared by ops: `add_flat` and `mul_flat` both run
    `binary_flat`); the files are `wgsl/<stem>.wgsl` and `glsl/<stem>.comp`, both generated
    from one family's templates (scripts/gen_shaders.py) and checked against this spec by
    tests/unit/test_shader_sync.py and the reflection tests. `wgsl_shader` / `glsl_shader`
    override one side's stem where the two languages' files are named apart (no project
    kernel does today).

    `exact`: the WGSL and the GLSL of this variant round alike: given bit-identical inputs on
    the same device, WebGPU's and Vulkan's outputs are bit-identical, so any bit difference
    between them is a bug of one side however far under budget it is (the exact tier,
    `harness.check.oracles.check_exact`). Declared only where measured true
    (docs/oracles.md "Exact equality"; `benchmarks.exact_pairs`).

    `webgpu_ulps`: how many ULPs apart two WebGPU implementations running this WGSL on
    different devices (Chrome's SwiftShader against lavapipe) may be, measured there
    (0 where the kernel has no transcendental); None where nothing is declared: f16
    kernels (SwiftShader has no f16, so never measured) and kernels using `exp`, which WGSL
    lets each device compute within 3 + 2|x| ULP, so that no fixed count holds. On one
    device the implementations are held to 0 wherever `exact` holds.
    """

    name: str
    tensors: tuple[Binding, ...]
    exact: bool = False
    webgpu_ulps: int | None = None
    shader: str | None = None
    wgsl_shader: str | None = None
    glsl_shader: str | None = None

    @property
    def stem(self) -> str:
        """The stem both shader files share (unless one side is overridden)."""
        return self.shader or self.name

    @property
    def wgsl(self) -> str:
        """The stem of the WGSL file, `wgsl/<stem>.wgsl`."""
        return self.wgsl_shader or self.stem

    @property
    def glsl(self) -> str:
        """The stem of the GLSL file, `glsl/<stem>.comp`."""
        return self.glsl_shader or self.stem


def rw(name: str, element: str = "f32") -> Binding:
    """A written tensor binding."""
    return Binding(name, "read_write", element)


def ro(name: str, element: str = "f32") -> Binding:
    """A read-only tensor binding."""
    return Binding(name, "read", element)


def kernels(*specs: KernelSpec) -> dict[str, KernelSpec]:
    """A name -> spec table."""
    return {spec.name: spec for spec in specs}


@dataclass
class LiveState:
    """Live dims of every tensor and the value of every SymInt, as the contract evolves them."""

    graph: Graph
    dims: dict[str, Dims]
    symints: dict[str, int] = field(default_factory=dict)
    # This step's host data of the tensor inputs (already checked: int64 ids fit int32).
    host: dict[str, np.ndarray] = field(default_factory=dict)

    def of(self, node: OpNode, slot: str) -> Dims:
        """Live dims of the tensor passed as `slot`."""
        return self.dims[node.arg(slot)]

    def max_of(self, node: OpNode, slot: str) -> Dims:
        """Max dims of the tensor passed as `slot` (or written as output `slot`)."""
        return self.graph.tensor(slot_name(node, slot)).dims

    def int_arg(self, node: OpNode, slot: str) -> int:
        """Current value of an int or SymInt argument."""
        return self._int(node.arg(slot))

    def ints(self, node: OpNode, slot: str) -> tuple[int, ...]:
        """Current values of a size list argument (ints and SymInts)."""
        return tuple(self._int(name) for name in node.size_list(slot))

    def _int(self, name: str) -> int:
        """Current value of the int or SymInt value called `name`."""
        if name in self.symints:
            return self.symints[name]
        return int(self.graph.scalar(name))

    def set_output(self, node: OpNode, slot: str, dims: Dims) -> None:
        """Set an output's live dims, with the same per-dim checks the backends apply."""
        name = node.outputs[slot]
        check_dims(name, dims, self.graph.tensor(name).dims)
        self.dims[name] = tuple(dims)


def slot_name(node: OpNode, slot: str) -> str:
    """The value passed as argument `slot` of `node`, or written as its output `slot` (an
    op's argument and output slots have distinct names: graph_format/signatures.py)."""
    return node.outputs[slot] if slot in node.outputs else node.arg(slot)


def tensors(node: OpNode, graph: Graph, *slots: str) -> tuple[TensorValue, ...]:
    """The tensors passed as (or written to) `slots` of `node`, in that order: what an op's
    load-time `check` reads, e.g. `x, weight, out = tensors(node, graph, "x", "weight", "out")`.
    """
    return tuple(graph.tensor(slot_name(node, slot)) for slot in slots)


def uniform_float_dtype(node: OpNode, graph: Graph, *slots: str, name_tensor: bool = True) -> str:
    """The one float dtype of the tensors of `slots` (float32, or float16 for the op's
    `_f16` kernels): the first one's, when it is a float type. Otherwise raise the
    `GraphBuildError` both backends raise, naming the first tensor of another dtype (or no
    tensor, for an op whose backends name none)."""
    found = tensors(node, graph, *slots)
    want = found[0].dtype if found[0].dtype in FLOAT_DTYPES else "float32"
    for t in found:
        if t.dtype != want:
            raise GraphBuildError(
                node.name,
                f"{node.op} takes all float32 or all float16; {t.name!r} is {t.dtype}",
                tensor=t.name if name_tensor else None,
            )
    return want


def optional_tensor(node: OpNode, graph: Graph, slot: str) -> TensorValue | None:
    """The tensor passed as optional argument `slot`, or None when it was left out."""
    name = node.optional_arg(slot)
    return None if name is None else graph.tensor(name)


def int_literal(node: OpNode, graph: Graph, slot: str) -> int:
    """The value of int argument `slot` (a literal, known at load)."""
    return int(graph.scalar(node.arg(slot)))


def check_dims(name: str, dims: Dims, max_dims: Dims) -> None:
    """Raise the ResizeError a backend must raise for live `dims` of tensor `name`."""
    if len(dims) != len(max_dims):
        raise ResizeError(name, None, len(dims), len(max_dims), "rank")
    for d, (size, limit) in enumerate(zip(dims, max_dims, strict=True)):
        if size < 1:
            raise ResizeError(name, d, size, 1, "nonpositive")
        if size > limit:
            raise ResizeError(name, d, size, limit, "above_max")


def div_up(a: int, b: int) -> int:
    """ceil(a / b) for non-negative ints."""
    return -(-a // b)


def numel(dims: Dims) -> int:
    """Element count."""
    return math.prod(dims)


class OpModel(ABC):
    """The harness's contract model, reference and budget of one op type: the base class of
    every op's model in `harness/ops/`.

    A model defines the abstract methods and the class attributes `kernels`, `activations`
    and `required_regimes`; the optional hooks below have defaults that a model overrides
    where its op needs more (`dtypes`, `pr_regimes`, `probe_reference`, `half_budget`,
    `regime_size`, `regimes`, `check_host`).
    """

    kernels: dict[str, KernelSpec]
    # The tensor argument slots that carry the data flowing through a model, new every step
    # (graph inputs or other ops' outputs); the op's other tensor slots hold what a model
    # loads once: weights, scales, rotation tables, caches (tests/golden_cases.py feeds
    # these as graph inputs, the rest as constants).
    activations: tuple[str, ...]
    # The coverage regimes (harness/check/coverage.py: `size=1`, `step=grow`, the tags of
    # `regimes`...) where this op's resize bugs live: a nightly run that exercises the op
    # must reach each of them, and every kernel of `kernels`, on every backend
    # (harness/run/profiles.py derives its required cells from these two).
    required_regimes: tuple[str, ...]
    # Those of `required_regimes` (the long paths: a GEMV's main loop, a long decode) that a
    # pr run of the op's family must reach too (harness/run/profiles.py).
    pr_regimes: tuple[str, ...] = ()
    # The float element types the op's kernels take: `float16` only for an op with its f16
    # kernel slots (`<slot>_f16`); only then do case families draw f16 for it.
    dtypes: tuple[str, ...] = ("float32",)

    @abstractmethod
    def check(self, node: OpNode, graph: Graph) -> None:
        """Raise the GraphBuildError both backends must raise at load, if any."""

    @abstractmethod
    def resize(self, node: OpNode, live: LiveState) -> None:
        """Set the outputs' live dims in `live`, or raise the rejection both must raise."""

    @abstractmethod
    def dispatches(self, node: OpNode, live: LiveState) -> list[ExpectedDispatch]:
        """The op's dispatch slots for the (already resized) live state."""

    @abstractmethod
    def kernel_values(self, node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
        """The values the op offers a kernel of `slot` (one of `kernels`) for the (already
        resized) live state: every name the slot's interface declares but `workgroups`,
        which `slot_values` takes from `dispatches`."""

    @abstractmethod
    def reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        """Float64 outputs by output slot; state tensors in `args` are updated in place."""

    @abstractmethod
    def budget(
        self, node: OpNode, args: Args, outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Per-element bound of the rounding error a correct float32 implementation makes
        in each output, from these exact inputs (state the op writes: under its slot name).

        Only the op's own rounding: how errors already in the inputs travel through the
        graph is `harness.check.reference.ReferenceEvaluator`'s business.

        Args:
            args: the float64 inputs the reference was given.
            outputs: the reference outputs.
        """

    # ------------------------------------------------------------------ optional hooks

    def probe_reference(self, node: OpNode, args: Args) -> dict[str, np.ndarray]:
        """The reference of many argument sets at once (the module docstring says how);
        an op that has one overrides this, often as `probe_reference = reference`."""
        raise NotImplementedError(f"{type(self).__qualname__} has no probe_reference")

    @property
    def batches_probes(self) -> bool:
        """Whether the model overrides `probe_reference` (else the reference evaluator
        calls `reference` once per probe)."""
        return type(self).probe_reference is not OpModel.probe_reference

    def half_budget(
        self,
        node: OpNode,
        args: Args,
        outputs: Mapping[str, np.ndarray],
        budgets: Mapping[str, np.ndarray],
    ) -> dict[str, np.ndarray]:
        """The op's budgets in half precision from its f32 `budgets`: by default each
        output's with its rounding to f16 added (`f16_store`); state slots as they are.
        A model overrides it where that differs (a copy stores exactly; an f16-accumulating
        kernel rounds more)."""
        return {
            slot: np.asarray(f16_store(budget, outputs[slot]))
            if slot in node.outputs
            else np.asarray(budget)
            for slot, budget in budgets.items()
        }

    def regime_size(self, node: OpNode, live: LiveState) -> int:
        """The op's regime size (harness/check/coverage.py): by default the leading-dims
        product of its first tensor argument (its only dim for a vector)."""
        for arg in node.args.values():
            if isinstance(arg, str) and isinstance(live.graph.values.get(arg), TensorValue):
                dims = live.dims[arg]
                return math.prod(dims[:-1]) if len(dims) > 1 else dims[0]
        return 1

    def regimes(self, node: OpNode, live: LiveState) -> set[str]:
        """The op's own coverage tags for the (resized) live state, beside the size, step
        and dtype ones every op gets; none by default."""
        return set()

    def check_host(self, node: OpNode, live: LiveState) -> None:
        """Check this step's host data (`live.host`: token ids against the vocabulary),
        raising the `InputError` both backends raise before any resize; nothing to check by
        default."""
        return None


# op type -> its model; filled by `register` as `harness.ops` imports each op's module.
MODELS: dict[str, OpModel] = {}

_Model = TypeVar("_Model", bound=OpModel)


def register(op: str, model: _Model) -> _Model:
    """Register `model` as the harness's model of op type `op`; returns it.

    Raises:
        ValueError: `op` has no schema in `graph_format/ops/`, or already has a model.
    """
    if op not in SIGNATURES:
        raise ValueError(
            f"op {op!r} has no schema in graph_format/ops/; known: {sorted(SIGNATURES)}"
        )
    if op in MODELS:
        raise ValueError(f"op {op!r} already has a model: {type(MODELS[op]).__qualname__}")
    MODELS[op] = model
    return model


def model_for(op: str) -> OpModel:
    """The model of op type `op`."""
    try:
        return MODELS[op]
    except KeyError:
        raise KeyError(
            f"the harness has no model of op {op!r} (is harness.ops imported?); "
            f"known: {sorted(MODELS)}"
        ) from None


def slot_values(node: OpNode, live: LiveState, slot: str) -> dict[str, Value]:
    """The harness's own values of `slot` of `node` for the (resized) live state: the op's
    `kernel_values` and `workgroups`, the slot's logical count in `dispatches` (0 when the
    op skips the slot this step). Exactly the names `graph_format/ops/<op>.toml` declares.

    Raises:
        ValueError: the model offers other names than the slot declares (a harness bug).
    """
    model = model_for(node.op)
    values = dict(model.kernel_values(node, live, slot))
    ran = [count for _, kernel, _, count, r in model.dispatches(node, live) if kernel == slot and r]
    values[WORKGROUPS_VALUE] = ran[0][0] if ran else 0
    declared = SLOTS[slot].values
    if set(values) != set(declared):
        raise ValueError(
            f"harness model of {node.op}: slot {slot} offers {sorted(values)}, its schema "
            f"declares {sorted(declared)}"
        )
    return values


def arg_values(node: OpNode) -> list[str]:
    """Every value name `node` reads, in slot order: size lists flattened, absent optional
    arguments left out."""
    return [
        name
        for arg in node.args.values()
        for name in (arg if isinstance(arg, tuple) else (arg,) if arg is not None else ())
    ]


def tensor_slots(node: OpNode, graph: Graph) -> list[str]:
    """Argument slots of `node` that hold tensors."""
    return [
        s
        for s, a in node.args.items()
        if isinstance(a, str) and isinstance(graph.values[a], TensorValue)
    ]


def model_dtypes(op: str) -> tuple[str, ...]:
    """The float element types op `op`'s kernels take (its model's `dtypes`); an op without
    kernels (sym_size reads dims only) takes any."""
    model = model_for(op)
    if not model.kernels:
        return FLOAT_DTYPES
    return model.dtypes


def workgroups_regime(kernel: str, count: int) -> str:
    """The coverage tag (harness/check/coverage.py) of kernel variant `kernel` dispatched over
    at least `count` workgroups of its own size: a cell an op model may require."""
    return f"{kernel}:workgroups>={count}"


def op_dtype(graph: Graph, node: OpNode) -> str:
    """The precision `node` runs in: `float16` when any float tensor it reads or writes is
    float16 (its kernels are then the `_f16` slots), else `float32` (`Graph.op_dtype`,
    worked out once per graph and kept by the graph)."""
    return graph.op_dtype(node)


class BudgetError(Exception):
    """An op model's budget is not finite where its reference is: a gap in the model's
    derivation (a case of non-finite inputs it does not cover), never a tolerance to use."""


def local_budget(
    graph: Graph,
    node: OpNode,
    args: Args,
    outputs: Mapping[str, np.ndarray],
    arithmetic: Arithmetic = F32,
) -> dict[str, np.ndarray]:
    """The op's own error budget per output slot (and state slot it writes), in the graph's
    precision: `OpModel.budget` (the computation, in `arithmetic`: f32 unless a manifest's
    kernel of the op declares `precision = "f16"`); for an op of an f16 graph
    (`op_dtype`), the model's `half_budget` of those, or by default each tensor output's
    budget with its rounding to f16 added (`f16_store`: exact for a value computed in f16,
    so that term only covers a kernel that computes part of its arithmetic in f32).

    Non-finite values (docs/oracles.md, "Non-finite values"): where the reference of an
    element is +-inf or NaN the budget is 0, since such an element is compared by class
    (`harness.model.numerics.compare`), and an error scale carried from it would turn every
    value downstream into NaN; where the reference is finite the budget must be too.

    Raises:
        BudgetError: a budget is NaN or infinite where the reference is finite (named: the
            op, its type, the tensor, how many elements).
    """
    model = model_for(node.op)
    with error_model(RIGOROUS.computing_in(arithmetic)):
        return _budget(graph, node, model, args, outputs)


@dataclass(frozen=True)
class BudgetTiers:
    """An op's two tiers of budgets by slot (docs/oracles.md, "The statistical tier").

    Attributes:
        hard: the rigorous budgets (`local_budget`): over them is a `numeric` finding.
        statistical: the same derivations with the probabilistic bound of long sums: over
            them, within the hard ones, is a `numeric_suspect`. The very `hard` mapping
            where no sum of the op is long enough for the two to differ.
    """

    hard: Mapping[str, np.ndarray]
    statistical: Mapping[str, np.ndarray]

    @property
    def tiered(self) -> bool:
        """Whether the statistical budgets are tighter than the hard ones anywhere."""
        return self.statistical is not self.hard


def local_budgets(
    graph: Graph,
    node: OpNode,
    args: Args,
    outputs: Mapping[str, np.ndarray],
    arithmetic: Arithmetic = F32,
) -> BudgetTiers:
    """`local_budget` in both tiers, for a kernel computing in `arithmetic`. The statistical
    one is derived only for an op whose derivation bounds a sum of at least
    `SHORTEST_TIGHTER_SUM` terms; for any other it is the hard one, unchanged (the
    probabilistic bound of a shorter sum is not tighter).

    Raises:
        BudgetError: as `local_budget`.
    """
    with longest_sum() as seen:
        hard = local_budget(graph, node, args, outputs, arithmetic)
    if seen[0] < SHORTEST_TIGHTER_SUM:
        return BudgetTiers(hard, hard)
    with error_model(STATISTICAL.computing_in(arithmetic)):
        statistical = _budget(graph, node, model_for(node.op), args, outputs)
    return BudgetTiers(hard, statistical)


def _budget(
    graph: Graph, node: OpNode, model: OpModel, args: Args, outputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`local_budget` under the error model in force (`harness.model.numerics.error_model`)."""
    budgets = dict(model.budget(node, args, outputs))
    if op_dtype(graph, node) == "float16":
        budgets = dict(model.half_budget(node, args, outputs, budgets))
    for slot, budget in budgets.items():
        reference = outputs.get(slot, args.get(slot))
        if isinstance(reference, np.ndarray):
            budgets[slot] = _class_compared(node, slot, np.asarray(budget), reference)
    return budgets


def _class_compared(node: OpNode, slot: str, budget: np.ndarray, reference: np.ndarray) -> Any:
    """`budget` with 0 where `reference` is not finite; a `BudgetError` if it is not finite
    anywhere else. Two checks of the whole array on the common path (all finite)."""
    special = ~np.isfinite(reference)
    if special.any() and np.broadcast_shapes(budget.shape, reference.shape) == reference.shape:
        budget = np.where(special, 0.0, budget)
    if np.isfinite(budget).all():
        return budget
    bad = ~np.isfinite(np.broadcast_to(budget, reference.shape)) & ~special
    if not bad.any():
        return np.where(np.isfinite(budget), budget, 0.0)
    first = tuple(int(i) for i in np.unravel_index(int(bad.argmax()), bad.shape))
    kinds = "NaN" if np.isnan(budget).any() else "infinite"
    raise BudgetError(
        f"op {node.name!r} ({node.op}): the budget of {slot!r} ({node.outputs.get(slot, slot)!r})"
        f" is {kinds} at {int(bad.sum())} of {bad.size} element(s) where the reference is "
        f"finite (first at {first}): the model's derivation does not cover these inputs "
        "(non-finite values in them?)"
    )


def kernel_arithmetic(
    graph: Graph, node: OpNode, precision: Callable[[str], str | None]
) -> Arithmetic:
    """The arithmetic `node`'s kernels compute in on one backend, for its budget
    (`local_budget`): f16 where the op runs in half precision (`op_dtype`) and a kernel of
    one of its slots declares `precision = "f16"` (`precision(slot)`: the backend's
    manifest entry's, None for the project's kernel), else f32. One f16 kernel makes the
    whole op's budget an f16-arithmetic one: a budget is per op, not per dispatch."""
    if op_dtype(graph, node) != "float16":
        return F32
    for slot in SIGNATURES[node.op].slots:
        declared = precision(slot)
        if declared is not None and declared != F32.name:
            return ARITHMETICS[declared]
    return F32
