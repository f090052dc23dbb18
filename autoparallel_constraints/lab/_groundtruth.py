"""Ground truth for the compatibility table: is every combination a row calls co-sharded exact?

For each row, sampled calls of its op (broadcasting, size-1, 0-d and uneven dims; duplicate
indices where the op accumulates) are run on every simulated rank under torch's
``LocalTensorMode`` with each tensor laid out by a placement combination, and the per-rank
results are reassembled by the output placements and compared with the op on the global tensors.

* Replicate and Shard inputs are cut from the global tensor (``torch.chunk`` semantics, mesh dims
  in order, as DTensor does); a Partial input gets random per-rank pieces that reduce to the
  global tensor (integer-valued float64, so sums and averages are exact; for max/min one rank
  holds the value and the others less/more; products of ±1/±2 factors), so a wrong combination
  cannot pass by symmetry. Each case is evaluated on two value draws (three in the full sweep).
* The output is reassembled on every rank (Replicate: the rank's own piece; Shard: gathered;
  Partial: reduced) and must equal the global result there; an op that raises on its shards
  is wrong.
* 1-D mesh ``(2,)``: every placement combination of the inputs and outputs when there are few
  (else every combination the row could accept, plus random ones). 2-D meshes ``(2, 2)`` and
  ``(2, 4)``, and the 3-D mesh ``(2, 2, 2)`` (:data:`MESH_3D`): every tuple of 1-D columns the row
  accepts, one per mesh dim (a random sample of them when there are more than the budget), plus
  tuples of numerically right columns and random ones.

A combination the row calls co-sharded but computes a wrong result is a **false co-sharded**: a
bug in the table. A combination that is right but the row rejects is a **missed opportunity**:
reported per row, not an error (the table is conservative on purpose).

Usage::

    python -m autoparallel_constraints groundtruth            # the CI sample
    python -m autoparallel_constraints groundtruth --full     # the larger sweep
    python -m autoparallel_constraints groundtruth --rows add,index_put --mesh 2x2 -v

Exit status 1 when any false co-sharded is found. Rows of ops without a sampler are listed as
unchecked; :func:`register_sampler` adds one for your own op.

The per-rank pieces and their reassembly are in ``_groundtruth_pieces``, the sampled calls of
each op in ``_groundtruth_samplers``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard

from ..core._placements import fmt_placements
from ..seam.dtensor import local_tensors
from ..seam.tracing import schema_of
from ..table._binders import bind
from ..table._model import Binding, DimKind, OpRule, check
from ..table._registry import Table, default_table
from ._groundtruth_pieces import FLOATS, make_locals, reconstruct
from ._groundtruth_samplers import GUARDS, SAMPLERS, Case, Skip, register_sampler

logger = logging.getLogger(__name__)

__all__ = [
    "CI_BUDGET",
    "FULL_BUDGET",
    "MESHES",
    "MESH_3D",
    "SAMPLERS",
    "Budget",
    "Case",
    "Finding",
    "MeshStats",
    "RowReport",
    "check_row",
    "check_table",
    "evaluate",
    "make_locals",
    "reconstruct",
    "register_sampler",
    "render",
]

MESHES: tuple[tuple[int, ...], ...] = ((2,), (2, 2), (2, 4))
#: The 3-D mesh the table is also checked on (data x tensor x context parallel, two ranks each).
MESH_3D: tuple[int, ...] = (2, 2, 2)
# How the op runs on the shards: "auto" — under LocalTensorMode when every rank's shards have the
# same shapes, rank by rank otherwise; "local_tensor" — always LocalTensorMode (rank by rank only
# if it raises); "loop" — always rank by rank.
RUNNER = "auto"
REDUCE_OPS = ("sum", "avg", "max", "min", "product")


# ---------------------------------------------------------------------------------------------
# Checking one row


@dataclass(frozen=True, slots=True)
class Budget:
    """How much of the placement space each row's check covers.

    ``cases``: sampled calls per row (the sampler's first ones), each with ``draws`` independent
    value draws (a combination is right only if right for all). On the 1-D mesh every input and
    output placement combination is evaluated when there are at most ``exhaustive_1d``; else the
    combinations the row could accept plus ``random_1d`` random ones. ``rejected_1d`` caps the
    rejected 1-D combinations evaluated (for missed opportunities). On each 2-D mesh every pair of
    accepted 1-D columns is evaluated (up to ``accepted_pairs``), plus ``other_pairs`` pairs of
    numerically right or random columns.
    """

    cases: int
    draws: int
    exhaustive_1d: int
    random_1d: int
    rejected_1d: int
    accepted_pairs: int
    other_pairs: int


CI_BUDGET = Budget(cases=2, draws=2, exhaustive_1d=1024, random_1d=150, rejected_1d=160, accepted_pairs=400,
                   other_pairs=40)
FULL_BUDGET = Budget(cases=99, draws=3, exhaustive_1d=20000, random_1d=3000, rejected_1d=20000, accepted_pairs=20000,
                     other_pairs=1500)


@dataclass(frozen=True, slots=True)
class Finding:
    """One evaluated combination worth showing: a false co-sharded or a missed opportunity."""

    case: str
    mesh: tuple[int, ...]
    placements: dict[str, str]  # member label -> placements text
    detail: str  # why it is wrong (false co-sharded) or why the row rejects it (missed)

    def __str__(self) -> str:
        pl = ", ".join(f"{k} {v}" for k, v in self.placements.items())
        return f"[{self.case}] mesh {self.mesh}: {pl} — {self.detail}"


@dataclass(kw_only=True, slots=True)
class MeshStats:
    """Counts on one mesh: evaluated combinations, how many the row accepts, and the verdicts."""

    checked: int = 0
    accepted: int = 0
    false_cosharded: int = 0
    missed: int = 0
    skipped: int = 0  # combinations a guard could not run (not counted as checked)


@dataclass(kw_only=True, slots=True)
class RowReport:
    """The ground-truth verdict on one row."""

    row: str
    family: str
    cases: int = 0
    unbound: int = 0  # sampled cases the row did not bind (nothing to check)
    unchecked: str = ""  # why nothing was checked (no sampler)
    meshes: dict[tuple[int, ...], MeshStats] = field(default_factory=dict)
    false_examples: list[Finding] = field(default_factory=list)
    missed_examples: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def checked(self) -> int:
        return sum(s.checked for s in self.meshes.values())

    @property
    def false_cosharded(self) -> int:
        return sum(s.false_cosharded for s in self.meshes.values())

    @property
    def missed(self) -> int:
        return sum(s.missed for s in self.meshes.values())

    @property
    def ok(self) -> bool:
        return self.false_cosharded == 0


@dataclass
class _Member:
    label: str
    value: torch.Tensor  # global
    is_output: bool
    slot: int  # spec index (inputs) or output index
    domain: list[Placement]


class _CaseRun:
    """One case bound to a row: global values, members, caches of local tensors and specs."""

    def __init__(self, row: OpRule, case: Case, binding: Binding, outputs: tuple[torch.Tensor | None, ...],
                 inputs: list[tuple[str, torch.Tensor]], gen: random.Random) -> None:
        self.row, self.case, self.binding, self.gen = row, case, binding, gen
        labels = {b.spec_index: b.label for b in binding.args}
        self.members: list[_Member] = []
        for i, (label, value) in enumerate(inputs):
            self.members.append(_Member(labels.get(i, label), value, False, i, _domain(value)))
        for j, value in enumerate(outputs):
            if value is not None:
                self.members.append(_Member(binding.out_label(j), value, True, j, _domain(value)))
        self.outputs = outputs
        self.extra: list[_CaseRun] = []  # further value draws of the same call, same shapes
        self._locals: dict[tuple[int, tuple[int, ...], tuple[Placement, ...]], list[torch.Tensor]] = {}
        self._specs: dict[tuple[int, tuple[Placement, ...], int], Any] = {}
        mutated = [i for i, a in enumerate(schema_of(row.op).arguments) if a.alias_info is not None and a.alias_info.is_write]
        self.mutated_positions = set(mutated)

    # -- the row's verdict ------------------------------------------------------------------------
    def mismatches(self, mesh: Any, combo: Sequence[Sequence[Placement]]) -> list[Any]:
        """The row's verdict on ``combo`` (one column per mesh dim): empty = co-sharded."""
        from ..seam.dtensor import DTensorSpec, TensorMeta

        def spec(k: int) -> Any:
            pl = tuple(col[k] for col in combo)
            key = (k, pl, id(mesh))
            if key not in self._specs:
                v = self.members[k].value
                meta = TensorMeta(v.shape, v.stride() if v.is_contiguous() else torch.empty(v.shape).stride(), v.dtype)
                self._specs[key] = DTensorSpec(mesh, pl, tensor_meta=meta)
            return self._specs[key]

        inputs = [spec(k) for k, mem in enumerate(self.members) if not mem.is_output]
        outs: list[Any] = [None] * len(self.outputs)
        for k, mem in enumerate(self.members):
            if mem.is_output:
                outs[mem.slot] = spec(k)
        out_specs = outs[0] if len(outs) == 1 else tuple(outs)
        return check(self.binding, inputs, out_specs)

    # -- the numbers ------------------------------------------------------------------------------
    def locals_of(self, k: int, mesh_shape: tuple[int, ...], pl: tuple[Placement, ...]) -> list[torch.Tensor]:
        key = (k, tuple(mesh_shape), pl)
        if key not in self._locals:
            self._locals[key] = make_locals(self.members[k].value, mesh_shape, pl, self.gen)
        return self._locals[key]

    def evaluate(self, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]]) -> str | None:
        """None when the combination computes the global result on every rank, else why not."""
        return evaluate(self, mesh_shape, combo)


