"""Proof by mutation: break one thing in a correct parallel graph and check the verifier agrees
with the numbers.

A *source* is a model, its interface pins and the call that configures the plugin; built on a
mesh the way the numerics harness builds it (:func:`~..harness._parallel.apply_on_one_rank`:
``dynamic=True``, compile_on_one_rank, so rank coordinates stay symbolic) it gives one correct
parallel graph. A *mutation operator* finds every site of that graph where it applies and, per
site, returns a copy of the graph with exactly one thing broken. Every mutant is named by the
reproducible tuple ``(source, mesh, operator, node, variant)`` (:class:`MutantId`).

Each mutant is run under LocalTensorMode against the single-device reference
(:func:`~..harness._parallel.run_parallel_graph` + :func:`~..harness._numerics.compare`; raising at run time is
``crash``, which is numerically wrong) and then given to the verifier (``apc.verify(autop,
gm=mutant)``). The two verdicts give one of four outcomes (:data:`OUTCOMES`):

========  =========  ========  ===============================================================
numbers   verifier   outcome   meaning
========  =========  ========  ===============================================================
wrong     flagged    caught    the verifier saw the break
wrong     clean      MISS      the verifier let a wrong graph through (must be 0)
exact     clean      fine      the break does not change the numbers (e.g. a redundant collective)
exact     flagged    flagged   the verifier rejects a graph that computes the right thing
========  =========  ========  ===============================================================

The unmutated graph of every (source, mesh) is checked too, as operator ``none``: it must be
``fine``.

The operators are in ``_mutants``.

Usage::

    python -m autoparallel_constraints mutate --sources seed --meshes 2x2 --json out.json

or :func:`run_mutations` from Python. Building a source takes ~10-60 s; every mutant of one
(source, mesh) shares that build, and one LocalTensorMode run takes well under a second at these
sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from ..harness._cpu import cpu_mesh, device_name
from ..harness._numerics import Reference, build_reference, compare
from ..harness._parallel import apply_on_one_rank, run_parallel_graph
from ..harness._yardstick import against_float64
from ._mutants import OPERATORS, NotConstructible, Site, find_sites, make_mutant

if TYPE_CHECKING:
    from autoparallel.api import AutoParallel
    from torch.fx import GraphModule


logger = logging.getLogger(__name__)

__all__ = ["Built", "MESHES", "MESHES_3D", "MutantId", "MutantResult", "MutationReport", "NumbersCache", "OUTCOMES", "Placements", "Skipped", "Source", "Verifier", "add_subcommand", "build_source", "classify", "default_verifier", "mutate_built", "run_mutations", "sources"]

Placements = tuple[Placement, ...]
MESHES: tuple[tuple[int, ...], ...] = ((2,), (2, 2), (2, 4), (4, 2))
# built only when named with ``--meshes``: a 3-D build of a source takes 4-11 min on 2 cores
MESHES_3D: tuple[tuple[int, ...], ...] = ((2, 2, 2),)

# numbers x verifier -> outcome (the module docstring's table)
OUTCOMES: dict[tuple[bool, bool], str] = {
    (True, True): "caught",  # wrong, flagged
    (True, False): "MISS",  # wrong, clean
    (False, False): "fine",  # exact, clean
    (False, True): "flagged",  # exact, flagged
}


def classify(numerics: str, verdict: str) -> str:
    """Outcome of one mutant: ``numerics`` is exact/wrong/crash, ``verdict`` clean/flagged/error.

    A crash is numerically wrong; a verifier that raised did not call the graph clean.
    """
    if numerics not in ("exact", "wrong", "crash"):
        raise ValueError(f"numerics must be exact, wrong or crash, got {numerics!r}")
    if verdict not in ("clean", "flagged", "error"):
        raise ValueError(f"verdict must be clean, flagged or error, got {verdict!r}")
    return OUTCOMES[(numerics != "exact", verdict != "clean")]


# --------------------------------------------------------------------------------------------
# Sources of correct parallel graphs
# --------------------------------------------------------------------------------------------


class _Logits(nn.Module):
    """A causal LM's logits as a plain tensor (transformers returns an output object)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        out = self.model(ids)
        return getattr(out, "logits", out)


