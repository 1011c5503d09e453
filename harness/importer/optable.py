"""The serialized op names the importer maps, each onto one project op, slot by slot.

A rule reads one `OperatorCall`'s positional arguments in the order upstream's serializer
writes them (every schema argument, defaults included, then the output: backends/vulkan/
serialization/vulkan_graph_builder.py) and names the project op it becomes. An argument
the project op has no slot for must hold the value that makes the two compute the same
(`ArgReader.expect`), or the model is refused naming the op and the argument. Nothing is
fused or dropped: SiLU arrives as `mul(x, sigmoid(x))` and stays two ops; the last-token
`select_copy` stays a `select_copy`. The one op folded away is `et_vk.prepack` (a
constant's placement on the device, a copy), recorded as a rewrite by the converter.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.importer.values import ArgReader

# The serialized name of the constant placement the converter folds away.
PREPACK = "et_vk.prepack.default"
# SymInt arithmetic serializes under the Python operator's name.
SYM_ARITHMETIC = {"add": "sym_add", "sub": "sym_sub", "mul": "sym_mul", "floordiv": "sym_floordiv"}

Rule = Callable[[ArgReader], str]


def linear_q4gsw(a: ArgReader) -> str:
    a.tensor("x")
    a.tensor("weight")
    a.tensor("scales", widen_f16=True)
    a.integer("group_size")
    a.optional_tensor("bias")
    a.output("out")
    return "linear_q4gsw"


def embedding_q4gsw(a: ArgReader) -> str:
    a.tensor("weight")
    a.tensor("scales", widen_f16=True)
    a.integer("group_size")
    a.tensor("indices")
    a.integer("is_linear_weight")  # a Bool, as the int 0 or 1 the project's slot takes
    a.output("out")
    return "embedding_q4gsw"


def rms_norm(a: ArgReader) -> str:
    a.tensor("x")
    a.tensor("weight")
    a.floating("eps")
    a.output("out")
    return "rms_norm"


def add(a: ArgReader) -> str:
    a.tensor("a")
    a.tensor("b")
    a.expect("alpha", (1, None), "the project's add computes a + b (alpha 1)")
    a.output("out")
    return "add"


def mul(a: ArgReader) -> str:
    a.tensor("a")
    a.tensor("b")
    a.output("out")
    return "mul"


def sigmoid(a: ArgReader) -> str:
    a.tensor("x")
    a.output("out")
    return "sigmoid"


def apply_rotary_emb(a: ArgReader) -> str:
    a.tensor("xq")
    a.tensor("xk")
    a.tensor("freqs_cos")
    a.tensor("freqs_sin")
    a.outputs_list("xq_out", "xk_out")
    return "apply_rotary_emb"


def apply_rotary_emb_hf(a: ArgReader) -> str:
    a.tensor("xq")
    a.tensor("xk")
    a.tensor("cos")
    a.tensor("sin")
    a.int_or_sym("start_pos")
    a.outputs_list("xq_out", "xk_out")
    return "apply_rotary_emb_hf"


def sdpa_with_kv_cache(a: ArgReader) -> str:
    for slot in ("q", "k", "v", "k_cache", "v_cache"):
        a.tensor(slot)
    a.int_or_sym("input_pos")
    a.skip("seq_len")  # upstream's runtimes ignore it too: S is q's live dim 1
    a.expect("attn_mask", (None,), "the project's op (as upstream's runtimes) takes no mask")
    a.expect("dropout_p", (0, None), "the project's op has no dropout")
    a.expect("is_causal", (True, None), "the project's op is causal")
    a.floating("scale", optional=True)
    a.output("out")
    return "sdpa_with_kv_cache"


def view_copy(a: ArgReader) -> str:
    a.tensor("x")
    a.size_list("sizes")
    a.output("out")
    return "view_copy"


def sym_size(a: ArgReader) -> str:
    a.tensor("x")
    a.integer("dim")
    a.sym_output("out")
    return "sym_size"


def select_as_symint(a: ArgReader) -> str:
    a.tensor("x")
    a.integer("dim")
    a.integer("index")
    a.sym_output("out")
    return "select_as_symint"


def slice_copy(a: ArgReader) -> str:
    a.tensor("x")
    a.integer("dim")
    a.int_or_sym("start")
    a.int_or_sym("end")
    a.integer("step")
    a.output("out")
    return "slice_copy"


def select_copy(a: ArgReader) -> str:
    a.tensor("x")
    a.integer("dim")
    a.integer("index")
    a.output("out")
    return "select_copy"


def _sym_rule(project_op: str) -> Rule:
    def rule(a: ArgReader) -> str:
        a.int_or_sym("a")
        a.int_or_sym("b")
        a.sym_output("out")
        return project_op

    return rule


# Serialized name -> the rule that converts it (PREPACK is the converter's own).
RULES: dict[str, Rule] = {
    "et_vk.linear_q4gsw.default": linear_q4gsw,
    "et_vk.embedding_q4gsw.default": embedding_q4gsw,
    "et_vk.rms_norm.default": rms_norm,
    "aten.add.Tensor": add,
    "aten.mul.Tensor": mul,
    "aten.sigmoid.default": sigmoid,
    "et_vk.apply_rotary_emb.default": apply_rotary_emb,
    "et_vk.apply_rotary_emb_hf.default": apply_rotary_emb_hf,
    "sdpa_with_kv_cache.default": sdpa_with_kv_cache,
    "aten.view_copy.default": view_copy,
    "sym_size.int": sym_size,
    "et_vk.select_as_symint.default": select_as_symint,
    "aten.slice_copy.Tensor": slice_copy,
    "aten.select_copy.int": select_copy,
    **{name: _sym_rule(op) for name, op in SYM_ARITHMETIC.items()},
}
# Every serialized name the importer accepts.
KNOWN_OPS = frozenset([*RULES, PREPACK])
# The KV-cache slots of the ops that update a constant in place (state tensors).
STATE_SLOTS = {"sdpa_with_kv_cache.default": (3, 4)}
