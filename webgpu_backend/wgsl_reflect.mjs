// WGSL reflection through the npm package wgsl_reflect, for webgpu_backend/reflection.py.
//
// Usage: node wgsl_reflect.mjs <node_modules dir>  (stdin: {"sources": [{"name", "code"}]})
// Writes one JSON object to stdout: {"tool", "version", "results": [...]}, one result per
// source, in order: the reflection, or {"error": {"message", "line", "column"}}. A missing or
// wrong version of the package is {"setup_error": "..."}. Exit status 0 unless the shim
// itself broke (then Python reports the traceback on stderr).
//
// What this adds to wgsl_reflect 1.6.0 (each checked by tests/unit/test_wgsl_reflection.py):
// - attribute arguments may be expressions (`@workgroup_size(TILE * 2u)`, `@align(4 * 4)`),
//   as WGSL allows; the library's parser takes a literal or a name only. Arguments that are
//   constant expressions are folded to their value before the layout is computed;
// - workgroup sizes are evaluated here: the library reads `64u` as 1 and an override
//   without a default as 1;
// - override ids come from `@id(n)` (the library reports 0 for every override without one)
//   and defaults are evaluated with the library's own interpreter (WgslExec);
// - types are described structurally (vector/matrix/array/atomic with their element type),
//   with the predeclared aliases (vec4f, mat3x3h, ...) spelled out.

import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

// The one pinned version: scripts/setup.sh installs exactly this one (it reads it from here).
const WGSL_REFLECT_VERSION = "1.6.0";

// stdout carries the one JSON answer: the library's interpreter logs (e.g. about `enable`)
// go to stderr.
console.log = console.error;
console.warn = console.error;

function fail(message) {
  process.stdout.write(JSON.stringify({ setup_error: message }));
  process.exit(0);
}

const modulesDir = process.argv[2];
const packageDir = path.join(modulesDir || "", "wgsl_reflect");
let installed = null;
try {
  installed = JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8")).version;
} catch {
  fail(`the npm package wgsl_reflect is not installed in ${modulesDir}`);
}
if (installed !== WGSL_REFLECT_VERSION) {
  fail(`wgsl_reflect ${installed} is installed in ${modulesDir}, ${WGSL_REFLECT_VERSION} is pinned`);
}
const W = await import(pathToFileURL(path.join(packageDir, "wgsl_reflect.module.js")).href);

// The library scans `block` (a pre-2022 WGSL attribute) as a keyword, so `let block = ...`
// (upstream ExecuTorch's embedding_q4gsw and sdpa_fd_split kernels) does not parse. WGSL has
// no such keyword: scan it as a name (`@block`, if anyone still writes it, stays an attribute:
// attribute names may be names).
delete W.TokenTypes.keywords.block;

// Words WGSL reserves or predeclares; the library's other keywords (`read`, `storage`,
// `uniform`, `workgroup`, texel formats, ...) are names in WGSL, and a parse error at one of
// them says so.
const WGSL_WORDS = new Set(
  (
    "alias break case const const_assert continue continuing default diagnostic discard else " +
    "enable false fn for if let loop override requires return struct switch true var while " +
    "array atomic bool f32 f16 i32 u32 ptr sampler sampler_comparison bitcast type " +
    "fallthrough static_assert vec2 vec3 vec4 mat2x2 mat2x3 mat2x4 mat3x2 mat3x3 mat3x4 " +
    "mat4x2 mat4x3 mat4x4"
  ).split(" "),
);

// Attribute argument expressions of the module being parsed, by attribute node.
let attributeArgs = new Map();

// The library's `_attribute` with full expressions as arguments. The argument's text (its
// tokens joined by spaces; a single literal or name is unchanged) becomes the attribute's
// value, as the library stores it; the expressions are kept for evaluation below.
W.WgslParser.prototype._attribute = function attribute() {
  const tokens = W.TokenTypes.tokens;
  const attributes = [];
  while (this._match(tokens.attr)) {
    const name = this._consume(W.TokenTypes.attribute_name, "Expected attribute name");
    const node = this._updateNode(new W.Attribute(name.toString(), null));
    if (this._match(tokens.paren_left)) {
      const texts = [];
      const expressions = [];
      while (!this._check(tokens.paren_right)) {
        const first = this._current;
        expressions.push(this._short_circuit_or_expression());
        texts.push(
          this._tokens
            .slice(first, this._current)
            .map((t) => t.lexeme)
            .join(" "),
        );
        if (!this._match(tokens.comma)) break;
      }
      this._consume(tokens.paren_right, "Expected ')'");
      node.value = texts.length === 1 ? texts[0] : texts;
      attributeArgs.set(node, { texts, expressions });
    }
    attributes.push(node);
  }
  return attributes.length === 0 ? null : attributes;
};

