"""The formulation lab (``python -m autoparallel_constraints compare``).

The lab::

    python -m autoparallel_constraints compare --model seed --mesh 2x4 \
        --formulations none,strict,explicit,soft,lazy --solvers cbc,highs --json lab.json --png lab.png

runs every formulation × solver (``none`` = autoparallel alone, with that solver) in one process,
interleaved: one warm-up round over every row (discarded), then ``--repeat`` rounds (3 by default),
the order reversed every other round. It prints one table (variables, constraints, the median and
min–max of build+solve wall and CPU seconds, objective, comm cost, redistributes inserted, audit
verdict) and each row's build+solve over autoparallel alone with CBC as a paired ratio with its
spread: "within noise" when the spread contains 1.0 (``_stats``). It writes every repeat as JSON
and draws the times with error bars, the ratios and the costs (matplotlib, the ``lab`` extra).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import torch

from ..core._stats import Ratio, Spread, interleave, paired_ratio
from ..errors import InvalidOptionError
from ._cli import parse_mesh
from ._models import LAB_MODELS, SIZES, lab_model
from ._runs import BASELINE, RunSummary, render_table, run_model

logger = logging.getLogger(__name__)

__all__ = ["COMPARE_COLUMNS", "CompareResult", "RowRuns", "add_compare_subcommand", "compare", "compare_figure", "compare_rows", "draw_png", "ratio_lines", "render_compare", "result_payload", "write_json"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RowRuns:
    """One lab row (formulation × solver): its measured repeats, in round order, and its warm-up
    runs (discarded from every figure, kept for the record)."""

    formulation: str
    solver: str
    runs: tuple[RunSummary, ...]
    warmups: tuple[RunSummary, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.formulation}/{self.solver}"

    @property
    def first(self) -> RunSummary:
        """The first measured run: ILP size, objective, audit (the same in every repeat, see
        :attr:`varies`)."""
        return self.runs[0]

    def spread(self, metric: Callable[[RunSummary], float]) -> Spread:
        return Spread.of([metric(r) for r in self.runs])

    @property
    def wall(self) -> Spread:
        """build+solve wall seconds over the repeats."""
        return self.spread(lambda r: r.build_solve_s)

    @property
    def cpu(self) -> Spread:
        """build+solve CPU seconds (process + CBC subprocess) over the repeats."""
        return self.spread(lambda r: r.build_solve_cpu_s)

    @property
    def varies(self) -> tuple[str, ...]:
        """Fields other than timings that were not the same in every repeat (expected: none)."""
        fields = ("variables", "constraints", "objective", "redistributes", "audit", "rounds")
        return tuple(f for f in fields if len({getattr(r, f) for r in self.runs}) > 1)


def _seconds(metric: Callable[[RunSummary], float], fmt: str = ".2f") -> Callable[[RowRuns], str]:
    return lambda row: row.spread(metric).format(fmt)


COMPARE_COLUMNS: tuple[tuple[str, str, Callable[[RowRuns], str]], ...] = (
    ("formulation", "<", lambda r: r.formulation),
    ("solver", "<", lambda r: r.solver),
    ("variables", ">", lambda r: f"{r.first.variables:,}"),
    ("constraints", ">", lambda r: f"{r.first.constraints:,}"),
    ("build s", ">", lambda r: f"{r.spread(lambda s: s.build_s).median:.2f}"),
    ("solve s", ">", lambda r: f"{r.spread(lambda s: s.solve_s).median:.2f}"),
    ("build+solve s [min-max]", ">", lambda r: r.wall.format()),
    ("cpu s [min-max]", ">", lambda r: r.cpu.format()),
    ("plugin s", ">", lambda r: f"{r.spread(lambda s: s.plugin_s + s.plugin_hook_s).median:.3f}"),
    ("rounds", ">", lambda r: str(r.first.rounds)),
    ("objective", ">", lambda r: f"{r.first.objective:.3f}"),
    ("comm cost", ">", lambda r: f"{r.first.comm_cost:.3f}"),
    ("redistributes", ">", lambda r: str(r.first.redistributes)),
    ("gave way", ">", lambda r: str(r.first.gave_way)),
    ("audit", "<", lambda r: r.first.audit),
)


@dataclass(kw_only=True)
class CompareResult:
    """The rows of one lab run (each with its repeats) and what they were run on."""

    model: str
    description: str
    mesh: tuple[int, ...]
    repeat: int
    warmup: int
    rows: list[RowRuns]
    machine: dict[str, Any] = field(default_factory=dict)
    # --one-build: the one AutoParallel build every row shared (wall, CPU seconds); the rows' build
    # column is then only the plugin's additions
    shared_build: tuple[float, float] | None = None

    def row(self, formulation: str, solver: str = "cbc") -> RowRuns | None:
        return next((r for r in self.rows if r.formulation == formulation and r.solver == solver), None)

    @property
    def baseline(self) -> RowRuns | None:
        """autoparallel alone with CBC, the row every ratio is taken against."""
        return self.row(BASELINE, "cbc")

    def ratios(self) -> dict[str, dict[str, Ratio]]:
        """Per row other than the baseline: build+solve over the baseline's, repeat by repeat,
        ``{"wall": Ratio, "cpu": Ratio}``."""
        base = self.baseline
        if base is None:
            return {}
        out: dict[str, dict[str, Ratio]] = {}
        for r in self.rows:
            if r is base:
                continue
            out[r.label] = {
                "wall": paired_ratio(r.wall.samples, base.wall.samples),
                "cpu": paired_ratio(r.cpu.samples, base.cpu.samples),
            }
        return out

    def heading(self) -> str:
        """What the figures are: medians of how many interleaved repeats, on what machine load."""
        m = self.machine
        load = ""
        if "load_start" in m and "load_end" in m:
            load = (
                f"; 1-min load average {m['load_start']:.2f} at start, {m['load_end']:.2f} at end on "
                f"{m.get('cpus')} CPUs"
            )
        shared = ""
        if self.shared_build is not None:
            shared = (
                f"; one build shared by every row ({self.shared_build[0]:.1f} s wall, {self.shared_build[1]:.1f} s "
                "CPU), not in the rows' build column"
            )
        return (
            f"median [min-max] of {self.repeat} interleaved repeat{'s' if self.repeat != 1 else ''} per "
            f"row after {self.warmup} warm-up round{'s' if self.warmup != 1 else ''} (discarded){load}{shared}"
        )


def _load() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except OSError:  # not every platform has it
        return None


def _machine() -> dict[str, Any]:
    import pulp

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pulp": pulp.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def compare(
    model: str,
    mesh_shape: Sequence[int],
    formulations: Sequence[str],
    solvers: Sequence[str],
    **kwargs: Any,
) -> CompareResult:
    """Every formulation × solver on ``model`` (rows in that order); see :func:`compare_rows`."""
    return compare_rows(model, mesh_shape, [(f, s) for f in formulations for s in solvers], **kwargs)


def compare_rows(
    model: str,
    mesh_shape: Sequence[int],
    rows: Sequence[tuple[str, str]],
    *,
    size: str = "full",
    layers: int | None = None,
    dim: int | None = None,
    repeat: int = 3,
    warmup: int = 1,
    time_limit: float | None = None,
    device: str = "H100",
    progress: TextIO | None = None,
    apply: bool = True,
    one_build: bool = False,
) -> CompareResult:
    """Run each ``(formulation, solver)`` row on ``model`` in this process, interleaved: ``warmup``
    rounds over every row (discarded), then ``repeat`` rounds, the order reversed every other
    round (:func:`..core._stats.interleave`). ``none`` is autoparallel alone (with that solver).

    Each run gets fresh mesh-blind caches, so every run pays the same build. ``progress`` (the CLI
    passes stderr) gets a line when each run starts and ends.

    ``one_build``: build once and run every row on it with the :class:`~..workbench.Workbench`
    (restored exactly between rows); each row's build column is then the plugin's additions only,
    and :attr:`CompareResult.shared_build` the one build.
    """
    from ..formulations import make_formulation
    from ..harness import cpu_mesh, device_name, fresh_strategy_cache
    from ..plan._solvers import solver_config

    for form, solver in rows:
        if form != BASELINE:
            make_formulation(form)  # a registered name or 'pkg.mod:Class'; raises with close names
        solver_config(solver)  # validates, and says how to install HiGHS
    if repeat < 1:
        raise InvalidOptionError(f"repeat must be >= 1, got {repeat}")
    if warmup < 0:
        raise InvalidOptionError(f"warmup must be >= 0, got {warmup}")
    keys = [(str(f), str(s)) for f, s in rows]
    shape = tuple(int(s) for s in mesh_shape)
    spec = lab_model(model, shape, size=size, layers=layers, dim=dim)
    mesh = cpu_mesh(shape, spec.mesh_dim_names)

    def run(key: tuple[str, str]) -> RunSummary:
        form, solver = key
        with fresh_strategy_cache():
            summary, _ = run_model(
                spec.model,
                spec.input_fn,
                mesh,
                name=spec.name,
                formulation=form,
                input_placements=list(spec.input_placements),
                output_placements=list(spec.output_placements) if spec.output_placements else None,
                mp_policy=spec.mp_policy,
                parameter_memory_constraint=spec.parameter_memory_constraint,
                solver=solver,
                time_limit=time_limit,
                apply=apply,
            )
        return summary

    def on_step(step: int, total: int, key: tuple[str, str], is_warmup: bool) -> None:
        if progress is not None:
            tag = " (warm-up)" if is_warmup else ""
            print(f"[{step}/{total}] {model} {key[0]}/{key[1]}{tag} ...", file=progress, flush=True)

    def on_done(step: int, total: int, key: tuple[str, str], is_warmup: bool, s: RunSummary) -> None:
        if progress is not None:
            tag = " (warm-up)" if is_warmup else ""
            print(
                f"[{step}/{total}] {model} {key[0]}/{key[1]}{tag}: build {s.build_s:.2f}s, solve {s.solve_s:.2f}s, "
                f"cpu {s.build_solve_cpu_s:.2f}s, objective {s.objective:.3f}, audit {s.audit}",
                file=progress,
                flush=True,
            )

    machine = _machine()
    machine["load_start"] = _load()
    shared: tuple[float, float] | None = None
    with device_name(device):
        if one_build:
            measured, warmups, shared = _one_build_rows(
                spec, mesh, keys, repeat=repeat, warmup=warmup, time_limit=time_limit, apply=apply,
                on_step=on_step, on_done=on_done,
            )
        else:
            measured, warmups = interleave(keys, run, repeat=repeat, warmup=warmup, on_step=on_step, on_done=on_done)
    machine["load_end"] = _load()
    return CompareResult(
        model=model,
        description=spec.description,
        mesh=shape,
        repeat=repeat,
        warmup=warmup,
        rows=[
            RowRuns(formulation=f, solver=s, runs=tuple(measured[(f, s)]), warmups=tuple(warmups[(f, s)]))
            for f, s in keys
        ],
        machine=machine,
        shared_build=shared,
    )


def _one_build_rows(
    spec: Any,
    mesh: Any,
    keys: list[tuple[str, str]],
    *,
    repeat: int,
    warmup: int,
    time_limit: float | None,
    apply: bool,
    on_step: Callable[..., None],
    on_done: Callable[..., None],
) -> tuple[dict[Any, list[RunSummary]], dict[Any, list[RunSummary]], tuple[float, float]]:
    """The lab's rows on one build: each a workbench row, as a :class:`RunSummary`."""
    from ..core._stats import cpu_seconds
    from ..harness import fresh_strategy_cache
    from ..workbench import Workbench

    t0, c0 = time.perf_counter(), cpu_seconds()
    with fresh_strategy_cache(), spec.enter(mesh) as autop:
        spec.constrain(autop)
        shared = (time.perf_counter() - t0, cpu_seconds() - c0)
        bench = Workbench(autop, apply=apply)

        def run(key: tuple[str, str]) -> RunSummary:
            row = bench.run(key[0], key[1], time_limit=time_limit)
            return RunSummary(
                model=spec.name, mesh=tuple(mesh.shape), formulation=row.formulation, solver=row.solver,
                variables=row.variables, constraints=row.constraints, build_s=row.plugin_s, plugin_s=row.plugin_s,
                solve_s=row.solve_s, apply_s=row.apply_s, objective=row.objective,
                table_nodes=len(row.table_choices), constrained_nodes=0, redistributes=row.redistributes,
                audit=row.audit, audit_ok=row.audit_ok, build_cpu_s=row.plugin_cpu_s, solve_cpu_s=row.solve_cpu_s,
                enter_s=0.0, enter_cpu_s=0.0, plugin_cpu_s=row.plugin_cpu_s, comm_cost=row.comm_cost,
                rounds=row.rounds, gave_way=row.gave_way, solver_status=row.solver_status,
            )

        measured, warmups = interleave(keys, run, repeat=repeat, warmup=warmup, on_step=on_step, on_done=on_done)
    return measured, warmups, shared


