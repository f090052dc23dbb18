"""The shared suite: every formulation (strict, explicit, soft, lazy) against the same cases on a
small copy of the seed block (10 heads x 16, batch 8, seq 16) on a 2x4 mesh.

Guards, for each formulation: its docstring states the math; names follow
``<formulation>.<family>_<idx>``; when autoparallel's plan already satisfies the table the objective
is the baseline's; the forced #348 plan (pre-fix index_put strategy offered, producers pinned), which
the baseline picks and the audit flags, is fixed (audit clean) with the formulation's own answer
(forbidden, repaired, penalized or cut); pinning the illegal strategy itself is refused (strict,
lazy), repaired (explicit) or reported as a rule that gave way (soft); the constraint report is
logged at INFO and emitted as a TORCH_TRACE artifact."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

import autoparallel_constraints as apc
from autoparallel_constraints.formulations import FORMULATIONS, make_formulation
from autoparallel_constraints.formulations.soft import DEFAULT_PENALTY
from autoparallel_constraints.lab import run_seed
from autoparallel_constraints.plan._report import ARTIFACT_NAME, constraint_report
from autoparallel_constraints.testing import cpu_mesh, explain
from autoparallel_constraints.testing.conformance import SMALL, forced_348, pin_illegal, pin_producers

FORMS = ("strict", "explicit", "soft", "lazy")
NAME = re.compile(r"^(?P<form>[a-z]+)\.(?P<family>[a-z_]+)_(?P<idx>\d{3})$")


class Run:
    """One solve+apply of a scenario: summary, audit, constraint report, all plugin names, or the error."""

    def __init__(self, scenario: str, formulation: str | None, verify: str = "raise", forbid: str | None = None) -> None:
        self.error: BaseException | None = None
        self.summary = self.audit = self.report = None
        self.names: list[str] = []
        self.rows: list[str] = []
        self.bounds: list[str] = []
        mesh = cpu_mesh((2, 4))

        def grab(autop: Any) -> None:
            self.report = constraint_report(autop)
            state = getattr(autop, "_apc_state", None)
            if state is not None:
                self.names = [*state.additions.constraints, *state.additions.variables, *state.additions.bounds]
                self.rows, self.bounds = list(state.additions.constraints), list(state.additions.bounds)

        configure = {"clean": None, "forced": pin_producers, "pinned": pin_illegal}[scenario]
        forbid_option = {"forbid": forbid} if forbid is not None else {}
        options = {"plugin_options": {"verify": verify, **forbid_option}} if formulation is not None else {}
        try:
            if scenario == "clean":
                self.summary, self.audit = run_seed(formulation, mesh, config=SMALL, after_apply=grab, **options)
            else:
                with forced_348():
                    self.summary, self.audit = run_seed(
                        formulation, mesh, config=SMALL, configure=configure, after_apply=grab, **options
                    )
        except apc.ConstraintsError as exc:
            self.error = exc


@pytest.fixture(scope="module")
def runs(fake_process_group: None, cpu_device_name: str):
    """Each (scenario, formulation) solved once per module, on demand."""
    cache: dict[tuple[str, str | None, str, str | None], Run] = {}

    def get(scenario: str, formulation: str | None, verify: str = "raise", forbid: str | None = None) -> Run:
        key = (scenario, formulation, verify, forbid)
        if key not in cache:
            cache[key] = Run(scenario, formulation, verify, forbid)
        return cache[key]

    return get


def test_every_formulation_is_registered_and_states_its_math():
    """The four formulations are registered by name; each class docstring gives sets, variables,
    objective and numbered constraint families with '→ Implemented in'."""
    assert set(FORMS) <= set(FORMULATIONS)
    for name in FORMS:
        doc = FORMULATIONS[name].__doc__ or ""
        for heading in ("Sets:", "Variables:", "Objective", "Constraints:", "→ Implemented in"):
            assert heading in doc, (name, heading)
        assert re.search(r"\([A-Z]\d\)", doc), f"{name}: constraint families are not numbered"


@pytest.mark.parametrize(
    ("formulation", "options", "match"),
    [
        ("soft", {"penalty": 0}, "penalty must be a positive"),
        ("soft", {"penalty": float("inf")}, "penalty must be a positive"),
        ("lazy", {"max_rounds": 0}, "max_rounds must be a positive"),
        ("lazy", {"penalty": 3}, "has no option"),
        ("strict", {"forbid": "rows"}, "forbid must be one of 'bounds', 'row'"),
        ("explicit", {"forbid": None}, "forbid must be one of"),
        ("lazy", {"forbid": 0}, "forbid must be one of"),
    ],
)
def test_bad_formulation_options_raise_package_errors(formulation, options, match):
    """Formulation options are validated with a message naming the option and what it must be."""
    with pytest.raises(apc.InvalidOptionError, match=match):
        make_formulation(formulation, **options)


@pytest.mark.parametrize("formulation", FORMS)
def test_clean_baseline_keeps_objective_and_audits_clean(runs, formulation):
    """autoparallel's own plan satisfies the table here: every formulation returns the baseline's
    objective, a clean audit, no redistribution, no rule that gave way, and one solve."""
    base, run = runs("clean", None), runs("clean", formulation)
    assert base.audit.ok, explain(base.audit)
    assert run.error is None, explain(run.error)
    assert run.audit.ok, explain(run.audit)
    assert run.summary.objective == pytest.approx(base.summary.objective, rel=1e-9)
    assert run.report is not None and run.report.formulation == formulation
    assert not run.report.sites and not run.audit.redistributes
    assert run.summary.rounds == 1


@pytest.mark.parametrize("formulation", FORMS)
def test_added_names_follow_the_convention(runs, formulation):
    """Every constraint and variable a formulation added (lazy cuts included) is named
    <formulation>.<family>_<idx> (or size.<kind>_<idx> and nested.even_<idx>: the size rows every
    formulation shares) and is in the optimizer's problem."""
    from autoparallel_constraints.plan._sizes import KINDS

    run = runs("forced", formulation)
    assert run.error is None, explain(run.error)
    assert run.names, f"{formulation} added nothing on the forced case"
    for name in run.names:
        m = NAME.match(name)
        assert m and (m["form"] == formulation or (m["form"] == "size" and m["family"] in KINDS)
                  or (m["form"] == "nested" and m["family"] == "even")), name
    families = {NAME.match(n)["family"] for n in run.names if not n.startswith(("size.", "nested."))}
    expected = {"strict": {"forbid"}, "explicit": {"link", "redistribute"}, "soft": {"elastic", "slack"}, "lazy": {"cut"}}
    assert expected[formulation] <= families, families


