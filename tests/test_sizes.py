"""Guards the size couplings (``_sizes``): symbolic shape arguments that autoparallel's dynamic
apply keeps as local. The parser reads the size expressions real graphs contain; the audit flags a
plan whose ``full`` takes a batch size from a batch-sharded tensor while itself replicated (the
fuzzer's case: wrong local size, crash at run time) and a view that splits a concrete size
unevenly; with the plugin the plan agrees and the numbers are exact, and with ``sizes=False`` the
same plugin call fails again, so it is the coupling that fixes it."""

from __future__ import annotations

import operator
from types import SimpleNamespace

import pytest
import torch
from _upstream import AP_CAT_BASELINE_SIZE_MISMATCH, AP_CAT_SIZES_FALSE_SPLITS_FULL
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.harness._fuzz import FuzzModel, ModelSpec, Step
from autoparallel_constraints.plan._sizes import (
    SizeCoupling,
    _leaves,
    _parse,
    find_size_couplings,
    is_dynamic,
    size_mismatches,
)
from autoparallel_constraints.testing import explain, run_numerics

# The fuzzer's two shrunk failures: `x = x + b; cat([x[..., :h], 2 * x[..., h:]], -1)`, input R.
CAT_1D = ModelSpec(
    batch=4, seq=4, heads=4, head_dim=2, steps=(Step("bias_add"),) * 3 + (Step("cat"),), mesh=(2,), input_placements=("R",)
)
CAT_2D = ModelSpec(
    batch=2, seq=2, heads=2, head_dim=2, steps=(Step("bias_add"), Step("cat")), mesh=(2, 2), input_placements=("R", "R")
)


def _graph_with(*exprs):
    """A graph with x: [4, 6] and y: [5], one node per expression built from sym_size nodes."""
    g = torch.fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    x.meta["val"], y.meta["val"] = torch.empty(4, 6), torch.empty(5)
    size = lambda t, d: g.call_function(torch.ops.aten.sym_size.int, (t, d))  # noqa: E731
    return [e(g, size, x, y) for e in exprs], x, y


@pytest.mark.parametrize(
    ("build", "k", "leaves", "b"),
    [
        (lambda g, s, x, y: s(x, 0), 1, [("x", 0)], 0),
        (lambda g, s, x, y: s(x, -1), 1, [("x", 1)], 0),
        (lambda g, s, x, y: g.call_function(operator.mul, (s(x, 0), 4)), 4, [("x", 0)], 0),
        (lambda g, s, x, y: g.call_function(operator.mul, (s(x, 0), s(y, 0))), 1, [("x", 0), ("y", 0)], 0),
        # falcon's arange length: (size - 0 + 1 - 1) // 1
        (
            lambda g, s, x, y: g.call_function(
                operator.floordiv,
                (g.call_function(operator.sub, (g.call_function(operator.add, (g.call_function(operator.sub, (s(x, 1), 0)), 1)), 1)), 1),
            ),
            1,
            [("x", 1)],
            0,
        ),
        (lambda g, s, x, y: g.call_function(operator.add, (s(x, 0), 1)), 1, [("x", 0)], 1),
        (lambda g, s, x, y: g.call_function(operator.add, (3, s(x, 0))), 1, [("x", 0)], 3),
        (lambda g, s, x, y: g.call_function(operator.mul, (g.call_function(operator.add, (s(x, 0), 1)), 2)), 2, [("x", 0)], 2),
        (lambda g, s, x, y: g.call_function(torch.ops.aten.sym_numel.default, (x,)), 1, [("x", 0), ("x", 1)], 0),
    ],
    ids=["size", "negative-dim", "times-const", "product", "arange-length", "offset", "const-plus", "offset-times",
         "numel"],
)
def test_parse_reads_monomials(build, k, leaves, b):
    """Sizes of the form k·Π size(x, d) + b are read exactly; dims are normalized."""
    (node,), _, _ = _graph_with(build)
    mono = _parse(node)
    assert mono is not None
    assert (mono.k, [(n.name, d) for n, d in mono.leaves], mono.b) == (k, leaves, b)


