"""One build, many formulations: the problem autoparallel built, solved once per formulation ×
solver and restored exactly between rows (:class:`Workbench`, :class:`ProblemSnapshot`).

Stage 6 of the pipeline (``docs/architecture.md``): it drives the plan, the apply step and the
audit, and sits below the harness and the lab (``compare --one-build`` runs on it).
"""

from ..seam._snapshot import ProblemSnapshot, problem_fingerprint
from ._bench import BASELINE, Workbench, WorkbenchRow, WorkbenchRows, comm_cost, plan_choices

__all__ = [
    "BASELINE",
    "ProblemSnapshot",
    "Workbench",
    "WorkbenchRow",
    "WorkbenchRows",
    "comm_cost",
    "plan_choices",
    "problem_fingerprint",
]