def ratio_lines(result: CompareResult) -> list[str]:
    """One line per row: build+solve over autoparallel alone with CBC, wall and CPU, as paired
    ratios with their spread and verdict (``within noise`` when the spread contains 1.0)."""
    base = result.baseline
    if base is None:
        return []
    lines = []
    ratios = result.ratios()
    for r in result.rows:
        if r is base:
            continue
        wall, cpu = ratios[r.label]["wall"], ratios[r.label]["cpu"]
        same = abs(r.first.objective - base.first.objective) <= 1e-6 * max(1.0, abs(base.first.objective))
        lines.append(
            f"{r.label} / {base.label} build+solve: wall {wall.format()}, cpu {cpu.format()}; "
            f"objective {'=' if same else '!='} {base.label}"
        )
    return lines


def render_compare(result: CompareResult) -> str:
    """The lab's table, with the paired ratios against autoparallel alone with CBC."""
    lines = [
        f"{result.description} on a {'x'.join(map(str, result.mesh))} CPU mesh",
        result.heading(),
        render_table(result.rows, COMPARE_COLUMNS),
    ]
    for r in result.rows:
        if r.varies:
            lines.append(f"note: {r.label} changed between repeats: {', '.join(r.varies)}")
    lines += ratio_lines(result)
    return "\n".join(lines)


