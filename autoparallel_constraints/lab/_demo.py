"""``python -m autoparallel_constraints demo``: the bug, the fix and the price, in four sections.

1. **The seed's own failure** (upstream #348): the seed block at the seed's sizes on a 2x4 CPU mesh,
   DTensor's pre-fix index_put strategy offered (self ``(R, S(0))``, values ``(R, S(1))``) and the
   two producers pinned as in the issue. Without the plugin the solver picks that strategy, the
   audit flags index_put and Inductor fails with the issue's message; with ``add_op_constraints()``
   the audit is clean, Inductor lowers, and the price is the objective and comm cost against the
   run without the plugin.
2. **Wrong numbers with matching shapes**: a small copy on 2x2 under LocalTensorMode, index_put's
   self pinned ``(S(0), S(1))`` and values ``(S(1), S(0))``: the local shapes agree, the gradients
   don't. Max error against one device, without and with the plugin.
3. **The PR #517 class** (no bad strategy at all): the seed model at 16 heads x 64, batch 8, seq 64
   on 2x2 with input/output ``(S(0), S(1))``: autoparallel's apply turns a planned Partial into
   Replicate and a gradient comes out 2x. The default call is run as is (its ``materialize`` read
   from the installed signature and printed), then, if it is not exact,
   ``add_op_constraints(materialize="all")``.
4. **The price in time**: the seed block (2x4), autoparallel alone (on its own solver, CBC) against
   the default call (``explicit`` on ``highs-lp``): what a user's day costs with and without it,
   interleaved as ``compare`` runs rows (``_stats``): one warm-up round, discarded, then
   ``--repeat`` rounds; medians with min–max, and paired ratios called "within noise" when their
   spread contains 1.0.

Progress goes to stderr, one line per run; ``--json FILE`` keeps every figure.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..apply._audit import AuditReport, audit
from ..core._placements import fmt_placements, fmt_spec
from ..models import SEED_CONFIG, SeedBlock, SeedConfig
from ..plan._solvers import DEFAULT_SOLVER
from ._compare import COMPARE_COLUMNS, CompareResult, compare_rows, ratio_lines, result_payload
from ._runs import render_table, run_seed

logger = logging.getLogger(__name__)

__all__ = ["DemoResult", "ForcedRun", "NumericsRun", "add_demo_subcommand", "render_demo", "run_demo"]

INDEX_PUT = torch.ops.aten.index_put.default
R = Replicate()
RS0: tuple[Placement, ...] = (R, Shard(0))
RS1: tuple[Placement, ...] = (R, Shard(1))
RR: tuple[Placement, ...] = (R, R)
SWAPPED_SELF: tuple[Placement, ...] = (Shard(0), Shard(1))
SWAPPED_VALUES: tuple[Placement, ...] = (Shard(1), Shard(0))
SMALL = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)  # batch == seq: swapped shapes agree
DIVERGING = SeedConfig(num_heads=16, head_dim=64, batch=8, seq=64)
IO_S0_S1: tuple[Placement, ...] = (Shard(0), Shard(1))
PARTIAL_TOL = {"atol": 1e-3, "rtol": 1e-4}
DEMO_COLUMNS = ("formulation", "variables", "constraints", "build+solve s [min-max]", "cpu s [min-max]",
                "objective", "comm cost", "redistributes", "audit")
SECTIONS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class ForcedRun:
    """Section 1, one side: the forced #348 setup solved, applied, audited and lowered."""

    call: str  # "" without the plugin
    index_put: str  # the chosen strategy's self / values placements
    audit: str
    flagged: tuple[str, ...]  # "<kind> <node>" per violation
    inductor_error: str | None  # None: Inductor lowered the parallel graph
    objective: float
    comm_cost: float
    redistributes: tuple[str, ...]
    seconds: float

    @property
    def clean(self) -> bool:
        return not self.flagged and self.inductor_error is None


