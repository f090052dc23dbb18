"""The apply step and the audit.

``_materialize`` wraps autoparallel's apply step: every planned redistribution becomes a real,
named node of the parallel graph and every edge is recorded. ``_audit`` proves the applied graph
matches the plan. Stage 5: it imports every stage below it, the verifier included.
"""
