"""The core every stage may use: placement formatting and local shapes, the check that
autoparallel is importable, the version report (``python -m autoparallel_constraints doctor``),
and the statistics every measured figure goes through (``_stats``).

Stage 1 of the pipeline (``docs/architecture.md``): it imports nothing else of the package but
:mod:`autoparallel_constraints.errors` and the seam to upstream (:mod:`autoparallel_constraints.seam`).
"""
