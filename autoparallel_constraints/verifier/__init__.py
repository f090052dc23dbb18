"""The verifier: placements proven from the parallel graph alone.

The audit (``apply._audit``) compares the applied graph with the plan through what the apply step
recorded. The verifier trusts none of that: it reads only the parallel graph and the interface
contract, and never the plugin's records or the solver's values.

**Contract.** The placements of the graph's inputs (parameters and buffers as the parallel module
holds them, user inputs, tangents) and of its outputs (forward outputs as the user receives them,
each gradient as its parameter). These are what the parallel module's interface promises; the
numerics harness shards and gathers real values by the same placements.

**Propagation.** Walking the graph in order, every tensor gets an abstract value: a ``DTensorSpec``
(global shape + placements), a *fill* (a constant-valued tensor from a factory op, which is valid in
any placement), or ``unknown`` with a reason. Nodes are interpreted as

* collectives, each a placement transition on the mesh dims of its process group (read from the
  group name, or from the mesh object and ``mesh_get_process_group`` under compile_on_one_rank):
  ``all_reduce`` needs ``Partial(op)`` with the same reduce op and gives ``Replicate``;
  ``reduce_scatter_tensor`` gives ``Shard(0)`` (or ``Shard(d)`` after the chunk+cat DTensor emits);
  ``all_gather_into_tensor`` needs ``Shard(0)`` (or is followed by chunk+cat along ``d``);
  all-to-all moves a shard from one tensor dim to another. Anything else is a violation;
* rank slices: a ``slice`` whose bounds are ``c * coordinate`` of a mesh dim (symbolic coordinates,
  as the numerics harness builds graphs), or a constant chunk equal to the tracing rank's
  coordinate when exactly one mesh dim could have produced it, is ``Replicate -> Shard(d)``;
* every other op with DTensor's own sharding propagation, on global shapes rebuilt from the local
  shapes and the inferred placements (view and factory ops: the global size arguments are the
  candidates whose shard on the tracing rank is the local shape in the graph). An op whose inputs
  need a redistribution DTensor would have inserted is a violation (``hidden_redistribution``), as
  is a table op whose inferred inputs break its row (``not_cosharded``) and a tensor whose local
  shape in the graph differs from the one its inferred placement implies (``local_shape``).

The graph's outputs must come out as the contract says (``output_mismatch``). Every tensor node
ends *proven* or *unknown* with its reason; unknowns are counted per op, never skipped silently.

The verifier by concern: ``_contract`` (the interface contract and :func:`verify`), ``_walk`` (the
walk over the graph), ``_collectives`` and ``_mesh`` (collectives, process groups, rank slices),
``_views`` (views and reshapes), ``_propagation`` (DTensor propagation, table rows, local shapes),
``_regions`` (local_map regions: read by their declaration, their Replicate claims checked),
``_orders`` (shard orders), ``_values`` (the abstract values) and ``_report`` (what it says).

It knows nothing of how the graph was built, so it sits below the apply step, which runs it as its
last act (``verify="raise"``). Stage 4 (``docs/architecture.md``): it imports the core, the table
and the plan's state.
"""
