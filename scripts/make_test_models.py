"""Export the tiny ExecuTorch test models of tests/data/models/, with their eager goldens.

Run by hand, never by the suite or CI (it needs ExecuTorch and PyTorch, which the project
does not depend on), from the repository root:

    python3 -m venv /tmp/et-venv && /tmp/et-venv/bin/pip install executorch==1.5.1 torch==2.13.0
    /tmp/et-venv/bin/python scripts/make_test_models.py [NAME ...]

Each model gets random weights from a fixed seed. The Llama models go through ExecuTorch's
own LLM exporter (`export_llama`, what `python -m executorch.extension.llm.export.export_llm`
runs) ALWAYS from a checkpoint written here: without `base.checkpoint` the exporter builds the
model on the `meta` device and `to_empty()`s it, which leaves the norm weights and rope tables
as uninitialised memory (values to 1e28 were seen). The FFN block and the refusal cases are
hand-built modules lowered with `to_edge_transform_and_lower` and `VulkanPartitioner`.

Beside each `<name>.pte` it writes `<name>.golden.npz`: the PyTorch EAGER outputs of the same
(quantized, for the q4 models) module over a fixed schedule of steps, computed in float32
before the export (the exporter's source transforms are the same ones; the eager module is a
deep copy, so its KV caches start at zero as the exported model's do). Arrays, for step i:
`step{i}.tokens` int32 [1, S] (Llamas) or `step{i}.x` float32 [1, S, dim] (FFN),
`step{i}.input_pos` int32 [1] (Llamas), `step{i}.out` float32 (the model's one output);
`schedule` int32 [steps, 2]: (S, input_pos) per step. Models whose name starts with `refuse_`
are refusal cases (the importer must refuse them); they have no goldens.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

OUT_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "models"
SEED = 20260901
# The Llama schedule: (S, input_pos) per step. A prefill, decodes, a prefill chunk, a decode:
# input_pos advances by each step's S, as a runner feeds it.
LLAMA_SCHEDULE = ((5, 0), (1, 5), (1, 6), (3, 7), (1, 10))
# The FFN schedule: its live S per step (no state; input_pos is 0).
FFN_SCHEDULE = (16, 1, 7, 3)


@dataclass(frozen=True)
class LlamaSpec:
    """One tiny Llama: its params.json and export settings."""

    params: dict[str, Any]
    group_size: int
    max_seq_length: int = 16
    max_context_length: int = 32
    force_fp16: bool = False
    # The embedding's q4 groups ("4,<group>"); one group per row fails upstream's partitioner.
    embedding_group: int = 32
    schedule: tuple[tuple[int, int], ...] = field(default=LLAMA_SCHEDULE)


def _params(**overrides: Any) -> dict[str, Any]:
    base = {
        "dim": 64,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 4,
        "vocab_size": 128,
        "multiple_of": 32,
        "norm_eps": 1e-5,
        "rope_theta": 10000.0,
    }
    return {**base, **overrides}


LLAMAS = {
    # Llama rope (interleaved pairs), multi-head attention, q4 groups of 32, two layers.
    "llama_rope": LlamaSpec(_params(), group_size=32),
    # HF (rotate-half) rope, GQA (2 kv heads for 4), q4 groups of 64, a longer context.
    "llama_hf_rope_gqa": LlamaSpec(
        _params(n_layers=1, n_kv_heads=2, vocab_size=256, use_hf_rope=True),
        group_size=64,
        max_context_length=64,
    ),
    # force_fp16: every float tensor serialized as float16, the q4 scales included; GQA.
    "llama_rope_gqa_f16": LlamaSpec(
        _params(n_layers=1, n_kv_heads=2), group_size=32, force_fp16=True
    ),
}


def seeded(name: str) -> None:
    """A fixed seed per model, so that adding a model changes no other model's weights."""
    torch.manual_seed(SEED + sum(name.encode()))


# ---------------------------------------------------------------------------- Llamas


