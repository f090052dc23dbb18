"""Guards the plugin where torchtitan users run it: torchtitan's own models, its ``AutoParallelGraph``
and its call sequence (bfloat16 parameters / float32 reduction, parameter memory without bounds,
``(tokens, positions)`` as ``(S(0), R)``, logits ``(S(0), S(2))``) on a 2x2 CPU mesh.

Default tier: the default call on torchtitan's Llama3 (2 layers, static shapes as torchtitan
builds) is verified clean with every output proven. On torchtitan 0.3.0 and this mesh the solver's
plan ends gradients in a constant chunk (a static graph's rank slice) that several mesh dims can
explain; the verifier judged such an output by its first reading and refused a legal plan, and a
search of readings cut at 16 combinations lost the reading the plan meant. A chunk index changed to
another rank's is still flagged. Full tier: autoparallel alone on highs-lp, the mixed-precision
numbers (float64 yardstick) of the default call, ``apc.enable()``'s plan. On demand: alone's
numbers, DeepSeek-V3, the default call on CBC.

Rests on: torchtitan 0.3.0 (``AutoParallelGraph``, ``model_registry``); autoparallel a54c252's
static apply emitting ``split`` + ``getitem`` for a Replicate -> Shard step.
"""

from __future__ import annotations

import json
import operator

import pytest
import torch

import autoparallel_constraints as apc
from autoparallel_constraints.harness._cpu import cpu_mesh
from autoparallel_constraints.harness._numerics import run_numerics

from _torchtitan import require_torchtitan

require_torchtitan()

from autoparallel_constraints.lab._torchtitan import autoparallel_graph_class, torchtitan_case  # noqa: E402
from autoparallel_constraints.testing import explain

aten = torch.ops.aten


def _static_build(family: str, layers: int, *, plugin: bool, **options):
    """torchtitan's sequence on a static 2x2 build, applied the way ``apply_placement_for_fx_module``
    starts (``_apply_placement_common``); returns the exited ``autop``. ``options`` go to the
    plugin's call."""
    case = torchtitan_case(family, layers=layers)
    with torch.device("meta"):
        model = case.model_fn()
    mesh = cpu_mesh((2, 2), ("dp", "tp"))
    with autoparallel_graph_class()(model, case.input_fn, mesh, mp_policy=case.mp_policy) as autop:
        case.configure(autop)
        if plugin:
            autop.add_op_constraints(**options)  # verify="raise": a refused plan fails here
        else:
            apc.use_solver(autop, "highs-lp")
        placement = autop.optimize_placement()
        autop._apply_placement_common(placement)
    return autop


@pytest.fixture(scope="module")
def llama3_default():
    return _static_build("llama3", 2, plugin=True)