@pytest.mark.parametrize(
    "build",
    [
        lambda g, s, x, y: g.call_function(operator.add, (s(x, 0), s(y, 0))),  # a sum of sizes
        lambda g, s, x, y: g.call_function(operator.sub, (8, s(x, 0))),
        lambda g, s, x, y: g.call_function(operator.floordiv, (s(x, 0), 2)),
        lambda g, s, x, y: g.call_function(torch.sym_max, (s(x, 0), 3)),
        lambda g, s, x, y: g.call_function(torch.ops.aten.sym_stride.int, (x, 0)),
        lambda g, s, x, y: g.call_function(torch.ops.aten.add.Tensor, (x, x)),  # a tensor op
    ],
    ids=["sum", "const-minus", "halved", "sym_max", "stride", "tensor-op"],
)
def test_parse_refuses_other_forms(build):
    """Anything else is not a monomial: the coupling then keeps both sides unsharded (Z2), on
    every dim the expression reads (a stride reads all of x's dims)."""
    (node,), x, _ = _graph_with(build)
    assert _parse(node) is None
    if node.target == torch.ops.aten.sym_stride.int:
        assert _leaves(node) == [(x, 0), (x, 1)]


def _spec(*placements):
    """What size_mismatches reads of a DTensorSpec: placements (and no shard order)."""
    return SimpleNamespace(placements=placements, shard_order=None)


@pytest.mark.parametrize(
    ("kind", "leaf", "out", "flagged"),
    [
        ("match", (Shard(0), Replicate()), (Shard(1), Replicate()), False),  # same mesh dim
        ("match", (Shard(0), Replicate()), (Replicate(), Shard(1)), True),  # other mesh dim
        ("match", (Replicate(), Replicate()), (Shard(1), Replicate()), True),
        ("global", (Replicate(), Replicate()), (Replicate(), Replicate()), False),
        ("global", (Shard(0), Replicate()), (Replicate(), Replicate()), True),  # the leaf is split
        ("global", (Replicate(), Replicate()), (Replicate(), Shard(1)), True),  # the output is split
        ("even", None, (Shard(1), Replicate()), True),  # 5 split 2 ways
        ("even", None, (Replicate(), Replicate()), False),
    ],
)
def test_plan_check_per_kind(kind, leaf, out, flagged):
    """The audit's check of each kind (the ILP forbids exactly these plans): a size read from
    x's dim 0 used for the output's dim 1; for "even", the concrete size 5 on a 2x2 mesh."""
    g = torch.fx.Graph()
    x, u = g.placeholder("x"), g.placeholder("u")
    coupling = SizeCoupling(
        consumer=u, out_dim=1, kind=kind, expr="e", leaves=((x, 0),) if leaf else (), size=5 if kind == "even" else None
    )
    specs = {x: _spec(*leaf) if leaf else None, u: _spec(*out)}
    bad = size_mismatches([coupling], specs.get, (2, 2))
    assert bool(bad) is flagged, bad