def write_checkpoint(name: str, spec: LlamaSpec, work: Path) -> tuple[Path, Path]:
    """params.json and a checkpoint of random weights for the exporter's model class."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    params_path = work / f"{name}.params.json"
    params_path.write_text(json.dumps(spec.params))
    seeded(name)
    args = ModelArgs(
        max_seq_len=spec.max_seq_length,
        max_context_len=spec.max_context_length,
        use_kv_cache=True,
        **spec.params,
    )
    model = construct_transformer(args)
    state = {}
    for key, tensor in model.state_dict().items():
        if key.endswith("norm.weight"):
            # Norm weights away from 1 (their init), so that a dropped weight shows.
            state[key] = 1.0 + 0.25 * torch.randn_like(tensor)
        elif key.endswith(("k_cache", "v_cache")):
            continue  # state, not weights
        else:
            state[key] = 0.2 * torch.randn_like(tensor)
    checkpoint_path = work / f"{name}.pth"
    torch.save(state, checkpoint_path)
    return params_path, checkpoint_path


def llama_config(name: str, spec: LlamaSpec, params: Path, checkpoint: Path, out: Path) -> Any:
    """The exporter's config, from the same key=value list `export_llm` takes."""
    from executorch.extension.llm.export.config.llm_config import LlmConfig
    from omegaconf import OmegaConf

    keys = [
        "base.model_class=llama3",
        f"base.params={params}",
        f"base.checkpoint={checkpoint}",
        "model.use_kv_cache=True",
        "model.use_sdpa_with_kv_cache=True",
        "model.enable_dynamic_shape=True",
        "backend.vulkan.enabled=True",
        f"backend.vulkan.force_fp16={spec.force_fp16}",
        "quantization.qmode=4w",
        f"quantization.group_size={spec.group_size}",
        f"quantization.embedding_quantize='4,{spec.embedding_group}'",
        f"export.max_seq_length={spec.max_seq_length}",
        f"export.max_context_length={spec.max_context_length}",
        f"export.output_dir={out.parent}",
        f"export.output_name={out}",
    ]
    merged = OmegaConf.merge(OmegaConf.structured(LlmConfig), OmegaConf.from_dotlist(keys))
    return OmegaConf.to_object(merged)


def llama_goldens(spec: LlamaSpec, config: Any) -> dict[str, np.ndarray]:
    """Eager outputs of the source-transformed (q4) model over the schedule."""
    from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export

    manager = _prepare_for_llama_export(copy.deepcopy(config))
    model = copy.deepcopy(manager.model).eval()
    generator = torch.Generator().manual_seed(SEED)
    arrays: dict[str, np.ndarray] = {"schedule": np.array(spec.schedule, np.int32)}
    vocab = spec.params["vocab_size"]
    with torch.no_grad():
        for i, (length, pos) in enumerate(spec.schedule):
            tokens = torch.randint(0, vocab, (1, length), generator=generator)
            input_pos = torch.tensor([pos], dtype=torch.long)
            out = model(tokens, {"input_pos": input_pos})
            logits = out[0] if isinstance(out, tuple) else out
            arrays[f"step{i}.tokens"] = tokens.numpy().astype(np.int32)
            arrays[f"step{i}.input_pos"] = input_pos.numpy().astype(np.int32)
            arrays[f"step{i}.out"] = logits.float().numpy()
    return arrays


def export_llama_model(name: str, spec: LlamaSpec) -> dict[str, np.ndarray]:
    from executorch.examples.models.llama.export_llama_lib import export_llama

    out = OUT_DIR / f"{name}.pte"
    with tempfile.TemporaryDirectory() as tmp:
        params, checkpoint = write_checkpoint(name, spec, Path(tmp))
        config = llama_config(name, spec, params, checkpoint, out)
        goldens = llama_goldens(spec, config)
        export_llama(config)
    return goldens


# ---------------------------------------------------------------------------- hand-built


