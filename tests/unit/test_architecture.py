"""The architecture, asserted: import boundaries (by static analysis) and registries that agree.

Import boundaries (read from every module's source with `ast`, so an import inside a function
or under TYPE_CHECKING counts too, and so does `importlib.import_module` / `__import__` of a
constant name; a package's `import_module(f"{__name__}.{name}")` over its own modules imports
each of them; any other import of a name computed at run time is refused outside
`DYNAMIC_IMPORTERS`):
- each package imports only the third-party packages of its allow-list (`THIRD_PARTY`):
  `graph_format` the standard library and numpy, each backend its own API package too
  (wgpu-py, `vulkan`), never the other's;
- the backends never import the harness or each other; `graph_format` imports neither;
- the harness reaches the backends through one module, `harness/check/backends.py`;
- each harness layer imports only the layers to its left:
  importer <- model <- gen <- ops <- families <- check <- run (the public API, the
  package's `__init__` and `harness/api.py`, and the `harness/cli.py` shim sit above them
  all), and the model imports no hypothesis;
- the importer (leftmost: it needs nothing of the harness) imports only graph_format and
  the third-party packages of its room (`ROOM_THIRD_PARTY`: numpy, flatbuffers), and
  flatbuffers is imported nowhere else;
- no import cycles among the modules of the four packages.
Each rule is also seen failing on an import planted into a real module's source.

Registries: every op with a schema (`graph_format/ops/<op>.toml`) has a harness model, a
WebGPU builder, a Vulkan implementation, a case family that exercises it and a random-graph
generator, nothing is registered for an op without a schema, and every op reaches random
graphs (drawn with a fixed seed); a model's `activations` are tensor slots of its schema.
docs/adding-an-op.md's table of where each op lives
matches the registries.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import vulkan_ref.ops
import webgpu_backend.ops
from graph_format import SIGNATURES
from harness.families import FAMILIES
from harness.families.random import random_graph_cases
from harness.gen.case import Case
from harness.gen.graphgen import GENERATORS, emitted_ops
from harness.model import OpModel
from harness.ops import MODELS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("graph_format", "webgpu_backend", "vulkan_ref", "harness")
BACKENDS = ("webgpu_backend", "vulkan_ref")
# The third-party packages each package may import (besides the standard library and the
# project's packages, whose own rules follow). `_typeshed` exists only for type checkers
# (imported under TYPE_CHECKING).
THIRD_PARTY = {
    "graph_format": {"numpy"},
    "webgpu_backend": {"numpy", "wgpu"},
    "vulkan_ref": {"numpy", "vulkan"},
    "harness": {"numpy", "hypothesis", "jinja2", "filelock", "flatbuffers", "_typeshed"},
}
# Rooms of a package held to a narrower allow-list than their package's; a third-party
# package on a room's list and no other room's is imported only there. The `.pte` importer
# reads flatbuffers and makes numpy arrays, nothing more: a model file becomes a graph
# without the harness's other dependencies.
ROOM_THIRD_PARTY = {"harness.importer": {"numpy", "flatbuffers"}}
ONLY_IN_ROOM = {"flatbuffers": "harness.importer"}
# Modules that import a module named at run time, and why that is safe.
DYNAMIC_IMPORTERS = {
    # PEP 562 lazy names: each resolves through `_EXPORTS`, a table of harness modules, and
    # the package sits above every layer (TOP).
    "harness": "the public API's lazy names",
}
DYNAMIC = "<a module named at run time>"
# The harness's layers, left to right: a layer may import itself and those to its left.
LAYERS = ("importer", "model", "gen", "ops", "families", "check", "run")
# Modules above every layer: the public API (`harness/__init__.py`, whose names resolve
# lazily, and `harness/api.py`, which composes gen, ops and check: single_op_graph, op_budget,
# run_case, check_case) and the `python -m harness.cli` shim. No layer may import them, so the
# API can reach into any layer without creating a cycle.
TOP = {"harness", "harness.api", "harness.cli"}
THE_BACKENDS_MODULE = "harness.check.backends"
# The WebGPU runtime's device seam (docs/design.md §2.1): only its implementations import
# wgpu-py (and GPU timing, which needs wgpu's timestamp queries); op modules import none of it.
SEAM = "webgpu_backend.gpu"
WGPU_USERS = {"webgpu_backend.profiling"}


def module_name(path: Path) -> str:
    """`harness/check/backends.py` -> `harness.check.backends` (a package: its own name)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the project's packages, by name."""
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


