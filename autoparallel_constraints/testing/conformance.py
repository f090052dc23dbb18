"""A conformance kit for formulations: the checks every formulation must pass, in a few lines.

Subclass :class:`FormulationConformance` in a test module and say how to make your formulation;
pytest collects the inherited checks (the base class's name does not start with ``Test``)::

    from autoparallel_constraints.testing.conformance import FormulationConformance

    class TestMine(FormulationConformance):
        formulation = "mypkg.mymod:MyFormulation"   # a registered name, "pkg.mod:Class",
                                                    # a Formulation subclass, or a zero-arg factory

The checks, each on a small copy of the seed block of upstream issue #348
(:data:`SMALL`: 10 heads x 16, batch 8, seq 16, input ``(Shard(0), Replicate())``) on a 2x4
CPU mesh over fake ranks, the costs of an H100 (see ``testing.device_name``):

* ``test_clean_baseline_keeps_the_objective`` — autoparallel's own plan satisfies the table:
  same objective as without the plugin, audit clean.
* ``test_forced_348_is_fixed_and_lowers`` — the pre-fix index_put strategy (self/out RS(0),
  values RS(1)) offered and the producers pinned to RS(0)/RS(1): the audit is clean and Inductor
  lowers the parallel graph (without the plugin it fails with "Broadcast failed in ExpandView").
* ``test_illegal_pin_is_repaired_refused_or_reported`` — index_put pinned to that strategy:
  refused with a package error naming the pin, repaired (audit clean), or reported as a rule that
  gave way (the constraint report lists index_put and the audit flags it). Never silent.
* ``test_swapped_case_is_exact`` — on 2x2 under LocalTensorMode, self ``(S0,S1)`` / values
  ``(S1,S0)`` forced (local shapes agree, numbers do not without the plugin): forward and every
  gradient equal the single-device model (6-12 s measured on 2 cores).
* ``test_failed_call_changes_nothing`` — the formulation's additions with one more that fails
  to apply: ``add_op_constraints`` raises and the problem's rows, bounds and objective are as before.
* ``test_same_inputs_same_plan`` — the forced case twice: the same strategy at every node.
* ``test_names_follow_the_convention`` — every constraint, variable and bound it added is named
  ``<formulation>.<family>_<idx>``, and is in the problem.

Runs are made once per class and shared by its checks; the baselines (no plugin) once per process.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

from ..apply._audit import AuditReport, audit
from ..errors import ConstraintsError, VerificationError
from ..formulations import Formulation, make_formulation
from ..harness._cpu import cpu_mesh, device_name, init_fake_process_group
from ..harness._explain import explain
from ..harness._inject import find_nodes, lower_with_inductor, offer_strategy, pin_strategy, strategy_index
from ..harness._numerics import NumericsReport, run_numerics
from ..lab._runs import RunSummary, run_seed
from ..models import SeedBlock, SeedConfig
from ..plan._report import ConstraintReport, constraint_report
from ..plan._state import get_state

__all__ = [
    "SMALL",
    "FormulationConformance",
    "Run",
    "forced_348",
    "make",
    "pin_illegal",
    "pin_producers",
    "run_scenario",
    "swapped_numerics",
]

INDEX_PUT = torch.ops.aten.index_put.default
R = Replicate()
RR = (R, R)
RS0, RS1 = (R, Shard(0)), (R, Shard(1))
SMALL = SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)
"""The seed block's sizes the conformance scenarios run at (small enough for the default tier)."""
SWAPPED_CONFIG = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)  # batch == seq: shapes agree
SWAPPED = ((Shard(0), Shard(1)), (Shard(1), Shard(0)))
PIN = "pin_illegal"
NAME = r"^{form}\.[a-z][a-z0-9_]*_\d{{3}}$"

Spec = Any  # a name, "pkg.mod:Class", a Formulation subclass, or a zero-argument factory


def make(spec: Spec) -> Formulation:
    """A fresh formulation instance from ``spec`` (every run gets its own)."""
    if callable(spec) and not isinstance(spec, type):
        form = spec()
        if not isinstance(form, Formulation):
            raise TypeError(f"the factory {spec!r} returned {type(form).__name__}, not a Formulation")
        return make_formulation(form)
    return make_formulation(spec)


def forced_348() -> Any:
    """Offer what DTensor's index_put rule allowed before pytorch#172350: self/out RS(0), values RS(1)."""
    return offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0)


def pin_producers(autop: Any) -> None:
    """Pin the producers of index_put's self and values to RS(0) and RS(1), as in the issue."""
    (node,) = find_nodes(autop, INDEX_PUT)
    opt = autop.sharding_optimizer
    opt.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
    opt.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")


def pin_illegal(autop: Any) -> None:
    """Pin index_put itself to the offered (illegal) strategy, as ``pin_illegal_000``."""
    (node,) = find_nodes(autop, INDEX_PUT)
    pin_strategy(autop, node, strategy_index(autop, node, [RS0, RR, RS1], RS0), name=PIN)


