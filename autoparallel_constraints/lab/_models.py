"""The lab's models by name (``seed``, ``llama3``, ``falcon``, ``falcon_style``, ...): each a factory of
the module, its input function, the input placements and the mixed-precision policy the lab uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..errors import InvalidOptionError
from ..models import SEED_CONFIG, SeedBlock, SeedConfig
from ..seam import autop as upstream
from ._runs import seed_mp_policy

logger = logging.getLogger(__name__)

__all__ = ["LAB_MODELS", "LabModel", "SIZES", "lab_model"]

# ---------------------------------------------------------------------------------------------
# The lab's models


@dataclass(frozen=True, kw_only=True, slots=True)
class LabModel:
    """One model as the lab runs it: the module (on meta), its input, and the user constraints."""

    name: str
    description: str
    model: torch.nn.Module
    input_fn: Callable[[], Any]
    input_placements: tuple[tuple[Placement, ...], ...]
    output_placements: tuple[tuple[Placement, ...], ...] | None = None
    mp_policy: Any = None
    parameter_memory_constraint: bool = False
    mesh_dim_names: tuple[str, ...] | None = None

    def enter(self, mesh: Any) -> Any:
        """An ``AutoParallel`` of this model on ``mesh`` (use as ``with spec.enter(mesh) as autop``)."""
        from autoparallel.api import AutoParallel

        return AutoParallel(self.model, self.input_fn, mesh, self.mp_policy)

    def constrain(self, autop: Any) -> None:
        """The lab's user constraints on an entered ``autop``: inputs, outputs, parameter memory."""
        autop.add_input_constraints(list(self.input_placements))
        if self.output_placements:
            autop.add_output_constraints(list(self.output_placements))
        if self.parameter_memory_constraint:
            autop.add_parameter_memory_constraint()


def _seed_model(mesh_shape: tuple[int, ...], *, size: str, layers: int | None, dim: int | None) -> LabModel:
    config = SEED_CONFIG if size == "full" else SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)
    with torch.device("meta"):
        model = SeedBlock(config)
    first = (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)
    return LabModel(
        name="seed",
        description=(
            f"seed block of upstream #348 ({config.num_heads} heads x {config.head_dim}, batch "
            f"{config.batch}, seq {config.seq}, bf16 params / fp32 reduce)"
        ),
        model=model,
        input_fn=lambda: model.make_input(),
        input_placements=(first,),
        mp_policy=seed_mp_policy(),
    )


def _llama3_model(mesh_shape: tuple[int, ...], *, size: str, layers: int | None, dim: int | None) -> LabModel:
    """autoparallel's own llama3 test model, configured as upstream's example_llama3.py (8B shape).

    Full size: ``dim`` 4096, 32 heads / 8 kv heads, vocab 128256, seq 8192, batch 2 x mesh[0],
    param-memory constraint, input ``(S(0), R)``, output ``(S(0), S(2))`` (vocab parallel) on a
    2-D mesh. ``tiny``: dim 256, 4 heads / 2 kv heads, vocab 512, seq 64 (for tests).
    """
    Transformer, TransformerModelArgs = upstream.llama3()

    n_layers = layers if layers is not None else 2
    if size == "full":
        vocab, seqlen = 128256, 2048 * 4
        args = TransformerModelArgs(
            dim=dim or 4096, n_layers=n_layers, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
            multiple_of=1024, rope_theta=500000, vocab_size=vocab, max_seq_len=seqlen,
        )
    else:
        vocab, seqlen = 512, 64
        args = TransformerModelArgs(
            dim=dim or 256, n_layers=n_layers, n_heads=4, n_kv_heads=2, multiple_of=64,
            vocab_size=vocab, max_seq_len=seqlen,
        )
    batch = 2 * mesh_shape[0]
    with torch.device("meta"):
        model = Transformer(args)
    first = (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)
    output = (Shard(0), Shard(2)) if len(mesh_shape) == 2 else first
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return LabModel(
        name="llama3",
        description=(
            f"autoparallel's llama3, {n_layers} layers, dim {args.dim}, {args.n_heads} heads / "
            f"{args.n_kv_heads} kv, vocab {vocab}, batch {batch}, seq {seqlen}, bf16/fp32"
        ),
        model=model,
        input_fn=lambda: torch.randint(0, vocab, (batch, seqlen)),
        input_placements=(first,),
        output_placements=(output,),
        mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
        parameter_memory_constraint=True,
        mesh_dim_names=("dp", "tp") if len(mesh_shape) == 2 else None,
    )


class _CausalLMLogits(torch.nn.Module):
    """Return only the logits of a HF causal LM (autoparallel traces tensors, not ModelOutput)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=input_ids, use_cache=False).logits


def _falcon_model(mesh_shape: tuple[int, ...], *, size: str, layers: int | None, dim: int | None) -> LabModel:
    """HF transformers' FalconForCausalLM from a local FalconConfig (nothing is downloaded).

    Full size: 1 layer, hidden 4544 (71 heads x 64, multi-query), vocab 65024, batch 2 x mesh[0],
    seq 2048 — the model of upstream #348. ``tiny``: hidden 128 (8 heads x 16), vocab 256, seq 32.
    Eager attention, as the zoo and the real-model tests: with transformers' default (sdpa) the
    traced ``_scaled_dot_product_flash_attention_for_cpu`` makes autoparallel's cost model assert
    while it builds (``compute_estimation._shard_args_for_node``; transformers 5.25, with or
    without the plugin). Needs ``transformers``.
    """
    try:
        from transformers import FalconConfig, FalconForCausalLM
    except ImportError as exc:
        raise InvalidOptionError(
            f"--model falcon needs HF transformers ({exc}); pip install transformers"
        ) from None
    n_layers = layers if layers is not None else 1
    if size == "full":
        hidden, heads, vocab, seqlen = dim or 4544, 71, 65024, 2048
    else:
        hidden, heads, vocab, seqlen = dim or 128, 8, 256, 32
    config = FalconConfig(
        hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=n_layers, vocab_size=vocab,
        multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False, alibi=False,
        use_cache=False, attn_implementation="eager",
    )
    batch = 2 * mesh_shape[0]
    with torch.device("meta"):
        model = _CausalLMLogits(FalconForCausalLM(config))
    first = (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)
    return LabModel(
        name="falcon",
        description=f"HF FalconForCausalLM, {n_layers} layer(s), hidden {hidden} ({heads} heads, multi-query), vocab {vocab}, batch {batch}, seq {seqlen}",
        model=model,
        input_fn=lambda: torch.randint(0, vocab, (batch, seqlen)),
        input_placements=(first,),
        mp_policy=seed_mp_policy(),
    )


LAB_MODELS: dict[str, Callable[..., LabModel]] = {
    "seed": _seed_model,
    "llama3": _llama3_model,
    "falcon": _falcon_model,
}
SIZES = ("full", "tiny")


def lab_model(
    name: str, mesh_shape: Sequence[int], *, size: str = "full", layers: int | None = None, dim: int | None = None
) -> LabModel:
    """Build the lab model ``name`` (``seed``, ``llama3``, ``falcon``) for ``mesh_shape``."""
    if name not in LAB_MODELS:
        raise InvalidOptionError(f"unknown model {name!r}; available: {', '.join(LAB_MODELS)}")
    if size not in SIZES:
        raise InvalidOptionError(f"size must be one of {SIZES}, got {size!r}")
    return LAB_MODELS[name](tuple(int(s) for s in mesh_shape), size=size, layers=layers, dim=dim)
