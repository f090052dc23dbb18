"""The transformers zoo: tiny causal LMs nobody here wrote, through the plugin's default call.

``python -m autoparallel_constraints zoo [--families llama,gpt2] [--mesh 2x2] [--dynamic on|off|both]
[--json FILE]`` (``--table a.json,b.json`` prints saved runs' table) runs every family of :data:`~.models.ZOO` (built on the meta device from a local
config, no downloads; eager attention, ``use_cache=False``, dropout 0, input ``[4, 16]`` token ids
pinned ``(S(0), R, ...)``, logits pinned the same, parameter-memory constraint) on each mesh
(default 2x2 and 2x4), with ``dynamic=True`` and ``False``, each through
``autop.add_op_constraints()`` with its defaults:

* ``dynamic=True``: solve, build the parallel graph (:func:`~.testing.apply_on_one_rank`, the step
  ``apply_placement`` starts with and the plugin hooks), ``apc.audit`` and LocalTensorMode numerics
  against one device (:func:`~.testing.run_numerics`, its default tolerances);
* ``dynamic=False``: solve, the public ``apply_placement``, ``apc.audit`` and Inductor lowering of
  the parallel graph (:func:`~.testing.lower_with_inductor`). No numerics: with static shapes a
  rank's mesh coordinates are baked into the graph, so a LocalTensorMode run would compare a correct
  plan wrong (see the harness's docstring).

One row per run: family, mesh, dynamic, the table ops the audit checked, the *uncovered* ops (ops
with two or more tensor inputs in the joint graph and no table row, see ``coverage``), the plugin's
redistributes, the audit's verdict, the numerics (worst tensor by error relative to its tolerance,
its max error and norm ratio) or the lowering, and the seconds. A run that raises is a row with the
stage and the error. Exit status 0 when every row that ran is clean and exact (or lowered); a
family that cannot be built or run at the tiny defaults is a skipped row with its reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Replicate, Shard

from ..apply._audit import audit
from ..errors import ConstraintsError, VerificationError
from ..harness import (
    cpu_mesh,
    device_name,
    lower_with_inductor,
    reset_strategy_cache,
    run_numerics,
    yardstick_summary,
)
from ..models import ZOO, FamilyUnavailable, causal_lm_families, zoo_model
from ..seam._notes import known_failure, origin
from ._cli import parse_mesh
from ._coverage import coverage_of_graph

logger = logging.getLogger(__name__)

__all__ = ["OUTCOMES", "ZooRow", "add_zoo_subcommand", "failure_origin", "format_table", "run_zoo", "zoo_row"]

MESHES: tuple[tuple[int, ...], ...] = ((2, 2), (2, 4))


@dataclass(frozen=True, kw_only=True, slots=True)
class ZooRow:
    """One family on one mesh, static or dynamic. ``numerics`` is ``"exact"``, ``"exact (float64)"``
    (float32 past its noise tolerance, rounding by the float64 yardstick of
    :mod:`~autoparallel_constraints.harness._yardstick`; ``reason`` says which tensors), ``"WRONG"``,
    ``"lowered"`` (static: Inductor lowered the parallel graph) or ``"-"``
    (the run stopped earlier); ``worst``/``error``/``ratio`` describe the float32 tensor furthest from
    its tolerance."""

    family: str
    mesh: tuple[int, ...]
    dynamic: bool
    table_ops: int | None = None
    uncovered: tuple[str, ...] = ()
    redistributes: int | None = None
    audit: str = "-"
    numerics: str = "-"
    worst: str = ""
    error: float | None = None
    ratio: float | None = None
    seconds: float = 0.0
    failure: str = ""
    details: str = ""
    unknown: int | None = None  # tensor nodes the verifier could not place
    unproven: int | None = None  # outputs it could not prove
    outcome: str = ""  # one of OUTCOMES (empty in rows saved before outcomes existed)
    reason: str = ""  # why: the refusal, the upstream error with the frame that raised it, the skip
    attn: str = "eager"  # transformers' attention implementation the model was built with

    @property
    def ok(self) -> bool:
        return not self.failure and self.audit == "clean" and self.numerics in ("exact", "exact (float64)", "lowered")


#: What a row's run came to. ``false alarm``: the default call refused the graph (VerificationError)
#: and the same plan with ``verify="warn"`` matches one device: a verifier defect. ``MISS``: the
#: verifier let a graph through whose numbers are wrong. ``upstream``: autoparallel, torch or
#: transformers raised (``reason`` names the innermost frame). ``skipped``: the family does not build
#: here at tiny sizes. ``timeout``: the row did not finish within ``--row-timeout`` seconds (``reason``
#: names the stage and the frame it was in): not tried to the end, like a skip, and said apart.
OUTCOMES = ("exact", "lowered", "refused", "false alarm", "MISS", "failed", "upstream", "skipped", "timeout")
#: Outcomes that do not fail the command: the family was not tried to the end here.
NOT_TRIED = ("skipped", "timeout")


class RowTimeout(BaseException):
    """A zoo row ran out of time. A BaseException so that no ``except Exception`` on the way (the
    harness reports a run's errors as findings) takes it for the plan's failure."""


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`RowTimeout` in the main thread after ``seconds`` (no limit when None)."""
    if not seconds:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise RowTimeout(f"did not finish within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: Whose code raised, from a formatted traceback (the line the zoo prints after "raised in").
failure_origin = origin


def _outcome_of_failure(failure: str, details: str) -> tuple[str, str]:
    where = origin(details)
    if where.startswith("autoparallel_constraints"):
        return "failed", f"{failure} [raised in {where}]"
    known = known_failure(details, failure)
    said = f"; known: {known.what}; {known.fix}" if known is not None else ""
    return "upstream", f"{failure} [raised in {where}{said}]"


def _batch(ndim: int) -> list[tuple[Any, ...]]:
    return [(Shard(0),) + (Replicate(),) * (ndim - 1)]


def _uncovered(gm: torch.fx.GraphModule) -> tuple[str, ...]:
    return tuple(o.op for o in coverage_of_graph(gm).uncovered)


def _dynamic_run(model_fn: Any, input_fn: Any, mesh_shape: tuple[int, ...], verify: str) -> tuple[Any, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def after_apply(autop: Any) -> None:
        seen["uncovered"] = _uncovered(autop.gm)
        seen["audit"] = audit(autop)

    report = run_numerics(model_fn, input_fn, mesh_shape, input_placements=_batch(len(mesh_shape)),
                          output_placements=_batch(len(mesh_shape)),
                          configure=lambda autop: autop.add_op_constraints(verify=verify), after_apply=after_apply,
                          float64_yardstick=True)
    return report, seen


def _worst_failure(report: Any) -> str:
    """The failed check furthest from its tolerance, with the float64 yardstick's word on it."""
    worst = max(report.failures, key=lambda c: c.excess)
    return f"{worst.name} max error {worst.max_abs_err:.2e} ({worst.note or 'past its tolerance'})"


def _samples_at_random(model_fn: Any, input_fn: Any) -> bool:
    """Whether the model's training-mode forward draws random numbers (PhiMoE's sparsemixer samples
    its routing): the same weights and input give other outputs under another RNG seed. Such a
    forward differs between the reference and the simulated ranks whatever the plan."""
    torch.manual_seed(0)
    model, x = model_fn(), input_fn()
    outs = []
    with torch.no_grad():
        for seed in (1, 2):
            torch.manual_seed(seed)
            outs.append(model(x))
    return not torch.equal(outs[0], outs[1])


def _eval_mode(model_fn: Any) -> Any:
    def build() -> torch.nn.Module:
        return model_fn().eval()

    return build


def _dynamic_row(family: str, mesh_shape: tuple[int, ...], attn: str) -> dict[str, Any]:
    model_fn, input_fn = zoo_model(family, attn=attn)
    note = ""
    if _samples_at_random(model_fn, input_fn):
        model_fn = _eval_mode(model_fn)
        note = "its training-mode forward samples at random: run in eval mode"
    out = _dynamic_row_of(model_fn, input_fn, mesh_shape)
    if note:
        out["reason"] = f"{note}; {out['reason']}" if out.get("reason") else note
    return out


def _dynamic_row_of(model_fn: Any, input_fn: Any, mesh_shape: tuple[int, ...]) -> dict[str, Any]:
    report, seen = _dynamic_run(model_fn, input_fn, mesh_shape, "raise")
    if report.error is not None and "VerificationError" in report.error:
        # refused: are the numbers of the same plan wrong (a right refusal) or exact (a false alarm)?
        checked, _ = _dynamic_run(model_fn, input_fn, mesh_shape, "warn")
        right = checked.ok
        numbers = "exact with verify='warn'" if right else (checked.error or "wrong with verify='warn'")
        if right and yardstick_summary(checked.checks):
            numbers += f"; {yardstick_summary(checked.checks)}"
        elif not right and checked.error is None:
            numbers += f" ({_worst_failure(checked)})"
        verdict = "false alarm" if right else "refused"
        return {"uncovered": seen.get("uncovered", ()), "failure": report.error, "details": report.details,
                "outcome": verdict, "reason": f"{report.error} ({numbers})"}
    out: dict[str, Any] = {"uncovered": seen.get("uncovered", ())}
    if "audit" in seen:
        rep = seen["audit"]
        out.update(table_ops=rep.table_nodes, redistributes=len(rep.redistributes), audit=rep.verdict)
        out.update(_verifier_counts(rep))
    if report.checks:
        worst = max(report.checks, key=lambda c: c.excess)
        rounding = yardstick_summary(report.checks)
        out.update(numerics=("exact (float64)" if rounding else "exact") if report.ok else "WRONG",
                   worst=worst.name, error=worst.max_abs_err, ratio=worst.ratio)
        if report.ok and rounding:
            out["float64"] = rounding
    if report.error is not None:
        out.update(failure=report.error, details=report.details)
        out["outcome"], out["reason"] = _outcome_of_failure(report.error, report.details)
    elif out.get("numerics", "").startswith("exact"):
        out["outcome"] = "exact" if out.get("audit") == "clean" else "refused"
        out["reason"] = "" if out.get("audit") == "clean" else f"audit {out.get('audit')}"
        if "float64" in out:
            out["reason"] = out["float64"] + (f"; {out['reason']}" if out["reason"] else "")
    else:
        out["outcome"], out["reason"] = "MISS", (f"wrong numbers and the verifier let it through: "
                                                 f"{_worst_failure(report)}")
    out.pop("float64", None)
    return out


def _static_row(family: str, mesh_shape: tuple[int, ...], attn: str) -> dict[str, Any]:
    from autoparallel.api import AutoParallel

    model_fn, input_fn = zoo_model(family, attn=attn)
    with torch.device("meta"):
        model = model_fn()
    out: dict[str, Any] = {}
    stage = "build"
    try:
        with device_name(), AutoParallel(model, input_fn, cpu_mesh(mesh_shape), dynamic=False) as autop:
            stage = "constraints"
            autop.add_input_constraints(_batch(len(mesh_shape)))
            autop.add_output_constraints(_batch(len(mesh_shape)))
            autop.add_parameter_memory_constraint()
            autop.add_op_constraints()
            out["uncovered"] = _uncovered(autop.gm)
            stage = "solve"
            placement = autop.optimize_placement()
            stage = "apply"
            autop.apply_placement(placement)
            stage = "audit"
            rep = audit(autop)
            out.update(table_ops=rep.table_nodes, redistributes=len(rep.redistributes), audit=rep.verdict)
            out.update(_verifier_counts(rep))
            stage = "inductor"
            lower_with_inductor(autop)
            out["numerics"] = "lowered"
    except Exception as exc:  # noqa: BLE001  (a row, not a crash: the zoo reports every family)
        first = (str(exc).strip().splitlines() or [""])[0]
        out.update(failure=f"{stage}: {type(exc).__name__}: {first}", details=traceback.format_exc())
        if isinstance(exc, VerificationError):
            out["outcome"], out["reason"] = "refused", out["failure"]
        else:
            out["outcome"], out["reason"] = _outcome_of_failure(out["failure"], out["details"])
        return out
    out["outcome"] = "lowered" if out.get("audit") == "clean" else "refused"
    out["reason"] = "" if out.get("audit") == "clean" else f"audit {out.get('audit')}"
    return out


def _verifier_counts(rep: Any) -> dict[str, Any]:
    verification = getattr(rep, "verification", None)
    if verification is None:
        return {}
    return {"unknown": verification.n_unknown, "unproven": len(verification.unproven_outputs)}


def _unavailable(family: str, attn: str) -> str | None:
    """Why ``family`` cannot be built here at tiny sizes on the meta device, or None."""
    try:
        model_fn, input_fn = zoo_model(family, attn=attn)
        with torch.device("meta"):
            model_fn()
    except FamilyUnavailable as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the family's own code refuses the tiny config
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return f"does not build at the tiny defaults: {type(exc).__name__}: {first}"
    try:  # one forward on one device: the tiny defaults may not fit the family's own code
        with torch.no_grad():
            model_fn()(input_fn())
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return f"its forward fails at the tiny defaults on one device: {type(exc).__name__}: {first}"
    return None


def _problem_at(tb: Any) -> str:
    """The size of the ILP a timed-out row was solving, from the innermost frame holding one: a
    solve that does not end is most often autoparallel's problem size (BailingHybrid at tiny sizes:
    a graph of 7,593 nodes, 4.87 M binary variables), which the frame alone does not say."""
    import pulp

    prob = None
    while tb is not None:
        found = next((v for v in tb.tb_frame.f_locals.values() if isinstance(v, pulp.LpProblem)), None)
        prob = found if found is not None else prob
        tb = tb.tb_next
    if prob is None:
        return ""
    return f"; solving an ILP of {prob.numVariables():,} variables and {prob.numConstraints():,} constraints"


def zoo_row(family: str, mesh_shape: Sequence[int], *, dynamic: bool, attn: str = "eager",
            timeout: float | None = None) -> ZooRow:
    """Run one family on one mesh with ``attn`` attention (see the module docstring); its row.
    ``timeout`` seconds (from the start of the row) end it as a ``timeout`` row."""
    mesh_shape = tuple(int(s) for s in mesh_shape)
    t0 = time.perf_counter()
    try:
        with _time_limit(timeout):
            return _zoo_row(family, mesh_shape, dynamic, attn, t0)
    except RowTimeout as exc:
        frames = traceback.extract_tb(exc.__traceback__)[:-1]  # without the alarm handler's own frame
        where = origin("".join(traceback.format_list(frames)))
        last = frames[-1] if frames else None
        inner = f"; innermost {last.filename.rsplit('/', 1)[-1]}:{last.lineno} {last.name}" if last else ""
        reason = f"{exc} (it was in {where}{inner}{_problem_at(exc.__traceback__)})"
        logger.info("zoo %s %s dynamic=%s: %s", family, mesh_shape, dynamic, reason)
        return ZooRow(family=family, mesh=mesh_shape, dynamic=dynamic, outcome="timeout", reason=reason,
                      failure=f"timeout: {reason}", seconds=time.perf_counter() - t0, attn=attn)


def _zoo_row(family: str, mesh_shape: tuple[int, ...], dynamic: bool, attn: str, t0: float) -> ZooRow:
    why = _unavailable(family, attn)
    if why is not None:
        return ZooRow(family=family, mesh=mesh_shape, dynamic=dynamic, outcome="skipped", reason=why,
                      failure=f"skipped: {why}", attn=attn, seconds=time.perf_counter() - t0)
    # each family from a clean cache: a build that went wrong half-way can leave autoparallel's
    # shared strategy specs rewritten for its own tensors, and the next family would fail on them
    reset_strategy_cache()
    try:
        fields = (_dynamic_row if dynamic else _static_row)(family, mesh_shape, attn)
    except ConstraintsError as exc:  # the plugin refused the call itself (e.g. pins it cannot satisfy)
        fields = {"failure": f"constraints: {type(exc).__name__}: {exc}", "details": traceback.format_exc(),
                  "outcome": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # noqa: BLE001 - a row, not a crash: the zoo reports every family
        failure = f"run: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        details = traceback.format_exc()
        outcome, reason = _outcome_of_failure(failure, details)
        fields = {"failure": failure, "details": details, "outcome": outcome, "reason": reason}
    row = ZooRow(family=family, mesh=mesh_shape, dynamic=dynamic, seconds=time.perf_counter() - t0, attn=attn, **fields)
    logger.info("zoo %s %s dynamic=%s: %s", family, mesh_shape, dynamic, row.failure or row.numerics)
    return row


def run_zoo(families: Sequence[str] | None = None, meshes: Sequence[tuple[int, ...]] = MESHES,
            dynamic: Sequence[bool] = (True, False), *, progress: Any = None, attn: str = "eager",
            timeout: float | None = None) -> list[ZooRow]:
    """Every family x mesh x dynamic, in that order, with ``attn`` attention; ``progress(row)`` after
    each; ``timeout`` seconds a row at most."""
    families = list(families) if families is not None else sorted(ZOO)
    everything = set(ZOO) | set(causal_lm_families())
    unknown = [f for f in families if f not in everything]
    if unknown:
        raise KeyError(f"unknown zoo families {unknown}; the curated zoo has: {', '.join(sorted(ZOO))} "
                       "(--families all: every causal LM of the installed transformers)")
    rows = []
    for family in families:
        for mesh_shape in meshes:
            for dyn in dynamic:
                row = zoo_row(family, mesh_shape, dynamic=dyn, attn=attn, timeout=timeout)
                rows.append(row)
                if progress is not None:
                    progress(row)
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(rows: Sequence[ZooRow]) -> str:
    """The zoo's one table, then the failures with their stage and first line, then the uncovered ops."""
    head = ("family", "mesh", "dynamic", "outcome", "table ops", "uncovered", "redistributes", "audit",
            "unknown", "numerics", "worst tensor", "max err", "ratio", "s")
    body = [
        (r.family, "x".join(map(str, r.mesh)), "yes" if r.dynamic else "no", r.outcome or "-", _fmt(r.table_ops, "d"),
         str(len(r.uncovered)), _fmt(r.redistributes, "d"), r.audit if not r.failure else "FAILED",
         "-" if r.unknown is None else f"{r.unknown}/{r.unproven}", r.numerics, r.worst or "-", _fmt(r.error, ".2e"), _fmt(r.ratio, ".6f"), f"{r.seconds:.0f}")
        for r in rows
    ]
    if any(r.attn != "eager" for r in rows):  # the attention column only when it tells rows apart
        head = (*head[:3], "attn", *head[3:])
        body = [(*b[:3], r.attn, *b[3:]) for b, r in zip(body, rows)]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)) for b in body]
    failed = [r for r in rows if r.failure]
    if failed:
        lines.append("failures:")
        lines += [f"  {r.family} {'x'.join(map(str, r.mesh))} dynamic={r.dynamic}"
                  f"{'' if r.attn == 'eager' else f' attn={r.attn}'}: {r.reason or r.failure}"
                  for r in failed]
    counts = Counter(r.outcome for r in rows if r.outcome)
    if counts:
        lines.append("outcomes: " + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES if counts[o]))
    uncovered = sorted({op for r in rows for op in r.uncovered})
    lines.append("uncovered ops (>=2 tensor inputs, no table row): " + (", ".join(uncovered) or "none"))
    ok = sum(r.ok for r in rows)
    lines.append(f"{ok} of {len(rows)} runs clean and exact (static runs: clean and lowered)")
    return "\n".join(lines)


