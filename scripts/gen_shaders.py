#!/usr/bin/env python3
"""Generate the project's kernels, `wgsl/<stem>.wgsl` and `glsl/<stem>.comp`, from one template
per kernel family and language (`shaders/wgsl/<family>.wgsl.in`, `shaders/glsl/<family>.comp.in`)
and the variants `shaders/variants.toml` declares (docs/adding-an-op.md §4).

The generated files are committed, so naga, glslc and Tint read plain files and every existing
path stays; `--check` (run by tests/unit/test_shadergen.py) fails, naming the file and its
first differing line, when a committed file is not what its template generates, or when
`wgsl/` or `glsl/` holds a kernel no template generates.

Template language (the same for WGSL and GLSL; `$` appears in neither language):
- `${NAME}`: a variant parameter (`DTYPE` and the family's own axes), `KERNEL` (the variant's
  stem), `KERNEL_F32` (the stem of its f32 sibling, for an f16 variant's comments) or a word
  of the language's table for the variant's DTYPE (`T`: the element type, WGSL `f32`/`f16`,
  GLSL `float`/`float16_t`; `T2`, `T4`: its 2- and 4-vectors in GLSL).
- `${load(EXPR)}`: EXPR widened to f32 on load (EXPR itself in an f32 variant; `load2`,
  `load4`: a 2- or 4-vector); `${store(EXPR)}`: an f32 EXPR rounded once to the element
  type on store (`store2`: a WGSL 2-vector). EXPR may hold balanced parentheses and other
  `${...}`.
- A line whose first non-blank characters are `$if COND`, `$elif COND`, `$else` or `$endif`
  is a directive: it keeps or drops the lines it encloses and is not itself emitted. COND is
  `NAME == value` or `NAME != value`, several joined by `and` or by `or` (not both).

Exit status: 0 (generated, or `--check` found every file current), 1 (`--check` found a
difference), 2 (a malformed template or variants file: one line naming it).
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = Path("shaders") / "variants.toml"

# Where each language's templates and generated kernels live, by language.
LANGUAGES = {
    "wgsl": ("shaders/wgsl", ".wgsl.in", "wgsl", ".wgsl"),
    "glsl": ("shaders/glsl", ".comp.in", "glsl", ".comp"),
}

# Each language's words and conversions, by DTYPE: what `${T}`, `${load(...)}` and
# `${store(...)}` become. Computation is in f32 in every variant; an f16 variant widens what
# it loads and rounds once what it stores.
WORDS: dict[str, dict[str, dict[str, str]]] = {
    "wgsl": {
        "f32": {
            "T": "f32",
            "load": "{}",
            "load2": "{}",
            "load4": "{}",
            "store": "{}",
            "store2": "{}",
        },
        "f16": {
            "T": "f16",
            "load": "f32({})",
            "load2": "vec2<f32>({})",
            "load4": "vec4<f32>({})",
            "store": "f16({})",
            "store2": "vec2<f16>({})",
        },
    },
    "glsl": {
        "f32": {
            "T": "float",
            "T2": "vec2",
            "T4": "vec4",
            "load": "{}",
            "load2": "{}",
            "load4": "{}",
            "store": "{}",
        },
        "f16": {
            "T": "float16_t",
            "T2": "f16vec2",
            "T4": "f16vec4",
            "load": "float({})",
            "load2": "vec2({})",
            "load4": "vec4({})",
            "store": "float16_t({})",
        },
    },
}

# The stem suffix of each value of an axis a family generates `forall` of: rms_norm (f32),
# rms_norm_f16. An axis not listed here suffixes `_<value>`.
SUFFIX = {
    "DTYPE": {"f32": "", "f16": "_f16"},
    "NIBBLES": {"even_low": "", "even_high": "_even_high"},
}

DIRECTIVE = re.compile(r"^\s*\$(if|elif|else|endif)\b\s*(.*?)\s*$")
CONDITION = re.compile(r"^(\w+)\s*(==|!=)\s*\"?([\w.]+)\"?$")


class TemplateError(Exception):
    """A malformed template or variants file (names the file and line)."""


@dataclass(frozen=True)
class Variant:
    """One generated kernel: its stem and the parameters its template is rendered with."""

    stem: str
    params: dict[str, str]


@dataclass(frozen=True)
class Family:
    """One template per language and the variants generated from it."""

    name: str
    variants: tuple[Variant, ...]


def load_families(root: Path) -> list[Family]:
    """The families of `shaders/variants.toml`.

    Each table `[<family>]` holds `forall` (axis -> values: one variant per combination, its
    stem the family's name plus each value's suffix), `variants` (stem -> params: explicit
    variants) and `defaults` (params every variant starts from); DTYPE defaults to f32.
    """
    path = root / VARIANTS
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise TemplateError(f"{path}: {error}") from None
    families = []
    for name, table in data.items():
        if not isinstance(table, dict) or set(table) - {"forall", "variants", "defaults"}:
            raise TemplateError(
                f"{path}: [{name}] may hold only forall, variants and defaults, got {table!r}"
            )
        defaults = {"DTYPE": "f32", **{k: str(v) for k, v in table.get("defaults", {}).items()}}
        variants = []
        forall: dict[str, list[str]] = table.get("forall", {})
        axes = list(forall)
        for values in itertools.product(*(forall[axis] for axis in axes)) if axes else ():
            params = {**defaults, **dict(zip(axes, map(str, values), strict=True))}
            stem, f32_stem = (
                name
                + "".join(
                    SUFFIX.get(axis, {}).get(params[axis], f"_{params[axis]}") for axis in axes
                )
                for params in (params, {**params, "DTYPE": "f32"})
            )
            variants.append(Variant(stem, {**params, "KERNEL_F32": f32_stem}))
        for stem, params in table.get("variants", {}).items():
            given = {k: str(v) for k, v in params.items()}
            variants.append(Variant(stem, {"KERNEL_F32": stem, **defaults, **given}))
        if not variants:
            raise TemplateError(f"{path}: [{name}] generates no variant (give forall or variants)")
        for variant in variants:
            if variant.params["DTYPE"] not in WORDS["wgsl"]:
                raise TemplateError(
                    f"{path}: [{name}] {variant.stem}: DTYPE must be one of "
                    f"{sorted(WORDS['wgsl'])}, got {variant.params['DTYPE']!r}"
                )
        families.append(Family(name, tuple(variants)))
    return families


def holds(condition: str, params: dict[str, str], where: str) -> bool:
    """Whether a directive's COND holds for `params`."""
    joiner = " or " if " or " in condition else " and "
    results = []
    for part in condition.split(joiner):
        match = CONDITION.match(part.strip())
        if match is None:
            raise TemplateError(
                f"{where}: expected `NAME == value` or `NAME != value`, got {part!r}"
            )
        name, operator, value = match.groups()
        if name not in params:
            raise TemplateError(f"{where}: {name!r} is not a parameter here ({sorted(params)})")
        results.append((params[name] == value) == (operator == "=="))
    return any(results) if joiner == " or " else all(results)


