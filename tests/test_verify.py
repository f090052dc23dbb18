"""Guards the verifier (``apc.verify``): placements proven from the parallel graph alone.

* correct graphs come out clean with no unknown node: the seed block on 2x4 (the static graph
  ``apply_placement`` builds, rank coordinates as constants); real models with symbolic
  coordinates are in tests/test_verify_models.py;
* the swapped index_put case with the plugin's own redistribute node sabotaged (made identity, or
  given the target with the mesh dims swapped) is flagged, and LocalTensorMode shows its numbers
  wrong; the same case unsabotaged is clean and exact;
* the natural PR #517 case: autoparallel alone is flagged (a reduce_scatter of a Replicate), the
  default call is clean and exact;
* ``verify="raise"`` (the default) raises ``VerificationError`` naming the node, ``"warn"`` warns,
  ``"off"`` skips; anything else is an ``InvalidOptionError``; ``apc.audit``'s ``ok`` rests on the
  verifier too;
* a tensor dim sharded by both mesh dims in reversed order keeps that order through local ops.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.apply import _materialize
from autoparallel_constraints.lab import run_seed
from autoparallel_constraints.models import SeedBlock, SeedConfig, llama3_small
from autoparallel_constraints.testing import cpu_mesh, explain, run_numerics
from autoparallel_constraints.testing.conformance import swapped_case

DIVERGING = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)  # PR #517 on 2x2 with io (S0, S1)


def _identity(local: torch.Tensor, source: Any, target: Any) -> torch.Tensor:
    return local


def _mesh_dims_swapped(local: torch.Tensor, source: Any, target: Any) -> torch.Tensor:
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._redistribute import redistribute_local_tensor

    wrong = DTensorSpec(target.mesh, tuple(reversed(target.placements)), tensor_meta=target.tensor_meta)
    return redistribute_local_tensor(local, source, wrong)


def _swapped_case(verify: str, sabotage: Any = None, materialize: str = "table") -> tuple[Any, list[Any]]:
    """The conformance kit's swapped index_put case, formulation explicit, with an optional
    sabotaged redistribute. Returns the numbers and the audits taken (none when apply failed)."""
    original = _materialize.apc_redistribute
    if sabotage is not None:
        _materialize.apc_redistribute = sabotage
    try:
        report, audit = swapped_case(
            lambda autop: autop.add_op_constraints(formulation="explicit", materialize=materialize, verify=verify)
        )
    finally:
        _materialize.apc_redistribute = original
    return report, [audit] if audit is not None else []


def test_honest_plugin_node_is_clean_and_exact():
    """The explicit formulation's redistribute node, unsabotaged: verifier clean, numbers exact."""
    report, audits = _swapped_case("raise")
    assert report.ok, explain(report)
    (audit,) = audits
    assert audit.ok and audit.verification is not None and audit.verification.ok, explain(audit)
    assert audit.verification.n_unknown == 0, explain(audit.verification)


@pytest.mark.full
def test_sabotaged_plugin_nodes_are_flagged():
    """The audit once took the plugin's word for its own nodes; the verifier reads the graph. With
    materialize="all" every planned redistribution is a plugin node; given the target with its mesh
    dims swapped, (R, R) -> (S(1), S(0)) becomes (S(0), S(1)): same local shapes, wrong shards. The
    numbers go wrong and the verifier says where."""
    report, audits = _swapped_case("warn", _mesh_dims_swapped, materialize="all")
    assert not report.ok, "the sabotage should make the numbers wrong"
    assert len(audits) == 1, explain(report)  # the run stopped before its audit
    (audit,) = audits
    assert not audit.ok and audit.verification.violations, explain(audit)


@pytest.mark.full
def test_identity_plugin_nodes_cannot_build_a_graph():
    """Made identity, the same nodes leave local shapes that no op accepts: the apply itself fails,
    so there is no graph to train (nor to verify)."""
    report, audits = _swapped_case("warn", _identity, materialize="all")
    assert report.error is not None and report.error.startswith("apply"), explain(report)
    assert not audits


@pytest.mark.full
@pytest.mark.parametrize("sabotage", [_identity, _mesh_dims_swapped], ids=["identity", "mesh-dims-swapped"])
def test_verifier_agrees_with_numbers_on_the_index_put_node(sabotage):
    """materialize="table": the plugin's one node here moves index_put's ``self``, a tensor of zeros
    (the backward's ``full``), so a sabotage of it changes no number, and the verifier (which knows a
    constant fill is valid in any placement) agrees: clean exactly when the numbers are exact."""
    report, audits = _swapped_case("warn", sabotage, materialize="table")
    assert len(audits) == 1, explain(report)  # the run stopped before its audit
    (audit,) = audits
    assert audit.verification.ok == report.ok, explain(audit, report)