def test_finder_couples_factory_and_view_shapes():
    """full's shape (args[0]) and view's sizes (args[1]) are couplings; concrete ints are not."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4, 6)
    s0 = g.call_function(torch.ops.aten.sym_size.int, (x, 0))
    full = g.call_function(torch.ops.aten.full.default, ([s0, 6], 0.0))
    prod = g.call_function(operator.mul, (s0, 6))
    view = g.call_function(torch.ops.aten.view.default, (x, [prod]))
    shifted = g.call_function(operator.add, (s0, 1))
    full_shifted = g.call_function(torch.ops.aten.full.default, ([shifted], 0.0))
    for n, shape in ((full, (4, 6)), (view, (24,)), (full_shifted, (5,))):
        n.meta["val"] = torch.empty(shape)
    plan = lambda n: n.op != "call_function" or n.target != operator.add  # noqa: E731
    got = [(c.consumer.name, c.out_dim, c.kind, c.expr) for c in find_size_couplings(g, plan, (4,), dynamic=True)]
    assert got == [
        (full.name, 0, "match", "size(x, 0)"),
        (full.name, 1, "even", "6"),  # 4 does not divide 6
        (view.name, 0, "match", "(size(x, 0) * 6)"),
        (full_shifted.name, 0, "global", "(size(x, 0) + 1)"),
    ]
    static = [(c.consumer.name, c.kind) for c in find_size_couplings(g, plan, (2,), dynamic=False)]
    assert static == [(full.name, "match"), (full_shifted.name, "global")]  # views: DTensor's job
    # A size tracing specialized to a number reaches the apply as an int: localized like a
    # concrete size (ceil division), so only an uneven split matters.
    s0.meta["val"] = 4
    got = [(c.consumer.name, c.out_dim, c.kind) for c in find_size_couplings(g, plan, (4,), dynamic=False)]
    assert got == [(full.name, 1, "even"), (full_shifted.name, 0, "global")]  # 4 divides 4, not 6


def _run(spec: ModelSpec, configure=None, pins=None):
    audits: list = []
    report = run_numerics(
        lambda: FuzzModel(spec),
        lambda: torch.randn(spec.batch, spec.seq, spec.hidden),
        spec.mesh,
        input_placements=pins or [tuple(Replicate() for _ in spec.mesh)],
        output_placements=[None],
        parameter_memory_constraint=False,
        atol=1e-4,
        rtol=1e-4,
        configure=configure,
        after_apply=lambda autop: audits.append(apc.audit(autop)),
    )
    return report, (audits[0] if audits else None)


def test_without_plugin_the_audit_names_the_size_mismatch():
    """Baseline on (2,): full (R) takes its batch size from alias_default (S(0)); the audit says
    so, and the graph crashes at run time. Where the solver picks the equal-cost plan with
    alias_default R instead (torch >= 2.14, see _upstream), the audit is clean and the numbers exact."""
    report, audit = _run(CAT_1D)
    if not AP_CAT_BASELINE_SIZE_MISMATCH:
        assert audit is not None and audit.ok, explain(audit, report)
        assert report.ok, explain(report)
        return
    assert audit is not None and not audit.ok, explain(audit, report)
    assert {v.kind for v in audit.violations} == {"size_mismatch"}, explain(audit)
    text = str(audit)
    assert "SIZE MISMATCH: full (aten.full.default)" in text
    assert "full dim 0 = size(alias_default, 0): mesh dim 0 splits the size it is read from" in text
    assert not report.ok and "expected src to have a size equal to the slice of self" in report.error, explain(report)


@pytest.mark.parametrize("formulation", ["explicit", "strict"])
@pytest.mark.parametrize("spec", [CAT_1D, CAT_2D], ids=["mesh2", "mesh2x2"])
def test_plugin_couples_sizes_audit_clean_and_exact(spec, formulation):
    """With the plugin the couplings are ILP rows (size.match_*), the plan agrees, the audit is
    clean and the numbers equal one device (baseline fails: run-time crash on (2,), apply-time
    'narrow unexpectedly changed concrete size' on (2,2))."""
    added: list = []

    def configure(autop):
        added.append(autop.add_op_constraints(formulation=formulation, materialize="all"))

    report, audit = _run(spec, configure)
    (a,) = added
    assert a.size_couplings and a.constraints.get("size.match", 0) >= len(spec.mesh)
    assert any(" dim " in c and "size(" in c for c in a.size_couplings)
    assert audit is not None and audit.ok, explain(audit, report)
    assert audit.size_couplings == len(a.size_couplings)
    assert report.ok, explain(report)


def _plan_size_mismatches(autop, plan) -> list[str]:
    """The size couplings ``plan`` breaks, as the audit words them: the plan-level half of the
    audit, which needs no parallel graph (so it answers when the apply fails). Call it before the
    apply, which specializes the graph's sizes."""
    mesh_shape = tuple(autop.mesh.shape)
    couplings = find_size_couplings(autop.gm.graph, lambda n: n in plan, mesh_shape, dynamic=is_dynamic(autop.gm))
    spec_of = lambda n: plan[n].output_specs if n in plan else None  # noqa: E731
    return sorted(why for _, why in size_mismatches(couplings, spec_of, mesh_shape))