def result_payload(result: CompareResult) -> dict[str, Any]:
    """The lab's rows (every repeat and warm-up run), spreads and ratios, JSON-ready."""

    def row(r: RowRuns) -> dict[str, Any]:
        return {
            "label": r.label,
            "formulation": r.formulation,
            "solver": r.solver,
            "build_solve_s": r.wall.as_dict(),
            "build_solve_cpu_s": r.cpu.as_dict(),
            "build_s": r.spread(lambda s: s.build_s).as_dict(),
            "solve_s": r.spread(lambda s: s.solve_s).as_dict(),
            "varies": list(r.varies),
            "samples": [asdict(s) for s in r.runs],
            "warmups": [asdict(s) for s in r.warmups],
        }

    return {
        "model": result.model,
        "description": result.description,
        "mesh": list(result.mesh),
        "repeat": result.repeat,
        "warmup": result.warmup,
        "machine": result.machine,
        "shared_build_s": list(result.shared_build) if result.shared_build is not None else None,
        "rows": [row(r) for r in result.rows],
        "ratios": {
            label: {kind: ratio.as_dict() for kind, ratio in pair.items()} for label, pair in result.ratios().items()
        },
    }


def write_json(result: CompareResult, path: str) -> None:
    """The lab's rows, every repeat and the ratios as JSON."""
    with open(path, "w") as f:
        json.dump(result_payload(result), f, indent=2)