// Scalar of a `Data` the interpreter returned, as JSON: a number, a bool, or null.
function scalarOf(data, typeName) {
  if (data === null || data === undefined) return null;
  let value = data.value;
  if (Array.isArray(value) || ArrayBuffer.isView(value)) value = value.length === 1 ? value[0] : null;
  if (typeof value !== "number") return null;
  if (typeName === "bool") return value !== 0;
  return value;
}

function evaluate(expression, exec) {
  try {
    const type = [];
    const data = expression.constEvaluate(exec, type);
    return scalarOf(data, type[0]?.name);
  } catch {
    return null;
  }
}

function referencedNames(expression) {
  const names = new Set();
  if (expression instanceof W.VariableExpr) names.add(expression.name);
  expression.search?.((node) => {
    if (node instanceof W.VariableExpr) names.add(node.name);
  });
  return [...names];
}

const ALIAS = /^(vec[234]|mat[234]x[234])([fihu])$/;
const ALIAS_ELEMENT = { f: "f32", i: "i32", u: "u32", h: "f16" };
const SCALAR_SIZE = { f32: 4, i32: 4, u32: 4, f16: 2, bool: 4 };

function scalar(name) {
  return { kind: "scalar", name, size: SCALAR_SIZE[name] ?? null };
}

// A structural description of a reflected TypeInfo (aliases resolved by the library).
function describe(type) {
  if (type === null || type === undefined) return null;
  if (type.isStruct) return { kind: "struct", name: type.name, size: type.size };
  if (type.isArray) {
    return {
      kind: "array",
      element: describe(type.format),
      count: type.count > 0 ? type.count : null,
      stride: type.stride,
      size: type.count > 0 ? type.size : null,
    };
  }
  const alias = ALIAS.exec(type.name);
  const base = alias ? alias[1] : type.name;
  const element = alias ? scalar(ALIAS_ELEMENT[alias[2]]) : describe(type.format ?? null);
  const vector = /^vec([234])$/.exec(base);
  if (vector) return { kind: "vector", count: Number(vector[1]), element, size: type.size };
  const matrix = /^mat([234])x([234])$/.exec(base);
  if (matrix) {
    const [columns, rows] = [Number(matrix[1]), Number(matrix[2])];
    return { kind: "matrix", columns, rows, element, size: type.size };
  }
  if (base === "atomic") return { kind: "atomic", element, size: type.size };
  if (base in SCALAR_SIZE) return scalar(base);
  return { kind: "other", name: type.getTypeName(), size: type.size || null };
}

function attributeValue(attributes, name) {
  const found = (attributes ?? []).find((a) => a.name === name);
  return found === undefined ? undefined : found.value;
}

// Attributes whose arguments are numbers (the others take enumerants: builtin, interpolate).
const NUMERIC_ATTRIBUTES = new Set(["align", "size", "binding", "group", "id", "location",
  "blend_src", "workgroup_size"]);

const RESOURCE_KINDS = ["uniform", "storage", "immediate", "texture", "sampler", "storage_texture"];

