"""The seam's table: every change this package makes to autoparallel, torch or PuLP, one row each,
in install order (which is also the order of their arounds on a shared target: the first row
outermost). ``docs/seam.md`` is generated from it (``python -m autoparallel_constraints doctor --seam-md``).
"""

from __future__ import annotations

from . import (
    _apply,
    _build_size,
    _caches,
    _entry,
    _harness,
    _local_map_hop,
    _memos,
    _notes,
    _optimizer,
    _view_skip,
)
from ._model import Effect, Shim, Target, TargetKind, When
from ._patching import unwrap, wrap

__all__ = ["SHIMS"]

ENTER = Target("autoparallel.api", "AutoParallel.__enter__")
_NOTED = tuple(Target("autoparallel.api", f"AutoParallel.{stage}") for stage in _notes.STAGES)


def _arounds(name: str, *pairs: tuple[Target, object]) -> tuple[object, object]:
    """attach/detach of a shim made of arounds on ``pairs`` of (target, around)."""

    def attach() -> None:
        for target, around in pairs:
            wrap(name, target, around)

    def detach() -> None:
        for target, _ in reversed(pairs):
            unwrap(name, target)

    return attach, detach


def _row(name: str, *, arounds: tuple[tuple[Target, object], ...] = (), **fields: object) -> Shim:
    if arounds:
        fields["attach"], fields["detach"] = _arounds(name, *arounds)
    return Shim(name=name, **fields)  # type: ignore[arg-type]