def _load_rows(paths: Sequence[str]) -> list[ZooRow]:
    rows = []
    for path in paths:
        with open(path) as f:
            for item in json.load(f):
                rows.append(ZooRow(**{**item, "mesh": tuple(item["mesh"]), "uncovered": tuple(item["uncovered"])}))
    return rows


def _zoo_command(args: argparse.Namespace) -> int:
    if args.torchtitan:
        from ._torchtitan_zoo import run_table

        return run_table(args)
    if args.table:
        rows = _load_rows(args.table.split(","))
        print(format_table(rows))
        return 0 if all(r.ok or r.outcome in NOT_TRIED for r in rows) else 1
    families = (causal_lm_families() if args.families == "all" else args.families.split(",")) if args.families else None
    meshes = [args.mesh] if args.mesh else list(MESHES)
    dynamic = {"both": (True, False), "on": (True,), "off": (False,)}[args.dynamic]

    done: list[ZooRow] = []
    if args.resume:  # keep the rows a file already holds and run only the others
        if not args.json:
            raise SystemExit("zoo: --resume needs --json FILE (the file whose rows are kept)")
        try:
            done = _load_rows([args.json])
        except FileNotFoundError:
            done = []
        have = {(r.family, r.mesh, r.dynamic) for r in done if r.attn == args.attn}
        wanted = families if families is not None else sorted(ZOO)
        families = [f for f in wanted if any((f, tuple(m), d) not in have for m in meshes for d in dynamic)]
        print(f"[zoo] resuming {args.json}: {len(done)} rows kept, {len(families)} families to run", file=sys.stderr)

    def progress(row: ZooRow) -> None:
        print(f"[zoo] {row.family} {'x'.join(map(str, row.mesh))} dynamic={row.dynamic}: "
              f"{row.failure or f'audit {row.audit}, {row.numerics}'} ({row.seconds:.0f}s)", file=sys.stderr, flush=True)
        key = (row.family, row.mesh, row.dynamic, row.attn)
        done[:] = [r for r in done if (r.family, r.mesh, r.dynamic, r.attn) != key]
        done.append(row)
        if args.json:  # rewritten after every row: a long zoo interrupted keeps what it measured
            with open(args.json, "w") as f:
                json.dump([asdict(r) for r in done], f, indent=2)

    run_zoo(families, meshes, dynamic, progress=progress, attn=args.attn, timeout=args.row_timeout)
    rows = done
    print(format_table(rows))
    return 0 if all(r.ok or r.outcome in NOT_TRIED for r in rows) else 1