def _batch_pins(ndim: int) -> list[Placements]:
    return [(Shard(0),) + (Replicate(),) * (ndim - 1)]


@dataclass(frozen=True, kw_only=True)
class Source:
    """A model, its interface pins and the plugin call: one correct parallel graph per mesh.

    ``input_placements(ndim)`` / ``output_placements(ndim)`` give the pins on a mesh of ``ndim``
    dims (an output entry None leaves it to the solver). ``configure(autop)`` runs after those
    pins and the parameter-memory constraint, then ``autop.add_op_constraints(**op_constraints)``
    (the plugin's default call when empty; None: the plugin is not called), then the solve.
    ``context()`` is active for the whole build (e.g. a strategy offered to the solver).
    """

    name: str
    model_fn: Callable[[], nn.Module]
    input_fn: Callable[[], Tensor]
    configure: Callable[[AutoParallel], None] | None = None
    op_constraints: dict[str, Any] | None = field(default_factory=dict)
    input_placements: Callable[[int], list[Placements]] = _batch_pins
    output_placements: Callable[[int], list[Placements | None]] = _batch_pins
    parameter_memory_constraint: bool = True
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    meshes: tuple[tuple[int, ...], ...] = MESHES
    on_demand_meshes: tuple[tuple[int, ...], ...] = MESHES_3D  # run when named in ``meshes`` only
    atol: float = 1e-5
    rtol: float = 1e-5
    limit: int | None = None  # at most this many sites per operator per build (a seeded sample)
    note: str = ""
    # mixed precision: built with this policy, one device runs the same precision, and every
    # floating tensor is judged by the float64 yardstick (as run_numerics(mp_policy=...) does)
    mp_policy: Any = None
    autoparallel_cls: Callable[[], type] | None = None  # an AutoParallel subclass (torchtitan's), built lazily


def _torchtitan_llama3() -> Any:
    from ._torchtitan import torchtitan_case

    return torchtitan_case("llama3", layers=2)


def _fuzz_spec() -> Any:
    from ..harness._fuzz import MENU, ModelSpec, Step

    # every menu pattern once, in menu order, between two linears; sizes even on every mesh
    steps = tuple(Step(k, 1) for k in MENU) + (Step("linear"),)
    return ModelSpec(batch=4, seq=4, heads=4, head_dim=4, steps=steps)


