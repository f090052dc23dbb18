"""Small models the demo, the lab and the tests run: the seed block of upstream issue #348.

Built from code only, nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["SEED_CONFIG", "AddMul", "SeedBlock", "SeedConfig", "SeedStack"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SeedConfig:
    """Sizes of the seed block. The defaults are the seed's: 73 heads of 64, batch 16, seq 128."""

    num_heads: int = 73
    head_dim: int = 64
    batch: int = 16
    seq: int = 128

    @property
    def hidden(self) -> int:
        return self.num_heads * self.head_dim


SEED_CONFIG = SeedConfig()


class SeedBlock(nn.Module):
    """Falcon-style fused projection used twice, as in upstream autoparallel issue #348.

    ``h = proj(x).view(B, S, NH, HD)``; the output is ``h[..., :-2, :]`` plus the list-indexed head
    ``h[..., [-2], :]`` broadcast over the sliced heads. The list index is advanced indexing, so
    the joint graph's backward contains ``index_put(zeros, [None, None, idx], grad, accumulate=True)``,
    and the two uses of ``h`` with different shapes let the solver shard them differently.
    """

    def __init__(self, config: SeedConfig = SEED_CONFIG) -> None:
        super().__init__()
        self.config = config
        self.proj = nn.Linear(config.hidden, config.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        h = self.proj(x).view(batch, seq, self.config.num_heads, self.config.head_dim)
        sliced = h[..., :-2, :]
        picked = h[..., [-2], :]
        return sliced + picked.expand_as(sliced)

    def make_input(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        c = self.config
        return torch.randn(c.batch, c.seq, c.hidden, device=device, dtype=dtype)


class AddMul(nn.Module):
    """Linear, then broadcasting add and mul: two pointwise table ops, the smallest model with a
    choice for the table to constrain (the tests' quick setup)."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim, bias=False)
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.fc(x) + x) * self.scale


class SeedStack(nn.Module):
    """``layers`` repeated seed blocks, each projected back to the hidden size.

    Identical layers let autoparallel link their ILP variables (``repeated_subgraphs``), so the
    plugin's per-node decisions bind every layer at once.
    """

    def __init__(self, config: SeedConfig = SEED_CONFIG, layers: int = 2) -> None:
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(SeedBlock(config) for _ in range(layers))
        kept = (config.num_heads - 2) * config.head_dim
        self.outs = nn.ModuleList(nn.Linear(kept, config.hidden, bias=False) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block, out in zip(self.blocks, self.outs):
            x = out(block(x).flatten(-2))
        return x

    def make_input(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        c = self.config
        return torch.randn(c.batch, c.seq, c.hidden, device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Larger test models, small sizes: each builder returns (model_fn, input_fn). Build the model
# where you want it (e.g. ``with torch.device("meta"): model = model_fn()``) and pass both to
# AutoParallel (``AutoParallel(model, input_fn, mesh)``); nothing is downloaded.

from collections.abc import Callable  # noqa: E402  (the builders' return type)

__all__ += ["falcon_tiny", "llama3_small"]

ModelBuilder = tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]


def llama3_small(
    *, dim: int = 64, n_layers: int = 2, n_heads: int = 4, n_kv_heads: int = 2, vocab_size: int = 128,
    seq: int = 16, batch: int = 4,
) -> ModelBuilder:
    """autoparallel's llama3 test model (``autoparallel._testing.models.llama3``) at small sizes.

    Returns ``(model_fn, input_fn)``: ``model_fn()`` builds the ``Transformer`` (grouped-query
    attention with ``n_kv_heads``, rotary embeddings, RMSNorm, SwiGLU), ``input_fn()`` a
    ``[batch, seq]`` tensor of token ids.
    """
    from autoparallel._testing.models.llama3 import Transformer, TransformerModelArgs

    args = TransformerModelArgs(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, vocab_size=vocab_size,
        max_seq_len=seq, multiple_of=32,
    )

    def model_fn() -> nn.Module:
        return Transformer(args)

    def input_fn() -> torch.Tensor:
        return torch.randint(0, vocab_size, (batch, seq))

    return model_fn, input_fn


def falcon_tiny(
    *, hidden: int = 64, heads: int = 4, layers: int = 1, vocab_size: int = 128, seq: int = 16, batch: int = 4,
) -> ModelBuilder:
    """HF transformers' ``FalconForCausalLM`` from a local ``FalconConfig`` at tiny sizes.

    Multi-query attention (``multi_query=True``, ``new_decoder_architecture=False``), rotary
    embeddings, parallel attention/MLP, no bias, ``use_cache=False``: transformers' Falcon then
    splits the fused qkv with ``fused_qkv[..., [-2], :]``, the list index that puts index_put in the
    backward (upstream autoparallel #348). Returns ``(model_fn, input_fn)`` like :func:`llama3_small`.
    """
    from transformers import FalconConfig, FalconForCausalLM

    config = FalconConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        multi_query=True, new_decoder_architecture=False, parallel_attn=True, bias=False, alibi=False,
        use_cache=False, max_position_embeddings=max(2 * seq, 32),
    )

    def model_fn() -> nn.Module:
        return FalconForCausalLM(config)

    def input_fn() -> torch.Tensor:
        return torch.randint(0, vocab_size, (batch, seq))

    return model_fn, input_fn
