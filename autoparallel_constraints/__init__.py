"""autoparallel_constraints: co-sharding rules for meta-pytorch/autoparallel's ILP, made visible.

Importing the package adds ``AutoParallel.add_op_constraints`` and attaches the seam's import
shims (:mod:`autoparallel_constraints.seam`: the apply step's recording, so every applied graph can
be audited, and the ones that leave autoparallel's results as they are or turn its crashes into
fixes or clear errors)::

    import autoparallel_constraints as apc

    with AutoParallel(model, input_fn, mesh) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        added = autop.add_op_constraints()          # whole table, formulation "explicit"
        placement = autop.optimize_placement()
        parallel_model = autop.apply_placement(placement)
        report = apc.audit(autop)
        assert report.ok, report
"""

from __future__ import annotations

from .core import _doctor
from .core._compat import require_autoparallel
from .errors import AutoParallelMissingError as _Missing

try:
    require_autoparallel()
except _Missing as _exc:  # the same report `doctor` prints, so one error says everything to fix
    _exc.args = (f"{_exc}\n\n{_doctor.format_checks(_doctor.checks())}",)
    raise
_doctor.warn_if_untested()

from .apply._audit import ArgAudit, AuditReport, Violation, audit  # noqa: E402
from .apply._materialize import apc_redistribute  # noqa: E402
from .errors import (  # noqa: E402
    AuditError,
    AutoParallelMissingError,
    BuildTooLargeError,
    ConstraintsError,
    FormulationError,
    InfeasibleConstraintsError,
    InvalidOptionError,
    InvalidRowError,
    PluginStateError,
    SolverTimeLimitError,
    SolverUnavailableError,
    StaleStrategiesError,
    StrictConflictError,
    UnknownOpError,
    UntestedVersionWarning,
    UpstreamChangedError,
    UpstreamChangedWarning,
    VerificationError,
    VerificationWarning,
)
from .formulations import FORMULATIONS, Formulation, register_formulation  # noqa: E402
from .plan._enable import disable, enable, enable_from_env, enabled, enabled_options  # noqa: E402
from .plan._plugin import NoMatchingNodesWarning, add_op_constraints  # noqa: E402
from .plan._report import ConstraintReport, constraint_report  # noqa: E402
from .plan._solvers import SolverTimeLimitWarning, use_solver  # noqa: E402
from .plan._state import AddedConstraints, PlannedRedistribute  # noqa: E402
from .seam import install as _install_shims  # noqa: E402
from .seam._build_size import set_build_budget  # noqa: E402
from .seam._memos import use_build_memo  # noqa: E402
from .seam._view_skip import use_view_skip  # noqa: E402
from .table import Alignment, ArgSpec, Flag, Linearity, OpRule, Role, Table, default_table  # noqa: E402
from .verifier._contract import verify  # noqa: E402
from .verifier._report import GraphViolation, VerifyReport  # noqa: E402
from .view import export  # noqa: E402
from .workbench import Workbench, WorkbenchRow, WorkbenchRows  # noqa: E402

__all__ = [
    "FORMULATIONS",
    "AddedConstraints",
    "Alignment",
    "ArgAudit",
    "ArgSpec",
    "AuditError",
    "AuditReport",
    "AutoParallelMissingError",
    "BuildTooLargeError",
    "ConstraintReport",
    "ConstraintsError",
    "Flag",
    "Formulation",
    "FormulationError",
    "GraphViolation",
    "InfeasibleConstraintsError",
    "InvalidOptionError",
    "InvalidRowError",
    "Linearity",
    "NoMatchingNodesWarning",
    "OpRule",
    "PlannedRedistribute",
    "PluginStateError",
    "SolverTimeLimitError",
    "SolverTimeLimitWarning",
    "SolverUnavailableError",
    "StaleStrategiesError",
    "Role",
    "StrictConflictError",
    "Table",
    "UnknownOpError",
    "UntestedVersionWarning",
    "UpstreamChangedError",
    "UpstreamChangedWarning",
    "VerificationError",
    "VerificationWarning",
    "VerifyReport",
    "Violation",
    "Workbench",
    "WorkbenchRow",
    "WorkbenchRows",
    "add_op_constraints",
    "apc_redistribute",
    "audit",
    "constraint_report",
    "default_table",
    "disable",
    "enable",
    "enable_from_env",
    "enabled",
    "enabled_options",
    "export",
    "register_formulation",
    "register_rule",
    "set_build_budget",
    "use_build_memo",
    "use_view_skip",
    "use_solver",
    "verify",
]

__version__ = "0.1.0"


def register_rule(row: OpRule, *, override: bool = False) -> OpRule:
    """Add a row for your own op to the process-wide table (validated; duplicates need override)."""
    return default_table().register(row, override=override)


_install_shims()