class FeedForward(torch.nn.Module):
    """A pre-norm SwiGLU block with its residual: x + w2(silu(w1(n)) * w3(n)), n = norm(x).

    The norm is the Llama example's RMSNorm, whose pattern upstream's partitioner fuses into
    `et_vk.rms_norm`; `torch.nn.RMSNorm` decomposes instead (its mean over dim 2, not -1,
    misses the pattern) and its eps add lands on the CPU between two delegates."""

    def __init__(self, dim: int, hidden: int) -> None:
        from executorch.examples.models.llama.norm import RMSNorm

        super().__init__()
        self.norm = RMSNorm(dim, eps=1e-5)
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.norm(x)
        return x + self.w2(torch.nn.functional.silu(self.w1(n)) * self.w3(n))


class CpuOpsBetween(torch.nn.Module):
    """Vulkan ops, then a cumsum (no Vulkan kernel: it stays on the CPU), twice: several
    delegates with CPU ops between them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cumsum(torch.sigmoid(x) * x, dim=-1)
        z = torch.cumsum(torch.sigmoid(y) + y, dim=-1)
        return torch.sigmoid(z) * z


class OutsideTheTable(torch.nn.Module):
    """One delegate holding an op the importer has no mapping for (tanh)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * x


def quantize_4w(module: torch.nn.Module, group_size: int) -> None:
    """The exporter's `4w` source transform: int4 weights, a scale per group, symmetric."""
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import IntxWeightOnlyConfig, quantize_

    quantize_(
        module, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group_size))
    )


def lower(module: torch.nn.Module, example: torch.Tensor, max_s: int, out: Path) -> None:
    """Export with a dynamic dim 1 in [1, max_s], lower to Vulkan, write the .pte."""
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    dims = {"x": {1: torch.export.Dim("S", min=1, max=max_s)}}
    exported = torch.export.export(module, (example,), dynamic_shapes=dims)
    edge = to_edge_transform_and_lower(
        exported, partitioner=[VulkanPartitioner({"require_dynamic_shapes": True})]
    )
    out.write_bytes(edge.to_executorch().buffer)


def export_ffn(name: str) -> dict[str, np.ndarray]:
    dim, hidden, max_s = 64, 192, 16
    seeded(name)
    module = FeedForward(dim, hidden).eval()
    with torch.no_grad():
        module.norm.weight.copy_(1.0 + 0.25 * torch.randn(dim))
        for linear in (module.w1, module.w2, module.w3):
            linear.weight.copy_(0.2 * torch.randn_like(linear.weight))
    quantize_4w(module, group_size=64)
    generator = torch.Generator().manual_seed(SEED)
    arrays: dict[str, np.ndarray] = {"schedule": np.array([(s, 0) for s in FFN_SCHEDULE], np.int32)}
    with torch.no_grad():
        for i, length in enumerate(FFN_SCHEDULE):
            x = torch.randn(1, length, dim, generator=generator)
            arrays[f"step{i}.x"] = x.numpy()
            arrays[f"step{i}.out"] = module(x).numpy()
    lower(module, torch.randn(1, max_s, dim), max_s, OUT_DIR / f"{name}.pte")
    return arrays


def export_refusal(name: str, module: torch.nn.Module) -> None:
    lower(module.eval(), torch.randn(1, 8, 16), 8, OUT_DIR / f"{name}.pte")


# ---------------------------------------------------------------------------- main


def main(names: list[str]) -> int:
    builders = {
        **{name: (lambda n=name: export_llama_model(n, LLAMAS[n])) for name in LLAMAS},
        "ffn_block": lambda: export_ffn("ffn_block"),
        "refuse_cpu_ops_between": lambda: export_refusal("refuse_cpu_ops_between", CpuOpsBetween()),
        "refuse_op_outside_table": lambda: export_refusal(
            "refuse_op_outside_table", OutsideTheTable()
        ),
    }
    unknown = sorted(set(names) - set(builders))
    if unknown:
        print(f"unknown models {unknown}; known: {sorted(builders)}", file=sys.stderr)
        return 2
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in names or list(builders):
        goldens = builders[name]()
        if goldens is not None:
            np.savez(OUT_DIR / f"{name}.golden.npz", allow_pickle=False, **goldens)
        size = (OUT_DIR / f"{name}.pte").stat().st_size
        print(f"{name}.pte: {size} bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
