"""torchtitan's models, run the way torchtitan runs them through autoparallel.

torchtitan (PyPI ``torchtitan``) reaches autoparallel through
``torchtitan.experiments.graph_trainer``: its ``AutoParallelGraph`` subclass and the sequence of its
``parallelize_autoparallel_llama`` / ``_deepseek_v3``. :func:`torchtitan_case` builds one of its
models by family and flavor (shrunk to ``layers`` layers) with that sequence as data:

* mixed precision: bfloat16 parameters, float32 gradient reduction, ``cast_forward_inputs=False``;
* ``add_parameter_memory_constraint(low=None, high=None)``;
* inputs ``(tokens, positions)``, both ``(S(0), R)`` on a ``(dp, tp)`` mesh;
* logits ``(S(0), S(2))``: the vocabulary split over ``tp`` (``loss_parallel``);
* ``spmd_backend="partial_dtensor"``, which the graph trainer's config sets (the default,
  ``spmd_types``, asserts mesh-axis types inside ``forward`` that a trace has no mesh for).

What cannot run as released, and what is done instead (``docs/limits.md``):

* torchtitan 0.3.0 refuses ``attn_backend="sdpa"`` for language models ("positions are always
  available, use flex"), while its autoparallel path is written for the maskless SDPA backend (its
  decoder's ``forward`` orders ``positions`` before ``attention_masks`` for exactly that). FlexAttention
  needs a ``BlockMask`` input autoparallel cannot take, so the model is built with torchtitan's own
  ``ScaledDotProductAttention`` module (causal) in the attention slot: :func:`_sdpa_backend`.
* ``parallelize_autoparallel_llama`` asks ``ParallelDims.get_optional_mesh("fsdp")``, which 0.3.0's
  ``ParallelDims`` rejects (its mesh dims are ``dp_shard``, ``tp``, ...): the sequence is replayed
  here on a ``(dp, tp)`` CPU mesh instead of calling that function.

torchtitan's autoparallel path is written for llama3 and deepseek_v3 only; the other language
families (:data:`TORCHTITAN_FAMILIES`) run the same sequence. Kimi K2.7 takes ``positions`` by
keyword only, so it is called through :class:`_PositionsByKeyword`. The families that cannot run
this sequence, and why, are :data:`TORCHTITAN_NOT_RUN`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..errors import InvalidOptionError

logger = logging.getLogger(__name__)

__all__ = ["TORCHTITAN_FAMILIES", "TORCHTITAN_NOT_RUN", "TorchtitanCase", "autoparallel_graph_class", "torchtitan_case", "torchtitan_mp_policy"]

#: torchtitan's model families (``torchtitan/models/``) and the module each is registered in.
TORCHTITAN_FAMILIES: dict[str, str] = {
    "llama3": "torchtitan.models.llama3",
    "deepseek_v3": "torchtitan.models.deepseek_v3",
    "qwen3": "torchtitan.models.qwen3",
    "gpt_oss": "torchtitan.models.gpt_oss",
    "kimi_k2_7": "torchtitan.models.kimi_k2_7",
    "muse_glimmer": "torchtitan.models.muse_glimmer",
}

#: torchtitan 0.3.0's model families that cannot run this sequence on CPU, with why.
TORCHTITAN_NOT_RUN: dict[str, str] = {
    "qwen3_5": "its Gated DeltaNet layers call flash-linear-attention's Triton kernels unconditionally "
               "(fla.ops.gated_delta_rule, fla.modules.conv): no CPU path. torchtitan 0.3.0 imports "
               "fla.modules.conv.triton, which fla-core 0.6.0 no longer ships and 0.5.2 fails to import "
               "with triton 3.9.0",
    "flux": "a diffusion transformer (image latents, text embeddings, timesteps; no tokens or positions): "
            "not the language-model sequence torchtitan's autoparallel path runs",
}

#: Families whose top module takes ``positions`` by keyword only.
_KEYWORD_POSITIONS = frozenset({"kimi_k2_7"})


def _require_torchtitan() -> None:
    try:
        importlib.import_module("torchtitan.experiments.graph_trainer.autoparallel_api")
    except ImportError as exc:
        raise InvalidOptionError(
            f"torchtitan is not importable ({exc}); install it with the project's torchtitan extra: "
            "pip install -c autoparallel_constraints/constraints.txt -e '.[torchtitan]'"
        ) from exc


def autoparallel_graph_class() -> type:
    """torchtitan's ``AutoParallelGraph`` (an ``AutoParallel`` subclass with its own apply path)."""
    _require_torchtitan()
    from torchtitan.experiments.graph_trainer.autoparallel_api import AutoParallelGraph

    return AutoParallelGraph


