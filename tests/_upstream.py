"""Upstream behaviours some tests rest on, each with the versions it was seen to hold for.

A test that depends on a third-party model's internals imports its fact from here, so the
dependency is written down once and the test can assert what the installed version does instead of
silently skipping. Re-check a line when ``autoparallel_constraints/constraints.txt`` moves.
"""

from __future__ import annotations

import torch
import transformers
from packaging.version import Version

TRANSFORMERS = Version(transformers.__version__)
TORCH = Version(torch.__version__.split("+")[0])

#: HF ``FalconAttention._split_heads`` (multi-query, old decoder architecture) takes k and v with the
#: list indexes ``fused_qkv[..., [-2], :]`` / ``[..., [-1], :]`` (advanced indexing: index_put in
#: the backward) in 5.0 to 5.24 (read in 5.23.0 and 5.24.0), and with
#: ``fused_qkv.split([num_heads, 1, 1], dim=-2)`` (no index_put) from 5.25.0.
HF_FALCON_LIST_INDEX = TRANSFORMERS < Version("5.25")

#: autoparallel a54c252 alone on test_sizes' CAT_1D, mesh (2,): two plans cost the same (objective
#: 109.31), the input's alias Shard(0) (``full`` then takes its batch size from a batch-sharded
#: tensor: size mismatch, run-time crash) or Replicate (exact). The solver picks the first with
#: torch 2.13.0 and the second with 2.14.1 and 2.15.0, whose DTensor rules offer more strategies
#: (Partial through slice, mul, cat) and so pose a different ILP with the same optimum.
AP_CAT_BASELINE_SIZE_MISMATCH = TORCH < Version("2.14")

#: The same model with the plugin's call but ``sizes=False`` (test_sizes), a different ILP whose
#: optimum ties the same way: the size-consistent plan and two that break full's coupling all cost
#: 109.31. The default solver (highs-lp) returns, with torch 2.13.0, the baseline's broken plan
#: (full Replicate, its batch size read from the Shard(0) alias: crash at run time) and, with
#: 2.14.1 and 2.15.0 (their CUDA builds), the mirror image (full Shard(0), the alias Replicate:
#: every rank builds a full-size block, and the apply fails in DTensor's unpad, "narrow
#: unexpectedly changed concrete size"), so no audit is made.
AP_CAT_SIZES_FALSE_SPLITS_FULL = TORCH >= Version("2.14")

#: The default call on the forced #348 example (``show --example 348``: DTensor's pre-fix index_put
#: strategy offered, self pinned (R, S(0)) and values (R, S(1)), 2x4). With torch 2.13.0 index_put
#: keeps the offered strategy and the plugin repairs values to (R, S(0)) (one ``repair``); with
#: 2.14.1 and 2.15.0, whose DTensor offers index_put (S(0), S(1)) on self, indices (R, R) and values,
#: the cheaper plan runs that strategy with both inputs redistributed by the plan's own edges (two
#: ``materialized``: self (R, S(0)) -> (S(0), S(1)), values (R, S(1)) -> (S(0), S(1))). Both audit
#: clean.
AP_348_EXAMPLE_REPAIRS_VALUES = TORCH < Version("2.14")