@pytest.mark.parametrize("formulation", FORMS)
def test_forced_348_plan_is_fixed(runs, formulation):
    """Pre-fix strategy offered, producers pinned: the baseline runs the illegal index_put strategy
    and the audit flags it; every formulation ends with a clean audit, and strict, soft and lazy
    reach the same optimum (the constrained one), above the illegal baseline's."""
    base = runs("forced", None)
    assert [v.node for v in base.audit.by_kind("not_cosharded")] == ["index_put"], explain(base.audit)
    run = runs("forced", formulation)
    assert run.error is None, explain(run.error)
    assert run.audit.ok, explain(run.audit)
    assert run.summary.objective >= base.summary.objective - 1e-6
    strict = runs("forced", "strict")
    if formulation in ("soft", "lazy"):
        assert run.summary.objective == pytest.approx(strict.summary.objective, rel=1e-9)
    if formulation == "lazy":  # round 0 is the baseline problem, which breaks index_put: one cut
        rounds = run.report.rounds
        assert len(rounds) == 2 and rounds[0].violated == ("index_put",) and rounds[0].cuts == ("lazy.cut_000",)
        assert rounds[0].objective == pytest.approx(base.summary.objective, rel=1e-9)
        assert rounds[1].violated == () and run.summary.rounds == 2


