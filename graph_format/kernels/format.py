"""The manifest format's vocabulary: its name, the backends, what a value and a count
are, the names a manifest may use besides a slot's values, and the keys of a section."""

from __future__ import annotations

from typing import Literal

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
# A section's `precision`: the arithmetic its kernel computes in (the first is the default).
PRECISIONS = ("f32", "f16")
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