def draw_png(result: CompareResult, path: str) -> None:
    """Write :func:`compare_figure` to ``path`` as a PNG."""
    fig = compare_figure(result)  # raises InvalidOptionError without matplotlib
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=100)
    plt.close(fig)


def compare_figure(result: CompareResult) -> Any:
    """A matplotlib Figure of three panels: build+solve seconds per row (median build and solve
    stacked, a min–max error bar, each repeat a dot); build+solve over autoparallel alone (wall
    and CPU paired ratios, median with min–max error bars, the line at 1.0; hollow markers where
    within noise); objective and comm cost per row."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InvalidOptionError(
            f"the PNG needs matplotlib ({exc}): pip install \"autoparallel-constraints[lab]\""
        ) from None
    rows = result.rows
    labels = [r.label for r in rows]
    xs = list(range(len(labels)))
    fig, (ax_t, ax_r, ax_c) = plt.subplots(
        1, 3, figsize=(min(22.0, max(14.0, 2.2 * len(labels))), 5.2), gridspec_kw={"width_ratios": [1.2, 1.0, 1.0]}
    )
    build = [r.spread(lambda s: s.build_s).median for r in rows]
    solve = [r.spread(lambda s: s.solve_s).median for r in rows]
    walls = [r.wall for r in rows]
    ax_t.bar(xs, build, label="build s (median)", color="#4c72b0")
    ax_t.bar(xs, solve, bottom=build, label="solve s (median)", color="#dd8452")
    ax_t.errorbar(
        xs, [w.median for w in walls],
        yerr=[[w.median - w.low for w in walls], [w.high - w.median for w in walls]],
        fmt="k_", markersize=14, ecolor="black", elinewidth=1.5, capsize=6,
        label="build+solve median, min-max",
    )
    for x, w in zip(xs, walls):
        ax_t.plot([x + 0.22] * w.n, w.samples, "k.", markersize=4)
    ax_t.set_title(f"seconds per row: median build + median solve; {result.repeat} repeats", fontsize=10)
    ax_t.set_xticks(xs, labels, rotation=30, ha="right")
    ax_t.set_ylim(0, 1.25 * max(max(w.high for w in walls), max(b + s for b, s in zip(build, solve))))
    ax_t.legend(loc="upper right", ncols=2, fontsize=8)

    ratios = result.ratios()
    base = result.baseline
    if ratios and base is not None:
        others = [r.label for r in rows if r is not base]
        rx = list(range(len(others)))
        for offset, kind, color in ((-0.12, "wall", "#4c72b0"), (0.12, "cpu", "#55a868")):
            for i, label in enumerate(others):
                ratio = ratios[label][kind]
                s = ratio.spread
                ax_r.errorbar(
                    [i + offset], [s.median], yerr=[[s.median - s.low], [s.high - s.median]], fmt="o",
                    color=color, mfc="white" if ratio.within_noise else color, capsize=5, elinewidth=1.5,
                )
        ax_r.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        spreads = [pair[kind].spread for pair in ratios.values() for kind in ("wall", "cpu")]
        low, high = min(1.0, *(s.low for s in spreads)), max(1.0, *(s.high for s in spreads))
        margin = 0.15 * (high - low) or 0.05
        ax_r.set_ylim(low - margin, high + 2 * margin)  # room for the legend above the data
        ax_r.set_xticks(rx, others, rotation=30, ha="right")
        ax_r.set_xlim(-0.6, len(others) - 0.4)
        ax_r.set_title(f"build+solve / {base.label} (paired; hollow = within noise)", fontsize=10)
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], marker="o", color=c, linestyle="none", label=k)
                   for k, c in (("wall", "#4c72b0"), ("cpu", "#55a868"))]
        ax_r.legend(handles=handles, loc="upper right", ncols=2, fontsize=8)
    else:
        ax_r.set_axis_off()
        ax_r.text(0.5, 0.5, "no none/cbc row: no ratios", ha="center", va="center")

    width = 0.4
    ax_c.bar([x - width / 2 for x in xs], [r.first.objective for r in rows], width, label="objective", color="#55a868")
    ax_c.bar([x + width / 2 for x in xs], [r.first.comm_cost for r in rows], width, label="comm cost", color="#c44e52")
    ax_c.set_title("cost per row (autoparallel's units)")
    ax_c.set_xticks(xs, labels, rotation=30, ha="right")
    objectives = [r.first.objective for r in rows]
    if any(r.first.gave_way for r in rows) and max(objectives) > 1e4 * max(min(objectives), 1.0):
        ax_c.set_yscale("log")  # soft's penalties would flatten everything else
    else:
        ax_c.set_ylim(0, 1.2 * max(max(r.first.objective, r.first.comm_cost) for r in rows))
    ax_c.legend(loc="upper right", ncols=2, fontsize=8)
    fig.suptitle(
        f"{result.description} on a {'x'.join(map(str, result.mesh))} mesh\n{result.heading()}", fontsize=9
    )
    fig.tight_layout()
    return fig


def _compare_command(args: argparse.Namespace) -> int:
    result = compare(
        args.model,
        args.mesh,
        [f for f in args.formulations.split(",") if f],
        [s for s in args.solvers.split(",") if s],
        size=args.size,
        layers=args.layers,
        dim=args.dim,
        repeat=args.repeat,
        warmup=args.warmup,
        time_limit=args.time_limit,
        device=args.device_name,
        progress=sys.stderr,
        one_build=args.one_build,
    )
    print(render_compare(result))
    if args.json:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if args.png:
        draw_png(result, args.png)
        print(f"wrote {args.png}")
    return 0


def add_compare_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """``compare``: every formulation × solver on one model, one table, JSON and a PNG."""
    p = subparsers.add_parser(
        "compare",
        help="formulation lab: formulations x solvers on one model (table, JSON, PNG)",
        description=(
            "Run autoparallel alone ('none') and each formulation with each solver on one model in "
            "one process, interleaved (a warm-up round, discarded, then --repeat rounds), and print "
            "one table: ILP size, median and min-max build+solve seconds (wall and CPU), objective, "
            "comm cost, redistributes inserted, audit verdict; then each row's paired ratio to "
            "none/cbc, called 'within noise' when its min-max contains 1.0."
        ),
    )
    p.add_argument("--model", choices=sorted(LAB_MODELS), default="seed")
    p.add_argument("--mesh", type=parse_mesh, default=(2, 4), help="mesh shape, e.g. 2x4 (default) or 8x8")
    p.add_argument("--formulations", default="none,strict,explicit,soft,lazy", help="comma list; 'none' = autoparallel alone; your own: a registered name or package.module:Class")
    p.add_argument("--solvers", default="cbc,highs", help="comma list of cbc, highs, highs-lp")
    p.add_argument("--size", choices=SIZES, default="full", help="model size: full (default) or tiny (seconds, for tests)")
    p.add_argument("--layers", type=int, default=None, help="layers (llama3: 2, falcon: 1 by default)")
    p.add_argument("--dim", type=int, default=None, help="hidden size (llama3: 4096, falcon: 4544 at full size)")
    p.add_argument("--repeat", type=int, default=3, help="measured runs per row (default 3): median and min-max")
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds over every row, discarded (default 1)")
    p.add_argument("--time-limit", type=float, default=None, help="solver time limit per optimize_placement (s)")
    p.add_argument("--device-name", default="H100", help="GPU whose limits the cost model uses (CPU run)")
    p.add_argument(
        "--one-build", action="store_true",
        help="build once and solve every row on that build (the Workbench; restored exactly between rows)",
    )
    p.add_argument("--json", default=None, help="write every repeat, the spreads and the ratios as JSON to this file")
    p.add_argument("--png", default=None, help="draw times with error bars, ratios and costs to this PNG (matplotlib)")
    p.set_defaults(func=_compare_command)
    return p