@pytest.mark.full
def test_default_call_refuses_a_sabotaged_graph():
    """verify="raise" (the default): apply stops with a VerificationError naming the node."""
    report, audits = _swapped_case("raise", _mesh_dims_swapped, materialize="all")
    assert report.error is not None and "VerificationError" in report.error, explain(report)
    assert not audits  # apply never returned a graph to audit


_DIVERGING_RUNS: dict[str, Any] = {}


def _diverging(mode: str) -> tuple[Any, Any]:
    """The seed block at NH16 HD64 b8 s64 on 2x2, io (S0, S1): autoparallel alone ("none") or the
    default call ("default"). One run per mode per session."""
    if mode not in _DIVERGING_RUNS:
        placements = [(Shard(0), Shard(1))]
        seen: list[Any] = []

        def configure(autop: Any) -> None:
            if mode == "default":
                autop.add_op_constraints()

        report = run_numerics(
            lambda: SeedBlock(DIVERGING),
            lambda: torch.randn(DIVERGING.batch, DIVERGING.seq, DIVERGING.hidden),
            (2, 2),
            input_placements=placements,
            output_placements=placements,
            atol=1e-3,
            rtol=1e-4,
            configure=configure,
            after_apply=lambda autop: seen.append(apc.verify(autop)),
        )
        _DIVERGING_RUNS[mode] = (report, seen[0] if seen else None)
    return _DIVERGING_RUNS[mode]


def test_pr517_without_plugin_is_flagged():
    """autoparallel alone reduces a gradient that is already whole: 2x, and the verifier names the
    reduce_scatter of a Replicate tensor."""
    report, verification = _diverging("none")
    assert report.check("grad:proj.weight").ratio == pytest.approx(2.0, abs=1e-4), explain(report)
    assert not verification.ok
    assert any(v.kind == "illegal_collective" and "reduce_scatter" in v.op for v in verification.violations), explain(verification)


def test_pr517_default_call_is_clean_and_exact():
    """The default call (materialize="all", verify="raise") trains exactly, and says why it may."""
    report, verification = _diverging("default")
    assert report.ok, explain(report)
    assert verification.ok and verification.n_unknown == 0, explain(verification)


def _verified_twice(autop: Any) -> tuple[Any, Any, int, int, int, Counter[str]]:
    """``apc.verify(autop)`` with the verifier's shortcuts and without them: the per-node memo
    (every node computed afresh), the view rule's refusals (every candidate global shape of a
    view propagated in full) and the DTensor memos (every output meta, redistribute cost and
    strided size computed by DTensor). Returns both reports, how many nodes each computed and
    how many view candidates the rule refused, and the DTensor memos' hits."""
    import contextlib

    from autoparallel_constraints.seam import _memos
    from autoparallel_constraints.verifier import _propagation, _walk

    calls, refused = [0], [0]
    compute, refusal = _walk._Verifier._compute, _walk._Verifier._view_rule_refusal
    memos, memo_hits = _memos.dtensor_memos, []

    @contextlib.contextmanager
    def counted_memos() -> Any:
        with memos() as hits:
            yield hits
        memo_hits.append(hits)

    def counted(self: Any, *a: Any) -> Any:
        calls[0] += 1
        return compute(self, *a)

    def counted_refusal(self: Any, *a: Any) -> Any:
        out = refusal(self, *a)
        refused[0] += out is not None
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_walk._Verifier, "_compute", counted)
        patch.setattr(_walk._Verifier, "_view_rule_refusal", counted_refusal)
        patch.setattr(_walk, "dtensor_memos", counted_memos)
        fast = apc.verify(autop)
        with_memo, calls[0] = calls[0], 0
        patch.setattr(_propagation, "_compute_key", lambda *a: None)
        patch.setattr(_walk._Verifier, "_view_rule_refusal", lambda self, *a: None)
        patch.setattr(_walk, "dtensor_memos", contextlib.nullcontext)
        plain = apc.verify(autop)
    (hits,) = memo_hits
    return fast, plain, with_memo, calls[0], refused[0], hits


def test_static_seed_graph_is_clean_without_unknowns():
    """The graph apply_placement builds (constants for rank coordinates) on 2x4, default call.
    The verifier's memo (a node whose op, inputs and local results it has seen takes that
    verdict) gives the report every node computed afresh gives, computing fewer nodes."""
    seen: list[Any] = []
    run_seed("explicit", cpu_mesh((2, 4)), after_apply=lambda autop: seen.append(_verified_twice(autop)))
    ((verification, plain, with_memo, without, _refused, _hits),) = seen
    assert verification.ok and verification.n_unknown == 0, explain(verification)
    assert verification.outputs_checked >= 1
    assert verification == plain and with_memo < without, (with_memo, without)


