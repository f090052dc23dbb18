"""The plan: ``autop.add_op_constraints(...)`` and everything between the table and the solution.

``_plugin`` finds the table's sites in autoparallel's ILP, asks the formulation for its additions,
adds the size couplings (``_sizes``), keeps what it added in the optimizer's state (``_state``),
solves with the chosen solver (``_solvers``), explains an infeasible problem (``_explain``),
summarizes the solve (``_report``) and refuses strategies cached for another mesh
(``_cache_guard``). Stage 3: it imports the core, the table and the formulations only.
"""