def add_zoo_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """``zoo``: every transformers family through the default call."""
    p = subparsers.add_parser("zoo", help="tiny transformers causal LMs (10 families) through add_op_constraints()",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default=None,
                   help=f"comma list, or 'all' for every causal LM of the installed transformers "
                        f"(default the curated ten: {','.join(sorted(ZOO))})")
    p.add_argument("--mesh", type=parse_mesh, default=None, help="one mesh, e.g. 2x2 (default: 2x2 and 2x4)")
    p.add_argument("--dynamic", choices=["both", "on", "off"], default="both",
                   help="AutoParallel(dynamic=...) runs (default both)")
    p.add_argument("--json", default=None, help="also write every row as JSON to this file (after each row)")
    p.add_argument("--attn", choices=["eager", "sdpa"], default="eager",
                   help="transformers' attention implementation (default eager; sdpa is transformers' own default)")
    p.add_argument("--row-timeout", type=float, default=None, metavar="SECONDS",
                   help="end a row that runs longer as a 'timeout' row (default: no limit)")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows --json FILE already holds, run only the families it lacks, append")
    p.add_argument("--table", default=None, help="run nothing: print the table of these --json files (comma list)")
    p.add_argument("--torchtitan", action="store_true",
                   help="torchtitan's model families the way torchtitan runs them (default: every family it ships), "
                        "alone and with the default call; the options below marked torchtitan")
    from ._torchtitan_zoo import add_arguments

    add_arguments(p)
    p.set_defaults(func=_zoo_command)
    return p