def _domain(value: torch.Tensor) -> list[Placement]:
    dom: list[Placement] = [Replicate()] + [Shard(d) for d in range(value.dim())]
    if value.dtype in FLOATS:
        dom += [Partial(op) for op in REDUCE_OPS]
    return dom


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype in FLOATS:
        scale = float(b.abs().max()) if b.numel() else 1.0
        return bool(torch.allclose(a, b, rtol=1e-6, atol=1e-6 * max(1.0, scale), equal_nan=True))
    return bool(torch.equal(a, b))


def evaluate(run: _CaseRun, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]]) -> str | None:
    """Run the op on every rank's shards under LocalTensorMode and compare with the global result.

    Returns None when every output, reassembled on every rank by its placements, equals the op's
    global result for every value draw of the case; else a short reason (a :class:`Skip` when
    a guard could not run it). Several draws keep a wrong combination from passing by
    coincidence (e.g. one of two partial dot products being zero).
    """
    for one in (run, *run.extra):
        verdict = _evaluate_one(one, mesh_shape, combo)
        if verdict is not None:
            return verdict
    return None


def _evaluate_one(run: _CaseRun, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]]) -> str | None:
    from ..seam.dtensor import LocalTensor, LocalTensorMode

    world = math.prod(mesh_shape)
    ranks = frozenset(range(world))
    slot_locals: dict[int, list[torch.Tensor]] = {}
    for k, mem in enumerate(run.members):
        if not mem.is_output:
            slot_locals[mem.slot] = run.locals_of(k, mesh_shape, tuple(col[k] for col in combo))
    counter = itertools.count()

    def localize(value: Any, position: int) -> Any:
        if isinstance(value, torch.Tensor):
            per_rank = slot_locals[next(counter)]
            if position in run.mutated_positions:
                return LocalTensor({r: per_rank[r].clone() for r in ranks})
            return LocalTensor({r: per_rank[r] for r in ranks})
        if isinstance(value, (list, tuple)):
            return type(value)(localize(v, position) for v in value)
        return value

    guard = GUARDS.get(run.row.op)
    if guard is not None:
        for r in range(world):
            verdict = guard([tuple(slot_locals[i][r].shape) for i in sorted(slot_locals)])
            if verdict is not None:
                return verdict
    if any(t.numel() == 0 for per_rank in slot_locals.values() for t in per_rank):
        # Some CPU kernels divide by a dim size before checking shapes (log_softmax backward on an
        # empty grad dies with SIGFPE): let the meta kernels reject mismatched shapes first.
        problem = _meta_check(run, slot_locals, world)
        if problem is not None:
            return problem
    even = all(len({tuple(t.shape) for t in per_rank}) == 1 for per_rank in slot_locals.values())
    result = None
    if RUNNER == "local_tensor" or (RUNNER == "auto" and even):
        try:
            with LocalTensorMode(ranks):
                args = [localize(a, i) for i, a in enumerate(run.case.args)]
                result = run.row.op(*args, **run.case.kwargs)
        except Exception:  # noqa: BLE001 - retried rank by rank below, where errors are the op's own
            result = None
    if result is None:
        # Uneven shards: LocalTensorMode carries per-rank sizes as symbolic ints, which is slow
        # (native_layer_norm_backward: ~30 ms a call) and not implemented for some ops (einsum:
        # "NYI"); each rank's shards are then run by hand, which is what LocalTensorMode does.
        try:
            result = _per_rank(run, slot_locals, world)
        except Exception as exc:  # noqa: BLE001 - any failure on the shards is a wrong combination
            return f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    results = result if isinstance(result, (list, tuple)) else (result,)
    for k, mem in enumerate(run.members):
        if not mem.is_output:
            continue
        local = results[mem.slot]
        if not isinstance(local, LocalTensor):
            per_rank = [local] * world
        else:
            per_rank = [local_tensors(local)[r] for r in range(world)]
        pl = tuple(col[k] for col in combo)
        for r in range(world):
            full = reconstruct(per_rank, mesh_shape, pl, r)
            if full is None:
                return f"{mem.label}: the local results do not fit together as {fmt_placements(pl)}"
            if not _close(full, mem.value):
                return f"{mem.label} as {fmt_placements(pl)} differs from the global result on rank {r}"
    return None