@contextlib.contextmanager
def _sdpa_backend() -> Iterator[None]:
    """``attn_backend="sdpa"`` builds torchtitan's causal ``ScaledDotProductAttention`` while a
    family's config is made (0.3.0 refuses the name; see the module docstring). Patched in every
    loaded family module: Kimi builds its layers with deepseek_v3's builder."""
    import sys

    from torchtitan.models.common.attention import ScaledDotProductAttention

    originals = {
        name: module.get_attention_config for name, module in list(sys.modules.items())
        if name.startswith("torchtitan.models.") and hasattr(module, "get_attention_config")
    }

    def patched(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_attention_config(backend: str, *args: Any, **kwargs: Any) -> Any:
            return ScaledDotProductAttention.Config() if backend == "sdpa" else original(backend, *args, **kwargs)

        return get_attention_config

    for name, original in originals.items():
        sys.modules[name].get_attention_config = patched(original)
    try:
        yield
    finally:
        for name, original in originals.items():
            sys.modules[name].get_attention_config = original


class _PositionsByKeyword(torch.nn.Module):
    """Calls ``model(tokens, positions=positions)``: autoparallel passes its inputs positionally."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, positions=positions)


@dataclass(frozen=True, kw_only=True, slots=True)
class TorchtitanCase:
    """One torchtitan model and torchtitan's autoparallel call sequence, as data.

    ``model_fn`` builds the model (call it under ``torch.device("meta")`` for autoparallel; on CPU
    for a reference it then runs the model's ``init_weights``, as torchtitan's trainer does);
    ``input_fn`` returns
    ``(tokens, positions)``. :meth:`configure` applies torchtitan's constraints to an entered
    ``AutoParallel``.
    """

    family: str
    flavor: str
    layers: int
    model_fn: Callable[[], torch.nn.Module]
    input_fn: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    mp_policy: Any
    input_placements: tuple[tuple[Placement, ...], ...]
    output_placements: tuple[tuple[Placement, ...], ...]

    @property
    def name(self) -> str:
        return f"torchtitan {self.family} {self.flavor} ({self.layers} layer{'s' if self.layers != 1 else ''})"

    def configure(self, autop: Any) -> None:
        """torchtitan's constraints: parameter memory (no bounds), inputs, outputs."""
        autop.add_parameter_memory_constraint(low=None, high=None)
        autop.add_input_constraints(list(self.input_placements))
        autop.add_output_constraints(list(self.output_placements))


def torchtitan_mp_policy() -> Any:
    """torchtitan's mixed precision: bfloat16 parameters, float32 reduction, forward inputs left as
    they are (no torchtitan import needed)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)


def torchtitan_case(
    family: str = "llama3",
    flavor: str = "debugmodel",
    *,
    layers: int | None = 2,
    mesh_ndim: int = 2,
    batch: int = 8,
    seq: int = 64,
    mixed_precision: bool = True,
) -> TorchtitanCase:
    """torchtitan's ``family``/``flavor`` model, its first ``layers`` layers (None: all), with the
    inputs and constraints of torchtitan's autoparallel path on a ``(dp, tp)`` mesh.

    ``mixed_precision=False`` keeps everything in float32 (torchtitan's default is bfloat16
    parameters with float32 reduction). On a 1-D mesh the logits are ``(S(0),)``.
    """
    if family in TORCHTITAN_NOT_RUN:
        raise InvalidOptionError(f"torchtitan's {family} is not run here: {TORCHTITAN_NOT_RUN[family]}")
    if family not in TORCHTITAN_FAMILIES:
        raise InvalidOptionError(f"unknown torchtitan family {family!r}; known: {', '.join(TORCHTITAN_FAMILIES)}")
    if mesh_ndim not in (1, 2):
        raise InvalidOptionError(f"torchtitan's autoparallel path takes a (dp,) or (dp, tp) mesh, not {mesh_ndim}-D")
    _require_torchtitan()
    from torchtitan.distributed import utils as dist_utils

    # process-wide in torchtitan too: its graph trainer sets it once from its config
    dist_utils.set_spmd_backend("partial_dtensor")
    module = importlib.import_module(TORCHTITAN_FAMILIES[family])
    with _sdpa_backend():
        config = module.model_registry(flavor, attn_backend="sdpa").model
    if layers is not None:
        if not 1 <= layers <= len(config.layers):
            raise InvalidOptionError(f"{family} {flavor} has {len(config.layers)} layers; layers={layers} is out of range")
        config = dataclasses.replace(config, layers=list(config.layers[:layers]))
        if getattr(config, "mtp_layers", None):
            config = dataclasses.replace(config, mtp_layers=[])
    vocab = int(config.vocab_size)

    def input_fn() -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, vocab, (batch, seq))
        positions = torch.arange(seq, dtype=torch.int32).repeat(batch, 1)
        return tokens, positions

    mp_policy = torchtitan_mp_policy() if mixed_precision else None
    x = (Shard(0), Replicate()) if mesh_ndim == 2 else (Shard(0),)
    logits = (Shard(0), Shard(2)) if mesh_ndim == 2 else (Shard(0),)

    def model_fn() -> torch.nn.Module:
        model = config.build()
        if not any(p.is_meta for p in model.parameters()):
            # torchtitan's trainer initialises every model after building it; the build alone
            # leaves the routed experts' weights (GroupedExperts: torch.empty) as whatever memory
            # held: zeros in a fresh process, garbage after other work
            with torch.no_grad():
                model.init_weights(buffer_device=None)
        return _PositionsByKeyword(model) if family in _KEYWORD_POSITIONS else model

    return TorchtitanCase(
        family=family, flavor=flavor, layers=len(config.layers), input_fn=input_fn, model_fn=model_fn,
        mp_policy=mp_policy, input_placements=(x, x), output_placements=(logits,),
    )
