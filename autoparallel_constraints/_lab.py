"""Run one model through autoparallel with and without the plugin and summarize what happened;
the formulation lab (``python -m autoparallel_constraints compare``).

Used by the demo (``python -m autoparallel_constraints demo``), the lab, the tests and the
benchmarks, so the figures they print are measured the same way: wall seconds and CPU seconds
(this process plus waited-for children, i.e. the CBC subprocess) per phase, so a busy machine
shows up as wall > CPU instead of silently skewing a ratio.

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
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO, TypeVar

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ._audit import AuditReport, audit
from ._cli import parse_mesh
from ._stats import Ratio, Spread, interleave, paired_ratio
from .errors import InvalidOptionError
from .models import SEED_CONFIG, SeedBlock, SeedConfig

logger = logging.getLogger(__name__)

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
    "write_json",
]

BASELINE = "none"
R = TypeVar("R")


def _cpu_seconds() -> float:
    """CPU seconds of this process (all threads) plus its waited-for children (the CBC binary)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """Figures of one solve+apply, all measured in this process."""

    model: str
    mesh: tuple[int, ...]
    formulation: str  # "none" for autoparallel alone
    variables: int
    constraints: int
    build_s: float  # AutoParallel.__enter__ (trace, strategies, ILP) + the plugin's additions
    plugin_s: float  # the plugin's share of build_s
    solve_s: float
    apply_s: float
    objective: float
    table_nodes: int
    constrained_nodes: int
    redistributes: int
    audit: str
    audit_ok: bool
    solver: str = "cbc"
    build_cpu_s: float = 0.0  # CPU seconds of build_s (process + children)
    solve_cpu_s: float = 0.0
    enter_s: float = 0.0  # autoparallel's own build: AutoParallel.__enter__
    plugin_hook_s: float = 0.0  # the plugin's Python work around the solves (objective, pins, checks)
    comm_cost: float = 0.0  # the plan's communication cost (autoparallel's model) + plugin redistributions
    rounds: int = 1  # solves of the plan (lazy: cutting-plane rounds)
    gave_way: int = 0  # table sites whose rule gave way (soft)
    solver_status: str = ""  # last plan solve, e.g. "Optimal", "time limit hit: feasible plan ..."
    # CPU seconds of this process for enter_s and plugin_s (None in runs recorded before they were):
    # on a shared machine a short window's wall time swings with whatever else runs in it
    enter_cpu_s: float | None = None
    plugin_cpu_s: float | None = None

    @property
    def build_solve_s(self) -> float:
        return self.build_s + self.solve_s

    @property
    def build_solve_cpu_s(self) -> float:
        return self.build_cpu_s + self.solve_cpu_s

    @property
    def label(self) -> str:
        return f"{self.formulation}/{self.solver}"