@pytest.mark.parametrize("formulation", ["strict", "lazy"])
def test_bounds_and_row_forbid_the_same(runs, formulation):
    """The default forbid (upper bounds 0, no row) and ``forbid="row"`` (one row per site) keep
    the same strategies out: on the forced #348 case both fix the plan at the same objective with a
    clean audit; the default adds no table row, the row mode no bound."""
    bounds, row = runs("forced", formulation), runs("forced", formulation, forbid="row")
    for run in (bounds, row):
        assert run.error is None, explain(run.error)
        assert run.audit.ok, explain(run.audit)
    assert row.summary.objective == pytest.approx(bounds.summary.objective, rel=1e-9)
    def table(names: list[str]) -> list[str]:
        return [n for n in names if not n.startswith(("size.", "nested."))]

    assert table(bounds.bounds) and not table(bounds.rows)
    assert table(row.rows) and not table(row.bounds)


@pytest.mark.parametrize("formulation", FORMS)
def test_pinned_illegal_strategy(runs, formulation):
    """index_put pinned to the illegal strategy: strict and lazy refuse with the rule and the pin
    named; explicit repairs it with a named redistribution (audit clean); soft keeps the plan: the
    verifier (verify="raise", the default) refuses the graph it gives, and with verify="warn" its
    report lists index_put's rule as given way at the penalty, which the audit confirms."""
    run = runs("pinned", formulation)
    if formulation in ("strict", "lazy"):
        assert isinstance(run.error, apc.StrictConflictError), explain(run.error)
        text = str(run.error)
        assert f"{formulation} formulation conflicts with user pins" in text
        assert "pin_illegal_000" in text and "aten.index_put.default [index_put]" in text
        return
    if formulation == "soft":
        # soft lets index_put's rule give way at the penalty; the default verify="raise" then
        # refuses the graph that plan gives (index_put's inputs are not co-sharded)
        assert isinstance(run.error, apc.VerificationError), explain(run.error)
        assert run.error.report.violations
        run = runs("pinned", formulation, verify="warn")  # the graph handed back, to report on
    assert run.error is None, explain(run.error)
    if formulation == "explicit":
        assert run.audit.ok, explain(run.audit)
        (site,) = run.report.sites
        assert site.outcome == "repaired" and site.decision == "explicit.redistribute_000"
        return
    (site,) = run.report.gave_way
    assert site.nodes == ("index_put",) and site.rule == "aten.index_put.default"
    assert site.cost == pytest.approx(DEFAULT_PENALTY) and site.decision.startswith("soft.slack_")
    assert "different logical dims" in site.reason and "(R, S(1))" in site.inputs
    assert run.report.plugin_objective == pytest.approx(DEFAULT_PENALTY)
    assert [v.node for v in run.audit.by_kind("not_cosharded")] == ["index_put"]


def test_soft_penalty_is_a_price_not_a_wall(make_mesh):
    """With a penalty below the saving, soft lets the rule give way on the forced case (the
    baseline's illegal plan, objective = baseline + penalty); the report says where and at what cost."""
    mesh = make_mesh((2, 4))
    with forced_348():
        base, _ = run_seed(None, mesh, config=SMALL, configure=pin_producers, apply=False)
    with forced_348():
        summary, _ = run_seed(
            "soft", mesh, config=SMALL, configure=pin_producers, apply=False, plugin_options={"penalty": 1e-3}
        )
    assert summary.gave_way == 1
    assert summary.objective == pytest.approx(base.objective + 1e-3, rel=1e-9)


def test_report_is_logged_and_emitted_as_trace_artifact(make_mesh, caplog):
    """After the solve the constraint report goes to the INFO log and, as JSON, to TORCH_TRACE as
    the 'autoparallel_constraints_report' artifact (what tlparse shows beside autoparallel's own)."""
    from torch._logging._internal import trace_log

    captured: list[dict] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            meta = getattr(record, "metadata", {})
            if meta.get("artifact", {}).get("name") == ARTIFACT_NAME:
                captured.append(json.loads(record.payload))

    handler = Capture()
    trace_log.addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="autoparallel_constraints.plan._report"):
            run_seed("lazy", make_mesh((2, 4)), config=SMALL, apply=False)
    finally:
        trace_log.removeHandler(handler)
    (payload,) = captured
    assert payload["formulation"] == "lazy" and payload["solver"] == "cbc"
    assert payload["solves"][0]["status"] == "Optimal" and payload["rounds"][0]["violated"] == []
    assert any("constraint report (lazy, cbc)" in r.getMessage() for r in caplog.records)