def substitute(text: str, scope: dict[str, str], where: str) -> str:
    """`text` with each `${NAME}` and `${fn(EXPR)}` replaced (innermost first)."""
    out = []
    i = 0
    while (start := text.find("${", i)) >= 0:
        out.append(text[i:start])
        match = re.compile(r"\w+").match(text, start + 2)
        if match is None:
            raise TemplateError(f"{where}: `${{` not followed by a name")
        name, j = match.group(), match.end()
        if j < len(text) and text[j] == "(":
            depth, k = 1, j + 1
            while depth and k < len(text):
                depth += {"(": 1, ")": -1}.get(text[k], 0)
                k += 1
            if depth or k >= len(text) or text[k] != "}":
                raise TemplateError(f"{where}: unbalanced `${{{name}(`")
            pattern = scope.get(name)
            if pattern is None or "{}" not in pattern:
                raise TemplateError(f"{where}: {name!r} is not a conversion ({sorted(scope)})")
            out.append(pattern.format(substitute(text[j + 1 : k - 1], scope, where)))
            i = k + 1
        else:
            if j >= len(text) or text[j] != "}":
                raise TemplateError(f"{where}: `${{{name}` not closed by `}}`")
            if name not in scope or "{}" in scope[name]:
                raise TemplateError(f"{where}: {name!r} is not a parameter here ({sorted(scope)})")
            out.append(scope[name])
            i = j + 1
    out.append(text[i:])
    return "".join(out)