MODULES = modules()
# The functions that import the module their first argument names.
IMPORT_FUNCTIONS = {"import_module", "__import__"}


def imports_of(name: str, path: Path, source: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import in a module (its file's text, or `source`
    planted in its place), relative ones resolved.

    `from a.b import c` yields `a.b.c` when `a/b/c` is a module of the project, else `a.b`.
    `importlib.import_module("a.b")` and `__import__("a.b")` yield `a.b`; a package's
    `import_module(f"{__name__}.{x}")` yields each of its own modules; an import of any other
    name computed at run time yields `DYNAMIC`.
    """
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]

    def resolve(level: int, base: str) -> str:
        if not level:
            return base
        anchor = package.split(".")
        anchor = anchor[: len(anchor) - (level - 1)]
        return ".".join([*anchor, base] if base else anchor)

    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.level, node.module or "")
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in MODULES else base
        elif isinstance(node, ast.Call) and called_name(node.func) in IMPORT_FUNCTIONS:
            for imported in imported_by_call(node, name if is_package else None, resolve):
                yield node.lineno, imported


def called_name(func: ast.expr) -> str | None:
    """`f` of a call `f(...)` or `x.f(...)`."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def imported_by_call(
    call: ast.Call, package: str | None, resolve: Callable[[int, str], str]
) -> list[str]:
    """What an `import_module(...)` / `__import__(...)` call imports (`package`: the module's
    name when it is a package's `__init__`)."""
    arg = call.args[0] if call.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        stripped = arg.value.lstrip(".")
        return [resolve(len(arg.value) - len(stripped), stripped)]
    if package is not None and own_module_pattern(arg):
        return [m for m in MODULES if m.rpartition(".")[0] == package]
    return [DYNAMIC]


def own_module_pattern(arg: ast.expr | None) -> bool:
    """`f"{__name__}.{x}"`: one of the package's own modules."""
    return (
        isinstance(arg, ast.JoinedStr)
        and len(arg.values) == 3
        and isinstance(first := arg.values[0], ast.FormattedValue)
        and isinstance(first.value, ast.Name)
        and first.value.id == "__name__"
        and isinstance(dot := arg.values[1], ast.Constant)
        and dot.value == "."
    )


def top(imported: str) -> str:
    return imported.split(".")[0]


def layer_of(name: str) -> int:
    """The index of a harness module's layer (len(LAYERS) for the modules above them)."""
    if name in TOP:
        return len(LAYERS)
    parts = name.split(".")
    assert len(parts) >= 2 and parts[1] in LAYERS, (
        f"{name}: every harness module belongs to a layer {LAYERS} (or is one of {sorted(TOP)})"
    )
    return LAYERS.index(parts[1])


def boundary_violations(planted: Mapping[str, str] | None = None) -> list[str]:
    """Every import that crosses a boundary, as `path:line: what` (`planted`: module name ->
    source read in place of that module's file)."""
    planted = planted or {}
    problems = []
    for name, path in MODULES.items():
        where = path.relative_to(ROOT)
        for line, imported in imports_of(name, path, planted.get(name)):
            problems += import_violations(name, f"{where}:{line}", imported)
    return problems