def render_table(rows: Sequence[R], columns: Sequence[tuple[str, str, Callable[[R], str]]]) -> str:
    """A plain-text table, one line per row; ``columns`` are (header, alignment, cell)."""
    cells = [[fmt(r) for _, _, fmt in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(f"{v:{a}{w}}" for v, (_, a, _), w in zip(values, columns, widths))

    out = [line([h for h, _, _ in columns]), line(["-" * w for w in widths])]
    out += [line(c) for c in cells]
    return "\n".join(out)


def run_model(
    model: torch.nn.Module,
    input_fn: Callable[[], Any],
    mesh: Any,
    *,
    name: str,
    formulation: str | None,
    input_placements: Sequence[tuple[Placement, ...] | None] | None = None,
    output_placements: Sequence[tuple[Placement, ...] | None] | None = None,
    mp_policy: Any = None,
    parameter_memory_constraint: bool = False,
    configure: Callable[[Any], None] | None = None,
    ops: Any = None,
    plugin_options: dict[str, Any] | None = None,
    apply: bool = True,
    after_apply: Callable[[Any], None] | None = None,
    solver: str = "cbc",
    time_limit: float | None = None,
) -> tuple[RunSummary, AuditReport | None]:
    """Trace, optionally add the plugin, solve, apply and audit ``model`` on ``mesh``.

    ``configure(autop)`` runs after the input/output constraints and before the plugin, for pins.
    ``after_apply(autop)`` runs inside the ``with`` block after the audit (e.g. Inductor lowering).
    ``solver``/``time_limit`` go to ``add_op_constraints``; without a formulation, a solver other
    than CBC (or a time limit) is installed with ``use_solver`` and plain CBC is autoparallel's own.
    The caller provides the CPU harness (device name, fresh caches) when needed.
    """
    from autoparallel.api import AutoParallel

    from ._report import constraint_report
    from ._solvers import use_solver

    t0 = time.perf_counter()
    c0 = _cpu_seconds()
    with AutoParallel(model, input_fn, mesh, mp_policy) as autop:
        t_enter = time.perf_counter() - t0
        c_enter = _cpu_seconds() - c0
        if input_placements is not None:
            autop.add_input_constraints(list(input_placements))
        if output_placements is not None:
            autop.add_output_constraints(list(output_placements))
        if parameter_memory_constraint:
            autop.add_parameter_memory_constraint()
        if configure is not None:
            configure(autop)
        plugin_s = plugin_cpu = 0.0
        table_nodes = constrained = 0
        hook = None
        if formulation is not None and formulation != BASELINE:
            t1 = time.perf_counter()
            c1 = _cpu_seconds()
            options = {"solver": solver, "time_limit": time_limit, **(plugin_options or {})}
            added = autop.add_op_constraints(ops, formulation=formulation, **options)
            plugin_s = time.perf_counter() - t1
            plugin_cpu = _cpu_seconds() - c1
            table_nodes, constrained = len(added.nodes), len(added.constrained_nodes)
        elif solver != "cbc" or time_limit is not None:
            hook = use_solver(autop, solver, time_limit=time_limit)
        opt = autop.sharding_optimizer
        t2 = time.perf_counter()
        c2 = _cpu_seconds()
        placement = autop.optimize_placement()
        solve_s = time.perf_counter() - t2
        solve_cpu = _cpu_seconds() - c2
        objective = float(opt.prob.objective.value())
        creport = constraint_report(autop)
        comm_cost = _comm_cost(opt, placement) + sum(
            site.cost for site in (creport.sites if creport else ()) if site.outcome == "repaired"
        )
        outcomes = creport.solves if creport else (hook.outcomes if hook else ())
        plans = [o for o in outcomes if o.purpose == "plan"]
        n_vars = len(opt.prob.variables())
        n_cons = len(opt.prob.constraints)
        report: AuditReport | None = None
        apply_s = 0.0
        if apply:
            t3 = time.perf_counter()
            autop.apply_placement(placement)
            apply_s = time.perf_counter() - t3
            report = audit(autop)
            if after_apply is not None:
                after_apply(autop)
        if not table_nodes and report is not None:
            table_nodes = report.table_nodes
    summary = RunSummary(
        model=name,
        mesh=tuple(mesh.shape),
        formulation=formulation or BASELINE,
        variables=n_vars,
        constraints=n_cons,
        build_s=t_enter + plugin_s,
        plugin_s=plugin_s,
        solve_s=solve_s,
        apply_s=apply_s,
        objective=objective,
        table_nodes=table_nodes,
        constrained_nodes=constrained,
        redistributes=len(report.redistributes) if report else 0,
        audit=report.verdict if report else "not applied",
        audit_ok=report.ok if report else False,
        solver=solver,
        build_cpu_s=c_enter + plugin_cpu,
        solve_cpu_s=solve_cpu,
        enter_s=t_enter,
        enter_cpu_s=c_enter,
        plugin_cpu_s=plugin_cpu,
        plugin_hook_s=creport.hook_seconds if creport else 0.0,
        comm_cost=comm_cost,
        rounds=max(len(plans), 1),
        gave_way=len(creport.gave_way) if creport else 0,
        solver_status=plans[-1].describe() if plans else "autoparallel's CBC",
    )
    logger.info("%s", summary)
    return summary, report


def _comm_cost(opt: Any, placement: dict[torch.fx.Node, Any]) -> float:
    """The plan's communication cost by autoparallel's own accounting (``_compute_solution_cost``)."""
    try:
        return float(opt._compute_solution_cost(opt._to_concrete_solution(placement))["comm"])
    except Exception as exc:  # noqa: BLE001 - a figure for the lab, never a reason to fail a run
        logger.warning("comm cost unavailable: %s", exc)
        return float("nan")


def seed_mp_policy() -> Any:
    """The seed's mixed precision: bf16 params, fp32 reduce."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def run_seed(
    formulation: str | None,
    mesh: Any,
    *,
    config: SeedConfig = SEED_CONFIG,
    mixed_precision: bool = True,
    **kwargs: Any,
) -> tuple[RunSummary, AuditReport | None]:
    """The seed block of #348 with the seed's input constraint ``(Shard(0), Replicate, ...)``."""
    with torch.device("meta"):
        model = SeedBlock(config)
    first = (Shard(0),) + (Replicate(),) * (mesh.ndim - 1)
    kwargs.setdefault("input_placements", [first])
    return run_model(
        model,
        lambda: model.make_input(),
        mesh,
        name="seed",
        formulation=formulation,
        mp_policy=seed_mp_policy() if mixed_precision else None,
        **kwargs,
    )


# ---------------------------------------------------------------------------------------------
# The formulation lab: models, the compare runner, JSON, PNG, command line


@dataclass(frozen=True, kw_only=True, slots=True)
class LabModel:
    """One model as the lab runs it: the module (on meta), its input, and the user constraints."""

    name: str
    description: str
    model: torch.nn.Module
    input_fn: Callable[[], Any]
    input_placements: tuple[tuple[Placement, ...], ...]
    output_placements: tuple[tuple[Placement, ...], ...] | None = None
    mp_policy: Any = None
    parameter_memory_constraint: bool = False
    mesh_dim_names: tuple[str, ...] | None = None


def _seed_model(mesh_shape: tuple[int, ...], *, size: str, layers: int | None, dim: int | None) -> LabModel:
    config = SEED_CONFIG if size == "full" else SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)
    with torch.device("meta"):
        model = SeedBlock(config)
    first = (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)
    return LabModel(
        name="seed",
        description=(
            f"seed block of upstream #348 ({config.num_heads} heads x {config.head_dim}, batch "
            f"{config.batch}, seq {config.seq}, bf16 params / fp32 reduce)"
        ),
        model=model,
        input_fn=lambda: model.make_input(),
        input_placements=(first,),
        mp_policy=seed_mp_policy(),
    )


def _llama3_model(mesh_shape: tuple[int, ...], *, size: str, layers: int | None, dim: int | None) -> LabModel:
    """autoparallel's own llama3 test model, configured as upstream's example_llama3.py (8B shape).

    Full size: ``dim`` 4096, 32 heads / 8 kv heads, vocab 128256, seq 8192, batch 2 x mesh[0],
    param-memory constraint, input ``(S(0), R)``, output ``(S(0), S(2))`` (vocab parallel) on a
    2-D mesh. ``tiny``: dim 256, 4 heads / 2 kv heads, vocab 512, seq 64 (for tests).
    """
    from autoparallel._testing.models.llama3 import Transformer, TransformerModelArgs

    n_layers = layers if layers is not None else 2
    if size == "full":
        vocab, seqlen = 128256, 2048 * 4
        args = TransformerModelArgs(
            dim=dim or 4096, n_layers=n_layers, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
            multiple_of=1024, rope_theta=500000, vocab_size=vocab, max_seq_len=seqlen,
        )
    else:
        vocab, seqlen = 512, 64
        args = TransformerModelArgs(
            dim=dim or 256, n_layers=n_layers, n_heads=4, n_kv_heads=2, multiple_of=64,
            vocab_size=vocab, max_seq_len=seqlen,
        )
    batch = 2 * mesh_shape[0]
    with torch.device("meta"):
        model = Transformer(args)
    first = (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)
    output = (Shard(0), Shard(2)) if len(mesh_shape) == 2 else first
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return LabModel(
        name="llama3",
        description=(
            f"autoparallel's llama3, {n_layers} layers, dim {args.dim}, {args.n_heads} heads / "
            f"{args.n_kv_heads} kv, vocab {vocab}, batch {batch}, seq {seqlen}, bf16/fp32"
        ),
        model=model,
        input_fn=lambda: torch.randint(0, vocab, (batch, seqlen)),
        input_placements=(first,),
        output_placements=(output,),
        mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
        parameter_memory_constraint=True,
        mesh_dim_names=("dp", "tp") if len(mesh_shape) == 2 else None,
    )


class _CausalLMLogits(torch.nn.Module):
    """Return only the logits of a HF causal LM (autoparallel traces tensors, not ModelOutput)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=input_ids, use_cache=False).logits


def _falcon_model(mesh_shape: tuple[int, ...], *, size: str, layers: int | None, dim: int | None) -> LabModel:
    """HF transformers' FalconForCausalLM from a local FalconConfig (nothing is downloaded).

    Full size: 1 layer, hidden 4544 (71 heads x 64, multi-query), vocab 65024, batch 2 x mesh[0],
    seq 2048 — the model of upstream #348. ``tiny``: hidden 128 (8 heads x 16), vocab 256, seq 32.
    Needs ``transformers``.
    """
    try:
        from transformers import FalconConfig, FalconForCausalLM
    except ImportError as exc:
        raise InvalidOptionError(
            f"--model falcon needs HF transformers ({exc}); pip install transformers"
        ) from None
    n_layers = layers if layers is not None else 1
    if size == "full":
        hidden, heads, vocab, seqlen = dim or 4544, 71, 65024, 2048
    else:
        hidden, heads, vocab, seqlen = dim or 128, 8, 256, 32
    config = FalconConfig(
        hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=n_layers, vocab_size=vocab,
        multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False, alibi=False,
        use_cache=False,
    )
    batch = 2 * mesh_shape[0]
    with torch.device("meta"):
        model = _CausalLMLogits(FalconForCausalLM(config))
    first = (Shard(0),) + (Replicate(),) * (len(mesh_shape) - 1)
    return LabModel(
        name="falcon",
        description=f"HF FalconForCausalLM, {n_layers} layer(s), hidden {hidden} ({heads} heads, multi-query), vocab {vocab}, batch {batch}, seq {seqlen}",
        model=model,
        input_fn=lambda: torch.randint(0, vocab, (batch, seqlen)),
        input_placements=(first,),
        mp_policy=seed_mp_policy(),
    )


LAB_MODELS: dict[str, Callable[..., LabModel]] = {
    "seed": _seed_model,
    "llama3": _llama3_model,
    "falcon": _falcon_model,
}
SIZES = ("full", "tiny")


def lab_model(
    name: str, mesh_shape: Sequence[int], *, size: str = "full", layers: int | None = None, dim: int | None = None
) -> LabModel:
    """Build the lab model ``name`` (``seed``, ``llama3``, ``falcon``) for ``mesh_shape``."""
    if name not in LAB_MODELS:
        raise InvalidOptionError(f"unknown model {name!r}; available: {', '.join(LAB_MODELS)}")
    if size not in SIZES:
        raise InvalidOptionError(f"size must be one of {SIZES}, got {size!r}")
    return LAB_MODELS[name](tuple(int(s) for s in mesh_shape), size=size, layers=layers, dim=dim)


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
        return (
            f"median [min-max] of {self.repeat} interleaved repeat{'s' if self.repeat != 1 else ''} per "
            f"row after {self.warmup} warm-up round{'s' if self.warmup != 1 else ''} (discarded){load}"
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
) -> CompareResult:
    """Run each ``(formulation, solver)`` row on ``model`` in this process, interleaved: ``warmup``
    rounds over every row (discarded), then ``repeat`` rounds, the order reversed every other
    round (:func:`._stats.interleave`). ``none`` is autoparallel alone (with that solver).

    Each run gets fresh mesh-blind caches, so every run pays the same build. ``progress`` (the CLI
    passes stderr) gets a line when each run starts and ends.
    """
    from ._solvers import solver_config
    from .formulations import make_formulation
    from .testing import cpu_mesh, device_name, fresh_strategy_cache

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
    with device_name(device):
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
    )


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
    p.add_argument("--json", default=None, help="write every repeat, the spreads and the ratios as JSON to this file")
    p.add_argument("--png", default=None, help="draw times with error bars, ratios and costs to this PNG (matplotlib)")
    p.set_defaults(func=_compare_command)
    return p
