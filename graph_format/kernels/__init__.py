"""Kernel manifests: which kernel implements which slot on which backend, and how it binds.

A user's kernel folder holds `kernels.toml` (format `parity-kernels/1`, docs/design.md §9): one
`[<backend>.<slot>]` table per replaced slot names the shader file and maps the kernel's own
declarations (bindings, params members, overrides, specialization and push constants) onto
the slot's interface (`graph_format/ops/<op>.toml`: roles and offered values), with the
dispatch count as an expression over those values. The project's own kernels are described
by the same dataclasses (`builtin_entry`), so a backend binds every kernel through one path:
reflect the kernel, then ask its `KernelEntry` what fills each declaration.

This package is the shared DATA layer: the file format, its frozen dataclasses, a safe
expression evaluator and the rules that fill a kernel's declarations by name. It knows no
backend API; what a kernel declares comes in as plain names and indices from each backend's
own reflection. docs/bring-your-own-kernels.md is the reference for users.

Its modules, each importing only those above it:
- `format`: the format's name, backends, value and count types, reserved names, section keys;
- `errors`: the errors of manifests and expressions;
- `expressions`: the expression language;
- `adapters`: a manifest's Python adapter class, imported from its file;
- `binding`: `KernelEntry` and `KernelDispatch`, and the binding rules;
- `scratch`: manifest-sized scratch buffers shared by an op's slots, masked columns;
- `manifest`: `KernelManifest`, its TOML data, the project's implicit entries;
- `extends`: a section inheriting another's keys;
- `parsing`: reading a `kernels.toml` (`parse_manifest`, `load_manifest`).
"""

from graph_format.kernels.adapters import (
    AdapterRef,
    KernelAdapter,
    adapter_provides,
    load_adapter,
)
from graph_format.kernels.binding import KernelDispatch, KernelEntry
from graph_format.kernels.errors import (
    ExpressionError,
    KernelInterfaceError,
    KernelManifestError,
    KernelRequirementError,
)
from graph_format.kernels.expressions import FASTDIV_MAX_DIVISOR, FUNCTIONS, Expression
from graph_format.kernels.format import (
    BACKENDS,
    BUILTIN_NAMES,
    EXTENDS_KEY,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MASK_READERS,
    MASK_WRITERS,
    MASKED_IGNORED,
    MASKED_READ,
    MASKED_SKIPPED,
    MASKED_WRITTEN,
    META_SUFFIX,
    PARAMS_TARGET,
    PROJECT_PADDING,
    PROJECT_WORKGROUP_OVERRIDE,
    WORKGROUP_SIZE_VALUE,
    WORKGROUPS_VALUE,
    Backend,
    Count,
    SourceKind,
    Value,
)
from graph_format.kernels.manifest import KernelManifest, builtin_entry
from graph_format.kernels.parsing import load_manifest, parse_manifest
from graph_format.kernels.scratch import masked_columns_unwritten, scratch_sizes

__all__ = [
    "BACKENDS",
    "BUILTIN_NAMES",
    "EXTENDS_KEY",
    "FASTDIV_MAX_DIVISOR",
    "FUNCTIONS",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MASKED_IGNORED",
    "MASKED_READ",
    "MASKED_SKIPPED",
    "MASKED_WRITTEN",
    "MASK_READERS",
    "MASK_WRITERS",
    "META_SUFFIX",
    "PARAMS_TARGET",
    "PROJECT_PADDING",
    "PROJECT_WORKGROUP_OVERRIDE",
    "WORKGROUPS_VALUE",
    "WORKGROUP_SIZE_VALUE",
    "AdapterRef",
    "Backend",
    "Count",
    "Expression",
    "ExpressionError",
    "KernelAdapter",
    "KernelDispatch",
    "KernelEntry",
    "KernelInterfaceError",
    "KernelManifest",
    "KernelManifestError",
    "KernelRequirementError",
    "SourceKind",
    "Value",
    "adapter_provides",
    "builtin_entry",
    "load_adapter",
    "load_manifest",
    "masked_columns_unwritten",
    "parse_manifest",
    "scratch_sizes",
]