SHIMS: tuple[Shim, ...] = (
    _row(
        "upstream_notes",
        brief="a note on autoparallel's own errors: whose, and the fix",
        targets=_NOTED,
        arounds=tuple((target, _notes.around(target.path.split(".")[-1])) for target in _NOTED),
        changes="an exception autoparallel raises in __enter__, optimize_placement or apply_placement gets one "
                "note: whose code raised (the frame) and, for a known limit, the way around it",
        why="autoparallel's failures surface deep in its code or torch's and read like the plugin's",
        limit="When autoparallel itself raises",
        retired_by="none filed",
        effect=Effect.CRASH_TO_ERROR,
        when=When.IMPORT,
        stops="autoparallel's own errors lose the note that says they are autoparallel's",
    ),
    _row(
        "failed_build_cleanup",
        brief="caches emptied and settings restored after a failed build",
        targets=(ENTER, _caches.STRATEGY_CACHE, _caches.COMM_CACHE, _caches.PADDING, _caches.NCCL),
        arounds=((ENTER, _caches.around_failed_build),),
        changes="after an AutoParallel.__enter__ that raised, autoparallel's caches are emptied and Inductor's "
                "comprehensive_padding and the cost model's NCCL topology restored",
        why="propagate_tensor_meta rewrites specs the strategy cache shares, so a build that failed half-way "
            "made nine later families fail the same way; __exit__, which restores the settings, never runs",
        limit="The placement-option cache shares specs that autoparallel then rewrites",
        retired_by="none filed",
        effect=Effect.CRASH_TO_FIX,
        when=When.IMPORT,
        stops="a failed build can make the next model's build in the process fail the same way",
    ),
    _row(
        "mesh_strategy_cache",
        brief="strategy cache emptied when the mesh changes",
        targets=(ENTER, _caches.STRATEGY_CACHE, Target(_caches.STRATEGY_KEY.module, _caches.STRATEGY_KEY.path,
                                                        TargetKind.READ)),
        arounds=((ENTER, _caches.around_build_strategies),),
        changes="autoparallel's placement-option cache is emptied when an AutoParallel is entered on another "
                "mesh than the one it was filled for",
        why="its key has no mesh: a second mesh of the same rank reused the first's strategies (150 of 150)",
        limit="The placement-option and comm-cost caches ignore the mesh",
        retired_by="autoparallel PR #511",
        effect=Effect.CHANGES,
        when=When.USE,
        stops="a second mesh in the process gets the first mesh's strategies (add_op_constraints refuses them)",
        probe=_caches.probe_strategy_cache,
    ),
    _row(
        "mesh_comm_cost_cache",
        brief="comm-cost cache emptied when the mesh changes",
        targets=(ENTER, _caches.COMM_CACHE, Target(_caches.COMM_KEY.module, _caches.COMM_KEY.path, TargetKind.READ)),
        arounds=((ENTER, _caches.around_build_comm_costs),),
        changes="autoparallel's comm-cost cache is emptied when an AutoParallel is entered on another mesh",
        why="its key (added by autoparallel PR #355) is the two specs' placements and tensor metadata: a second "
            "mesh's ILP is priced with the first mesh's collective costs; PR #511 leaves it so",
        limit="The placement-option and comm-cost caches ignore the mesh",
        retired_by="none filed (#511 keys only the strategy cache)",
        effect=Effect.CHANGES,
        when=When.USE,
        stops="a second mesh in the process is priced with the first mesh's communication costs",
        probe=_caches.probe_comm_cost_cache,
    ),
    _row(
        "view_skip",
        brief="view rule skips a layout DTensor refuses (3-D meshes)",
        targets=(ENTER, _view_skip.TARGET),
        arounds=((ENTER, _view_skip.around_build),),
        changes="during a build, DTensor's 'Cannot shard unevenly distributed tensor' RuntimeError in autoparallel's "
                "view rule becomes the AssertionError the rule skips",
        why="view_rule skips a strategy DTensor cannot view only on AssertionError; torch 2.13+ raises RuntimeError "
            "for a flatten split unevenly by all three mesh dims, and the whole build stops",
        limit="A flatten of a dim split unevenly by all three mesh dims (3-D meshes)",
        retired_by="none filed",
        effect=Effect.CRASH_TO_FIX,
        when=When.IMPORT,
        stops="3-D meshes whose heads split unevenly stop in AutoParallel.__enter__",
        probe=_view_skip.probe,
    ),
    _row(
        "local_map_hop",
        brief="local_map regions traced by torch 2.14+ build",
        targets=(ENTER, _local_map_hop.TARGET),
        arounds=((ENTER, _local_map_hop.around_build),),
        changes="during a build, a local_map region traced as the HOP itself (torch 2.14+) reads as the "
                "call_local_map wrapper autoparallel asserts on",
        why="autoparallel asserts the target is named call_local_map; torch 2.14 and 2.15 trace local_map_hop, "
            "so every local_map model stops in __enter__ with a bare AssertionError",
        limit="local_map on torch 2.14 and 2.15",
        retired_by="autoparallel PRs #511, #512",
        effect=Effect.CRASH_TO_FIX,
        when=When.IMPORT,
        stops="local_map models on torch 2.14+ stop in AutoParallel.__enter__",
        probe=_local_map_hop.probe,
    ),
    _row(
        "build_memo",
        brief="DTensor's redistribute_cost memoized during a build",
        targets=(ENTER, _memos.REDISTRIBUTE_COST),
        arounds=((ENTER, _memos.around_build),),
        changes="during a build, DTensor's redistribute_cost answers repeated questions from a memo (same values)",
        why="DTensor skips its path cache while tracing: on 2x2x2, 2.17 M calls, about a fifth distinct, two "
            "thirds of the build",
        limit="DTensor skips its redistribution path cache while tracing",
        retired_by="none filed",
        effect=Effect.NOTHING,
        when=When.IMPORT,
        stops="builds take their full time (on 2x2x2, about 3x longer)",
    ),
    _row(
        "build_size_guard",
        brief="an ILP too large for memory refused before it is built",
        targets=(ENTER, _build_size.TARGET),
        arounds=((ENTER, _build_size.around_build),),
        changes="before autoparallel creates its ILP's variables, they are counted and a build that cannot fit the "
                "memory available raises BuildTooLargeError (apc.set_build_budget)",
        why="each mesh dim multiplies the variables: a 1-layer Falcon-style LM on 2x2x2 (13.5 M) was killed by "
            "the OOM killer at 23 GiB after 43 minutes",
        limit="The ILP on 3-D meshes does not fit in 24 GiB for real LMs",
        retired_by="none filed",
        effect=Effect.CRASH_TO_ERROR,
        when=When.IMPORT,
        stops="an ILP too large for the machine is built until the OOM killer ends the process",
    ),
    _row(
        "apply_observer",
        brief="apply step recorded; the plugin's nodes and verifier",
        targets=_apply.TARGETS,
        arounds=tuple((target, _apply.around(name)) for target, name in zip(
            _apply.TARGETS, ("apply_placement_common", "run_node", "redistribute_tensor", "ordered_redistribute"))),
        changes="the apply step records what the interpreter executes on every edge and tags table ops; with a "
                "plugin call it inserts the planned redistributions as named nodes and verifies the graph",
        why="the audit judges the graph autoparallel built against its plan (a baseline run too: at the pin its "
            "apply turns planned Partial targets into Replicate, PR #517); the plugin's explicit redistributions "
            "must be nodes of the parallel graph on every path that builds it",
        limit="apply turns planned Partial targets into Replicate",
        retired_by="not a workaround (the plugin's apply step)",
        effect=Effect.OBSERVES,
        when=When.IMPORT,
        stops="apc.audit, the explicit redistributions and the verifier after apply",
    ),
    _row(
        "add_op_constraints",
        brief="AutoParallel.add_op_constraints",
        targets=(_entry.METHOD,),
        attach=_entry.attach_method,
        detach=_entry.detach_method,
        changes="AutoParallel gets the method add_op_constraints (the plugin's call)",
        why="the public contract: autop.add_op_constraints() inside the with block",
        limit="",
        retired_by="not a workaround (the plugin's call)",
        effect=Effect.NOTHING,
        when=When.IMPORT,
        stops="autop.add_op_constraints() (apc.add_op_constraints(autop) still works)",
    ),
    _row(
        "load_refusal",
        brief="load() of a plugin-saved optimizer raises a clear error",
        targets=(_entry.REPLAY,),
        attach=_entry.attach_replay,
        detach=_entry.detach_replay,
        changes="ShardingOptimizer gets apc_add_op_constraints, which load() replays for a plugin-saved optimizer "
                "and which raises a clear PluginStateError",
        why="load() replays the constraint log by method name and would drop the plugin's rows silently",
        limit="",
        retired_by="not a workaround (the plugin's call)",
        effect=Effect.CRASH_TO_ERROR,
        when=When.IMPORT,
        stops="loading a plugin-saved optimizer fails with autoparallel's AttributeError",
    ),
    _row(
        "enable_hook",
        brief="apc.enable(): add_op_constraints before the first solve",
        targets=(_entry.OPTIMIZE,),
        attach=_entry.attach_enable,
        detach=_entry.detach_enable,
        changes="while apc.enable() is in force, optimize_placement calls add_op_constraints(**options) first",
        why="torchtitan and auto_parallel(...) call optimize_placement themselves",
        limit="",
        retired_by="not a workaround (the plugin's call)",
        effect=Effect.CHANGES,
        when=When.USE,
        stops="apc.enable()",
    ),
    Shim(
        name="plugin_hooks",
        brief="the plugin's objective terms, rows and report per solve",
        targets=(_optimizer.SOLVE, _optimizer.SET_OBJECTIVE, _optimizer.MEMORY),
        changes="on an optimizer the plugin was added to: its objective terms after autoparallel's, its rows after "
                "the memory rows, pins checked, lazy rounds, infeasibility explained, the report built",
        why="autoparallel (re)sets the objective and rebuilds its memory rows inside every solve",
        limit="",
        retired_by="not a workaround (the plugin's call)",
        effect=Effect.CHANGES,
        when=When.USE,
        stops="add_op_constraints",
    ),
    Shim(
        name="solver_route",
        brief="the chosen solver (highs-lp, cbc, highs) per optimizer",
        targets=(_optimizer.PROB_SOLVE, _optimizer.SET_OBJECTIVE),
        changes="on an optimizer given a solver (add_op_constraints, use_solver): its problem solved by that "
                "solver, and autoparallel's objective built in bulk on the HiGHS routes",
        why="autoparallel solves with CBC through prob.solve; HiGHS solves llama3 8x8 in a fraction of its time",
        limit="",
        retired_by="not a workaround (the plugin's call)",
        effect=Effect.CHANGES,
        when=When.USE,
        stops="solver= and use_solver",
    ),
    Shim(
        name="dtensor_memos",
        brief="DTensor's pure functions memoized during verify",
        targets=(_memos.REDISTRIBUTE_COST, Target(_memos.TENSOR_META.module, _memos.TENSOR_META.path, TargetKind.INSTANCE),
                 _memos.STRIDED_SIZE),
        changes="during one verification, three pure DTensor functions answer repeated questions from memos",
        why="the verifier asks the same questions again and again (on llama3 2 layers 8x8, 4.5 s of 8.3 s)",
        limit="",
        retired_by="none filed",
        effect=Effect.NOTHING,
        when=When.SCOPED,
        stops="apc.verify",
    ),
    Shim(
        name="device_name",
        brief="the cost model told a GPU's name on CPU",
        targets=(Target("torch", "get_device_module", TargetKind.READ),),
        changes="while the CPU harness is active, the cost model's device-name question is answered with a GPU's",
        why="the cost model looks the device's name up in a table of GPU limits; torch.cpu has none",
        limit="",
        retired_by="not a workaround (the CPU harness)",
        effect=Effect.CRASH_TO_FIX,
        when=When.SCOPED,
        stops="autoparallel on a CPU-only machine",
    ),
    Shim(
        name="rank_aware_all_to_all",
        brief="all_to_all as the collective op on CPU meshes",
        targets=(_harness.ALLTOALL, _harness.ALLTOALL_IMPORTED),
        changes="while the numerics harness builds a graph, S(a) -> S(b) emits the _dtensor all_to_all collective",
        why="on a cpu mesh DTensor's fallback indexes the chunks with the tracing rank: every rank gets rank 0's",
        limit="",
        retired_by="not a workaround (the CPU harness)",
        effect=Effect.CHANGES,
        when=When.SCOPED,
        stops="numerics of plans with an all_to_all on CPU",
    ),
    Shim(
        name="example_inputs_on_tracing_rank",
        brief="uneven example inputs sharded with compile_on_one_rank off",
        targets=(_harness.LOCAL_ARGS,),
        changes="while the numerics harness builds a graph, example inputs are sharded with compile_on_one_rank off",
        why="an uneven shard's size under compile_on_one_rank is symbolic, which ShapeEnv refuses as a placeholder",
        limit="",
        retired_by="not a workaround (the CPU harness)",
        effect=Effect.CRASH_TO_FIX,
        when=When.SCOPED,
        stops="numerics of plans with uneven inputs",
    ),
    Shim(
        name="strategy_offer",
        brief="one more strategy offered to the solver (test tool)",
        targets=(_harness.LOOKUP,),
        changes="while testing.offer_strategy is active, one more strategy is offered to the solver for an op",
        why="reproducing what a wrong DTensor rule (issue #348's index_put) does to autoparallel",
        limit="",
        retired_by="not a workaround (a test tool)",
        effect=Effect.CHANGES,
        when=When.SCOPED,
        stops="testing.offer_strategy",
    ),
)