def _chunked_outputs(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """getitem(split(x), 0) nodes that reach an output through casts and clones only."""
    out = next(iter(gm.graph.find_nodes(op="output")))
    found = []
    for arg in torch.utils._pytree.tree_leaves(out.args[0]):
        node = arg
        while isinstance(node, torch.fx.Node) and node.target in (aten.clone.default, torch.ops.prims.convert_element_type.default):
            node = node.args[0]
        if (isinstance(node, torch.fx.Node) and node.target is operator.getitem and node.args[1] == 0
                and node.args[0].target in (aten.split.Tensor, aten.split_with_sizes.default)):
            found.append(node)
    return found


def test_default_call_on_torchtitans_llama3_is_proven(llama3_default) -> None:
    """The default call on torchtitan's Llama3 with its mixed precision: audit clean, every output
    proven (the verifier refused this plan before it read constant chunks as every mesh dim that
    explains them)."""
    report = apc.verify(llama3_default)
    assert report.ok and report.n_unknown == 0, explain(report)
    assert apc.audit(llama3_default).ok


def test_another_ranks_chunk_is_still_flagged(llama3_default) -> None:
    """The reading that accepts a constant chunk as a rank slice is not blind: a gradient that
    ends in a chunk of the other index on the tracing rank is not clean."""
    gm = llama3_default.parallel_gm
    chunks = _chunked_outputs(gm)
    assert chunks, "the plan no longer ends a gradient in a constant chunk: this test covers nothing"
    node = chunks[0]
    node.args = (node.args[0], 1)
    try:
        report = apc.verify(llama3_default)
    finally:
        node.args = (node.args[0], 0)
    assert not report.ok, explain(report)
    assert apc.verify(llama3_default).ok


@pytest.mark.full
def test_autoparallel_alone_on_highs_lp_is_proven() -> None:
    """autoparallel alone on the default solver: the plan the issue saw refused is proven."""
    report = apc.verify(_static_build("llama3", 2, plugin=False))
    assert report.ok and report.n_unknown == 0, explain(report)


@pytest.mark.ondemand
def test_default_call_on_cbc_is_proven() -> None:
    """The same case with the default call on CBC, which picks another plan of the same objective
    than highs-lp: proven too (its numbers: the on-demand case below). On demand: 3 minutes on
    the shared 2-core machine, CBC's solve most of it."""
    report = apc.verify(_static_build("llama3", 2, plugin=True, solver="cbc"))
    assert report.ok and report.n_unknown == 0, str(report)


@pytest.mark.full
@pytest.mark.parametrize("call", [pytest.param("alone", marks=pytest.mark.ondemand), "default",
                                  pytest.param("default-cbc", marks=pytest.mark.ondemand)])
def test_mixed_precision_numbers_match_one_device(call: str) -> None:
    """bfloat16 parameters / float32 reduction, every rank simulated, against one device running
    the same precision: every output and gradient within the float64 yardstick (the default call
    on highs-lp and, on demand, on CBC)."""
    case = torchtitan_case("llama3", layers=2)

    def configure(autop) -> None:  # run_numerics pins the inputs and outputs itself
        autop.add_parameter_memory_constraint(low=None, high=None)
        if call.startswith("default"):
            autop.add_op_constraints(**({"solver": "cbc"} if call == "default-cbc" else {}))
        else:
            apc.use_solver(autop, "highs-lp")

    report = run_numerics(
        case.model_fn, case.input_fn, (2, 2), configure=configure, parameter_memory_constraint=False,
        input_placements=list(case.input_placements), output_placements=list(case.output_placements),
        mp_policy=case.mp_policy, autoparallel_cls=autoparallel_graph_class(),
    )
    assert report.ok, explain(report)
    assert all(c.yardstick is not None for c in report.checks if c.name.startswith("grad:"))


@pytest.mark.ondemand
def test_deepseek_v3_default_call_is_proven() -> None:
    """torchtitan's DeepSeek-V3 (2 layers: a dense one and an MoE one) with the default call. On
    demand (75 s): the torchtitan table proves it on 2x2 and 2x4 (``zoo --torchtitan``)."""
    report = apc.verify(_static_build("deepseek_v3", 2, plugin=True))
    assert report.ok and report.n_unknown == 0, explain(report)


def test_torchtitans_module_loader_switches_the_plugin_on(monkeypatch) -> None:
    """torchtitan's own ConfigManager, given ``--module autoparallel_constraints.torchtitan``,
    finds its graph_trainer config there, and the import enabled the plugin with $APC_OPTIONS."""
    import sys

    from torchtitan.config.manager import ConfigManager

    monkeypatch.setenv("APC_OPTIONS", '{"formulation": "strict"}')
    monkeypatch.delitem(sys.modules, "autoparallel_constraints.torchtitan", raising=False)
    try:
        config = ConfigManager().parse_args(
            ["--module", "autoparallel_constraints.torchtitan", "--config", "graph_trainer_llama3_debugmodel"]
        )
        assert type(config).__name__ == "Config"
        assert apc.enabled_options() == {"formulation": "strict"}
    finally:
        apc.disable()


def _plan(autop) -> dict[str, str]:
    return {n.name: str(s) for n, s in autop.sharding_placement.items()}


@pytest.mark.full
def test_enable_gives_torchtitans_class_the_same_plan_as_the_explicit_call(llama3_default) -> None:
    """apc.enable() with torchtitan's AutoParallelGraph and torchtitan's sequence (no plugin line
    in it): the same objective and the same strategy on every node as add_op_constraints() (the
    module's explicit build), and the graph torchtitan's own apply path builds
    (apply_placement_for_fx_module) is verified."""
    from torchtitan.experiments.graph_trainer.configs import GraphTrainerCompileConfig

    explicit = llama3_default
    case = torchtitan_case("llama3", layers=2)
    with torch.device("meta"):
        model = case.model_fn()
    with apc.enabled():
        with autoparallel_graph_class()(model, case.input_fn, cpu_mesh((2, 2), ("dp", "tp")),
                                        mp_policy=case.mp_policy) as autop:
            case.configure(autop)
            placement = autop.optimize_placement(verbose=False)
            autop.apply_placement_for_fx_module(placement, compile_config=GraphTrainerCompileConfig())
    assert autop._apc_state is not None
    assert autop.sharding_optimizer.prob.objective.value() == pytest.approx(
        explicit.sharding_optimizer.prob.objective.value(), rel=1e-9)
    assert _plan(autop) == _plan(explicit)
    assert apc.verify(autop).ok


def test_every_language_family_builds_with_torchtitans_sdpa_module() -> None:
    """Every torchtitan family this sequence runs builds (on meta) with torchtitan's causal SDPA
    module in each attention slot, Kimi's built by deepseek_v3's layer builder included, and takes
    ``(tokens, positions)`` positionally; the families that cannot run say why."""
    from torchtitan.models.common.attention import ScaledDotProductAttention

    from autoparallel_constraints.errors import InvalidOptionError
    from autoparallel_constraints.lab._torchtitan import TORCHTITAN_FAMILIES, TORCHTITAN_NOT_RUN

    for family in TORCHTITAN_FAMILIES:
        case = torchtitan_case(family, layers=1)
        with torch.device("meta"):
            model = case.model_fn()
        inner = [m for m in model.modules() if isinstance(m, ScaledDotProductAttention)]
        assert inner, f"{family}: no ScaledDotProductAttention module in the built model"
        tokens, positions = case.input_fn()
        assert tokens.shape == positions.shape
    for family, why in TORCHTITAN_NOT_RUN.items():
        with pytest.raises(InvalidOptionError, match=why[:20]):
            torchtitan_case(family)


def test_the_reference_model_is_initialised_as_torchtitans_trainer_does() -> None:
    """torchtitan builds the routed experts' weights with ``torch.empty`` and initialises every
    model in its trainer (``init_weights``); a case's ``model_fn`` on CPU does too. Before, the
    reference ran the experts on whatever memory held: zeros in a fresh process (every routed
    expert's output zero, their gradients untested), garbage after other work in the process (the
    wrong numbers of a dynamic build after a static one)."""
    junk = [torch.full((n,), 3.0) for n in range(1000, 70000, 997)]  # memory the allocator hands back
    del junk
    torch.manual_seed(0)
    model = torchtitan_case("deepseek_v3", layers=2, mixed_precision=False).model_fn()
    experts = {name: p.detach() for name, p in model.named_parameters() if "routed_experts" in name}
    assert experts, "no routed experts in torchtitan's DeepSeek-V3: this test covers nothing"
    for name, weight in experts.items():
        assert torch.isfinite(weight).all() and 1e-3 < float(weight.std()) < 0.1, (name, float(weight.std()))


def test_torchtitan_zoo_rows_say_their_outcome_and_why(capsys, tmp_path) -> None:
    """``zoo --torchtitan``: a family that cannot run the sequence is a row that says why; a row's
    outcome is proven exact only when audit, verifier and numbers all are, and off-plan edges
    (autoparallel's apply delivering other placements than planned) are told apart from a wrong
    graph."""
    from autoparallel_constraints.__main__ import main as cli
    from autoparallel_constraints.lab._torchtitan_zoo import outcome

    rows = tmp_path / "rows.json"
    assert cli(["zoo", "--torchtitan", "--families", "flux,qwen3_5", "--json", str(rows)]) == 0
    printed = capsys.readouterr().out
    assert "flux" in printed and "not run: a diffusion transformer" in printed and "Triton kernels" in printed
    written = json.loads(rows.read_text())  # the not-run rows are part of the table's record too
    assert {r["family"]: bool(r.get("not_run")) for r in written} == {"flux": True, "qwen3_5": True}

    proven = {"family": "qwen3", "built": True, "audit": "clean", "verify": "clean", "unknown": 0, "unproven": 0,
              "numerics": "exact"}
    assert outcome(proven) == ("proven exact", "")
    assert outcome({**proven, "audit": "2 edge_diverges"})[0] == "exact, off-plan edges"
    assert outcome({**proven, "audit": "2 edge_diverges, 1 size_mismatch"})[0] == "not proven"
    assert outcome({**proven, "unproven": 1})[0] == "not proven"
    wrong = outcome({**proven, "numerics": "wrong", "failures": ["grad:w: off by 2x"]})
    assert wrong[0] == "not proven" and "grad:w" in wrong[1]