@dataclass
class Run:
    """One solve + apply + audit of a scenario, or the package error it raised."""

    summary: RunSummary | None = None
    audit: AuditReport | None = None
    report: ConstraintReport | None = None
    error: BaseException | None = None
    lowered: BaseException | None | str = "not tried"  # None: Inductor lowered; else its error
    plan: dict[str, str] = field(default_factory=dict)  # node -> chosen strategy, printed
    names: dict[str, bool] = field(default_factory=dict)  # added name -> is it in the problem


def run_scenario(scenario: str, spec: Spec | None, *, lower: bool = False) -> Run:
    """``"clean"``, ``"forced"`` (producers pinned) or ``"pinned"`` (index_put pinned to the
    illegal strategy) on :data:`SMALL` at 2x4; ``spec`` None is autoparallel alone."""
    init_fake_process_group()
    run = Run()

    def grab(autop: Any) -> None:
        run.report = constraint_report(autop)
        opt = autop.sharding_optimizer
        run.plan = {n.name: str(spec) for n, spec in autop.sharding_placement.items()}
        state = get_state(autop)
        if state is not None:
            variables = {v.name for v in opt.prob.variables()}
            adds = state.additions
            run.names.update({n: n in opt.prob.constraints for n in adds.constraints})
            run.names.update({n: n in variables for n in adds.variables})
            run.names.update({n: all((b.up is None or v.upBound == b.up) and (b.low is None or v.lowBound == b.low)
                                     for v in b.variables) for n, b in adds.bounds.items()})
        if lower:
            try:
                lower_with_inductor(autop)
                run.lowered = None
            except Exception as exc:  # noqa: BLE001 - the verdict is the point
                run.lowered = exc

    configure = {"clean": None, "forced": pin_producers, "pinned": pin_illegal}[scenario]
    form = make(spec) if spec is not None else None
    mesh = cpu_mesh((2, 4))
    try:
        with device_name():
            if scenario == "clean":
                run.summary, run.audit = run_seed(form, mesh, config=SMALL, after_apply=grab)
            else:
                with forced_348():
                    run.summary, run.audit = run_seed(form, mesh, config=SMALL, configure=configure, after_apply=grab)
    except ConstraintsError as exc:
        run.error = exc
    return run


def swapped_numerics(spec: Spec | None) -> tuple[NumericsReport, AuditReport | None]:
    """The swapped index_put case on 2x2 under LocalTensorMode against one device."""
    plugin = None if spec is None else (lambda autop: autop.add_op_constraints(formulation=make(spec)))
    return swapped_case(plugin)


def swapped_case(plugin: Callable[[Any], None] | None) -> tuple[NumericsReport, AuditReport | None]:
    """The swapped index_put case (self ``(S0,S1)``, values ``(S1,S0)``, the illegal strategy offered,
    both producers pinned) on 2x2 under LocalTensorMode; ``plugin(autop)`` adds the plugin's call.
    Returns the numbers and the audit (None when the apply failed)."""
    init_fake_process_group()
    self_p, values_p = SWAPPED
    audits: list[AuditReport] = []

    def configure(autop: Any) -> None:
        (node,) = find_nodes(autop, INDEX_PUT)
        opt = autop.sharding_optimizer
        opt.add_node_constraint(node.args[0], self_p, constraint_name="pin_self")
        opt.add_node_constraint(node.args[2], values_p, constraint_name="pin_values")
        if plugin is not None:
            plugin(autop)

    with device_name(), offer_strategy(INDEX_PUT, input_placements=[self_p, RR, values_p], output_placements=self_p):
        report = run_numerics(
            lambda: SeedBlock(SWAPPED_CONFIG),
            lambda: torch.randn(SWAPPED_CONFIG.batch, SWAPPED_CONFIG.seq, SWAPPED_CONFIG.hidden),
            (2, 2),
            configure=configure,
            parameter_memory_constraint=False,
            after_apply=lambda autop: audits.append(audit(autop)),
        )
    return report, audits[0] if audits else None


def failed_call_leaves_problem(spec: Spec) -> tuple[BaseException | None, bool, str]:
    """Make the formulation's own additions (bounds are set first, then rows), plus a row that
    fails last, go through
    ``add_op_constraints`` on the forced case. Returns (the error, problem unchanged?, what changed)."""
    from autoparallel.api import AutoParallel

    init_fake_process_group()
    form = make(spec)
    build = form.build

    def failing_build(opt: Any, sites: Any, namer: Any) -> Any:
        out = build(opt, sites, namer)
        out.constraints[namer("failing")] = "not a constraint"  # type: ignore[assignment]  # added last: fails
        return out

    form.build = failing_build  # type: ignore[method-assign]
    mesh = cpu_mesh((2, 4))
    with torch.device("meta"):
        model = SeedBlock(SMALL)
    error: BaseException | None = None
    with device_name(), forced_348(), AutoParallel(model, model.make_input, mesh) as autop:
        autop.add_input_constraints([(Shard(0), R)])
        pin_producers(autop)
        prob = autop.sharding_optimizer.prob
        before = (list(prob.constraints), {v.name: (v.lowBound, v.upBound) for v in prob.variables()}, str(prob.objective))
        try:
            autop.add_op_constraints(formulation=form)
        except Exception as exc:  # noqa: BLE001 - the check is that it raised and left no trace
            error = exc
        after = (list(prob.constraints), {v.name: (v.lowBound, v.upBound) for v in prob.variables()}, str(prob.objective))
        state = get_state(autop)
    changed = [what for what, b, a in zip(("rows", "bounds", "objective"), before, after) if b != a]
    if state is not None:
        changed.append("plugin state")
    return error, not changed, ", ".join(changed)