@dataclass(frozen=True, kw_only=True, slots=True)
class NumericsRun:
    """Sections 2 and 3, one run: LocalTensorMode against one device, and the audit."""

    call: str  # "" without the plugin
    ok: bool
    error: str | None  # the run failed (e.g. a shape mismatch) instead of giving numbers
    checked: int  # tensors compared: outputs and every gradient
    worst: str  # the tensor with the largest error
    max_abs_err: float
    ratio: float | None  # norm(parallel) / norm(reference) of the worst tensor
    audit: str
    flagged: tuple[str, ...]
    local_shapes: tuple[str, ...] = ()  # index_put's self/values local shapes, when flagged
    seconds: float = 0.0


@dataclass(kw_only=True)
class DemoResult:
    forced: list[ForcedRun]
    swapped: list[NumericsRun]
    partial: list[NumericsRun]
    default_materialize: str
    cost: CompareResult
    wall_s: float = 0.0

    @property
    def fixed(self) -> bool:
        """The with-plugin side of every section holds: clean and lowered, exact, exact, and
        every timed run's audit clean."""
        return (
            self.forced[-1].clean
            and self.swapped[-1].ok
            and self.partial[-1].ok
            and all(run.audit_ok for row in self.cost.rows for run in row.runs)
        )


class _Progress:
    """One stderr line per run: ``[demo 1/4] ... `` before and the seconds after."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def say(self, text: str) -> None:
        if self.stream is not None:
            print(text, file=self.stream, flush=True)

    def timed(self, section: int, what: str, fn: Callable[[], Any]) -> tuple[Any, float]:
        self.say(f"[demo {section}/{SECTIONS}] {what} ...")
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        self.say(f"[demo {section}/{SECTIONS}] {what}: {seconds:.1f}s")
        return out, seconds


def _flagged(report: AuditReport | None) -> tuple[str, ...]:
    return tuple(f"{v.kind} {v.node}" for v in report.violations) if report is not None else ()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _default_materialize() -> str:
    from ..plan._plugin import add_op_constraints

    return str(inspect.signature(add_op_constraints).parameters["materialize"].default)


# ---------------------------------------------------------------------------------------------
# Section 1: the forced #348 case at the seed's sizes


def _forced_348(with_plugin: bool, device: str) -> ForcedRun:
    from ..harness import cpu_mesh, device_name, fresh_strategy_cache
    from ..harness._inject import chosen_strategy, find_nodes, lower_with_inductor, offer_strategy

    seen: dict[str, Any] = {"error": None}

    def configure(autop: Any) -> None:
        (node,) = find_nodes(autop, INDEX_PUT)
        opt = autop.sharding_optimizer
        opt.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
        opt.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
        if with_plugin:
            autop.add_op_constraints()

    def after_apply(autop: Any) -> None:
        (node,) = find_nodes(autop, INDEX_PUT)
        inputs = chosen_strategy(autop, node).input_specs
        seen["index_put"] = f"self {fmt_spec(inputs[0])}, values {fmt_spec(inputs[2])}"
        try:
            lower_with_inductor(autop)
        except Exception as exc:  # noqa: BLE001 - the failure is what section 1 shows
            seen["error"] = _first_line(exc)

    t0 = time.perf_counter()
    offer = offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0)
    with device_name(device), fresh_strategy_cache(), offer:
        summary, report = run_seed(None, cpu_mesh((2, 4)), configure=configure, after_apply=after_apply)
    return ForcedRun(
        call="add_op_constraints()" if with_plugin else "",
        index_put=seen["index_put"],
        audit=summary.audit,
        flagged=_flagged(report),
        inductor_error=seen["error"],
        objective=summary.objective,
        comm_cost=summary.comm_cost,
        redistributes=tuple(r.describe() for r in report.redistributes) if report else (),
        seconds=time.perf_counter() - t0,
    )


# ---------------------------------------------------------------------------------------------
# Sections 2 and 3: numerics under LocalTensorMode


def _numerics(
    call: str,
    options: dict[str, Any] | None,
    config: SeedConfig,
    *,
    pins: tuple[tuple[Placement, ...], tuple[Placement, ...]] | None = None,
    **kwargs: Any,
) -> NumericsRun:
    """Run the seed model at ``config`` on 2x2 with every rank simulated; ``options`` are
    ``add_op_constraints``'s (None: no plugin); ``pins`` offer and pin index_put's inputs."""
    import contextlib

    from ..harness import run_numerics
    from ..harness._inject import find_nodes, offer_strategy

    audits: list[AuditReport] = []

    def configure(autop: Any) -> None:
        if pins is not None:
            (node,) = find_nodes(autop, INDEX_PUT)
            opt = autop.sharding_optimizer
            opt.add_node_constraint(node.args[0], pins[0], constraint_name="pin_self")
            opt.add_node_constraint(node.args[2], pins[1], constraint_name="pin_values")
        if options is not None:
            autop.add_op_constraints(**options)

    offer = (
        offer_strategy(INDEX_PUT, input_placements=[pins[0], RR, pins[1]], output_placements=pins[0])
        if pins is not None
        else contextlib.nullcontext()
    )
    t0 = time.perf_counter()
    with offer:
        report = run_numerics(
            lambda: SeedBlock(config),
            lambda: torch.randn(config.batch, config.seq, config.hidden),
            (2, 2),
            configure=configure,
            after_apply=lambda autop: audits.append(audit(autop)),
            **kwargs,
        )
    seconds = time.perf_counter() - t0
    worst = max(report.checks, key=lambda c: c.max_abs_err, default=None)
    report_audit = audits[0] if audits else None
    shapes: tuple[str, ...] = ()
    if report_audit is not None:
        for v in report_audit.by_kind("not_cosharded"):
            shapes += tuple(f"{a.label} {list(a.actual_local_shape or ())}" for a in v.args if a.label in ("self", "values"))
    return NumericsRun(
        call=call,
        ok=report.ok,
        error=report.error,
        checked=len(report.checks),
        worst=worst.name if worst is not None else "-",
        max_abs_err=worst.max_abs_err if worst is not None else float("nan"),
        ratio=worst.ratio if worst is not None else None,
        audit=report_audit.verdict if report_audit is not None else "not applied",
        flagged=_flagged(report_audit),
        local_shapes=shapes,
        seconds=seconds,
    )


# ---------------------------------------------------------------------------------------------
# The run and its rendering


def run_demo(*, repeat: int = 3, device: str = "H100", progress: TextIO | None = None) -> DemoResult:
    """All four sections; ``repeat`` measured rounds in section 4 (after one warm-up round)."""
    t_start = time.perf_counter()
    say = _Progress(progress)
    forced = [
        say.timed(1, "forced #348 (seed sizes, 2x4), without the plugin", lambda: _forced_348(False, device))[0],
        say.timed(1, "forced #348 (seed sizes, 2x4), add_op_constraints()", lambda: _forced_348(True, device))[0],
    ]
    swap = (SWAPPED_SELF, SWAPPED_VALUES)
    small = {"parameter_memory_constraint": False}
    swapped = [
        say.timed(2, "swapped index_put (2x2, LocalTensorMode), without the plugin",
                  lambda: _numerics("", None, SMALL, pins=swap, **small))[0],
        say.timed(2, "swapped index_put (2x2, LocalTensorMode), add_op_constraints()",
                  lambda: _numerics("add_op_constraints()", {}, SMALL, pins=swap, **small))[0],
    ]
    default = _default_materialize()
    io = {"input_placements": [IO_S0_S1], "output_placements": [IO_S0_S1], **PARTIAL_TOL}
    partial = [
        say.timed(3, "PR #517 class (2x2, LocalTensorMode), without the plugin",
                  lambda: _numerics("", None, DIVERGING, **io))[0],
        say.timed(3, "PR #517 class (2x2, LocalTensorMode), add_op_constraints()",
                  lambda: _numerics("add_op_constraints()", {}, DIVERGING, **io))[0],
    ]
    if not partial[-1].ok and default != "all":
        call = "add_op_constraints(materialize='all')"
        partial.append(
            say.timed(3, f"PR #517 class (2x2, LocalTensorMode), {call}",
                      lambda: _numerics(call, {"materialize": "all"}, DIVERGING, **io))[0]
        )
    say.say(f"[demo 4/{SECTIONS}] the price in time: seed block (2x4), 1 warm-up round + {repeat} interleaved")
    cost = compare_rows("seed", (2, 4), [("none", "cbc"), ("explicit", DEFAULT_SOLVER)], repeat=repeat, warmup=1,
                        device=device, progress=progress)
    return DemoResult(forced=forced, swapped=swapped, partial=partial, default_materialize=default, cost=cost,
                      wall_s=time.perf_counter() - t_start)


def _pct(new: float, old: float) -> str:
    return f"{(new - old) / old * 100:+.1f} %" if old else "n/a"


LABEL_WIDTH = 26


def _block(label: str, lines: list[str]) -> list[str]:
    """``label`` in a column of its own, ``lines`` beside it (a long label gets a line to itself)."""
    if len(label) >= LABEL_WIDTH:
        return [f"   {label}"] + [f"   {'':<{LABEL_WIDTH}} {line}" for line in lines]
    return [f"   {(label if i == 0 else ''):<{LABEL_WIDTH}} {line}" for i, line in enumerate(lines)]


def _numerics_line(run: NumericsRun) -> str:
    if run.error is not None:
        return f"the parallel run fails: {run.error}"
    grads = run.checked - 1 if run.checked else 0
    tensors = f"output and {grads} gradient{'s' if grads != 1 else ''}"
    if run.ok and run.max_abs_err == 0:
        return f"exact: {tensors} equal one device's (max error 0)"
    if run.ok:
        return f"right: {tensors} match one device within tolerance (max error {run.max_abs_err:.3g})"
    ratio = f", {run.ratio:.3f}x the reference's norm" if run.ratio is not None else ""
    return f"WRONG: {run.worst} max error {run.max_abs_err:.3g}{ratio}"


def _audit_line(flagged: tuple[str, ...]) -> str:
    return f"audit flags {', '.join(sorted(set(flagged)))}" if flagged else "audit clean"


def _who(call: str) -> str:
    return call or "without the plugin"


def render_demo(result: DemoResult) -> str:
    """The demo's text: four short sections with their verdicts, then the wall time."""
    out: list[str] = []
    cfg = SEED_CONFIG
    base, fixed = result.forced
    out += [
        "1. The seed's own failure: upstream #348 forced at the seed's sizes",
        (f"   seed block ({cfg.num_heads} heads x {cfg.head_dim}, batch {cfg.batch}, seq {cfg.seq}, bf16 params / fp32 "
         "reduce) on a 2x4 CPU mesh;"),
        (f"   DTensor's pre-fix index_put strategy offered (self {fmt_placements(RS0)}, values {fmt_placements(RS1)}), "
         "its producers pinned as in the issue"),
    ]
    for run in (base, fixed):
        lines = [f"index_put runs {run.index_put}", _audit_line(run.flagged)]
        lines.append(f"Inductor fails: {run.inductor_error}" if run.inductor_error else "Inductor lowers the parallel graph")
        lines += [f"inserted: {r}" for r in run.redistributes]
        out += _block(_who(run.call), lines)
    out += _block("price", [
        (f"objective {fixed.objective:.3f} vs {base.objective:.3f} without ({_pct(fixed.objective, base.objective)}), "
         f"comm cost {fixed.comm_cost:.3f} vs {base.comm_cost:.3f} ({_pct(fixed.comm_cost, base.comm_cost)})")
    ])
    out += [
        "",
        "2. Wrong numbers with matching shapes",
        (f"   seed block ({SMALL.num_heads} heads x {SMALL.head_dim}, batch {SMALL.batch}, seq {SMALL.seq}) on 2x2 under "
         "LocalTensorMode against one device;"),
        f"   index_put's self pinned {fmt_placements(SWAPPED_SELF)}, values {fmt_placements(SWAPPED_VALUES)}",
    ]
    for run in result.swapped:
        lines = [_numerics_line(run), _audit_line(run.flagged)]
        if run.local_shapes:
            lines.append(f"local shapes agree: {', '.join(run.local_shapes)}")
        out += _block(_who(run.call), lines)
    out += [
        "",
        "3. PR #517: a planned Partial applied as Replicate (no bad strategy at all)",
        (f"   seed block ({DIVERGING.num_heads} heads x {DIVERGING.head_dim}, batch {DIVERGING.batch}, seq "
         f"{DIVERGING.seq}, fp32) on 2x2, input/output {fmt_placements(IO_S0_S1)}, LocalTensorMode,"),
        f"   atol {PARTIAL_TOL['atol']:g}, rtol {PARTIAL_TOL['rtol']:g}",
    ]
    for run in result.partial:
        label = _who(run.call)
        if run.call == "add_op_constraints()":
            label += f" (default: materialize={result.default_materialize!r})"
        out += _block(label, [_numerics_line(run), _audit_line(run.flagged)])
    cost = result.cost
    columns = [c for c in COMPARE_COLUMNS if c[0] in DEMO_COLUMNS]
    out += [
        "",
        (f"4. The price in time: seed block on 2x4, autoparallel alone (none, on its CBC) vs add_op_constraints() "
         f"(explicit on {DEFAULT_SOLVER}, the defaults)"),
        "   build+solve = AutoParallel.__enter__ + add_op_constraints + optimize_placement, wall and CPU seconds;",
        f"   {cost.heading()}",
    ]
    out += [f"   {line}" for line in render_table(cost.rows, columns).splitlines()]
    out += [f"   {line}" for line in ratio_lines(cost)]
    out += [
        "",
        "See the plans of sections 1 and 3, autoparallel alone against the default call, in autoparallel's viewer:",
        "   python -m autoparallel_constraints show --example 348 --diff -o plan_348.html   (or --example 517)",
    ]
    out += ["", f"demo wall time {result.wall_s:.1f}s"]
    return "\n".join(out)


