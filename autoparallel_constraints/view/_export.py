"""``apc.export(autop)``: the plan in autoparallel's own JSON format, annotated with what the
plugin did.

The dict is autoparallel's ``ShardingOptimizer.get_json()`` (``mesh``, ``nodes``, ``summary``:
``autoparallel/export_json.py``), unchanged, plus

* a top-level ``"apc"`` object: the schema name, the run's label, the plugin's call (formulation,
  materialize, solver, rows in force, families added), the audit's and the verifier's verdicts,
  every redistribution the plugin put in the graph with its cost, every flag, and the nodes whose
  strategy differs from autoparallel alone's (when ``alone`` is given);
* on every node of ``nodes`` an ``"apc"`` object: the chosen strategy, autoparallel alone's
  (when given) and whether they differ, the table row that matched, the indices of the
  redistributions in front of it and of the flags on it, and the verifier's unknowns there.

The full schema, field by field, is in ``docs/plan_page.md``; :data:`SCHEMA` names its version.
A run's file is read back by ``python -m autoparallel_constraints show RUN.json``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..apply._audit import AuditReport, audit
from ..apply._materialize import MATERIALIZED_PREFIX, NODE_TAG
from ..core._placements import fmt_spec
from ..errors import InvalidOptionError, PluginStateError
from ..plan._state import PlannedRedistribute, get_state
from ..seam import autop as upstream
from ..table import bind, default_table

logger = logging.getLogger(__name__)

__all__ = ["SCHEMA", "compare_to", "export", "load_export", "plan_choices", "strategy_key"]

SCHEMA = "autoparallel_constraints.export/1"
"""The export's schema name and version, in ``data["apc"]["schema"]`` (docs/plan_page.md)."""


def strategy_key(spec: Any) -> str:
    """One strategy as text: its output and input placements, ``out <- in, in``."""
    outs = spec.output_specs if isinstance(spec.output_specs, (tuple, list)) else (spec.output_specs,)
    ins = spec.input_specs or ()
    return f"{', '.join(fmt_spec(s) for s in outs)} <- {', '.join(fmt_spec(s) for s in ins)}"


def plan_choices(placement: Mapping[Any, Any]) -> dict[str, str]:
    """``{node name: chosen strategy}`` for every node of a plan (``optimize_placement``'s dict)."""
    return {node.name: strategy_key(spec) for node, spec in placement.items()}


def _alone_choices(alone: Any) -> tuple[dict[str, str], str]:
    """The strategies of autoparallel alone, from a WorkbenchRow, an export dict or a mapping."""
    if alone is None:
        return {}, ""
    choices = getattr(alone, "choices", None)
    if isinstance(choices, Mapping):  # a WorkbenchRow
        name = getattr(alone, "formulation", None)
        return dict(choices), "autoparallel alone" if name == "none" else str(getattr(alone, "label", "alone"))
    if isinstance(alone, Mapping) and "nodes" in alone:  # another run's export
        out = {n["name"]: n["apc"]["strategy"] for n in alone["nodes"] if n.get("apc", {}).get("strategy")}
        return out, str(alone.get("apc", {}).get("label", "alone"))
    if isinstance(alone, Mapping):
        return {str(k): str(v) for k, v in alone.items()}, "alone"
    raise InvalidOptionError(
        f"export(alone=...) takes a WorkbenchRow (e.g. Workbench(autop).run('none')), another run's "
        f"export dict or a {{node name: strategy}} mapping, got {type(alone).__name__}"
    )


def _redistribute(r: PlannedRedistribute, kind: str) -> dict[str, Any]:
    return {
        "kind": kind,  # "repair": the formulation's priced redistribution; "materialized": a planned edge made a node
        "node": r.node,
        "op": r.op,
        "arg": r.arg,
        "arg_index": r.spec_index,
        "source": fmt_spec(r.source),
        "target": fmt_spec(r.target),
        "cost": float(r.cost),
        "name": r.constraint,
        "parallel_node": r.parallel_node,
    }


