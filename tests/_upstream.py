"""Upstream behaviours some tests rest on, each with the versions it was seen to hold for.

A test that depends on a third-party model's internals imports its fact from here, so the
dependency is written down once and the test can assert what the installed version does instead of
silently skipping. Re-check a line when ``autoparallel_constraints/constraints.txt`` moves.
"""

from __future__ import annotations

import transformers
from packaging.version import Version

TRANSFORMERS = Version(transformers.__version__)

#: HF ``FalconAttention._split_heads`` (multi-query, old decoder architecture) takes k and v with the
#: list indexes ``fused_qkv[..., [-2], :]`` / ``[..., [-1], :]`` (advanced indexing: index_put in
#: the backward) in 5.0 to 5.24 (read in 5.23.0 and 5.24.0), and with
#: ``fused_qkv.split([num_heads, 1, 1], dim=-2)`` (no index_put) from 5.25.0.
HF_FALCON_LIST_INDEX = TRANSFORMERS < Version("5.25")
