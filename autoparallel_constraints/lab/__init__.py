"""The lab: tools around the library, each a ``python -m autoparallel_constraints`` command.

``compare`` (formulations x solvers: ``_compare`` on the runs of ``_runs`` and the models of
``_models``), ``demo``, ``zoo``, ``coverage`` and ``crosscheck``, ``groundtruth`` (every table row
against numerics on simulated ranks) and ``mutate`` (the verifier against mutated graphs);
``_stats`` holds the medians and spreads every printed ratio goes through. The package exports
the run and compare API (``run_seed``, ``run_model``, ``compare``, ``lab_model``, ...) that the
tests, benchmarks and examples use.

Stage 7: it uses the library and the harness; only the public test kit and the command line sit
above it.
"""

from ._compare import (
    COMPARE_COLUMNS,
    CompareResult,
    RowRuns,
    add_compare_subcommand,
    compare,
    compare_figure,
    compare_rows,
    draw_png,
    ratio_lines,
    render_compare,
    result_payload,
    write_json,
)
from ._models import LAB_MODELS, LabModel, lab_model
from ._runs import RunSummary, render_table, run_model, run_seed, seed_mp_policy

__all__ = [
    "COMPARE_COLUMNS",
    "LAB_MODELS",
    "CompareResult",
    "LabModel",
    "RowRuns",
    "RunSummary",
    "add_compare_subcommand",
    "compare",
    "compare_figure",
    "compare_rows",
    "draw_png",
    "lab_model",
    "ratio_lines",
    "render_compare",
    "render_table",
    "result_payload",
    "run_model",
    "run_seed",
    "seed_mp_policy",
    "write_json",
]
