"""Take an ``AutoParallel``'s problem as autoparallel built it, and put it back exactly (the
workbench's snapshot: it reads and restores autoparallel's and PuLP's objects' state wholesale,
so it lives in the seam).

What one formulation row changes, and so what :class:`ProblemSnapshot` restores:

* the PuLP problem: its rows (names, order, objects), the variables PuLP registered
  (``_variables``, ``_variable_ids``), the objective, the status, every variable's bounds and
  values, every row's dual and slack, and the instance's ``solve`` (the solver hook shadows it);
* the optimizer: every instance attribute (the plugin's hooks on ``_set_objective``, ``_solve`` and
  ``_apply_memory_constraint``, the solver hook, ``selected_keys``), its constraint log and the
  names of its node constraints;
* the ``AutoParallel``: the plugin's state, the plan, the parallel graph and the apply record, and
  the fields of ``joint_with_descriptors`` that autoparallel's apply step rewrites in place
  (``update_joint_with_descriptors``: the graph module and the flat arguments become the local
  ones).

:func:`problem_fingerprint` reads all of the problem's part back as one digest, so a test (or
``Workbench(check_restore=True)``) can prove that a row left nothing behind.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["ProblemSnapshot", "problem_fingerprint"]

_MISSING = object()
# Containers autoparallel and the plugin mutate in place: copied on take and on every restore.
_PROB_CONTAINERS = ("_constraints", "_variables", "_variable_ids", "modifiedConstraints", "modifiedVariables")
_OPT_CONTAINERS = ("_constraint_log", "_node_constraint_names")
# What a solve, the plugin or the apply step sets on the AutoParallel.
_AUTOP_FIELDS = ("_apc_state", "sharding_placement", "parallel_gm", "_apc_apply_record")
# joint_with_descriptors fields autoparallel's apply step rewrites (graph_utils.update_joint_with_descriptors).
_JOINT_FIELDS = (
    ("", "graph_module"),
    ("_aot_graph_capture", "graph_module"),
    ("_aot_graph_capture", "updated_flat_args"),
    ("_aot_state", "flat_args"),
    ("_aot_state.fw_metadata", "traced_tangents"),
    ("_aot_state.fw_metadata", "subclass_tangent_meta"),
)


def _copy(value: Any) -> Any:
    return type(value)(value) if isinstance(value, (dict, list)) else value


def _resolve(root: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        root = getattr(root, part, None)
        if root is None:
            return None
    return root


@dataclass(kw_only=True)
class ProblemSnapshot:
    """Everything a row may change, as it was when :meth:`take` ran."""

    autop: Any
    prob_dict: dict[str, Any]
    opt_dict: dict[str, Any]
    autop_fields: dict[str, Any]
    joint_fields: list[tuple[Any, str, Any]]
    variables: list[tuple[Any, Any, Any, Any, Any, Any]]  # (var, lowBound, upBound, varValue, dj, modified)
    rows: list[tuple[Any, Any, Any, Any]]  # (constraint, pi, slack, modified)

    @classmethod
    def take(cls, autop: Any) -> ProblemSnapshot:
        opt = autop.sharding_optimizer
        prob = opt.prob
        prob_dict = {k: _copy(v) if k in _PROB_CONTAINERS else v for k, v in vars(prob).items()}
        opt_dict = {k: _copy(v) if k in _OPT_CONTAINERS else v for k, v in vars(opt).items()}
        joint = getattr(autop, "joint_with_descriptors", None)
        joint_fields = []
        for path, name in _JOINT_FIELDS:
            owner = _resolve(joint, path)
            if owner is not None and hasattr(owner, name):
                joint_fields.append((owner, name, getattr(owner, name)))
        return cls(
            autop=autop,
            prob_dict=prob_dict,
            opt_dict=opt_dict,
            autop_fields={k: vars(autop).get(k, _MISSING) for k in _AUTOP_FIELDS},
            joint_fields=joint_fields,
            variables=[(v, v.lowBound, v.upBound, v.varValue, v.dj, v.modified) for v in prob._variables],
            rows=[(c, c.pi, c.slack, c.modified) for c in prob.constraints.values()],
        )

    def restore(self) -> None:
        """Put everything back; the snapshot stays valid for the next restore."""
        autop = self.autop
        opt = autop.sharding_optimizer
        for obj, saved, containers in ((opt.prob, self.prob_dict, _PROB_CONTAINERS), (opt, self.opt_dict, _OPT_CONTAINERS)):
            current = vars(obj)
            current.clear()
            current.update({k: _copy(v) if k in containers else v for k, v in saved.items()})
        for var, low, up, value, dj, modified in self.variables:
            var.lowBound, var.upBound, var.varValue, var.dj, var.modified = low, up, value, dj, modified
        for constraint, pi, slack, modified in self.rows:
            constraint.pi, constraint.slack, constraint.modified = pi, slack, modified
        for key, value in self.autop_fields.items():
            if value is _MISSING:
                vars(autop).pop(key, None)
            else:
                setattr(autop, key, value)
        for owner, name, value in self.joint_fields:
            setattr(owner, name, value)


def problem_fingerprint(opt: Any) -> str:
    """A digest of the optimizer's problem: every row (name, sense, constant, terms), every
    variable (name, bounds, category, value), the objective, the status and which methods are
    shadowed on the instance. Equal digests: the same problem, down to the row order."""
    prob = opt.prob
    h = hashlib.sha256()

    def put(*parts: Any) -> None:
        h.update(repr(parts).encode())
        h.update(b"\n")

    def terms(expr: Any) -> list[tuple[str, float]]:
        return sorted((v.name, float(c)) for v, c in expr.items())

    for name, c in prob.constraints.items():
        put("row", name, c.sense, float(c.constant), terms(c))
    for v in prob._variables:
        put("var", v.name, v.lowBound, v.upBound, v.cat, v.varValue)
    put("variable_ids", len(prob._variable_ids), len(prob.modifiedConstraints))
    objective = prob.objective
    put("objective", None if objective is None else (float(objective.constant), terms(objective)))
    put("status", prob.status, getattr(prob, "sol_status", None))
    put("prob_shadowed", sorted(k for k in vars(prob) if k in ("solve",)))
    put("opt_attrs", sorted(vars(opt)))
    put("constraint_log", [entry[0] if isinstance(entry, tuple) else entry for entry in opt._constraint_log])
    return h.hexdigest()