def render(template: str, path: Path, language: str, variant: Variant) -> str:
    """The kernel `variant` of `template` (the text of `path`) in `language`."""
    scope = {**WORDS[language][variant.params["DTYPE"]], **variant.params, "KERNEL": variant.stem}
    # Each open block: (this branch emits, some branch already emitted, enclosing emits).
    stack: list[tuple[bool, bool, bool]] = []
    emitting = True
    lines = []
    for number, line in enumerate(template.splitlines(keepends=True), 1):
        where = f"{path}:{number}"
        directive = DIRECTIVE.match(line)
        if directive is None:
            if emitting:
                lines.append(substitute(line, scope, where))
            continue
        keyword, condition = directive.groups()
        if keyword == "if":
            taken = holds(condition, scope, where)
            stack.append((taken, taken, emitting))
            emitting = emitting and taken
            continue
        if not stack:
            raise TemplateError(f"{where}: ${keyword} without an open $if")
        _, done, outer = stack.pop()
        if keyword == "endif":
            emitting = outer
            continue
        taken = not done and (keyword == "else" or holds(condition, scope, where))
        stack.append((taken, done or taken, outer))
        emitting = outer and taken
    if stack:
        raise TemplateError(f"{path}: {len(stack)} $if without $endif")
    return "".join(lines)


def generate(root: Path) -> dict[Path, str]:
    """Every generated kernel, by its path under `root`."""
    out: dict[Path, str] = {}
    families = load_families(root)
    names = {family.name for family in families}
    for template_dir, template_ext, _, _ in LANGUAGES.values():
        for path in sorted((root / template_dir).glob(f"*{template_ext}")):
            if path.name.removesuffix(template_ext) not in names:
                raise TemplateError(f"{path}: no family of {root / VARIANTS} names it")
    for family in families:
        for language, (template_dir, template_ext, out_dir, out_ext) in LANGUAGES.items():
            path = root / template_dir / f"{family.name}{template_ext}"
            try:
                template = path.read_text()
            except OSError:
                raise TemplateError(
                    f"{path}: missing (family {family.name!r} of {root / VARIANTS})"
                ) from None
            for variant in family.variants:
                target = root / out_dir / f"{variant.stem}{out_ext}"
                if target in out:
                    raise TemplateError(f"{root / VARIANTS}: {target.name} is generated twice")
                out[target] = render(template, path, language, variant)
    return out


def first_difference(path: Path, expected: str) -> str | None:
    """None when `path` holds `expected`, else a line naming it and its first differing line."""
    try:
        actual = path.read_text()
    except FileNotFoundError:
        return f"{path}: missing (run scripts/gen_shaders.py)"
    if actual == expected:
        return None
    want, have = expected.splitlines(keepends=True), actual.splitlines(keepends=True)
    for number, (a, b) in enumerate(itertools.zip_longest(want, have, fillvalue=""), 1):
        if a != b:
            return (
                f"{path}:{number}: differs from what its template generates: expected "
                f"{a.rstrip(chr(10))!r}, found {b.rstrip(chr(10))!r} (edit the template under "
                "shaders/ and run scripts/gen_shaders.py)"
            )
    return f"{path}: differs from what its template generates"  # pragma: no cover


def check(root: Path, generated: dict[Path, str]) -> list[str]:
    """Each committed kernel that differs from `generated`, and each one no template makes."""
    problems = [
        p for path, text in sorted(generated.items()) if (p := first_difference(path, text))
    ]
    for _, _, out_dir, out_ext in LANGUAGES.values():
        for path in sorted((root / out_dir).glob(f"*{out_ext}")):
            if path not in generated:
                problems.append(f"{path}: no template generates it (add it to {VARIANTS})")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Generate (or with --check, verify) the project's kernels."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a committed kernel is stale",
    )
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the repository (default: this one)"
    )
    args = parser.parse_args(argv)
    try:
        generated = generate(args.root)
    except TemplateError as error:
        print(f"gen_shaders: {error}", file=sys.stderr)
        return 2
    if args.check:
        problems = check(args.root, generated)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    for path, text in generated.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