def test_dtensor_memos_keep_what_the_value_depends_on_and_restore_dtensor():
    """The verifier's DTensor memos key an op's output meta on everything but placements:
    scalars of different types (1, 1.0, True promote differently) and lists vs tuples stay
    apart, and DTensor's own functions are back after the verification, even a failed one."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._ops import utils as op_utils
    from torch.distributed.tensor.placement_types import _StridedShard

    from autoparallel_constraints.seam import _memos

    keys = {_memos._meta_key(a) for a in (1, 1.0, True, [1, 2], (1, 2))}
    assert len(keys) == 5, keys
    propagator = DTensor._op_dispatcher.sharding_propagator
    before = (op_utils.redistribute_cost, _StridedShard.local_shard_size_and_offset)
    with pytest.raises(RuntimeError), _memos.dtensor_memos():
        assert op_utils.redistribute_cost is not before[0]
        assert "_propagate_tensor_meta_non_cached" in vars(propagator)
        raise RuntimeError("a verification that fails")
    assert (op_utils.redistribute_cost, _StridedShard.local_shard_size_and_offset) == before
    assert "_propagate_tensor_meta_non_cached" not in vars(propagator)


def test_verify_option_is_checked():
    """A verify mode that does not exist is refused before anything is added."""
    from autoparallel.api import AutoParallel

    from autoparallel_constraints.testing import device_name

    mesh = cpu_mesh((2, 4))
    with torch.device("meta"):
        model = SeedBlock(SeedConfig(num_heads=2, head_dim=8, batch=8, seq=4))
    with device_name(), AutoParallel(model, lambda: model.make_input(), mesh) as autop:
        with pytest.raises(apc.InvalidOptionError, match="verify must be one of"):
            autop.add_op_constraints(verify="sometimes")
        assert getattr(autop, "_apc_state", None) is None


@pytest.mark.full
def test_forced_348_baseline_is_flagged_and_the_default_call_clean():
    """The forced #348 case on 2x4 (producers pinned RS(0)/RS(1), the illegal strategy offered):
    autoparallel alone gets a graph the verifier rejects; with the default call it is clean."""
    from autoparallel_constraints.testing.conformance import run_scenario

    base = run_scenario("forced", None)
    assert base.audit is not None and base.audit.verification.violations, explain(base.audit)
    run = run_scenario("forced", "explicit")
    assert run.error is None and run.audit.ok and run.audit.verification.ok, explain(run.audit)


def _ordered(mesh: Any, shape: tuple[int, ...], order: tuple[int, ...]) -> Any:
    """A spec of a ``shape`` tensor whose dim 0 is sharded by both mesh dims, in ``order``."""
    from torch.distributed.tensor._dtensor_spec import ShardOrderEntry

    return _spec(mesh, shape, (Shard(0), Shard(0)), shard_order=(ShardOrderEntry(tensor_dim=0, mesh_dims=order),))


@pytest.mark.parametrize(("out_order", "ok"), [((1, 0), True), ((0, 1), False)], ids=["kept", "lost"])
def test_shard_order_survives_local_ops(out_order, ok):
    """A tensor dim sharded by both mesh dims in reversed order keeps that order through local ops
    (a clone, a sum over another dim; DTensor's propagation drops it, and llama3 2x2 norm-weight
    gradients whose plugin node had its mesh dims swapped were called clean)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh((2, 2))
    gm = make_fx(lambda x: x.clone().sum(1), tracing_mode="fake")(torch.empty(2, 4))
    report = verify_graph(gm, mesh, [_ordered(mesh, (8, 4), (1, 0))], [("out", _ordered(mesh, (8,), out_order))])
    assert report.n_unknown == 0 and report.n_proven == 2
    assert report.ok is ok
    assert [v.kind for v in report.violations] == ([] if ok else ["output_mismatch"])


def _spec(mesh: Any, shape: tuple[int, ...], placements: tuple[Any, ...], shard_order: Any = None) -> Any:
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    meta = TensorMeta(torch.Size(shape), torch.empty(shape).stride(), torch.float32)
    return DTensorSpec(mesh, placements, tensor_meta=meta, shard_order=shard_order)


@pytest.mark.parametrize(("b_placements", "verdict"), [((Shard(0), Shard(1)), "clean"), ((Shard(1), Shard(0)), "hidden_redistribution")],
                         ids=["same-blocks", "other-blocks"])