def import_violations(name: str, where: str, imported: str) -> list[str]:
    """The boundaries module `name` crosses by importing `imported`."""
    package, target = top(name), top(imported)
    if imported == DYNAMIC:
        if name in DYNAMIC_IMPORTERS:
            return []
        return [
            f"{where}: {name} imports a module whose name is computed at run time; name it "
            f"(an import statement, or import_module of a constant) or list {name} in "
            "DYNAMIC_IMPORTERS with why it is safe"
        ]
    problems = seam_violations(name, where, imported)
    if target not in PACKAGES:
        problems += third_party_violations(name, where, imported)
    elif package == "graph_format" and target != "graph_format":
        problems.append(f"{where}: graph_format imports {imported}")
    elif package in BACKENDS and target not in (package, "graph_format"):
        problems.append(f"{where}: backend {package} imports {imported}")
    elif package == "harness" and target in BACKENDS and name != THE_BACKENDS_MODULE:
        problems.append(
            f"{where}: imports {imported}; the harness reaches the backends "
            f"only through {THE_BACKENDS_MODULE}"
        )
    elif target == "harness" and layer_of(imported) > layer_of(name):
        problems.append(
            f"{where}: {name} (layer {layer_of(name)}) imports {imported} "
            f"(layer {layer_of(imported)}), a layer to its right"
        )
    return problems


def third_party_violations(name: str, where: str, imported: str) -> list[str]:
    """A third-party import outside its package's allow-list, or hypothesis in the op model."""
    package, target = top(name), top(imported)
    if target in sys.stdlib_module_names:
        return []
    problems = []
    if target not in THIRD_PARTY[package]:
        problems.append(
            f"{where}: {name} imports {imported}; {package} may import only the standard "
            f"library, the project's packages and {sorted(THIRD_PARTY[package])}"
        )
    if name.startswith("harness.model") and target == "hypothesis":
        problems.append(f"{where}: the op model imports hypothesis")
    problems += room_violations(name, where, target)
    return problems


def in_room(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


def room_violations(name: str, where: str, target: str) -> list[str]:
    """A third-party import outside its room's narrower allow-list, or of a package only
    one room may import, from elsewhere."""
    problems = []
    for room, allowed in ROOM_THIRD_PARTY.items():
        if in_room(name, room) and target not in allowed:
            problems.append(
                f"{where}: {name} imports {target}; {room} may import only the standard "
                f"library, graph_format and {sorted(allowed)}"
            )
    room = ONLY_IN_ROOM.get(target)
    if room is not None and not in_room(name, room):
        problems.append(f"{where}: {name} imports {target}; only {room} may")
    return problems


def seam_violations(name: str, where: str, imported: str) -> list[str]:
    """The WebGPU runtime's seam: wgpu-py only behind it, and no op module reaching into it."""
    if top(name) != "webgpu_backend":
        return []
    inside = name == SEAM or name.startswith(SEAM + ".")
    if top(imported) == "wgpu" and not inside and name not in WGPU_USERS:
        return [f"{where}: {name} imports {imported}; only {SEAM} talks to an implementation"]
    if name.startswith("webgpu_backend.ops") and (
        imported == SEAM or imported.startswith(SEAM + ".")
    ):
        return [f"{where}: op module {name} imports {imported}; ops never see an implementation"]
    return []


def import_cycles(planted: Mapping[str, str] | None = None) -> list[str]:
    """Every import cycle among the project's modules, as `a -> b -> a` (`planted`: as for
    `boundary_violations`). A module's import of its own package does not count: the
    package's `__init__` has run before any of its modules."""
    planted = planted or {}
    graph = {
        name: {
            imported
            for _, imported in imports_of(name, path, planted.get(name))
            if imported in MODULES and imported != name and not name.startswith(imported + ".")
        }
        for name, path in MODULES.items()
    }
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def planted(name: str, line: str) -> dict[str, str]:
    """Module `name`'s real source with `line` added at its end."""
    return {name: MODULES[name].read_text() + "\n" + line + "\n"}


def test_the_webgpu_seam_is_kept() -> None:
    # The rule itself, on planted imports (the real tree is checked by the test below).
    assert seam_violations("webgpu_backend.graph", "x", "wgpu.classes")
    assert seam_violations("webgpu_backend.ops.sdpa", "x", "webgpu_backend.gpu.dawn")
    assert not seam_violations("webgpu_backend.gpu.wgpu_native", "x", "wgpu")
    assert not seam_violations("webgpu_backend.graph", "x", "webgpu_backend.gpu")


def test_import_boundaries_hold() -> None:
    problems = boundary_violations()
    assert not problems, "import boundaries crossed:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        # Each package's allow-list of third-party packages.
        ("graph_format.graph", "import wgpu", "graph_format may import only"),
        ("graph_format.kernels", "import vulkan", "graph_format may import only"),
        ("webgpu_backend.gpu.wgpu_native", "import vulkan", "webgpu_backend may import only"),
        ("vulkan_ref.instance", "import wgpu", "vulkan_ref may import only"),
        ("harness.check.backends", "import vulkan", "harness may import only"),
        # The importer's room: its own narrower list, and flatbuffers nowhere else.
        ("harness.importer.convert", "import hypothesis", "harness.importer may import only"),
        ("harness.check.backends", "import flatbuffers", "only harness.importer may"),
        # The importer is the leftmost layer: it imports nothing of the harness.
        ("harness.importer.convert", "import harness.model.q4", "a layer to its right"),
        # Imports through importlib, of a constant name, obey the same rules.
        (
            "graph_format.graph",
            "importlib.import_module('wgpu')",
            "graph_format may import only",
        ),
        ("webgpu_backend.graph", "__import__('vulkan')", "webgpu_backend may import only"),
        ("vulkan_ref.graph", "import_module('harness.api')", "backend vulkan_ref imports"),
        (
            "harness.model.numerics",
            "importlib.import_module('harness.run.cli')",
            "a layer to its right",
        ),
        # ... and one of a name computed at run time is refused.
        ("graph_format.graph", "importlib.import_module(NAME)", "computed at run time"),
        ("vulkan_ref.ops", "importlib.import_module('vulkan_ref.' + x)", "computed at run time"),
    ],
)
def test_each_boundary_catches_a_planted_import(module: str, line: str, expected: str) -> None:
    (problem,) = boundary_violations(planted(module, line))
    where = (
        f"{MODULES[module].relative_to(ROOT)}:{len(MODULES[module].read_text().splitlines()) + 2}"
    )
    assert problem.startswith(where) and expected in problem, problem