class FormulationConformance:
    """Inherit in a ``Test...`` class and set :attr:`formulation`; see the module docstring."""

    formulation: ClassVar[Spec] = None
    _baselines: ClassVar[dict[str, Run]] = {}  # shared by every subclass: no plugin, once per process

    @pytest.fixture(scope="class")
    def runs(self) -> Callable[[str], Run]:
        """``runs(scenario)`` for this formulation, ``runs("base:" + scenario)`` without the plugin."""
        if self.formulation is None:
            raise TypeError(f"{type(self).__name__}: set the class attribute `formulation`")
        cache: dict[str, Run] = {}

        def get(key: str) -> Run:
            if key.startswith("base:"):
                if key not in self._baselines:
                    self._baselines[key] = run_scenario(key[5:], None, lower=key == "base:forced")
                return self._baselines[key]
            if key not in cache:
                cache[key] = run_scenario(key.split("#")[0], self.formulation, lower=key == "forced")
            return cache[key]

        return get

    @property
    def name(self) -> str:
        return make(self.formulation).name

    def test_clean_baseline_keeps_the_objective(self, runs: Callable[[str], Run]) -> None:
        base, run = runs("base:clean"), runs("clean")
        assert base.error is None and base.audit is not None and base.audit.ok, explain(base.audit)
        assert run.error is None, explain(run.error)
        assert run.audit is not None and run.audit.ok, explain(run.audit)
        assert run.summary.objective == pytest.approx(base.summary.objective, rel=1e-9)

    def test_forced_348_is_fixed_and_lowers(self, runs: Callable[[str], Run]) -> None:
        base = runs("base:forced")
        assert [v.node for v in base.audit.by_kind("not_cosharded")] == ["index_put"], explain(base.audit)
        assert base.lowered is not None and "Broadcast failed in ExpandView" in str(base.lowered)
        run = runs("forced")
        assert run.error is None, explain(run.error)
        assert run.audit.ok, explain(run.audit)
        assert run.lowered is None, f"Inductor failed on the plan: {run.lowered}"

    def test_illegal_pin_is_repaired_refused_or_reported(self, runs: Callable[[str], Run]) -> None:
        run = runs("pinned")
        if run.error is not None:
            assert isinstance(run.error, ConstraintsError), explain(run.error)
            if isinstance(run.error, VerificationError):
                return  # the plan kept the illegal strategy and the default verify refused its graph
            assert PIN in str(run.error), f"the error does not name the pin {PIN!r}: {run.error}"
            return
        if run.audit.ok:
            return  # repaired
        gave_way = [n for s in (run.report.gave_way if run.report else ()) for n in s.nodes]
        assert gave_way == ["index_put"], f"the plan breaks the table silently: {run.audit}"
        assert [v.node for v in run.audit.by_kind("not_cosharded")] == ["index_put"], explain(run.audit)

    def test_swapped_case_is_exact(self) -> None:
        report, report_audit = swapped_numerics(self.formulation)
        assert report.ok, explain(report)
        assert report_audit is not None and report_audit.ok, explain(report_audit)

    def test_failed_call_changes_nothing(self) -> None:
        error, unchanged, changed = failed_call_leaves_problem(self.formulation)
        assert error is not None, "add_op_constraints did not raise on a failing addition"
        assert unchanged, f"a failed add_op_constraints changed the problem: {changed}"

    def test_same_inputs_same_plan(self, runs: Callable[[str], Run]) -> None:
        first, second = runs("forced"), runs("forced#again")
        assert first.error is None and second.error is None, explain(first.error, second.error)
        assert first.plan and first.plan == second.plan
        assert first.summary.objective == second.summary.objective

    def test_names_follow_the_convention(self, runs: Callable[[str], Run]) -> None:
        run = runs("forced")
        assert run.error is None, explain(run.error)
        own = {n: present for n, present in run.names.items() if not n.startswith(("size.", "nested."))}
        assert own, f"{self.name} added nothing on the forced #348 case"
        pattern = re.compile(NAME.format(form=re.escape(self.name)))
        assert [n for n in own if not pattern.match(n)] == []
        assert [n for n, present in own.items() if not present] == [], "added names missing from the problem"