def test_flatten_of_two_sharded_dims_into_a_contraction(b_placements, verdict):
    """An einsum's bmm flattens two dims sharded by different mesh dims and drops a size-1 dim
    (``[48, 8(S), 8(S), 1] -> [1, 48, 64]``, as in seed_swapped 2x2, once unproven): DTensor's view
    rule refuses it, yet contracting two operands of the same blocks is exact and Partial on both
    mesh dims; operands whose blocks differ are a violation."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh((2, 2))
    gm = make_fx(lambda a, b: torch.bmm(a.reshape(1, 48, 16), b.reshape(1, 16, 16)), tracing_mode="fake")(
        torch.empty(48, 4, 4, 1), torch.empty(4, 4, 16, 1)
    )
    for node in gm.graph.nodes:  # reshape, as the parallel graph holds it: DTensor names this view, not this reshape
        if node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    report = verify_graph(
        gm, mesh, [_spec(mesh, (48, 8, 8, 1), (Shard(1), Shard(2))), _spec(mesh, (8, 8, 16, 1), b_placements)],
        [("out", _spec(mesh, (1, 48, 16), (Partial(), Partial())))],
    )
    assert [v.kind for v in report.violations] == ([] if verdict == "clean" else [verdict])
    assert report.ok is (verdict == "clean")
    assert report.n_unknown == (0 if verdict == "clean" else 1)  # the bmm itself, after its violation


@pytest.mark.parametrize(("out_placements", "ok"), [((Shard(1), Shard(1)), True), ((Shard(2), Shard(2)), False)],
                         ids=["heads", "wrong-dim"])
def test_a_view_keeps_every_reading_until_an_op_decides(out_placements, ok):
    """Splitting a feature dim sharded by both mesh dims into 4 heads leaves one head per rank:
    ``[4, 16, 64](S(2), S(2)) -> [4, 16, 1, 16]`` locally reads as heads sharded
    (``[4, 16, 4, 16]``) or as the features still sharded (``[4, 16, 1, 64]``). The verifier
    kept only the second, and flagged Phi's exact graphs on 2x2; both are kept until a later op
    (here the output contract) decides."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh((2, 2))
    gm = make_fx(lambda x: x.reshape(4, 16, 1, 16).permute(0, 2, 1, 3), tracing_mode="fake")(torch.empty(4, 16, 16))
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    report = verify_graph(gm, mesh, [_spec(mesh, (4, 16, 64), (Shard(2), Shard(2)))],
                          [("out", _spec(mesh, (4, 4, 16, 16), out_placements))])
    assert report.ok is ok and report.n_unknown == 0
    assert [v.kind for v in report.violations] == ([] if ok else ["output_mismatch"])


@pytest.mark.parametrize(("w_placements", "ok"), [((Replicate(), Replicate()), True), ((Shard(1), Replicate()), False)],
                         ids=["rows", "sharded-contraction"])
def test_a_batch_of_one_per_rank_moves_into_the_rows(w_placements, ok):
    """Batch 4 on a 4-way mesh dim is one sample per rank; the graph retraced per rank lets einsum
    drop that local size-1 dim into a bmm's rows (``[16, 64, 4(S), 1] -> [1, 16, 64]``, llama3
    and Falcon tiny on 4x2, once unproven). Read with the batch dim moved,
    ``[4(S), 16, 64] -> [1, 64(S), 64]``, the bmm is proven. Against a weight sharded along the
    contracted dim the only reading that fits sums the samples (Partial), which the contract refuses."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh((4, 2))
    gm = make_fx(lambda x, w: torch.bmm(x.reshape(1, 16, 64), w).reshape(16, 128), tracing_mode="fake")(
        torch.empty(16, 64, 1, 1), torch.empty(1, 64, 128)
    )
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    report = verify_graph(
        gm, mesh, [_spec(mesh, (16, 64, 4, 1), (Shard(2), Replicate())), _spec(mesh, (1, 64 * (4 if not ok else 1), 128), w_placements)],
        [("out", _spec(mesh, (64, 128), (Shard(0), Replicate())))],
    )
    assert report.ok is ok, explain(report)
    if ok:
        assert report.n_unknown == 0 and report.n_proven == 3
    else:
        assert [v.kind for v in report.violations] == ["output_mismatch"], explain(report)


def _rows_graph(local_bs: int, local_n: int) -> Any:
    """``x @ w`` as the parallel graph traces it per rank, for ``x`` ``[b, s, 8]`` with batch and
    seq split by different mesh dims: an einsum whose bmm rows flatten them (local ``[2, 2, 8] ->
    [1, 4, 8]``), or, at one (batch, seq) pair per rank, the einsum's own local layout, which puts
    the features first (``[8, 1, 1, 1] -> [1, 1, 8]``)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        b, s, k = x.shape
        if b * s == 1:
            a = x.unsqueeze(3).permute(0, 1, 3, 2).permute(3, 0, 1, 2).reshape(1, 1, k)
        else:
            a = x.reshape(1, b * s, k)
        out = torch.bmm(a, w.reshape(1, k, -1))
        return out.reshape(1, b, s, -1).permute(1, 2, 3, 0).reshape(b, s, -1)

    gm = make_fx(rows, tracing_mode="fake")(torch.empty(local_bs, local_bs, 8), torch.empty(8, local_n))
    for node in gm.graph.nodes:  # reshape, as the parallel graph holds it
        if node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    return gm


_R, _S0, _S1, _S2 = Replicate(), Shard(0), Shard(1), Shard(2)


