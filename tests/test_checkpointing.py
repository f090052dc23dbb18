"""Guards activation checkpointing with the default call: a checkpointed region's numbers, and the
plugin's redistributions inside a region carrying the region's recompute tags.

The block (``models.CheckpointedBlock``: attention + gated MLP, the body checkpointed) runs on a 2x2
CPU mesh with the gate's ``mul`` pinned to a swapped strategy (``(S(0), S(1))`` against
``(S(1), S(0))``, batch == seq so local shapes agree and only numbers could tell), so the default
call must repair it with a named redistribution inside the region. Full tier: selective
checkpointing (``create_selective_checkpoint_contexts``, matmuls saved); on demand: plain
``checkpoint(use_reentrant=False)``, and torchtitan 0.3.0's own ``FullAC`` and ``SelectiveAC``
wrapped around its Llama3 debug model's layers. Each: exact against one device, audit clean, every
output proven; every plugin node serving an op of a region carries that op's ``recompute`` policy
and ``ac_graph_id``. Default tier (no build): the apply step's insertion copies the tags of the op
it feeds.

Before: the repair node took only the op's trace meta, so inside a region it was an untagged op,
which the partitioner saves for backward (a collective is forced MUST_SAVE, an untagged input of a
recomputed op is saved) instead of recomputing it with the region
(``benchmarks/results/checkpoint_saved_bytes.txt`` measures the bytes).

Rests on: torch 2.13 tracing a checkpointed region with ``meta["recompute"]`` (a
``CheckpointPolicy``) and ``meta["ac_graph_id"]`` on its forward ops, the partitioner
(``torch/_functorch/partitioners.py``: ``must_recompute``, ``cleanup_recompute_tags``,
``force_save_collectives``) reading them, and ``make_fx`` under ``preserve_node_meta`` copying
them from the node being interpreted onto every op it traces.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor.placement_types import Shard

import autoparallel_constraints as apc
from autoparallel_constraints.core._tags import TAG
from autoparallel_constraints.harness._numerics import run_numerics
from autoparallel_constraints.models import CheckpointedBlock
from autoparallel_constraints.testing import explain, find_nodes, offer_strategy, pin_strategy, strategy_index

MUL = torch.ops.aten.mul.Tensor
GATE, UP = (Shard(0), Shard(1)), (Shard(1), Shard(0))  # the gate's swapped pair
AC_KEYS = ("recompute", "ac_graph_id")


def _forward(node: torch.fx.Node) -> bool:
    return node.meta.get("partitioner_tag") == "is_forward"


def _pin_the_gate(autop) -> None:
    (gate,) = [n for n in find_nodes(autop, MUL) if _forward(n)]
    pin_strategy(autop, gate, strategy_index(autop, gate, [GATE, UP], GATE), name="pin_gate")


def _forced(ac: str) -> dict:
    """The block under ``ac`` with the gate pinned, the default call, numbers, audit, verifier."""
    held: dict = {}

    def configure(autop) -> None:
        _pin_the_gate(autop)
        autop.add_op_constraints()

    def after(autop) -> None:
        held.update(autop=autop, audit=apc.audit(autop), verify=apc.verify(autop))

    with offer_strategy(MUL, input_placements=[GATE, UP], output_placements=GATE, where=_forward):
        with torch.fx.traceback.preserve_node_meta():
            held["report"] = run_numerics(lambda: CheckpointedBlock(ac=ac), lambda: torch.randn(8, 8, 32),
                                          (2, 2), configure=configure, after_apply=after)
    return held


def tag_mismatches(autop, audit) -> tuple[int, list[str]]:
    """(plugin nodes checked, mismatches): every parallel-graph node of a plugin redistribution
    whose served joint node is in a checkpointed region must carry that node's AC tags."""
    served = {r.constraint: r.node for r in (*audit.redistributes, *audit.materialized)}
    joint = {n.name: n for n in autop.gm.graph.nodes}
    checked, wrong = 0, []
    for node in autop.parallel_gm.graph.nodes:
        op = joint.get(served.get((node.meta.get("custom") or {}).get(TAG)))
        if op is None or op.meta.get("recompute") is None:
            continue
        checked += 1
        wrong += [f"{node.name} {key}={node.meta.get(key)!r}, {op.name} has {op.meta.get(key)!r}"
                  for key in AC_KEYS if node.meta.get(key) != op.meta.get(key)]
    return checked, wrong


def _assert_exact_and_clean(held: dict) -> None:
    report = held["report"]
    assert report.ok, explain(report)
    assert held["audit"].ok, explain(held["audit"])
    assert held["verify"].ok and held["verify"].n_unknown == 0, explain(held["verify"])


def _assert_repair_in_region_is_tagged(held: dict) -> None:
    autop, audit = held["autop"], held["audit"]
    (repair,) = audit.redistributes
    gate = next(n for n in autop.gm.graph.nodes if n.name == repair.node)
    assert gate.meta.get("recompute") is not None, "the gate is outside the region: the test covers nothing"
    nodes = [n for n in autop.parallel_gm.graph.nodes
             if (n.meta.get("custom") or {}).get(TAG) == repair.constraint]
    assert any(str(n.target).startswith("_c10d_functional.") for n in nodes), "the repair runs no collective"
    for node in nodes:
        assert {k: node.meta.get(k) for k in AC_KEYS} == {k: gate.meta[k] for k in AC_KEYS}, node.name
    checked, wrong = tag_mismatches(autop, audit)
    assert checked and not wrong, "\n".join(wrong)


