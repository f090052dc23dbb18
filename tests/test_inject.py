"""Guards the reproduction tools of ``autoparallel_constraints.harness._inject`` on the seed block of
upstream autoparallel issue #348 (2x4 CPU mesh, seed sizes, bf16 params / fp32 reduce).

What must keep holding, against the real autoparallel at the pin (no mocks):

* offering DTensor's pre-fix index_put strategy (self/output ``RS(0)``, values ``RS(1)``) and pinning
  only its producers makes the solver pick that strategy itself; ``apply_placement`` passes and
  Inductor lowering fails with the issue's exact message;
* the same block without injection lowers fine, so the lowering helper is not a crash generator;
* ``offer_strategy`` leaves autoparallel's placement-option cache and lookup as they were;
* ``strategy_index`` / ``pin_strategy`` / ``chosen_strategy`` find, pin (named, removable) and read
  strategies; bad requests fail with the package's errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest
import torch
from autoparallel.api import AutoParallel
from torch._inductor.exc import InductorError
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor.placement_types import Replicate, Shard

from autoparallel_constraints.seam.autop import cached_strategies
from autoparallel_constraints.errors import InvalidOptionError
from autoparallel_constraints.harness._cpu import (
    cpu_mesh,
    device_name,
    init_fake_process_group,
)
from autoparallel_constraints.harness._inject import (
    chosen_strategy,
    find_nodes,
    lower_with_inductor,
    offer_strategy,
    pin_strategy,
    strategy_index,
)
from autoparallel_constraints.models import SEED_CONFIG, SeedBlock

# Every test builds the seed block at the seed's sizes on a 2x4 mesh.

INDEX_PUT = torch.ops.aten.index_put.default
RR = (Replicate(), Replicate())
RS0 = (Replicate(), Shard(0))
RS1 = (Replicate(), Shard(1))
BATCH_SHARDED = (Shard(0), Replicate())
# DTensor's index_put rule before pytorch#172350: self and output on the batch dim, values on seq.
PRE_FIX_INPUTS = [RS0, RR, RS1]
PRE_FIX_OUTPUT = RS0
# values [16, 128, 1, 64] sharded 4-way on seq vs self [16, 128, 73, 64] sharded 4-way on batch.
ISSUE_348_MESSAGE = "Broadcast failed in ExpandView([16, 32, 1, 64], [4, 128, 1, 64]) on dimension 0"


@pytest.fixture(scope="module")
def mesh() -> DeviceMesh:
    init_fake_process_group()
    return cpu_mesh((2, 4), ("dim0", "dim1"))


@pytest.fixture
def cpu_cost_model() -> Iterator[None]:
    """H100 limits for the cost model (the plugin's guard keeps the strategy cache mesh-safe)."""
    with device_name():
        yield


def seed_autoparallel(mesh: DeviceMesh) -> AutoParallel:
    """The issue's setup: the seed block, bf16 params and fp32 gradient reduction."""
    with torch.device("meta"):
        model = SeedBlock(SEED_CONFIG)

    def input_fn() -> torch.Tensor:
        return torch.randn(SEED_CONFIG.batch, SEED_CONFIG.seq, SEED_CONFIG.hidden)

    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return AutoParallel(model, input_fn, mesh, mp_policy=mp_policy)


def offer_pre_fix_index_put():
    return offer_strategy(
        INDEX_PUT, input_placements=PRE_FIX_INPUTS, output_placements=PRE_FIX_OUTPUT
    )


def placements(spec) -> tuple:
    return tuple(spec.placements)


def is_pre_fix(spec) -> bool:
    inputs = spec.input_specs
    return (
        placements(inputs[0]) == RS0
        and placements(inputs[2]) == RS1
        and placements(spec.output_specs) == RS0
    )


def test_solver_picks_offered_index_put_strategy_and_inductor_fails_like_issue_348(
    mesh, cpu_cost_model
):
    """Guards the faithful #348 reproduction: with the pre-fix strategy offered and only the
    producers pinned (``full`` to RS(0), the values to RS(1)), the solver chooses the illegal
    strategy on its own, apply passes, and Inductor fails with the issue's message."""
    with offer_pre_fix_index_put() as offered:
        with seed_autoparallel(mesh) as autop:
            autop.add_input_constraints([BATCH_SHARDED])
            optimizer = autop.sharding_optimizer
            (index_put,) = find_nodes(autop, INDEX_PUT)
            assert [o.node_name for o in offered] == [index_put.name]

            strategies = optimizer.strats[index_put].strategies
            offer = offered[0]
            assert offer.strategy_index == len(strategies) - 1
            assert strategies[offer.strategy_index] is offer.spec
            # Input slots: self (the zeros from `full`), the index tensor, values.
            producers = [index_put.args[0], index_put.args[1][2], index_put.args[2]]
            assert len(offer.redistribute_cost) == len(producers)
            for slot, (producer, row) in enumerate(zip(producers, offer.redistribute_cost)):
                reference = strategies[0].input_specs[slot]
                assert offer.spec.input_specs[slot].tensor_meta == reference.tensor_meta
                assert len(row) == len(optimizer.strats[producer].strategies)
                assert all(math.isfinite(c) for c in row)
            assert offer.spec.output_specs.tensor_meta == strategies[0].output_specs.tensor_meta

            self_producer, values_producer = index_put.args[0], index_put.args[2]
            assert self_producer.target == torch.ops.aten.full.default
            optimizer.add_node_constraint(self_producer, RS0)
            optimizer.add_node_constraint(values_producer, RS1)
            autop.optimize_placement()

            chosen = chosen_strategy(autop, index_put)
            assert chosen is offer.spec
            assert is_pre_fix(chosen)

            autop.apply_placement(autop.sharding_placement)
            with pytest.raises(InductorError, match=re.escape(ISSUE_348_MESSAGE)):
                lower_with_inductor(autop)


@pytest.mark.full
def test_seed_block_without_injection_lowers(mesh, cpu_cost_model):
    """Guards the control: without an offered strategy the default plan has no pre-fix index_put
    strategy to pick, and the same lowering succeeds."""
    with seed_autoparallel(mesh) as autop:
        autop.add_input_constraints([BATCH_SHARDED])
        (index_put,) = find_nodes(autop, INDEX_PUT)
        assert not any(is_pre_fix(s) for s in autop.sharding_optimizer.strats[index_put].strategies)
        autop.optimize_placement()
        chosen = chosen_strategy(autop, index_put)
        assert placements(chosen.input_specs[0]) == placements(chosen.input_specs[2])
        autop.apply_placement(autop.sharding_placement)
        lower_with_inductor(autop)


def _cache_snapshot(cache: dict) -> dict:
    return {
        key: (id(entry), tuple(id(spec) for spec in entry.strategies)) for key, entry in cache.items()
    }


def test_offer_strategy_leaves_cache_and_lookup_unchanged(mesh, cpu_cost_model):
    """Guards isolation: the offered strategy lives only in the optimizer built while active; the
    module-global cache never holds it (a later build served from the cache has none) and
    autoparallel's lookup is the original function again after exit."""
    import autoparallel.optimize_sharding as optimize_sharding
    import autoparallel.shardings.placement_options as placement_options

    original_lookup = placement_options.get_placement_options_for_node
    assert optimize_sharding.get_placement_options_for_node is original_lookup
    cache = placement_options._placement_options_cache

    with offer_pre_fix_index_put() as offered:
        assert optimize_sharding.get_placement_options_for_node is not original_lookup
        with seed_autoparallel(mesh) as autop:
            (index_put,) = find_nodes(autop, INDEX_PUT)
            with_offer = len(autop.sharding_optimizer.strats[index_put].strategies)
        snapshot_while_active = _cache_snapshot(cache)

    assert optimize_sharding.get_placement_options_for_node is original_lookup
    assert placement_options.get_placement_options_for_node is original_lookup
    assert _cache_snapshot(cache) == snapshot_while_active
    # the cache's key layout is autoparallel's (the pin: op first; PR #511: the mesh, then the op)
    entries = cached_strategies(INDEX_PUT)
    assert entries, "the index_put strategies should have been cached"
    for entry in entries:
        assert len(entry.strategies) == with_offer - 1
        assert not any(spec is offered[0].spec or is_pre_fix(spec) for spec in entry.strategies)

    timer = placement_options.get_placement_options_timer()
    hits_before = timer.cache_hits
    with seed_autoparallel(mesh) as autop:
        (index_put,) = find_nodes(autop, INDEX_PUT)
        strategies = autop.sharding_optimizer.strats[index_put].strategies
        assert timer.cache_hits > hits_before
        assert len(strategies) == with_offer - 1
        assert not any(is_pre_fix(spec) for spec in strategies)


def test_pin_strategy_pins_by_index_with_named_removable_constraints(mesh, cpu_cost_model):
    """Guards the pinning helpers: strategy_index finds the offered strategy, pin_strategy forces
    it with named constraints registered like add_node_constraint's, removing them lets the solver
    go back to a legal plan, and bad indices or placements raise InvalidOptionError."""
    with offer_pre_fix_index_put() as offered:
        with seed_autoparallel(mesh) as autop:
            autop.add_input_constraints([BATCH_SHARDED])
            optimizer = autop.sharding_optimizer
            (index_put,) = find_nodes(autop, INDEX_PUT)
            strategies = optimizer.strats[index_put].strategies
            index = strategy_index(autop, index_put, PRE_FIX_INPUTS, PRE_FIX_OUTPUT)
            assert index == offered[0].strategy_index

            names = pin_strategy(autop, index_put, index, name="inject_pin")
            assert names == ["inject_pin_000", "inject_pin_001", "inject_pin_002"]  # one per input
            for name in names:
                assert name in optimizer.prob.constraints
                assert optimizer._node_constraint_names[name] == index_put.name

            autop.optimize_placement()
            assert chosen_strategy(autop, index_put) is strategies[index]

            optimizer.remove_constraints(names)
            relaxed = optimizer.resolve()
            assert not is_pre_fix(chosen_strategy(autop, index_put, relaxed))

            with pytest.raises(InvalidOptionError, match=rf"has {len(strategies)} strategies"):
                pin_strategy(autop, index_put, len(strategies))
            with pytest.raises(InvalidOptionError, match="no strategy with inputs"):
                strategy_index(autop, index_put, [RS1, RR, RS0], RS1)


def test_offer_strategy_rejects_requests_that_do_not_fit_the_op(mesh, cpu_cost_model):
    """Guards the error path: a malformed request fails at the call, a wrong number of input slots
    fails while the optimizer is built with the node and slot count named, and the lookup is
    restored either way."""
    import autoparallel.optimize_sharding as optimize_sharding

    original_lookup = optimize_sharding.get_placement_options_for_node
    with pytest.raises(InvalidOptionError, match="input_placements"):
        with offer_strategy(INDEX_PUT, input_placements=[RS0, "S(1)"], output_placements=RS0):
            pass
    slot_count = r"node index_put .* 2 input placements given, .* 3 input slots"
    with pytest.raises(InvalidOptionError, match=slot_count):
        with offer_strategy(INDEX_PUT, input_placements=[RS0, RS1], output_placements=RS0):
            with seed_autoparallel(mesh):
                pass
    assert optimize_sharding.get_placement_options_for_node is original_lookup