def test_sizes_false_brings_the_failure_back():
    """The same plugin call without the size couplings: the plan breaks full's size coupling again
    and the run fails with that mismatch, not otherwise.

    Which broken plan comes back rests on a tie in autoparallel's ILP: the plans that keep full's
    batch size consistent and the two that break it cost the same (objective 109.3124 on (2,)), and
    which one the solver returns moves with torch's DTensor strategies
    (``_upstream.AP_CAT_SIZES_FALSE_SPLITS_FULL``). Before torch 2.14 it is the baseline's: full
    replicated, its size read from the batch-sharded alias; the audit names it and the run crashes
    on the wrong local size. From 2.14 it is the mirror image: full batch-sharded, its size read
    from the replicated alias, so every rank makes a full-size block where the plan has half; the
    apply cannot build that graph (DTensor's unpad: "narrow unexpectedly changed concrete size"),
    so no audit is made and the plan's own check names the mismatch."""
    held: dict = {}

    def configure(autop) -> None:
        # verify="warn": the default "raise" would stop at the apply (the verifier sees it too)
        autop.add_op_constraints(materialize="all", sizes=False, verify="warn")
        solve = autop.optimize_placement

        def solve_and_check(*args, **kwargs):
            plan = solve(*args, **kwargs)
            held["broken"] = _plan_size_mismatches(autop, plan)
            return plan

        autop.optimize_placement = solve_and_check  # the plan's check, before the apply

    report, audit = _run(CAT_1D, configure)
    assert "broken" in held, explain(report)  # the run stopped before its plan was solved
    broken = held["broken"]
    split_full = [f"{full} dim 0 = size(alias_default, 0): mesh dim 0 splits the output dim, not the size it is read "
                  f"from ({full} (S(0)); alias_default (R))" for full in ("full", "full_1")]
    split_size = [f"{full} dim 0 = size(alias_default, 0): mesh dim 0 splits the size it is read from, not the "
                  f"output dim ({full} (R); alias_default (S(0)))" for full in ("full", "full_1")]
    assert broken == (split_full if AP_CAT_SIZES_FALSE_SPLITS_FULL else split_size), explain(*broken, report)
    if AP_CAT_SIZES_FALSE_SPLITS_FULL:
        assert audit is None, explain(audit, report)  # the apply failed: there is no graph to audit
        assert report.error is not None, explain(report)
        assert report.error.startswith("apply: RuntimeError: narrow unexpectedly changed concrete size on dim 0"), explain(report)
        return
    assert audit is not None, explain(audit, report)
    assert {v.kind for v in audit.violations} == {"size_mismatch"}, explain(audit)
    assert "full dim 0 = size(alias_default, 0): mesh dim 0 splits the size it is read from" in str(audit)
    assert report.error is not None and report.error.startswith("run: RuntimeError: "), explain(report)
    assert "expected src to have a size equal to the slice of self" in report.error, explain(report)


def test_baseline_2d_fails_at_apply():
    """(2,2) baseline: autoparallel's own apply fails (the plan's local sizes disagree), and the
    error carries the plugin's note (PEP 678, shown in the report's error): the couplings the plan
    breaks, by node, and that the plugin's call keeps plans out of them."""
    report, _ = _run(CAT_2D)
    assert not report.ok and report.error.startswith("apply:") and "narrow unexpectedly changed" in report.error, explain(report)
    assert "[autoparallel_constraints: the plan breaks" in report.error, report.error
    assert "size(" in report.error and "add_op_constraints()" in report.error, report.error


UNEVEN = ModelSpec(
    batch=4, seq=5, heads=3, head_dim=2, steps=(Step("slice", 1), Step("index_put", 1)), mesh=(2,), input_placements=("S1",)
)


def test_uneven_concrete_size_flagged_then_split_evenly():
    """seq 5 pinned Shard(1) on (2,), then viewed: baseline views with S(1) output, which
    autoparallel localizes as ceil(5/2) on both ranks (audit: size_mismatch; run: invalid view
    shape); the plugin (Z3) keeps the view's seq dim unsplit: clean and exact."""
    pins = [(Shard(1),)]
    base, base_audit = _run(UNEVEN, pins=pins)
    assert base_audit is not None and base_audit.by_kind("size_mismatch"), explain(base_audit, base)
    assert "dim 1 = 5: split 2 ways, which autoparallel localizes as ceil(5/2) on every rank" in str(base_audit)
    assert not base.ok and "is invalid for input of size" in base.error, explain(base)

    added: list = []
    report, audit = _run(UNEVEN, lambda autop: added.append(autop.add_op_constraints(materialize="all")), pins=pins)
    assert added[0].constraints.get("size.even", 0) >= 1
    assert audit is not None and audit.ok, explain(audit, report)
    assert report.ok, explain(report)