def test_an_inserted_repair_copies_the_checkpoint_tags_of_the_op_it_feeds() -> None:
    """``materialize`` on a two-input op of a region: the inserted node carries the op's
    ``recompute``, ``ac_graph_id`` and ``partitioner_tag`` (and the graph is restored on exit)."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._op_schema import OpSpec
    from torch.utils.checkpoint import CheckpointPolicy

    from autoparallel_constraints.apply._materialize import apc_redistribute, materialize
    from autoparallel_constraints.harness._cpu import cpu_mesh
    from autoparallel_constraints.plan._state import PlannedRedistribute

    gm = torch.fx.symbolic_trace(lambda gate, up: gate * up)
    gate, up, mul = list(gm.graph.nodes)[:3]
    tags = {"recompute": CheckpointPolicy.PREFER_RECOMPUTE, "ac_graph_id": 3, "partitioner_tag": "is_forward"}
    mul.meta.update(tags)
    mesh = cpu_mesh((2, 2))
    spec_gate, spec_up = DTensorSpec(mesh, GATE), DTensorSpec(mesh, UP)
    placement = {gate: OpSpec(output_specs=spec_gate), up: OpSpec(output_specs=spec_up),
                 mul: OpSpec(output_specs=spec_gate, input_specs=[spec_gate, spec_up])}
    planned = [PlannedRedistribute(node=mul.name, op=str(MUL), arg="other", spec_index=1, source=spec_up,
                                   target=spec_gate, constraint="explicit.redistribute_000", cost=0.0)]
    with materialize(gm, placement, planned):
        (inserted,) = [n for n in gm.graph.nodes if n.target is apc_redistribute]
        assert mul.args[1] is inserted
        assert {k: inserted.meta.get(k) for k in tags} == tags
    assert mul.args == (gate, up) and len(gm.graph.nodes) == 4


@pytest.fixture(scope="module")
def selective() -> dict:
    return _forced("selective")


@pytest.mark.full
def test_selective_checkpointing_with_a_repair_is_exact_and_clean(selective) -> None:
    """Selective AC (matmuls saved) with the default call repairing the pinned gate inside the
    region: exact, audit clean, every output proven."""
    _assert_exact_and_clean(selective)


@pytest.mark.full
def test_the_repair_inside_a_selective_region_carries_its_tags(selective) -> None:
    """The repair's nodes (a collective among them) carry the gate's recompute policy and
    checkpoint id, as does every other plugin node serving an op of the region."""
    _assert_repair_in_region_is_tagged(selective)


@pytest.mark.ondemand
def test_plain_checkpointing_with_a_repair_is_exact_clean_and_tagged() -> None:
    """``checkpoint(use_reentrant=False)`` around the whole body: the same three checks and tags."""
    held = _forced("full")
    _assert_exact_and_clean(held)
    _assert_repair_in_region_is_tagged(held)


def _torchtitan_with_ac(ac: str) -> dict:
    """torchtitan's Llama3 debug model (2 layers, fp32) with its own ``FullAC`` / ``SelectiveAC``
    applied to its layers, torchtitan's constraints and ``AutoParallelGraph``, the default call."""
    from _torchtitan import require_torchtitan

    require_torchtitan()
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    from autoparallel_constraints.lab._torchtitan import autoparallel_graph_class, torchtitan_case

    case = torchtitan_case("llama3", layers=2, mixed_precision=False)

    def model_fn() -> torch.nn.Module:
        model = case.model_fn()
        (FullAC.Config() if ac == "full" else SelectiveAC.Config()).build().apply(model)
        # apply() turns dynamo's LRU cache off for torchtitan's compile path; nothing here needs that
        torch._C._dynamo.eval_frame._set_lru_cache(True)
        return model

    held: dict = {}

    def configure(autop) -> None:
        autop.add_parameter_memory_constraint(low=None, high=None)
        autop.add_op_constraints()

    def after(autop) -> None:
        held.update(autop=autop, audit=apc.audit(autop), verify=apc.verify(autop))

    with torch.fx.traceback.preserve_node_meta():
        held["report"] = run_numerics(
            model_fn, case.input_fn, (2, 2), configure=configure, parameter_memory_constraint=False,
            input_placements=list(case.input_placements), output_placements=list(case.output_placements),
            autoparallel_cls=autoparallel_graph_class(), after_apply=after,
        )
    return held


@pytest.mark.ondemand
@pytest.mark.parametrize("ac", ["full", "selective"])
def test_torchtitans_own_checkpointing_is_exact_clean_and_tagged(ac: str) -> None:
    """torchtitan 0.3.0's ``FullAC`` and ``SelectiveAC`` (its per-op policy: compute-intensive ops
    saved, every second matmul recomputed) on its Llama3: exact, audit clean, proven, and every
    plugin node serving an op of a region (here the materialized edges) carries its tags."""
    held = _torchtitan_with_ac(ac)
    _assert_exact_and_clean(held)
    joint = held["autop"].gm.graph.nodes
    assert any(n.meta.get("recompute") is not None for n in joint), "torchtitan's AC left no region in the graph"
    checked, wrong = tag_mismatches(held["autop"], held["audit"])
    assert checked and not wrong, "\n".join(wrong)