@pytest.mark.parametrize(
    ("mesh_shape", "batch_seq", "x_placements", "w_placements", "out_placements", "verdict"),
    [
        ((2, 2), 4, (_S0, _S1), (_R, _R), (_S0, _S1), "clean"),
        ((2, 2), 4, (_S0, _S1), (_R, _R), (_S1, _S0), "output_mismatch"),
        ((2, 2), 4, (_S0, _S1), (_S0, _R), (_S0, _S1), "violation"),
        ((2, 2, 2), 4, (_S0, _S1, _R), (_R, _R, _S1), (_S0, _S1, _S2), "clean"),
        ((2, 2, 2), 4, (_S0, _S1, _R), (_R, _R, _S1), (_S0, _S2, _S1), "output_mismatch"),
        ((2, 2), 2, (_S0, _S1), (_R, _R), (_S0, _S1), "unproven"),
    ],
    ids=["rows", "rows-swapped", "contraction-sharded", "3d-columns-sharded", "3d-wrong-dims", "one-pair-per-rank"],
)
def test_a_flatten_of_two_sharded_dims_into_a_bmm_s_rows(mesh_shape, batch_seq, x_placements, w_placements,
                                                         out_placements, verdict):
    """``x @ w`` with batch and seq split by different mesh dims: the einsum's bmm takes their
    flatten as its rows, which no DTensor placement names, and unflattens its output back. Each
    row maps to its own output row, so the output holds batch and seq as the input does (a false
    alarm before, on 2x2 and on 2x2x2), its columns split where the weight's are. A wrong
    contract, and a weight split along the contraction by a mesh dim the rows use, are refused.
    At one (batch, seq) pair per rank the retrace puts the features first, and reading that as
    the rows would read a permuted tensor as this one, which the local graph cannot tell apart
    from a wrong graph: unproven, never clean (docs/verifier.md)."""
    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh(mesh_shape)
    split = 2 if _S1 in w_placements else 1
    gm = _rows_graph(batch_seq // 2, 6 // split)
    report = verify_graph(
        gm, mesh, [_spec(mesh, (batch_seq, batch_seq, 8), x_placements), _spec(mesh, (8, 6), w_placements)],
        [("out", _spec(mesh, (batch_seq, batch_seq, 6), out_placements))],
    )
    assert report.ok is (verdict == "clean"), explain(report)
    if verdict == "clean":
        assert report.n_unknown == 0, explain(report)
    elif verdict == "output_mismatch":
        assert [v.kind for v in report.violations] == ["output_mismatch"], explain(report)
    elif verdict == "unproven":
        assert not report.violations and report.unproven_outputs, explain(report)
    else:
        assert report.violations, explain(report)


@pytest.mark.ondemand  # 76 s; static graphs are proven in the default tier on the seed block
def test_static_graph_on_a_square_mesh_is_proven():
    """The graph the public apply_placement builds on 2x2 (rank 0's coordinates (0, 0), so a
    constant chunk 0 of 2 is either mesh dim's shard): each reading is kept until an op decides,
    and llama3 small comes out clean with no unknown (was: outputs unproven, "mesh dims alike")."""
    from autoparallel.api import AutoParallel

    from autoparallel_constraints.testing import device_name

    model_fn, input_fn = llama3_small()
    with torch.device("meta"):
        model = model_fn()
    with device_name(), AutoParallel(model, input_fn, cpu_mesh((2, 2)), dynamic=False) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        autop.add_output_constraints([(Shard(0), Replicate())])
        autop.add_parameter_memory_constraint()
        autop.add_op_constraints()
        autop.apply_placement(autop.optimize_placement())
        report, plain, with_memo, without, refused, hits = _verified_twice(autop)
    assert report.ok and report.n_unknown == 0, explain(report)
    # two layers: the second layer's nodes take the first's verdicts; the view rule refuses
    # candidates without propagating them; DTensor is asked for an output meta it gave for
    # other placements; and the report is the one without any of these shortcuts
    assert report == plain and with_memo < without and refused > 0, (with_memo, without, refused)
    assert hits["meta"] > 0, hits


def test_a_reassembly_of_a_tensor_no_gather_stacked_is_not_proven():
    """DTensor's reassembly of gathered shards (split along 0, every piece into one cat along
    another dim) applied to a replicated tensor that no all_gather stacked: every op is a valid
    DTensor op, yet the data are permuted (a seed_swapped collective_dim mutant, wrong numbers,
    was called clean). Not proven: the output is unproven, never clean."""
    from torch.distributed.tensor.placement_types import Replicate as R
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh((2, 2))
    gm = make_fx(lambda x: torch.cat(torch.split(x, 2, 0), 1), tracing_mode="fake")(torch.empty(4, 4))
    report = verify_graph(gm, mesh, [_spec(mesh, (4, 4), (R(), R()))], [("out", _spec(mesh, (2, 8), (R(), R())))])
    assert not report.violations and not report.ok
    assert report.unproven_outputs and "not gathered" in report.unproven_outputs[0]


_EMBEDDING_BACKWARD_CASES = {
    # name: (grad_output, indices, weight gradient as the contract says, verdict)
    "batch": ((Shard(0), Replicate()), (Shard(0), Replicate()), (Partial(), Replicate()), "clean"),
    "columns": ((Replicate(), Shard(2)), (Replicate(), Replicate()), (Replicate(), Shard(1)), "clean"),
    "partial": ((Partial(), Replicate()), (Replicate(), Replicate()), (Partial(), Replicate()), "clean"),
    "indices-on-other-mesh-dim": ((Shard(0), Replicate()), (Replicate(), Shard(0)), (Partial(), Replicate()), "hidden_redistribution"),
    "partial-called-replicate": ((Shard(0), Replicate()), (Shard(0), Replicate()), (Replicate(), Replicate()), "output_mismatch"),
}


@pytest.mark.parametrize("case", list(_EMBEDDING_BACKWARD_CASES))
def test_the_embedding_backward_decomposition_is_proven(case):
    """The parallel graph holds ``embedding_dense_backward`` decomposed
    (``_unsafe_masked_index_put_accumulate`` into a zero fill, masked by the indices), which DTensor
    has no rule for: on llama3 8x8 it was the one unknown op and the embedding's gradient the one
    unproven output. Read as DTensor's rule for the op it came from, each of that rule's strategies
    is proven, an indices/values pair on different mesh dims is a violation, and the Partial it
    gives is not mistaken for a Replicate. (Rests on torch._decomp's decomposition of the op, as
    autoparallel's parallel graph is traced with the inductor table.)"""
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    grad_p, index_p, out_p, verdict = _EMBEDDING_BACKWARD_CASES[case]
    mesh = cpu_mesh((2, 2))
    vocab, batch, seq, dim = 32, 4, 8, 16

    def local(shape: tuple[int, ...], placements: tuple[Any, ...]) -> list[int]:
        out = list(shape)
        for p in placements:
            if isinstance(p, Shard):
                out[p.dim] //= 2
        return out

    gm = make_fx(
        lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, vocab, -1, False),
        decomposition_table=select_decomp_table(), tracing_mode="fake",
    )(torch.empty(local((batch, seq, dim), grad_p)), torch.zeros(local((batch, seq), index_p), dtype=torch.int64))
    assert any(n.target is torch.ops.aten._unsafe_masked_index_put_accumulate.default for n in gm.graph.nodes)
    indices = _spec(mesh, (batch, seq), index_p)
    report = verify_graph(gm, mesh, [_spec(mesh, (batch, seq, dim), grad_p), indices],
                          [("grad_weight", _spec(mesh, (vocab, dim), out_p))])
    assert [v.kind for v in report.violations] == ([] if verdict == "clean" else [verdict]), explain(report)
    assert report.ok is (verdict == "clean")
    if verdict == "hidden_redistribution":
        assert "embedding backward" in report.violations[0].reason, explain(report)
    else:
        assert report.n_unknown == 0 and not report.unproven_outputs, explain(report)