def sources() -> dict[str, Source]:
    """The sources by name: ``seed``, ``seed_swapped``, ``llama3``, ``falcon``, ``olmo2``, ``fuzz``,
    ``fuzz_all``."""
    from ..harness._fuzz import FuzzModel
    from ..models import SeedBlock, SeedConfig, falcon_tiny, llama3_small, zoo_model

    # conformance.SWAPPED_CONFIG and SWAPPED (not imported: conformance imports the lab, which
    # imports this package): batch == seq, so the swapped shardings have equal local shapes
    seed_cfg = SeedConfig(num_heads=6, head_dim=8, batch=8, seq=8)
    swapped = ((Shard(0), Shard(1)), (Shard(1), Shard(0)))

    def seed_input() -> Tensor:
        return torch.randn(seed_cfg.batch, seed_cfg.seq, seed_cfg.hidden)

    def swapped_configure(autop: AutoParallel) -> None:
        from ..harness._inject import find_nodes, pin_strategy, strategy_index

        (node,) = find_nodes(autop, torch.ops.aten.index_put.default)
        opt = autop.sharding_optimizer
        opt.add_node_constraint(node.args[0], swapped[0], constraint_name="pin_self")
        opt.add_node_constraint(node.args[2], swapped[1], constraint_name="pin_values")
        rr = (Replicate(), Replicate())
        pin_strategy(autop, node, strategy_index(autop, node, [swapped[0], rr, swapped[1]], swapped[0]),
                     name="pin_illegal")

    def swapped_context() -> contextlib.AbstractContextManager[Any]:
        from ..harness._inject import offer_strategy

        rr = (Replicate(), Replicate())
        return offer_strategy(
            torch.ops.aten.index_put.default, input_placements=[swapped[0], rr, swapped[1]],
            output_placements=swapped[0],
        )

    llama_model, llama_input = llama3_small()
    from ._torchtitan import (  # no torchtitan import until built
        autoparallel_graph_class,
        torchtitan_mp_policy,
    )

    titan = functools.cache(_torchtitan_llama3)
    falcon_model, falcon_input = falcon_tiny()
    spec = _fuzz_spec()
    return {
        "seed": Source(name="seed", model_fn=lambda: SeedBlock(seed_cfg), input_fn=seed_input,
                       note="seed block, 6 heads x 8, batch = seq = 8"),
        "seed_swapped": Source(
            name="seed_swapped", model_fn=lambda: SeedBlock(seed_cfg), input_fn=seed_input,
            configure=swapped_configure, op_constraints={"formulation": "explicit"}, context=swapped_context,
            parameter_memory_constraint=False,
            output_placements=lambda ndim: [None], meshes=((2, 2),), on_demand_meshes=(),
            note="issue 10's swapped index_put case: producers pinned (S0,S1)/(S1,S0), the illegal "
                 "index_put strategy offered and pinned, explicit formulation (plugin redistribute nodes)",
        ),
        # not built on 3-D: a 1-layer Falcon-style LM of these sizes went past 23 GiB on 2x2x2
        "llama3": Source(name="llama3", model_fn=lambda: _Logits(llama_model()), input_fn=llama_input,
                         atol=1e-4, rtol=1e-4, limit=3, on_demand_meshes=(), note="llama3_small(): 2 layers, dim 64"),
        "falcon": Source(name="falcon", model_fn=lambda: _Logits(falcon_model()), input_fn=falcon_input,
                         atol=1e-4, rtol=1e-4, limit=3, on_demand_meshes=(),
                         note="falcon_tiny(): 1 layer, hidden 64, multi-query"),
        # transformers' OLMo2 at tiny defaults (q/k norms over the whole projection): on 2x2 its plan
        # reduces a Partial(avg) that is replicated as it is, on the flattened mesh: the sum, then
        # the division by 4 (transformers 5.25; the zoo's olmo2 row)
        "olmo2": Source(name="olmo2", model_fn=lambda: zoo_model("olmo2")[0](), input_fn=lambda: zoo_model("olmo2")[1](),
                        atol=1e-4, rtol=1e-4, limit=3, meshes=((2, 2),), on_demand_meshes=(),
                        note="transformers OLMo2, tiny defaults, eager: the sum-then-divide reduction"),
        # transformers' Falcon-H1 at tiny defaults (Mamba2 mixer beside attention): on 2x2 with one
        # sample per rank, its backward's cat takes inputs each with several readings (the verifier
        # once refused it, exact; the zoo's falcon_h1 row)
        "falcon_h1": Source(name="falcon_h1", model_fn=lambda: zoo_model("falcon_h1")[0](),
                            input_fn=lambda: zoo_model("falcon_h1")[1](), atol=1e-4, rtol=1e-4, limit=3,
                            meshes=((2, 2),), on_demand_meshes=(), note="transformers Falcon-H1, tiny defaults, eager: a Mamba2 "
                                                   "backward's cat of inputs with several readings each"),
        # torchtitan's Llama3 with its mixed precision (bf16 parameters, fp32 reduction), built by
        # its AutoParallelGraph with its constraints; imported only when built (the torchtitan extra)
        "torchtitan_llama3": Source(
            name="torchtitan_llama3", model_fn=lambda: titan().model_fn(), input_fn=lambda: titan().input_fn(),
            input_placements=lambda ndim: list(titan().input_placements),
            output_placements=lambda ndim: list(titan().output_placements),
            parameter_memory_constraint=False,
            configure=lambda autop: autop.add_parameter_memory_constraint(low=None, high=None),
            mp_policy=torchtitan_mp_policy(), autoparallel_cls=autoparallel_graph_class, limit=3, meshes=((2, 2),),
            on_demand_meshes=(),
            note="torchtitan 0.3.0's Llama3 debug model, 2 layers, bf16 params / fp32 reduce, AutoParallelGraph",
        ),
        "fuzz": Source(
            name="fuzz", model_fn=lambda: FuzzModel(spec), input_fn=lambda: torch.randn(4, 4, 16),
            output_placements=lambda ndim: [None], parameter_memory_constraint=False, atol=1e-4, rtol=1e-4,
            note="the fuzz menu: " + ", ".join(s.kind for s in spec.steps),
        ),
        # the fuzz harness's own call: every planned redistribution a plugin node, so the plugin
        # operators have sites on every mesh
        "fuzz_all": Source(
            name="fuzz_all", model_fn=lambda: FuzzModel(spec), input_fn=lambda: torch.randn(4, 4, 16),
            output_placements=lambda ndim: [None], parameter_memory_constraint=False, atol=1e-4, rtol=1e-4,
            op_constraints={"materialize": "all"}, note="the fuzz menu, add_op_constraints(materialize='all')",
        ),
    }


