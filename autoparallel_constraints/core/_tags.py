"""The key the apply step puts in ``node.meta["custom"]`` of every node of a plugin redistribution.

Defined here, below both, because the verifier reads it too: only to refuse more (a division inside
a plugin redistribution must be the scale of the sum before it), never to accept a graph.
"""

REGION = "apc_region"  # meta["custom"] key: the local_map region (its joint-graph node) an op runs in
TAG = "apc_constraint"  # meta["custom"] key on parallel-graph nodes made by a plugin redistribution