def test_even_local_shapes_are_dtensors_on_every_rank():
    """The verifier's local shapes skip DTensor's per-rank chunking (for a strided shard it chunks
    an arange of the whole dim: nine tenths of the verifier's time on llama3 8x8) when every
    sharded dim splits evenly. Wherever it does, the arithmetic equals DTensor's shape on every
    rank of a 2x4 mesh, for plain, nested and strided shards; uneven sizes are left to DTensor."""
    import itertools

    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
    from torch.distributed.tensor.placement_types import _StridedShard

    from autoparallel_constraints.verifier._values import _even_local_shape

    sizes = (2, 4)
    menu = [Replicate(), Partial(), Shard(0), Shard(1), _StridedShard(0, split_factor=2), _StridedShard(1, split_factor=4)]
    checked = uneven = 0
    for shape in [(16, 32), (8, 12), (6, 64), (64, 3)]:
        for placements in itertools.product(menu, repeat=2):
            fast = _even_local_shape(shape, placements, sizes)
            if fast is None:
                uneven += 1
                continue
            for coordinate in itertools.product(range(sizes[0]), range(sizes[1])):
                local, _ = _compute_local_shape_and_global_offset(shape, sizes, list(coordinate), placements, skip_offset=True)
                assert tuple(local) == fast, (shape, placements, coordinate)
            checked += 1
    assert checked > 60 and uneven > 10, (checked, uneven)


