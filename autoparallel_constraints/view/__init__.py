"""What the plugin changed, for a person to see: the plan in autoparallel's JSON export with the
plugin's marks (:func:`export`), and the page drawn from it with autoparallel's own visualizer
(:func:`render_page`, :func:`render_diff`; ``python -m autoparallel_constraints show``).
"""

from ._export import SCHEMA, compare_to, export, load_export, plan_choices, strategy_key
from ._page import render_diff, render_page

__all__ = [
    "SCHEMA", "compare_to", "export", "load_export", "plan_choices", "render_diff", "render_page", "strategy_key",
]
