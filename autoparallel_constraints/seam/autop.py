"""autoparallel's private state the package reads, and the plugin's own state kept on its objects.

Each function reads one private name of ``ShardingOptimizer``, ``AutoParallel``, the apply
interpreter or a module, so the package holds the name in one place; a name that is gone raises
:class:`~autoparallel_constraints.errors.UpstreamChangedError` saying which and who reads it.
The plugin's own state (the call's record, the apply record, the solver hook) is kept on
autoparallel's objects with :func:`put` / :func:`get`, under ``_apc_``-prefixed names: the
workbench's snapshot restores them with the rest of the object's state.
"""

from __future__ import annotations

from typing import Any

from ..errors import UpstreamChangedError

__all__ = [
    "add_node_constraint",
    "build_physical_placements",
    "cached_strategies",
    "cluster_linked_node_idxs",
    "call_apply_placement_common",
    "concrete_to_orig",
    "constraint_log",
    "create_all_options",
    "get",
    "llama3",
    "memory_factors",
    "node_constraint_names",
    "normalize_node",
    "orig_to_concrete",
    "pulp_variable",
    "put",
    "resolve_decision_var",
    "root_to_linked",
    "shard_orders",
    "solution_comm_cost",
    "view_ops",
    "visualizer_page",
]


def _read(obj: Any, name: str, reader: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError as exc:
        raise UpstreamChangedError(
            f"autoparallel's {type(obj).__name__} has no {name} (read by {reader}): autoparallel changed "
            "it; this package is tested with the commit `python -m autoparallel_constraints doctor` names",
            shim="reads", target=f"{type(obj).__module__}:{type(obj).__qualname__}.{name}", stops=reader,
        ) from exc


# ---------------------------------------------------------------------------------------------
# The plugin's own state on autoparallel's objects


def put(obj: Any, key: str, value: Any) -> None:
    """Keep the plugin's ``value`` on ``obj`` (an ``AutoParallel`` or its optimizer) as ``_apc_<key>``."""
    setattr(obj, f"_apc_{key}", value)


def get(obj: Any, key: str, default: Any = None) -> Any:
    """What :func:`put` kept on ``obj`` under ``key``, or ``default``."""
    return getattr(obj, f"_apc_{key}", default)


# ---------------------------------------------------------------------------------------------
# ShardingOptimizer


def concrete_to_orig(opt: Any) -> dict[Any, Any]:
    """The optimizer's map from its concretized graph's nodes to the traced graph's."""
    return _read(opt, "_concrete_to_orig", "the plan's node mapping")


def orig_to_concrete(opt: Any) -> dict[Any, Any]:
    """The traced graph's nodes to the optimizer's concretized copy's (empty: one graph for both)."""
    return getattr(opt, "_orig_to_concrete", None) or {}


def root_to_linked(opt: Any) -> dict[Any, Any] | None:
    """Cluster root decision key -> its linked twins' keys (None when the optimizer has none)."""
    return getattr(opt, "_root_to_linked", None)


def cluster_linked_node_idxs(opt: Any) -> Any:
    """The node indices autoparallel links to a cluster root (None before its decision variables)."""
    return getattr(opt, "_cluster_linked_node_idxs", None)


def normalize_node(opt: Any, node: Any) -> Any:
    """The optimizer's node for ``node`` (a node of ``autop.gm`` or of the optimizer's own graph)."""
    return _read(opt, "_normalize_node", "the strategy helpers")(node)


def pulp_variable(opt: Any, key: tuple[int, int, int, int]) -> Any:
    """The PuLP variable of decision ``(node_idx, argi, out_idx, inp_idx)`` (a cluster twin's root's)."""
    return _read(opt, "_get_pulp_variable", "the table's sites")(key)


def resolve_decision_var(opt: Any, key: tuple[int, int, int, int]) -> Any:
    """The decision record (``.var``, ``.cost``) of ``(node_idx, argi, out_idx, inp_idx)``."""
    return _read(opt, "_resolve_decision_var", "the nested-shard memory budget")(key)


def add_node_constraint(opt: Any, node: Any, strategy_index: int, name: str | None) -> list[str]:
    """Pin ``node`` to one strategy with autoparallel's own node constraint, its rows registered in
    the optimizer's name index as ``add_node_constraint`` registers them."""
    names = _read(opt, "_add_node_constraint", "pin_strategy")(
        node, output_constraint_indices=[strategy_index], constraint_name=name
    )
    registry = node_constraint_names(opt)
    for constraint_name in names:
        registry[constraint_name] = node.name
    return list(names)


def node_constraint_names(opt: Any) -> dict[str, str]:
    """Node-constraint row name -> node name (what ``remove_constraints`` reads)."""
    return _read(opt, "_node_constraint_names", "the constraint report")


def constraint_log(opt: Any) -> list[Any]:
    """The optimizer's constraint log (what ``save`` keeps and ``load`` replays by method name)."""
    return _read(opt, "_constraint_log", "save/load")


def memory_factors(opt: Any) -> tuple[float, float] | None:
    """The (low, high) factors of the parameter-memory constraint, None when it was not added."""
    return getattr(opt, "_memory_constraint", None)


def solution_comm_cost(opt: Any, placement: dict[Any, Any]) -> float:
    """The communication cost autoparallel's own accounting gives ``placement``."""
    concrete = _read(opt, "_to_concrete_solution", "the workbench's comm cost")(placement)
    return float(_read(opt, "_compute_solution_cost", "the workbench's comm cost")(concrete)["comm"])


# ---------------------------------------------------------------------------------------------
# The apply step


def call_apply_placement_common(autop: Any, placement: dict[Any, Any]) -> Any:
    """``AutoParallel._apply_placement_common``: the step ``apply_placement`` starts with, callable
    where the public method is not (compile_on_one_rank graphs cannot be deep-copied)."""
    return _read(autop, "_apply_placement_common", "the numerics harness")(placement)


def shard_orders(interp: Any, node: Any, curr_spec: Any, tgt_spec: Any) -> tuple[Any, Any]:
    """The apply interpreter's (source, target) shard orders for one edge."""
    return _read(interp, "_compute_origin_and_target_shard_order", "materialize='all'")(node, curr_spec, tgt_spec)


def build_physical_placements(placement: Any, order: Any) -> Any:
    """``apply_sharding._build_physical_placements``: the physical specs of parameters laid out in
    autoparallel's optimized shard order."""
    from autoparallel.apply_sharding import _build_physical_placements

    return _build_physical_placements(placement, order)


def view_ops() -> frozenset[Any]:
    """The view ops autoparallel's apply wraps with ``DTensor.from_local`` (``apply_sharding._VIEW_OPS``)."""
    from autoparallel import apply_sharding

    return frozenset(_read(apply_sharding, "_VIEW_OPS", "the size couplings"))


# ---------------------------------------------------------------------------------------------
# Strategies and models


def create_all_options(mesh: Any, shape: Any, tensor: Any) -> Any:
    """``propagation_rules._create_all_options``: every placement of a tensor (its placeholder's strategies)."""
    from autoparallel.shardings.propagation_rules import _create_all_options

    return _create_all_options(mesh, shape, tensor=tensor)


def cached_strategies(op: Any) -> list[Any]:
    """The entries of autoparallel's placement-option cache for ``op``, whatever else its key holds
    (the pin keys it by op first; PR #511 puts the mesh before the op)."""
    from autoparallel.shardings import placement_options

    cache = placement_options._placement_options_cache
    return [entry for key, entry in cache.items() if isinstance(key, tuple) and op in key[:2]]


def llama3() -> tuple[Any, Any]:
    """autoparallel's llama3 test model: ``(Transformer, TransformerModelArgs)``."""
    from autoparallel._testing.models.llama3 import Transformer, TransformerModelArgs

    return Transformer, TransformerModelArgs


def visualizer_page(data: dict[str, Any], *, head: str = "", top: str = "", tail: str = "") -> str:
    """autoparallel's visualizer page for ``data`` (its export's keys), made offline (the Perfetto
    tab, an iframe of ui.perfetto.dev, and every link to the network dropped), with ``head`` put in
    its ``<head>``, ``top`` at the top of its container and ``tail`` at the end of its body. The
    anchors are autoparallel's markup: one that is gone raises (the page would lose the plugin's
    panel silently otherwise)."""
    import re

    from autoparallel.visualizer.build_display_from_json import generate_visualization_html

    page = generate_visualization_html(data)
    page = re.sub(r'<div class="tab" data-tab-id="perfetto"[^>]*>Perfetto</div>', "", page)
    page = re.sub(r'<a [^>]*href="https?://[^"]*"[^>]*>.*?</a>', "", page, flags=re.S)
    page = re.sub(r"<iframe[^>]*></iframe>", '<div class="apc-none">Perfetto needs the network: left out of this '
                  "offline page.</div>", page, flags=re.S)
    for anchor, text in (("</head>", head), ('<div class="container">', top)):
        if text and anchor not in page:
            raise UpstreamChangedError(
                f"autoparallel's visualizer page has no {anchor!r} (where the plan page puts its panel): its markup "
                "changed; this package is tested with the commit `python -m autoparallel_constraints doctor` names",
                shim="reads", target="autoparallel.visualizer.build_display_from_json:generate_visualization_html",
                stops="the plan page's panel",
            )
    page = page.replace("</head>", head + "</head>", 1)
    page = page.replace('<div class="container">', '<div class="container">\n' + top, 1)
    return page.replace("</body>", tail + "</body>", 1) if "</body>" in page else page + tail