def _all_reduce_graph(divisor: float | None, *, op: str = "sum", tag_div: bool = False, partition: bool = False) -> Any:
    """``x -> all_reduce(op) over mesh dim 0 -> wait [-> x / divisor]``, traced, as DTensor emits a
    mixed sum/avg reduction on a flattened mesh (``_redistribute``: the sum, then ``/ avg_scale``);
    with ``partition``, ``x / divisor`` comes first (``Replicate -> Partial("sum")``) and the sum after."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.core._tags import TAG

    mesh = cpu_mesh((2, 2))
    group = mesh.get_group(0).group_name
    c10d = torch.ops._c10d_functional

    def fn(x: torch.Tensor) -> torch.Tensor:
        if partition:
            return c10d.wait_tensor(c10d.all_reduce(x / divisor, op, group))
        y = c10d.wait_tensor(c10d.all_reduce(x, op, group)) if op else x
        return y / divisor if divisor is not None else y

    gm = make_fx(fn, tracing_mode="fake")(torch.empty(4, 8))
    for node in gm.graph.nodes:
        if tag_div and node.target is torch.ops.aten.div.Tensor:
            node.meta["custom"] = {TAG: "all.redistribute_000"}
    return gm, mesh


@pytest.mark.parametrize(
    ("op", "source", "divisor", "tag_div", "verdict"),
    [
        ("sum", "R", 2, False, "clean"),  # olmo2 2x2: a Partial(avg) that is replicated as it is
        ("sum", "P(avg)", 2, False, "clean"),
        ("sum", "P(sum)", None, False, "clean"),
        ("avg", "R", None, False, "clean"),  # avg, max and min of a replicated tensor are the tensor
        ("sum", "R", None, False, "illegal_collective"),  # twice the value reaches the output
        ("sum", "R", 4, False, "illegal_collective"),  # divided by the wrong size
        ("sum", "P(sum)", 2, False, "clean"),  # the model's own division of a whole sum
        ("", "R", 2, True, "output_mismatch"),  # the sum dropped: the plugin's division is a partition left Partial
        ("", "R", 3, True, "illegal_collective"),  # a plugin division no mesh dims explain
        ("", "R", 2, False, "clean"),  # an untagged division is the model's
        ("partition", "R", 2, True, "clean"),  # qwen2_moe 2x2: R -> P(sum) is x / 2, then the sum
    ],
    ids=["R-sum-div", "avg-sum-div", "sum-sum", "R-avg", "R-sum-undivided", "R-sum-wrong-divisor",
         "sum-sum-model-div", "dropped-sum-tagged-div", "tagged-div-no-dims", "model-div", "partition-then-sum"],
)
def test_a_sum_over_replicated_dims_must_be_divided_back(op, source, divisor, tag_div, verdict):
    """A sum-reduction over mesh dims where the value is replicated or Partial(avg) is that many
    times the value: only a division by exactly that size gives it back (how DTensor reduces a
    mixed sum/avg Partial on a flattened mesh; OLMo2's graphs on 2x2 were refused for it though
    their numbers are exact). A division inside a plugin redistribution is either that scale or
    DTensor's ``Replicate -> Partial("sum")`` (``v / n`` over mesh dims of size n: qwen2_moe's
    graphs); one neither explains is a violation, and without its sum it leaves a Partial the
    contract refuses (the mutant that drops the sum). The model's own divisions are its own."""

    from autoparallel_constraints.verifier._walk import verify_graph

    partition = op == "partition"
    gm, mesh = _all_reduce_graph(divisor, op="sum" if partition else op, tag_div=tag_div, partition=partition)
    first = {"R": Replicate(), "P(avg)": Partial("avg"), "P(sum)": Partial("sum")}[source]
    out = Replicate() if op else first
    report = verify_graph(gm, mesh, [_spec(mesh, (4, 8), (first, Replicate()))], [("out", _spec(mesh, (4, 8), (out, Replicate())))])
    assert [v.kind for v in report.violations] == ([] if verdict == "clean" else [verdict]), explain(report)
    if verdict == "illegal_collective":
        assert "times" in report.violations[0].reason or "divides" in report.violations[0].reason, explain(report)


def test_inputs_read_the_same_way_are_tried_first():
    """A node whose inputs each have several readings tries the combinations that read every input
    the same way first (a Mamba2 backward's cat on 2x2, local batch 1: 2 x 4 x 4 readings, the
    batch-sharded one last of each; in product order it was the 32nd of 32 with 16 tried, and the
    verifier refused a graph whose numbers are exact). A search cut short and accepting nothing is
    unknown, not a violation (``_walk``)."""
    from types import SimpleNamespace

    from autoparallel_constraints.verifier._values import _MAX_READINGS, _reading_combos

    def r(*placements):
        return SimpleNamespace(placements=placements)

    batch = (Shard(0), Shard(0))
    a = [r(Shard(2), Shard(2)), r(*batch)]
    b = [r(Partial(), Partial()), r(Shard(2), Shard(2)), r(Shard(1), Shard(1)), r(*batch)]
    c, d = list(b), list(b)  # 2 x 4 x 4 x 4 = 128 combinations, more than are tried
    combos, total = _reading_combos([a, b, c, d])
    assert total == 128 and len(combos) == _MAX_READINGS < total
    # one way of reading all four first (plainest first: S(2) before the batch), then mixed ones
    assert [v.placements for v in combos[0]] == [(Shard(2), Shard(2))] * 4
    assert [v.placements for v in combos[1]] == [batch] * 4
    one = [r(Shard(0))] * 1
    assert _reading_combos([one, one]) == ([(one[0], one[0])], 1)