def test_finder_keeps_unlocalized_sizes_global():
    """A size passed to an op the apply does not localize (iota's length, what torch.arange(n)
    traces to; slice's end) reaches it evaluated on local tensors, even when tracing specialized
    it to a number (GPT-2's batch size): (Z2) keeps its leaves unsharded, and iota's output too."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4, 6)
    s0 = g.call_function(torch.ops.aten.sym_size.int, (x, 0))
    s0.meta["val"] = 4  # specialized, as in transformers' sdpa_mask under AutoParallel(dynamic=True)
    length = g.call_function(operator.floordiv, (g.call_function(operator.sub, (s0, 0)), 1))
    iota = g.call_function(torch.ops.prims.iota.default, (length,), {"start": 0, "step": 1})
    s1 = g.call_function(torch.ops.aten.sym_size.int, (x, 1))
    sliced = g.call_function(torch.ops.aten.slice.Tensor, (x, 1, 0, s1))
    iota.meta["val"], sliced.meta["val"] = torch.empty(4), torch.empty(4, 6)
    def plan(n):
        return n.op == "placeholder" or isinstance(n.meta.get("val"), torch.Tensor)

    got = [(c.consumer.name, c.out_dim, c.kind, c.leaves) for c in find_size_couplings(g, plan, (2,), dynamic=True)]
    assert got == [(iota.name, 0, "global", ((x, 0),)), (sliced.name, None, "global", ((x, 1),))]
    coupling = find_size_couplings(g, plan, (2,), dynamic=True)[1]
    assert size_mismatches([coupling], {x: _spec(Shard(1)), sliced: _spec(Replicate())}.get, (2,))
    assert not size_mismatches([coupling], {x: _spec(Shard(0)), sliced: _spec(Shard(0))}.get, (2,))


class Positions(torch.nn.Module):
    """``x + arange(batch)``: transformers' mask builders do this (``sdpa_mask``'s batch arange)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + torch.arange(x.shape[0], dtype=x.dtype)[:, None]) * self.w


def _positions(configure=None):
    audits: list = []
    report = run_numerics(
        Positions, lambda: torch.randn(4, 16), (2,), configure=configure,
        after_apply=lambda autop: audits.append(apc.audit(autop)),
    )
    return report, (audits[0] if audits else None)


def test_arange_of_a_sharded_size_baseline_then_plugin():
    """The upstream cause of GPT-2's dynamic apply failure in a few lines: the input pinned
    (S(0),) on (2,), the arange's length read from it. autoparallel alone hands iota the local
    batch, a length-2 arange planned Replicate: silently wrong numbers (measured: output norm ratio
    0.589), which the audit names; the plugin keeps the size global (size.global_*): clean, exact."""
    base, base_audit = _positions()
    assert base.error is None and not base.ok, explain(base)
    assert base_audit is not None and base_audit.by_kind("size_mismatch"), explain(base_audit, base)
    assert "iota dim 0 = " in str(base_audit) and "a size that must stay global" in str(base_audit)
    added: list = []
    report, audit = _positions(lambda autop: added.append(autop.add_op_constraints()))
    assert any("iota" in c and "size argument" not in c for c in added[0].size_couplings), added[0].size_couplings
    assert audit is not None and audit.ok, explain(audit, report)
    assert report.ok, explain(report)


def test_a_deep_size_expression_is_described_without_recursing_forever():
    """A size argument computed through a long chain (transformers' ProphetNet: its ngram position
    arithmetic raised RecursionError while the size couplings named it) is described up to a depth,
    then by node names."""
    from autoparallel_constraints.plan._sizes import _TEXT_DEPTH, _text

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    size = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
    node = size
    for _ in range(5000):
        node = graph.call_function(operator.add, (node, 1))
    text = _text(node)
    assert text.count("(") <= _TEXT_DEPTH + 1 and "add_" in text
    assert _text(graph.call_function(operator.mul, (size, 2))) == "(size(x, 0) * 2)"