def demo_payload(result: DemoResult) -> dict[str, Any]:
    return {
        "forced_348": [asdict(r) for r in result.forced],
        "swapped": [asdict(r) for r in result.swapped],
        "partial_517": [asdict(r) for r in result.partial],
        "default_materialize": result.default_materialize,
        "cost": result_payload(result.cost),
        "wall_s": result.wall_s,
        "fixed": result.fixed,
    }


def _demo_command(args: argparse.Namespace) -> int:
    repeat = args.repeat if args.repeat is not None else (2 if args.quick else 3)
    result = run_demo(repeat=repeat, device=args.device_name, progress=sys.stderr)
    print(render_demo(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(demo_payload(result), f, indent=2)
        print(f"wrote {args.json}")
    return 0 if result.fixed else 1


def add_demo_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """``demo``: the bug, the fix and the price."""
    p = subparsers.add_parser(
        "demo",
        help="the bug, the fix, the price: #348 forced, swapped numbers, PR #517, the time it costs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--repeat", type=int, default=None, help="measured rounds in section 4 (default 3, --quick 2)")
    p.add_argument("--quick", action="store_true", help="2 measured rounds in section 4 instead of 3")
    p.add_argument("--device-name", default="H100", help="GPU whose limits the cost model uses (CPU run)")
    p.add_argument("--json", default=None, help="write every figure as JSON to this file")
    p.set_defaults(func=_demo_command)
    return p