@dataclass
class Built:
    """One source built on one mesh: what every mutant of it shares."""

    source: Source
    mesh_shape: tuple[int, ...]
    autop: AutoParallel
    placement: Any
    reference: Reference
    gm: GraphModule
    seconds: float


def build_source(source: Source, mesh_shape: tuple[int, ...]) -> Built:
    """Solve and apply ``source`` on ``mesh_shape`` as :func:`~..harness._numerics.run_numerics` does."""
    from autoparallel.api import AutoParallel

    start = time.perf_counter()
    ndim = len(mesh_shape)
    reference = build_reference(source.model_fn, source.input_fn, seed=0, mp_policy=source.mp_policy)
    mesh = cpu_mesh(mesh_shape)
    cls = AutoParallel if source.autoparallel_cls is None else source.autoparallel_cls()
    with torch.device("meta"):
        meta_model = source.model_fn()
    traced = [(tuple(t.shape), t.dtype) for t in reference.inputs]

    def traced_inputs() -> tuple[Tensor, ...]:
        return tuple(torch.empty(shape, dtype=dtype) for shape, dtype in traced)

    with device_name(), source.context(), cls(meta_model, traced_inputs, mesh, mp_policy=source.mp_policy,
                                              dynamic=True) as autop:
        autop.add_input_constraints(source.input_placements(ndim))
        autop.add_output_constraints(source.output_placements(ndim))
        if source.parameter_memory_constraint:
            autop.add_parameter_memory_constraint()
        if source.configure is not None:
            source.configure(autop)
        if source.op_constraints is not None:
            autop.add_op_constraints(**source.op_constraints)
        placement = autop.optimize_placement()
        gm = apply_on_one_rank(autop, placement)
    seconds = time.perf_counter() - start
    logger.info("built %s on %s in %.1f s (%d nodes)", source.name, mesh_shape, seconds, len(gm.graph.nodes))
    return Built(source=source, mesh_shape=tuple(mesh_shape), autop=autop, placement=placement,
                 reference=reference, gm=gm, seconds=seconds)


# --------------------------------------------------------------------------------------------
# Running and classifying
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class MutantId:
    """The reproducible name of one mutant: ``source@mesh:operator:node[variant]``."""

    source: str
    mesh: tuple[int, ...]
    operator: str
    node: str
    variant: str = ""

    def __str__(self) -> str:
        mesh = "x".join(map(str, self.mesh))
        return f"{self.source}@{mesh}:{self.operator}:{self.node}" + (f"[{self.variant}]" if self.variant else "")