def test_no_import_cycles() -> None:
    cycles = import_cycles()
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize(
    ("module", "line", "members"),
    [
        # The cycle each backend had: its graph reaching for the op table its op modules
        # fill (now the runtime's `load` hands the graph the table), deferred or not.
        (
            "webgpu_backend.graph",
            "from webgpu_backend.ops import OP_BUILDERS",
            {"webgpu_backend.graph", "webgpu_backend.ops"},
        ),
        (
            "vulkan_ref.graph",
            "def load() -> None:\n    from vulkan_ref.ops import OP_IMPLS",
            {"vulkan_ref.graph", "vulkan_ref.ops"},
        ),
        (
            "graph_format.signatures",
            "from graph_format.graph import Graph",
            {"graph_format.graph", "graph_format.signatures"},
        ),
    ],
)
def test_the_cycle_check_catches_a_planted_cycle(module: str, line: str, members: set[str]) -> None:
    cycles = import_cycles(planted(module, line))
    assert any(members <= set(cycle.split(" -> ")) for cycle in cycles), cycles


def test_every_harness_module_is_in_a_layer() -> None:
    for name in MODULES:
        if top(name) == "harness":
            layer_of(name)


# ---------------------------------------------------------------------------- registries


def test_every_op_has_a_model_both_backends_a_family_and_a_generator() -> None:
    ops = set(SIGNATURES)
    exercised = set().union(*(f.exercises for f in FAMILIES.values()))
    parts = {
        "harness model (harness.model.register)": set(MODELS),
        "WebGPU builder (@webgpu_backend.ops.register)": set(webgpu_backend.ops.OP_BUILDERS),
        "Vulkan implementation (@vulkan_ref.ops.register)": set(vulkan_ref.ops.OP_IMPLS),
        "case family exercising it (harness.gen.families)": exercised,
        "random-graph generator (harness.gen.graphgen.generator)": set(
            emitted_ops(GENERATORS.values())
        ),
    }
    problems = [
        f"{sorted(ops - have)} have no {what}" for what, have in parts.items() if ops - have
    ] + [
        f"{sorted(have - ops)} have a {what} but no schema in graph_format/ops/"
        for what, have in parts.items()
        if have - ops
    ]
    assert not problems, "registries disagree:\n" + "\n".join(problems)