def _per_rank(run: _CaseRun, slot_locals: dict[int, list[torch.Tensor]], world: int) -> Any:
    """The op on each rank's plain local tensors, results packed as LocalTensors."""
    from ..seam.dtensor import LocalTensor

    outs = []
    for r in range(world):
        counter = itertools.count()

        def local(value: Any, position: int) -> Any:
            if isinstance(value, torch.Tensor):
                t = slot_locals[next(counter)][r]
                return t.clone() if position in run.mutated_positions else t
            if isinstance(value, (list, tuple)):
                return type(value)(local(v, position) for v in value)
            return value

        out = run.row.op(*[local(a, i) for i, a in enumerate(run.case.args)], **run.case.kwargs)
        outs.append(out if isinstance(out, (list, tuple)) else (out,))
    packed = []
    for j in range(len(outs[0])):
        if isinstance(outs[0][j], torch.Tensor):
            packed.append(LocalTensor({r: outs[r][j] for r in range(world)}))
        else:
            packed.append(outs[0][j])
    return tuple(packed)


def _meta_check(run: _CaseRun, slot_locals: dict[int, list[torch.Tensor]], world: int) -> str | None:
    """Run the op on meta copies of every rank's shards; the first shape error, or None."""
    for r in range(world):
        counter = itertools.count()

        def meta(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return slot_locals[next(counter)][r].to("meta")
            if isinstance(value, (list, tuple)):
                return type(value)(meta(v) for v in value)
            return value

        try:
            run.row.op(*[meta(a) for a in run.case.args], **run.case.kwargs)
        except NotImplementedError:
            return None  # no meta kernel: nothing learnt
        except Exception as exc:  # noqa: BLE001
            return f"raises {type(exc).__name__} on rank {r}: {str(exc).splitlines()[0][:120]}"
    return None


def _prepare(row: OpRule, case: Case, gen: random.Random) -> _CaseRun | str:
    """Bind ``row`` to a one-node graph of ``case``; the run, or why the case is skipped."""
    try:
        clones = [a.clone() if isinstance(a, torch.Tensor) else
                  ([x.clone() if isinstance(x, torch.Tensor) else x for x in a] if isinstance(a, list) else a)
                  for a in case.args]
        result = row.op(*clones, **case.kwargs)
    except Exception as exc:  # noqa: BLE001
        return f"the sample does not run on one device: {type(exc).__name__}: {exc}"
    outputs = tuple(r if isinstance(r, torch.Tensor) else None
                    for r in (result if isinstance(result, (list, tuple)) else (result,)))
    graph = torch.fx.Graph()
    inputs: list[tuple[str, torch.Tensor]] = []

    def placeholder(value: torch.Tensor, name: str) -> torch.fx.Node:
        node = graph.placeholder(f"x{len(inputs)}")
        node.meta["val"] = value
        inputs.append((name, value))
        return node

    schema_args = schema_of(row.op).arguments
    args: list[Any] = []
    for i, a in enumerate(case.args):
        name = schema_args[i].name if i < len(schema_args) else f"arg{i}"
        if isinstance(a, torch.Tensor):
            args.append(placeholder(a, name))
        elif isinstance(a, list) and any(isinstance(x, torch.Tensor) for x in a):
            args.append([placeholder(x, f"{name}[{k}]") if isinstance(x, torch.Tensor) else x for k, x in enumerate(a)])
        else:
            args.append(a)
    node = graph.call_function(row.op, tuple(args), dict(case.kwargs))
    node.meta["val"] = result
    binding = bind(row, node)
    if binding is None:
        return "the row does not bind this call"
    return _CaseRun(row, case, binding, outputs, inputs, gen)


def _same_call(a: _CaseRun, b: _CaseRun) -> bool:
    """Two draws of one call: same members with the same shapes, same non-tensor arguments."""
    if [(m.label, tuple(m.value.shape), m.value.dtype) for m in a.members] != [
            (m.label, tuple(m.value.shape), m.value.dtype) for m in b.members]:
        return False

    def plain(args: Iterable[Any]) -> list[Any]:
        return [None if isinstance(x, torch.Tensor) else (plain(x) if isinstance(x, (list, tuple)) else x)
                for x in args]

    return plain(a.case.args) == plain(b.case.args) and a.case.kwargs.keys() == b.case.kwargs.keys()


def _structured_columns(run: _CaseRun) -> Iterator[tuple[Placement, ...]]:
    """Every 1-D column the row could accept: all-Replicate; each logical dim sharded by every
    member that has it (outputs without it Partial(sum)); Partial subsets of the inputs."""
    members = run.members
    yield tuple(Replicate() for _ in members)
    dim_maps: list[tuple[Any, ...]] = []
    bound = {b.spec_index: b.dim_map for b in run.binding.args}
    for mem in members:
        if mem.is_output:
            dim_maps.append(run.binding.out_dim_maps[mem.slot] or ())
        else:
            dim_maps.append(bound.get(mem.slot, tuple(DimKind.WHOLE for _ in range(mem.value.dim()))))
    logicals = sorted({e for m in dim_maps for e in m if isinstance(e, int)})
    for logical in logicals:
        col: list[Placement] = []
        for mem, dm in zip(members, dim_maps):
            real = next((d for d, e in enumerate(dm) if e == logical), None)
            if real is not None:
                col.append(Shard(real))
            else:
                col.append(Partial("sum") if mem.is_output else Replicate())
        yield tuple(col)
    float_inputs = [k for k, mem in enumerate(members) if not mem.is_output and mem.value.dtype in FLOATS]
    outs = [k for k, mem in enumerate(members) if mem.is_output]
    for op in REDUCE_OPS:
        for size in range(1, min(len(float_inputs), 6) + 1):
            for subset in itertools.combinations(float_inputs, size):
                for out_p in [Replicate(), *(Partial(o) for o in REDUCE_OPS)]:
                    col = [Replicate() for _ in members]
                    for k in subset:
                        col[k] = Partial(op)
                    for k in outs:
                        if members[k].value.dtype in FLOATS or isinstance(out_p, Replicate):
                            col[k] = out_p
                    yield tuple(col)


def _columns_1d(run: _CaseRun, budget: Budget, rng: random.Random) -> list[tuple[Placement, ...]]:
    domains = [mem.domain for mem in run.members]
    total = math.prod(len(d) for d in domains)
    if total <= budget.exhaustive_1d:
        return [tuple(c) for c in itertools.product(*domains)]
    seen: dict[tuple[Placement, ...], None] = {}
    for col in _structured_columns(run):
        seen.setdefault(col, None)
    for _ in range(budget.random_1d):
        seen.setdefault(tuple(rng.choice(d) for d in domains), None)
    return list(seen)


def _valid_layout(combo: Sequence[Sequence[Placement]]) -> bool:
    """DTensor allows one Partial reduce op per tensor across mesh dims."""
    for k in range(len(combo[0])):
        ops = {col[k].reduce_op for col in combo if isinstance(col[k], Partial)}
        if len(ops) > 1:
            return False
    return True


def _describe(run: _CaseRun, mesh_shape: tuple[int, ...], combo: Sequence[Sequence[Placement]], detail: str) -> Finding:
    placements = {mem.label: fmt_placements(tuple(col[k] for col in combo)) for k, mem in enumerate(run.members)}
    return Finding(run.case.name, mesh_shape, placements, detail)


def check_row(
    row: OpRule,
    meshes: Sequence[tuple[int, ...]] = MESHES,
    budget: Budget = CI_BUDGET,
    seed: int = 0,
    *,
    max_examples: int = 3,
) -> RowReport:
    """Evaluate ``row`` against ground truth on ``meshes`` within ``budget``."""
    with _one_thread():
        return _check_row(row, meshes, budget, seed, max_examples)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Intra-op threads only cost on tensors this small (on a busy 2-core machine a 2-thread
    native_layer_norm_backward takes ~15 ms instead of ~10 us)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _check_row(row: OpRule, meshes: Sequence[tuple[int, ...]], budget: Budget, seed: int,
               max_examples: int) -> RowReport:
    from ..harness import cpu_mesh

    t0 = time.perf_counter()
    report = RowReport(row=row.name, family=row.family)
    sampler = SAMPLERS.get(row.op)
    if sampler is None:
        report.unchecked = "no sampler for this op (register one with register_sampler)"
        return report
    rng = random.Random(seed)
    draws = [sampler(torch.Generator().manual_seed(seed * 1009 + d)) for d in range(max(1, budget.draws))]
    cases = draws[0][: budget.cases]
    mesh_objs = {shape: cpu_mesh(shape) for shape in meshes}
    line = next((m for s, m in mesh_objs.items() if len(s) == 1), None) or cpu_mesh((2,))
    for shape in meshes:
        report.meshes[shape] = MeshStats()
    for i, case in enumerate(cases):
        run = _prepare(row, case, random.Random(rng.random()))
        if isinstance(run, str):
            report.unbound += 1
            logger.info("%s [%s]: skipped, %s", row.name, case.name, run)
            continue
        for other in draws[1:]:
            extra = _prepare(row, other[i], random.Random(rng.random())) if i < len(other) else "missing"
            if not isinstance(extra, str) and _same_call(run, extra):
                run.extra.append(extra)
        report.cases += 1
        _check_case(run, mesh_objs, line, budget, rng, report, max_examples)
    report.seconds = time.perf_counter() - t0
    return report


def _record(report: RowReport, run: _CaseRun, shape: tuple[int, ...], combo: Sequence[Sequence[Placement]],
            accepted: bool, mismatches: list[Any], wrong: str | None, max_examples: int) -> bool:
    stats = report.meshes[shape]
    if isinstance(wrong, Skip):
        stats.skipped += 1
        return False
    stats.checked += 1
    if accepted:
        stats.accepted += 1
        if wrong is not None:
            stats.false_cosharded += 1
            if len(report.false_examples) < max_examples:
                report.false_examples.append(_describe(run, shape, combo, wrong))
    elif wrong is None:
        stats.missed += 1
        if len(report.missed_examples) < max_examples:
            report.missed_examples.append(_describe(run, shape, combo, str(mismatches[0])))
    return wrong is None


def _check_case(run: _CaseRun, meshes: dict[tuple[int, ...], Any], line: Any, budget: Budget,
                rng: random.Random, report: RowReport, max_examples: int) -> None:
    """1-D columns first (judged by the row on ``line``, a 1-D mesh), then pairs on 2-D meshes."""
    columns = _columns_1d(run, budget, rng)
    accepted_cols: list[tuple[Placement, ...]] = []
    rejected_cols: list[tuple[tuple[Placement, ...], list[Any]]] = []
    for col in columns:
        mism = run.mismatches(line, (col,))
        if mism:
            rejected_cols.append((col, mism))
        else:
            accepted_cols.append(col)
    right_cols: list[tuple[Placement, ...]] = []
    for shape in [s for s in meshes if len(s) == 1]:
        for col in accepted_cols:
            if _record(report, run, shape, (col,), True, [], run.evaluate(shape, (col,)), max_examples):
                right_cols.append(col)
        sample = rejected_cols if len(rejected_cols) <= budget.rejected_1d else rng.sample(rejected_cols,
                                                                                             budget.rejected_1d)
        for col, mism in sample:
            if _record(report, run, shape, (col,), False, mism, run.evaluate(shape, (col,)), max_examples):
                right_cols.append(col)
    if not right_cols:  # no 1-D mesh asked for: numerically right columns are unknown
        right_cols = list(accepted_cols)
    domains = [mem.domain for mem in run.members]
    for shape, mesh in meshes.items():
        if len(shape) == 1:
            continue
        combos: dict[tuple[tuple[Placement, ...], ...], None] = {}
        n_pairs = len(accepted_cols) ** len(shape)
        if n_pairs <= budget.accepted_pairs:
            for p in itertools.product(accepted_cols, repeat=len(shape)):
                combos.setdefault(tuple(p), None)
        else:
            for _ in range(budget.accepted_pairs):
                combos.setdefault(tuple(rng.choice(accepted_cols) for _ in shape), None)
        for i in range(budget.other_pairs):
            if i % 2 == 0:
                combos.setdefault(tuple(rng.choice(right_cols) for _ in shape), None)
            else:
                combos.setdefault(tuple(tuple(rng.choice(d) for d in domains) for _ in shape), None)
        for combo in combos:
            if not _valid_layout(combo):
                continue
            mism = run.mismatches(mesh, combo)
            _record(report, run, shape, combo, not mism, mism, run.evaluate(shape, combo), max_examples)


# ---------------------------------------------------------------------------------------------
# The whole table, and the command line


def check_table(
    table: Table | None = None,
    *,
    rows: Iterable[OpRule] | None = None,
    meshes: Sequence[tuple[int, ...]] = MESHES,
    budget: Budget = CI_BUDGET,
    seed: int = 0,
    progress: Callable[[RowReport], None] | None = None,
) -> list[RowReport]:
    """:func:`check_row` for every row (of ``table``, default the process-wide one)."""
    chosen = list(rows) if rows is not None else list(table if table is not None else default_table())
    reports = []
    for row in chosen:
        rep = check_row(row, meshes, budget, seed)
        reports.append(rep)
        if progress is not None:
            progress(rep)
    return reports


def render(reports: Sequence[RowReport], *, verbose: bool = False) -> str:
    """A plain-text table: per row, combinations checked per mesh, false co-sharded, missed."""
    meshes = sorted({s for r in reports for s in r.meshes}, key=lambda s: (len(s), s))
    mesh_names = ["x".join(map(str, s)) for s in meshes]
    width = max([len("row")] + [len(r.row) for r in reports])
    head = f"{'row':<{width}}  {'family':<18} {'cases':>5} " + " ".join(f"{n:>8}" for n in mesh_names)
    head += f" {'accepted':>8} {'false':>5} {'missed':>6} {'sec':>5}"
    lines = [head, "-" * len(head)]
    for r in reports:
        if r.unchecked:
            lines.append(f"{r.row:<{width}}  {r.family:<18} unchecked: {r.unchecked}")
            continue
        per = " ".join(f"{r.meshes.get(s, MeshStats()).checked:>8}" for s in meshes)
        acc = sum(s.accepted for s in r.meshes.values())
        lines.append(f"{r.row:<{width}}  {r.family:<18} {r.cases:>5} {per} {acc:>8} {r.false_cosharded:>5} "
                     f"{r.missed:>6} {r.seconds:>5.1f}")
        if verbose or r.false_cosharded:
            lines += [f"    FALSE CO-SHARDED {f}" for f in r.false_examples]
        if verbose:
            lines += [f"    missed {f}" for f in r.missed_examples]
    checked = [r for r in reports if not r.unchecked]
    totals = {s: sum(r.meshes.get(s, MeshStats()).checked for r in checked) for s in meshes}
    skipped = sum(st.skipped for r in checked for st in r.meshes.values())
    lines.append("-" * len(head))
    lines.append(
        f"{len(checked)} rows checked ({len(reports) - len(checked)} unchecked); combinations checked: "
        + ", ".join(f"{n}: {totals[s]}" for n, s in zip(mesh_names, meshes))
        + f"; false co-sharded: {sum(r.false_cosharded for r in checked)}; missed opportunities: "
        + f"{sum(r.missed for r in checked)}"
        + (f"; {skipped} not runnable by the CPU kernel (skipped)" if skipped else "")
    )
    return "\n".join(lines)


def _command(args: argparse.Namespace) -> int:
    global RUNNER
    RUNNER = args.runner
    table = default_table()
    rows = table.select(args.rows.split(",")) if args.rows else list(table)
    budget = FULL_BUDGET if args.full else CI_BUDGET
    meshes = tuple(args.mesh) if args.mesh else MESHES

    def progress(rep: RowReport) -> None:
        print(f"  {rep.row}: {rep.checked} checked, {rep.false_cosharded} false, {rep.missed} missed "
              f"({rep.seconds:.1f}s)", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    reports = check_table(rows=rows, meshes=meshes, budget=budget, seed=args.seed, progress=progress)
    print(render(reports, verbose=args.verbose))
    print(f"({time.perf_counter() - t0:.0f}s, budget {'full' if args.full else 'ci'}, seed {args.seed})")
    return 1 if any(r.false_cosharded for r in reports) else 0


def add_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``groundtruth`` on the package CLI's subparsers."""
    from ._cli import parse_mesh

    p = subparsers.add_parser("groundtruth", help="check the table's rows against numerics on simulated ranks",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="the larger sweep (every sampled case, larger budgets)")
    p.add_argument("--rows", default=None, help="comma list of table selectors (names, packets, families)")
    p.add_argument("--mesh", action="append", type=parse_mesh, default=None,
                   help="mesh shape, repeatable (default: 2, 2x2, 2x4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runner", choices=("auto", "local_tensor", "loop"), default="auto",
                   help="how the op runs on the shards (see RUNNER)")
    p.add_argument("-v", "--verbose", action="store_true", help="show missed-opportunity examples")
    p.set_defaults(func=_command)
    return p