@dataclass(frozen=True, kw_only=True, slots=True)
class MutantResult:
    """One mutant's numbers and the verifier's verdict.

    ``numerics`` is ``exact``, ``wrong`` or ``crash`` (with the worst failing check or the error
    in ``numerics_detail``); ``verdict`` is ``clean``, ``flagged`` or ``error`` (the verifier
    raised), with its first violations and unknown ops in ``verifier_detail``.
    """

    id: MutantId
    what: str
    numerics: str
    numerics_detail: str
    verdict: str
    verifier_detail: str
    unknown: int = 0
    seconds: float = 0.0
    excerpt: str = ""

    @property
    def outcome(self) -> str:
        return classify(self.numerics, self.verdict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Skipped:
    """A site that gives no mutant (not constructible) or a source that did not build."""

    id: MutantId
    reason: str


@dataclass(frozen=True, kw_only=True)
class MutationReport:
    """Every mutant's result, the sites that gave none, and the build time of every source."""

    results: tuple[MutantResult, ...]
    skipped: tuple[Skipped, ...] = ()
    builds: dict[str, float] = field(default_factory=dict)  # "source@mesh" -> seconds

    @property
    def mutants(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.results if r.id.operator != "none")

    @property
    def originals(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.results if r.id.operator == "none")

    @property
    def misses(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.mutants if r.outcome == "MISS")

    @property
    def flagged_exact(self) -> tuple[MutantResult, ...]:
        return tuple(r for r in self.mutants if r.outcome == "flagged")

    @property
    def bad_originals(self) -> tuple[MutantResult, ...]:
        """Unmutated graphs that are not exact and clean."""
        return tuple(r for r in self.originals if r.outcome != "fine")

    @property
    def ok(self) -> bool:
        """No verifier miss and every unmutated graph exact and clean."""
        return not self.misses and not self.bad_originals

    def table(self) -> list[dict[str, Any]]:
        """One row per (source, mesh, operator): counts of the four outcomes, and not constructible."""
        rows: dict[tuple[str, tuple[int, ...], str], Counter[str]] = defaultdict(Counter)
        for r in self.results:
            rows[(r.id.source, r.id.mesh, r.id.operator)][r.outcome] += 1
        for s in self.skipped:
            rows[(s.id.source, s.id.mesh, s.id.operator)]["n/c"] += 1
        return [
            {"source": src, "mesh": "x".join(map(str, mesh)), "operator": op,
             **{k: counts.get(k, 0) for k in (*OUTCOMES.values(), "n/c")}}
            for (src, mesh, op), counts in sorted(rows.items())
        ]

    def to_json(self) -> dict[str, Any]:
        def result(r: MutantResult) -> dict[str, Any]:
            d = asdict(r)
            d["id"] = str(r.id)
            d["outcome"] = r.outcome
            return d

        return {
            "ok": self.ok,
            "totals": self.totals(),
            "table": self.table(),
            "misses": [result(r) for r in self.misses],
            "flagged_exact": [result(r) for r in self.flagged_exact],
            "bad_originals": [result(r) for r in self.bad_originals],
            "results": [result(r) for r in self.results],
            "skipped": [{"id": str(s.id), "reason": s.reason} for s in self.skipped],
            "builds": self.builds,
        }

    def totals(self) -> dict[str, int]:
        counts = Counter(r.outcome for r in self.mutants)
        return {"mutants": len(self.mutants), **{k: counts.get(k, 0) for k in OUTCOMES.values()},
                "originals": len(self.originals), "bad_originals": len(self.bad_originals),
                "not_constructible": sum(1 for s in self.skipped if s.id.operator != "none")}

    def __str__(self) -> str:
        cols = ["source", "mesh", "operator", *OUTCOMES.values(), "n/c"]
        rows = [[str(row[c]) for c in cols] for row in self.table()]
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        t = self.totals()
        lines.append(
            f"mutants: {t['mutants']} (caught {t['caught']}, MISS {t['MISS']}, fine {t['fine']}, "
            f"flagged {t['flagged']}); not constructible {t['not_constructible']}; unmutated graphs "
            f"{t['originals']}, not exact+clean {t['bad_originals']}"
        )
        for title, items in (("unmutated graphs not exact and clean", self.bad_originals),
                             ("verifier misses (wrong numbers, clean verdict)", self.misses),
                             ("exact but flagged", self.flagged_exact)):
            if items:
                lines.append(f"{title}:")
                for r in items:
                    lines.append(f"  {r.id}: {r.what}")
                    lines.append(f"    numbers: {r.numerics} {r.numerics_detail}")
                    lines.append(f"    verifier: {r.verdict} {r.verifier_detail}")
        errors = [s for s in self.skipped if s.id.operator == "none"]
        for s in errors:
            lines.append(f"source did not build: {s.id}: {s.reason}")
        return "\n".join(lines)


Verifier = Callable[["AutoParallel", "GraphModule"], Any]


def default_verifier(autop: AutoParallel, gm: GraphModule) -> Any:
    """``apc.verify(autop, gm=gm)``."""
    from ..verifier._contract import verify

    return verify(autop, gm=gm)


def _numbers(built: Built, gm: GraphModule) -> tuple[str, str]:
    autop, saved = built.autop, built.autop.parallel_gm
    autop.parallel_gm = gm
    try:
        ref = built.reference
        run = run_parallel_graph(autop, built.placement, ref.model, ref.inputs, ref.grad_outputs)
        if built.source.mp_policy is not None:  # bf16 rounding: judged by the float64 yardstick only
            checks = list(against_float64(compare(ref, run), ref, run, every=True))
        else:
            checks = compare(ref, run, atol=built.source.atol, rtol=built.source.rtol)
    except Exception as exc:  # noqa: BLE001 - a mutant that raises is numerically wrong
        lines = str(exc).strip().splitlines()
        return "crash", f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
    finally:
        autop.parallel_gm = saved
    failed = [c for c in checks if not c.ok]
    if not failed:
        return "exact", ""
    worst = max(failed, key=lambda c: (c.max_abs_err if not math.isnan(c.max_abs_err) else math.inf))
    ratio = "-" if worst.ratio is None else f"{worst.ratio:.3f}"
    return "wrong", (f"{len(failed)}/{len(checks)} checks failed; worst {worst.name}: max_abs_err "
                     f"{worst.max_abs_err:.3g}, ratio {ratio}{' (' + worst.note + ')' if worst.note else ''}")


def _verdict(built: Built, gm: GraphModule, verifier: Verifier) -> tuple[str, str, int, tuple[str, ...]]:
    """``(clean | flagged | error, first violations and unknown ops, unknown count, violation nodes)``."""
    try:
        report = verifier(built.autop, gm)
    except Exception as exc:
        logger.debug("verifier raised", exc_info=True)
        return "error", f"{type(exc).__name__}: {str(exc).strip()[:300]}", 0, ()
    unknown = dict(getattr(report, "unknown", {}) or {})
    n_unknown = sum(unknown.values())
    violations = tuple(getattr(report, "violations", ()) or ())
    parts = [f"{v.kind} at {getattr(v.node, 'name', v.node)} ({v.op}): {v.reason}" for v in violations[:3]]
    if len(violations) > 3:
        parts.append(f"... {len(violations) - 3} more")
    if unknown:
        parts.append("unknown: " + ", ".join(f"{op} x{k}" for op, k in sorted(unknown.items())))
    flagged_at = tuple(str(getattr(v.node, "name", v.node)) for v in violations)
    return ("clean" if report.ok else "flagged"), "; ".join(parts)[:600], n_unknown, flagged_at


def _excerpt(gm: GraphModule, around: Sequence[str], radius: int = 4) -> str:
    """The mutant's graph around the nodes named ``around`` and its mutation nodes, as FX text
    (windows of ``radius`` nodes either side, merged; ``...`` between windows)."""
    nodes = list(gm.graph.nodes)
    names = set(around)
    marks = [i for i, n in enumerate(nodes) if n.name in names or "mutation" in n.meta]
    keep = sorted({j for i in marks for j in range(max(0, i - radius), min(len(nodes), i + radius + 1))})
    lines: list[str] = []
    for k, j in enumerate(keep):
        if k and j != keep[k - 1] + 1:
            lines.append("...")
        lines.append(nodes[j].format_node() or nodes[j].name)
    return "\n".join(lines)


class NumbersCache:
    """The numbers of mutants already run, by mutant id, checked against the mutant's code.

    LocalTensorMode runs of the larger sources take seconds each, the verifier far less: with a
    cache file the numbers of one run serve the next (e.g. after the verifier changed). An entry
    is used only if the rebuilt mutant's code hashes the same, so a build that came out different
    is run again. ``path`` None: in memory only.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.entries: dict[str, list[str]] = {}
        if path is not None:
            with contextlib.suppress(FileNotFoundError), open(path) as f:
                self.entries = json.load(f)

    @staticmethod
    def _key(gm: GraphModule) -> str:
        import hashlib

        return hashlib.sha256(gm.code.encode()).hexdigest()[:16]

    def get(self, ident: MutantId, gm: GraphModule) -> tuple[str, str] | None:
        entry = self.entries.get(str(ident))
        if entry is None or entry[0] != self._key(gm):
            return None
        return entry[1], entry[2]

    def put(self, ident: MutantId, gm: GraphModule, numerics: str, detail: str) -> None:
        self.entries[str(ident)] = [self._key(gm), numerics, detail]

    def save(self) -> None:
        if self.path is not None:
            with open(self.path, "w") as f:
                json.dump(self.entries, f, indent=0)


def _run_one(
    built: Built, ident: MutantId, gm: GraphModule, what: str, verifier: Verifier, cache: NumbersCache | None = None
) -> MutantResult:
    start = time.perf_counter()
    cached = cache.get(ident, gm) if cache is not None else None
    if cached is None:
        numerics, ndetail = _numbers(built, gm)
        if cache is not None:
            cache.put(ident, gm, numerics, ndetail)
    else:
        numerics, ndetail = cached
    verdict, vdetail, unknown, flagged_at = _verdict(built, gm, verifier)
    result = MutantResult(id=ident, what=what, numerics=numerics, numerics_detail=ndetail, verdict=verdict,
                          verifier_detail=vdetail, unknown=unknown, seconds=time.perf_counter() - start)
    if result.outcome in ("MISS", "flagged") or (ident.operator == "none" and result.outcome != "fine"):
        result = MutantResult(**{**{f: getattr(result, f) for f in result.__slots__},
                                 "excerpt": _excerpt(gm, (ident.node, *flagged_at[:2]))})
    logger.info("%s: %s (%s / %s)", ident, result.outcome, numerics, verdict)
    return result


def mutate_built(
    built: Built,
    *,
    operators: Sequence[str] | None = None,
    verifier: Verifier = default_verifier,
    limit: int | None = None,
    seed: int = 0,
    cache: NumbersCache | None = None,
) -> tuple[list[MutantResult], list[Skipped]]:
    """The unmutated graph and every mutant of one build. ``limit`` keeps at most that many sites
    per operator (a seeded sample, the same for the same graph)."""
    src, mesh = built.source.name, built.mesh_shape
    results = [_run_one(built, MutantId(src, mesh, "none", "-"), built.gm, "unmutated", verifier, cache)]
    skipped: list[Skipped] = []
    by_op: dict[str, list[Site]] = defaultdict(list)
    for site in find_sites(built.gm, operators):
        by_op[site.operator].append(site)
    for op, sites in by_op.items():
        if limit is not None and len(sites) > limit:
            sites = sorted(random.Random(f"{seed}:{src}:{mesh}:{op}").sample(sites, limit))
        for site in sites:
            ident = MutantId(src, mesh, site.operator, site.node, site.variant)
            try:
                gm, what = make_mutant(built.gm, site)
            except NotConstructible as exc:
                skipped.append(Skipped(id=ident, reason=str(exc)))
                continue
            results.append(_run_one(built, ident, gm, what, verifier, cache))
    return results, skipped


def run_mutations(
    source_names: Sequence[str] | None = None,
    meshes: Sequence[tuple[int, ...]] | None = None,
    *,
    operators: Sequence[str] | None = None,
    verifier: Verifier = default_verifier,
    limit: int | None = None,
    seed: int = 0,
    materialize: str | None = None,
    numbers_cache: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> MutationReport:
    """Build every source on every mesh it supports (one build per pair) and run all its mutants.

    ``meshes`` None means each source's own meshes (:data:`MESHES`, or fewer); otherwise the
    intersection with those and its on-demand meshes (:data:`MESHES_3D`). ``materialize`` overrides the plugin call's ``materialize`` for every source
    (None: each source's own call). A source that fails to build is reported in ``skipped`` as
    operator ``none``. ``numbers_cache`` names a JSON file of :class:`NumbersCache`, read first
    and written after every build.
    """
    cache = NumbersCache(numbers_cache)
    table = sources()
    if materialize is not None:
        table = {n: replace(s, op_constraints={**(s.op_constraints or {}), "materialize": materialize})
                 for n, s in table.items()}
    names = list(table) if source_names is None else list(source_names)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise KeyError(f"unknown sources {unknown}; there are: {', '.join(table)}")
    results: list[MutantResult] = []
    skipped: list[Skipped] = []
    builds: dict[str, float] = {}
    for name in names:
        source = table[name]
        for mesh in dict.fromkeys(source.meshes + (source.on_demand_meshes if meshes is not None else ())):
            if meshes is not None and tuple(mesh) not in {tuple(m) for m in meshes}:
                continue
            key = f"{name}@{'x'.join(map(str, mesh))}"
            try:
                built = build_source(source, mesh)
            except Exception as exc:
                logger.debug("build failed", exc_info=True)
                skipped.append(Skipped(id=MutantId(name, tuple(mesh), "none", "-"),
                                       reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}"))
                continue
            builds[key] = round(built.seconds, 1)
            start = time.perf_counter()
            cap = limit if limit is not None else source.limit
            r, s = mutate_built(built, operators=operators, verifier=verifier, limit=cap, seed=seed, cache=cache)
            cache.save()
            results += r
            skipped += s
            if progress is not None:
                counts = Counter(x.outcome for x in r[1:])
                progress(f"{key}: built in {built.seconds:.1f} s; unmutated {r[0].outcome}; {len(r) - 1} mutants "
                         f"in {time.perf_counter() - start:.1f} s ({dict(counts)}), {len(s)} not constructible")
    return MutationReport(results=tuple(results), skipped=tuple(skipped), builds=builds)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _mutate_cmd(args: argparse.Namespace) -> int:
    from ._cli import parse_mesh

    logging.getLogger("torch").setLevel(logging.ERROR)
    meshes = None if args.meshes is None else [parse_mesh(m) for m in args.meshes.split(",")]
    names = None if args.sources is None else args.sources.split(",")
    ops = None if args.operators is None else args.operators.split(",")
    report = run_mutations(names, meshes, operators=ops, limit=args.limit, seed=args.seed,
                           materialize=args.materialize, numbers_cache=args.numbers_cache,
                           progress=lambda line: print(line, flush=True))
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0 if report.ok else 1


def add_subcommand(subparsers: Any) -> None:
    """Register ``mutate`` on the package CLI's subparsers."""
    p = subparsers.add_parser("mutate", help="break correct parallel graphs one thing at a time; the verifier "
                              "must agree with the numbers", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sources", default=None, help="comma list of seed, seed_swapped, llama3, falcon, olmo2, falcon_h1, "
                   "torchtitan_llama3, fuzz, fuzz_all (default: all)")
    p.add_argument("--meshes", default=None, help="comma list like 2,2x2,2x4,4x2 (default: each source's own); 2x2x2 "
                   "builds seed, fuzz and fuzz_all on the 3-D mesh (4-9 minutes each)")
    p.add_argument("--operators", default=None, help=f"comma list of {', '.join(OPERATORS)} (default: all)")
    p.add_argument("--limit", type=int, default=None, help="at most this many sites per operator per build "
                   "(a seeded sample; default: all for seed, seed_swapped and fuzz, 3 for llama3 and falcon, "
                   "whose LocalTensorMode runs take seconds)")
    p.add_argument("--seed", type=int, default=0, help="seed of that sample (default 0)")
    p.add_argument("--materialize", choices=["table", "all"], default=None,
                   help="pass materialize=... to every source's add_op_constraints (default: the plugin's default)")
    p.add_argument("--json", default=None, help="also write the report as JSON to this file")
    p.add_argument("--numbers-cache", default=None, help="JSON file of mutants' LocalTensorMode numbers, reused "
                   "when a rebuilt mutant's code is the same (rerun the verifier without rerunning the numbers)")
    p.set_defaults(func=_mutate_cmd)