def test_every_op_model_is_an_op_model() -> None:
    """Every registered model subclasses `OpModel`, so its optional hooks are methods with
    defaults (no `getattr(model, "hook", None)` lookups stand in for them)."""
    assert {op for op, m in MODELS.items() if not isinstance(m, OpModel)} == set()
    assert {op for op, m in MODELS.items() if m.batches_probes} >= {"rms_norm", "add"}
    assert not MODELS["sym_size"].batches_probes


def test_every_models_activations_are_tensor_slots_of_its_schema() -> None:
    """What a model declares about its op's slots (`OpModel.activations`, which the golden
    cases make graph inputs) names tensor slots the op's schema has."""
    problems = []
    for op, model in sorted(MODELS.items()):
        tensor_slots = {s.name for s in SIGNATURES[op].args if s.kind == "tensor"}
        if not model.activations or not set(model.activations) <= tensor_slots:
            problems.append(
                f"{op}: activations {list(model.activations)}, tensor slots {sorted(tensor_slots)}"
            )
    assert not problems, "\n".join(problems)


DRAWS = 300


def test_every_op_reaches_random_graphs() -> None:
    """Drawn with a fixed seed, the random family's graphs contain every op with a schema
    (20 op types over graphs of up to 6 ops: 300 draws leave room for the draw order to
    move, as adding a draw to the family does)."""
    seen: set[str] = set()

    @settings(
        max_examples=DRAWS,
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=random_graph_cases())
    def draw(case: Case) -> None:
        seen.update(node.op for node in case.graph.ops)

    draw()
    assert not set(SIGNATURES) - seen, (
        f"no random graph of {DRAWS} contained {sorted(set(SIGNATURES) - seen)}"
    )


# ---------------------------------------------------------------------------- where ops live

DOC = ROOT / "docs" / "adding-an-op.md"
TABLE_ROW = re.compile(r"^\| `(\w+)` \| (.+) \|$", re.M)


def where_each_op_lives() -> dict[str, list[str]]:
    """Per op: its schema file, harness module, WebGPU module, Vulkan module and shader stems
    (each kernel's WGSL and GLSL files share their stem)."""

    def path(registered: object | None) -> str:
        if registered is None:
            return "none"
        return f"`{registered.__module__.replace('.', '/')}.py`"

    def stems(op: str) -> str:
        specs = MODELS[op].kernels.values()
        assert all(s.wgsl == s.glsl for s in specs), f"{op}: WGSL and GLSL stems differ"
        return ", ".join(f"`{stem}`" for stem in sorted({s.wgsl for s in specs})) or "none"

    return {
        op: [
            f"`graph_format/ops/{op}.toml`",
            path(type(MODELS[op]) if op in MODELS else None),
            path(webgpu_backend.ops.OP_BUILDERS.get(op)),
            path(vulkan_ref.ops.OP_IMPLS.get(op)),
            stems(op) if op in MODELS else "none",
        ]
        for op in sorted(SIGNATURES)
    }


def test_the_docs_say_where_each_op_lives() -> None:
    documented = {
        op: [cell.strip() for cell in cells.split("|")]
        for op, cells in TABLE_ROW.findall(DOC.read_text())
    }
    expected = where_each_op_lives()
    assert documented == expected, (
        f"{DOC.relative_to(ROOT)}'s table of where each op lives is out of date; its rows "
        "should be:\n"
        + "\n".join(f"| `{op}` | {' | '.join(cells)} |" for op, cells in expected.items())
    )