function reflectOne(code) {
  attributeArgs = new Map();
  const parser = new W.WgslParser();
  let ast;
  try {
    ast = parser.parse(code);
  } catch (error) {
    const token = parser._tokens?.[Math.min(parser._current, parser._tokens.length - 1)];
    let line = token?.line ?? null;
    let column = null;
    if (token && token.start >= 0) column = token.start - code.lastIndexOf("\n", token.start - 1);
    if (line === null) {
      const match = /Line: (\d+)/.exec(String(error.message));
      line = match ? Number(match[1]) : null;
    }
    let message = String(error.message ?? error);
    const lexeme = token?.lexeme;
    const keyword = lexeme in W.TokenTypes.keywords;
    if (keyword && !WGSL_WORDS.has(lexeme) && !lexeme.startsWith("texture")) {
      message +=
        ` (wgsl_reflect ${WGSL_REFLECT_VERSION} takes '${lexeme}' for a keyword; WGSL lets it` +
        " name a value: rename it)";
    }
    return { error: { message, line, column } };
  }

  // Module-scope constants, overrides (at their defaults) and their values.
  const exec = new W.WgslExec(ast);
  try {
    exec.execute({});
  } catch {
    // An override or const the interpreter cannot evaluate: it stays without a value.
  }
  const overrideNodes = ast.filter((node) => node instanceof W.Override);
  const overrideNames = new Set(overrideNodes.map((node) => node.name));

  // Fold constant attribute arguments (`@align(4 * 4)`) to their values, so that the
  // library's layout sees numbers; arguments naming overrides keep their text.
  for (const [node, args] of attributeArgs) {
    if (!NUMERIC_ATTRIBUTES.has(node.name)) continue;
    const values = args.expressions.map((expression, i) => {
      if (referencedNames(expression).some((n) => overrideNames.has(n))) return args.texts[i];
      const value = evaluate(expression, exec);
      return typeof value === "number" ? String(value) : args.texts[i];
    });
    node.value = values.length === 1 ? values[0] : values;
  }

  const reflect = new W.WgslReflect();
  reflect.updateAST(ast);

  const declarationLine = new Map();
  for (const node of ast) if (node.name !== undefined) declarationLine.set(node.name, node.line);

  const overrides = overrideNodes.map((node) => {
    const id = attributeValue(node.attributes, "id");
    // Declared, or inferred from a literal (an abstract int `4` becomes i32, as in WGSL). The
    // library's interpreter infers other expressions wrongly (`a * 2` with `a = 4` comes out
    // f32): their type stays unknown (null).
    let type = node.type?.name ?? null;
    if (type === null && node.value instanceof W.LiteralExpr) {
      type = node.value.type?.name ?? null;
      if (type === "x32") type = "i32";
    }
    let value = null;
    if (node.value !== null) {
      value = scalarOf({ value: exec.getVariableValue(node.name) }, type);
    }
    let text = null;
    if (node.value !== null && node.start >= 0) {
      const declaration = code.slice(node.start, node.end);
      text = declaration.slice(declaration.indexOf("=") + 1).replace(/;\s*$/, "").trim();
    }
    return {
      name: node.name,
      type,
      id: id === undefined ? null : Number(id),
      default: value,
      default_text: text,
      line: node.line,
    };
  });

  const workgroupSize = (attributes) => {
    const found = (attributes ?? []).find((a) => a.name === "workgroup_size");
    if (found === undefined) return null;
    const args = attributeArgs.get(found);
    const dims = args.texts.map((text, i) => {
      const expression = args.expressions[i];
      const used = referencedNames(expression).filter((n) => overrideNames.has(n));
      return { text, value: evaluate(expression, exec), overrides: used };
    });
    while (dims.length < 3) dims.push({ text: null, value: 1, overrides: [] });
    return dims;
  };

  const entryPoints = [];
  for (const stage of ["compute", "vertex", "fragment"]) {
    for (const fn of reflect.entry[stage]) {
      const node = ast.find((n) => n instanceof W.Function && n.name === fn.name);
      const size = stage === "compute" ? workgroupSize(node?.attributes) : null;
      // The library misses overrides that only the workgroup size uses.
      const used = new Set([
        ...fn.overrides.map((o) => o.name),
        ...(size ?? []).flatMap((d) => d.overrides),
      ]);
      entryPoints.push({
        name: fn.name,
        stage,
        line: node?.line ?? fn.startLine,
        workgroup_size: size,
        resources: fn.resources.map((v) => [v.group, v.binding]),
        overrides: overrideNodes.map((o) => o.name).filter((name) => used.has(name)),
      });
    }
  }

  const variables = [
    ...reflect.uniforms,
    ...reflect.storage,
    ...reflect.immediates,
    ...reflect.textures,
    ...reflect.samplers,
  ];
  const seen = new Set();
  const bindings = [];
  for (const v of variables) {
    const key = `${v.group}/${v.binding}/${v.name}`;
    if (seen.has(key)) continue;
    seen.add(key);
    bindings.push({
      group: v.group,
      binding: v.binding,
      name: v.name,
      line: declarationLine.get(v.name) ?? null,
      resource: RESOURCE_KINDS[v.resourceType] ?? String(v.resourceType),
      access: v.access || null,
      type: describe(v.type),
    });
  }

  const structs = reflect.structs.map((s) => ({
    name: s.name,
    line: s.startLine,
    size: s.size,
    align: s.align,
    members: s.members.map((m) => {
      const align = attributeValue(m.attributes, "align");
      const size = attributeValue(m.attributes, "size");
      return {
        name: m.name,
        type: describe(m.type),
        offset: m.offset,
        size: m.size,
        align_attribute: align === undefined ? null : Number(align),
        size_attribute: size === undefined ? null : Number(size),
      };
    }),
  }));

  const enables = [];
  for (const node of ast) if (node instanceof W.Enable) enables.push(node.name);

  return { enables, entry_points: entryPoints, bindings, overrides, structs };
}

const request = JSON.parse(fs.readFileSync(0, "utf8"));
const results = request.sources.map(({ code }) => {
  try {
    return reflectOne(code);
  } catch (error) {
    const message = `wgsl_reflect failed: ${error?.stack ?? error}`;
    return { error: { message, line: null, column: null } };
  }
});
process.stdout.write(
  JSON.stringify({ tool: "wgsl_reflect", version: WGSL_REFLECT_VERSION, results }),
);