def _tags(parallel_gm: torch.fx.GraphModule | None) -> dict[str, str]:
    """parallel-graph node name -> the joint-graph node it was traced from."""
    if parallel_gm is None:
        return {}
    out = {}
    for n in parallel_gm.graph.nodes:
        tag = (n.meta.get("custom") or {}).get(NODE_TAG)
        if tag is not None:
            out[n.name] = str(tag)
    return out


_PAREN_NODE = re.compile(r"\((\w+)\)")


def _flags(report: AuditReport | None, tags: dict[str, str]) -> list[dict[str, Any]]:
    """One dict per finding: the audit's violations, the verifier's violations and unproven outputs."""
    if report is None:
        return []
    out: list[dict[str, Any]] = []
    for v in report.violations:
        out.append({
            "source": "audit",
            "kind": v.kind,
            "node": v.node,
            "op": v.op,
            "summary": v.reasons[0] if v.reasons else v.kind,
            "evidence": [*v.reasons, *(str(a) for a in v.args)],
            "rule": v.rule,
        })
    proof = report.verification
    if proof is None:
        return out
    for g in proof.violations:
        out.append({
            "source": "verify",
            "kind": g.kind,
            "node": tags.get(g.node, g.node),
            "parallel_node": g.node,
            "op": g.op,
            "summary": g.reason,
            "evidence": [str(g)],
        })
    for text in proof.unproven_outputs:
        m = _PAREN_NODE.search(text)
        parallel = m.group(1) if m else None
        out.append({
            "source": "verify",
            "kind": "unproven_output",
            "node": tags.get(parallel, parallel) if parallel else None,
            "parallel_node": parallel,
            "op": "output",
            "summary": text.split(": ", 1)[-1],
            "evidence": [text],
        })
    return out


def _plugin(autop: Any) -> dict[str, Any] | None:
    state = get_state(autop)
    if state is None:
        return None
    added = state.added
    return {
        "formulation": state.formulation.name,
        "materialize": state.materialize,
        "solver": state.solver.config.name,
        "rows": list(added.rows),
        "table_nodes": len(added.nodes),
        "constrained_nodes": len(added.constrained_nodes),
        "constraints": dict(added.constraints),
        "variables": dict(added.variables),
        "bounds": dict(added.bounds),
    }


def _rules(autop: Any, placement: Mapping[Any, Any]) -> dict[str, dict[str, str]]:
    """node name -> the table row whose arguments bound to it (as the audit binds them)."""
    state = get_state(autop)
    table = state.table if state is not None else default_table()
    out = {}
    for node in autop.gm.graph.nodes:
        if node.op != "call_function" or node not in placement:
            continue
        rule = table.get(node.target)
        if rule is None or bind(rule, node, is_input=lambda n: n in placement) is None:
            continue
        out[node.name] = {"name": rule.name, "rule": rule.describe()}
    return out