_FILL_INDEX_CASES = {
    # name: (grad_output, weight gradient as the contract says, verdict)
    "batch": ((Shard(0), Replicate()), (Partial(), Replicate()), "clean"),
    "columns": ((Replicate(), Shard(2)), (Replicate(), Shard(1)), "clean"),
    "partial-called-replicate": ((Shard(0), Replicate()), (Replicate(), Replicate()), "output_mismatch"),
}


@pytest.mark.parametrize("case", list(_FILL_INDEX_CASES))
def test_fill_indices_of_the_embedding_backward_are_proven(case):
    """BERT-style models look up a token-type embedding at ``zeros`` when no token types are given,
    so the embedding backward's indices (and its mask) are a fill, the same on every rank. Read in
    the gradient's own placement (or Replicate) it is proven, and a Partial result called
    Replicate is still a violation. Before, the fill was not interpreted: on 2x2 roformer,
    roc_bert, rembert and megatron-bert each had the token-type weight's gradient unproven."""
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    grad_p, out_p, verdict = _FILL_INDEX_CASES[case]
    mesh = cpu_mesh((2, 2))
    vocab, batch, seq, dim = 2, 4, 8, 16
    local = [batch, seq, dim]
    for p in grad_p:
        if isinstance(p, Shard):
            local[p.dim] //= 2

    def backward(g: torch.Tensor) -> torch.Tensor:
        types = torch.zeros(g.shape[:2], dtype=torch.int64, device=g.device)
        return torch.ops.aten.embedding_dense_backward(g, types, vocab, -1, False)

    gm = make_fx(backward, decomposition_table=select_decomp_table(), tracing_mode="fake")(torch.empty(local))
    assert any(n.target is torch.ops.aten._unsafe_masked_index_put_accumulate.default for n in gm.graph.nodes)
    report = verify_graph(gm, mesh, [_spec(mesh, (batch, seq, dim), grad_p)],
                          [("grad_weight", _spec(mesh, (vocab, dim), out_p))])
    assert [v.kind for v in report.violations] == ([] if verdict == "clean" else [verdict]), explain(report)
    assert report.ok is (verdict == "clean")
    if verdict == "clean":
        assert report.n_unknown == 0 and not report.unproven_outputs, explain(report)


@pytest.mark.parametrize(
    ("shape", "target", "proven"),
    [
        ((1, 1, 64), (1, 1, 64), True),  # RWKV's time-mix parameters on 2x2
        ((2, 1, 64), (2, 1, 64), False),  # a leading dim of 2: the view interleaves the ranks' rows
    ],
    ids=["leading-ones", "leading-two"],
)
def test_a_gather_reassembled_by_a_view_is_proven_only_when_it_is_the_cat(shape, target, proven):
    """DTensor gathers a tensor sharded on its last dim by both mesh dims (``(S(2), S(2))``) over the
    flattened mesh and, when every dim before the sharded one has size 1, puts the stacked shards
    back with a view (``[4, 1, 16] -> [1, 1, 64]``) instead of chunk + cat. That view is the cat
    and is proven (RWKV on 2x2: 3,560 unknown nodes and 42 unproven outputs came from it); with a
    leading dim of 2 the same view interleaves the ranks' rows and stays unproven."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autoparallel_constraints.verifier._walk import verify_graph

    mesh = cpu_mesh((2, 2))
    group = mesh._flatten("apc_test_flat").get_group().group_name
    c10d = torch.ops._c10d_functional

    def gather(x: torch.Tensor) -> torch.Tensor:
        return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 4, group)).reshape(target)

    local = (*shape[:-1], shape[-1] // 4)
    gm = make_fx(gather, tracing_mode="fake")(torch.empty(local))
    report = verify_graph(gm, mesh, [_spec(mesh, shape, (Shard(2), Shard(2)))],
                          [("out", _spec(mesh, target, (Replicate(), Replicate())))])
    assert not report.violations, explain(report)
    assert report.ok is proven, explain(report)
    if proven:
        assert report.n_unknown == 0 and not report.unproven_outputs, explain(report)


def test_sym_ite_with_equal_branches_is_its_branch_and_unequal_stays_unknown():
    """A rank's chunk end traced as ``sym_ite(coord == last, size - ceil, ceil)`` is read as the
    branch when both branches are the same value (an even split: the rank does not matter); when
    they differ (an uneven split) it is not collapsed to either, so a rank slice with it stays
    unproven rather than passed."""
    import sympy

    from autoparallel_constraints.verifier._values import _SCALAR, _scalar_value

    graph = torch.fx.Graph()
    cond = graph.placeholder("cond")
    node = graph.call_function(torch.sym_ite, (cond, 2, 2))
    coord = sympy.Symbol("coord0")
    assert _scalar_value(node, (_SCALAR, 2, 2)) == 2
    assert _scalar_value(node, (_SCALAR, 2 * coord + 2, 2 + 2 * coord)) == 2 * coord + 2
    assert _scalar_value(node, (_SCALAR, 2, 3)) is _SCALAR
    assert _scalar_value(node, (_SCALAR, coord, 1)) is _SCALAR
