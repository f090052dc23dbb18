"""The key the apply step puts in ``node.meta["custom"]`` of every node of a plugin redistribution,
and how a ``local_map`` region's node is recognised in the joint graph.

Defined here, below both, because the verifier reads them too: the tag only to refuse more (a
division inside a plugin redistribution must be the scale of the sum before it), never to accept a
graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

REGION = "apc_region"  # meta["custom"] key: the local_map region (its joint-graph node) an op runs in
TAG = "apc_constraint"  # meta["custom"] key on parallel-graph nodes made by a plugin redistribution

#: What a ``local_map`` region's joint-graph node has as its target: torch 2.13 traces the HOP
#: inside a wrapper named ``call_local_map`` (``call_local_map_backward``), torch 2.14 and 2.15
#: trace the HOP ``local_map_hop`` itself.
LOCAL_MAP_TARGETS = ("call_local_map", "local_map_hop")


def is_local_map_region(node: torch.fx.Node) -> bool:
    """A ``local_map`` region's node in the joint graph (forward or backward), in either trace."""
    return (node.op == "call_function" and bool(node.meta.get("local_map_kwargs"))
            and any(name in str(node.target) for name in LOCAL_MAP_TARGETS))