def export(
    autop: Any, *, alone: Any = None, label: str | None = None, report: AuditReport | None = None
) -> dict[str, Any]:
    """The plan of ``autop`` in autoparallel's JSON export, with the plugin's marks (module docstring).

    Call it after ``optimize_placement()``; after ``apply_placement`` (or autoparallel's common
    apply step) the audit's and the verifier's findings and the inserted redistributions are in it
    too (``report``: an audit already run, else one is run here). ``alone``: autoparallel alone's
    plan to compare against — a :class:`~autoparallel_constraints.WorkbenchRow` of formulation
    ``"none"``, another run's export, or ``{node name: strategy}``. ``label`` names the run on the
    page (default: the formulation, or ``"autoparallel alone"``). The dict is JSON as it is:
    ``json.dump(apc.export(autop), f)``.
    """
    opt = getattr(autop, "sharding_optimizer", None)
    if opt is None or not getattr(opt, "selected_keys", None):
        raise PluginStateError(
            "export() needs a solved plan: call it after autop.optimize_placement() (and after "
            "apply_placement for the audit, the verifier and the inserted redistributions)"
        )
    data = opt.get_json()
    record = upstream.get(autop, "apply_record")
    placement = record.placement if record is not None and record.placement else autop.sharding_placement
    if placement is None:
        raise PluginStateError("export() needs the plan: call it after autop.optimize_placement()")
    chosen = plan_choices(placement)
    _alone_choices(alone)  # a wrong kind of `alone` fails before any work
    plugin = _plugin(autop)
    if report is None and record is not None:
        report = audit(autop)
    tags = _tags(record.parallel_gm if record is not None else None)
    redistributes = []
    if report is not None:
        redistributes = [_redistribute(r, "repair") for r in report.redistributes]
        redistributes += [_redistribute(r, "materialized") for r in report.materialized]
    elif record is not None:
        redistributes = [
            _redistribute(r, "materialized" if r.constraint.startswith(MATERIALIZED_PREFIX) else "repair")
            for r in record.redistributes
        ]
    flags = _flags(report, tags)
    rules = _rules(autop, placement)
    unknown: dict[str, list[str]] = {}
    proof = report.verification if report is not None else None
    if proof is not None:
        for pnode, why in proof.unknown_reasons.items():
            unknown.setdefault(tags.get(pnode, pnode), []).append(f"{pnode}: {why}")
    for entry in data["nodes"]:
        name = entry["name"]
        if name not in chosen:
            continue
        entry["apc"] = {
            "strategy": chosen[name],
            "alone": None,
            "changed": False,
            "rule": rules.get(name),
            "redistributes": [i for i, r in enumerate(redistributes) if r["node"] == name],
            "flags": [i for i, f in enumerate(flags) if f["node"] == name],
            "unknown": unknown.get(name, []),
        }
    data["apc"] = {
        "schema": SCHEMA,
        "label": label or (plugin["formulation"] if plugin else "autoparallel alone"),
        "plugin": plugin,
        "alone": None,
        "objective": _objective(opt),
        "applied": record is not None,
        "audit": None if report is None else {
            "verdict": report.verdict, "ok": report.ok, "table_nodes": report.table_nodes, "edges": report.edges,
        },
        "verify": None if proof is None else {
            "verdict": proof.verdict, "ok": proof.ok, "proven": proof.n_proven, "unknown": proof.n_unknown,
            "outputs_checked": proof.outputs_checked, "unproven_outputs": list(proof.unproven_outputs),
        },
        "redistributes": redistributes,
        "redistribute_cost": sum(r["cost"] for r in redistributes),
        "flags": flags,
        "changed": [],
    }
    if alone is not None:
        compare_to(data, alone)
    logger.info("export: %d nodes, %d redistributes, %d flags, %d changed", len(data["nodes"]),
                len(redistributes), len(flags), len(data["apc"]["changed"]))
    return data


def compare_to(data: dict[str, Any], alone: Any) -> dict[str, Any]:
    """Mark in ``data`` (an :func:`export`) each node whose strategy differs from ``alone``'s: a
    WorkbenchRow, another run's export or ``{node name: strategy}``. Returns ``data``, changed in place."""
    choices, label = _alone_choices(alone)
    changed = []
    for entry in data["nodes"]:
        mark = entry.get("apc")
        if mark is None:
            continue
        theirs = choices.get(entry["name"])
        mark["alone"] = theirs
        mark["changed"] = theirs is not None and theirs != mark["strategy"]
        if mark["changed"]:
            changed.append(entry["name"])
    data["apc"]["alone"] = label
    data["apc"]["changed"] = changed
    return data


def _objective(opt: Any) -> float | None:
    try:
        value = opt.prob.objective.value()
    except Exception:  # noqa: BLE001 - no solved objective: recorded as null
        return None
    return None if value is None else float(value)


def load_export(path: str | Path) -> dict[str, Any]:
    """Read a run written with ``json.dump(apc.export(autop), f)``; checks it is one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidOptionError(f"cannot read the run {path}: {exc}") from exc
    if not isinstance(data, dict) or not {"mesh", "nodes", "summary"} <= set(data):
        raise InvalidOptionError(
            f"{path} is not an autoparallel export: it needs 'mesh', 'nodes' and 'summary' "
            "(write it with json.dump(apc.export(autop), f))"
        )
    schema = (data.get("apc") or {}).get("schema")
    if schema is not None and schema != SCHEMA:
        raise InvalidOptionError(f"{path} has schema {schema!r}; this version reads {SCHEMA!r}")
    return data
