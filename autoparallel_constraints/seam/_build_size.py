"""Stop autoparallel's build before it creates an ILP that cannot be built and solved in memory.

Right after its strategy enumeration, autoparallel's ``ShardingOptimizer`` creates one PuLP
binary variable per (node, argument, own strategy, producer strategy) and a cost record for each
(``_create_pulp_variables``, then the objective and rows), and holds them until the solve. Each
mesh dim multiplies a tensor's strategies, so a 3-D mesh gives about 40 times the variables of a
2-D one: a 1-layer Falcon-style LM has 0.30 M on 2×2 and 13.5 M on 2×2×2, and that run was
killed by the OOM killer at 23 GiB after 43 minutes (docs/meshes_3d.md).

While one ``AutoParallel.__enter__`` runs, :func:`size_guard` counts those variables first, from the
enumerated strategies (arithmetic, nothing created; 7 ms for 1.13 M), and raises
:class:`BuildTooLargeError` when ``count * (BYTES_PER_VARIABLE + SOLVE_BYTES_PER_VARIABLE)`` (what
the build holds, and what the solve needs on top) exceeds the budget: by default the memory the
system reports available when the count is made (``MemAvailable``, or a cgroup's limit less its
usage when lower), or a fixed budget in GiB set with :func:`set_build_budget`; ``None`` turns it
off (or ``APC_SHIMS=-build_size_guard``). Where neither is known (no ``/proc/meminfo``) the default
checks nothing. The patch is process-wide for the length of a build, like autoparallel's own
caches: builds in several threads at once are not supported.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BuildTooLargeError, InvalidOptionError
from ._model import Target
from ._patching import swapped

logger = logging.getLogger(__name__)

__all__ = [
    "BYTES_PER_VARIABLE",
    "SOLVE_BYTES_PER_VARIABLE",
    "IlpSize",
    "around_build",
    "count_variables",
    "set_build_budget",
    "size_guard",
]

# What autoparallel's ILP holds per variable from _create_pulp_variables to the end of the build
# (variables, cost records, rows), measured as resident memory before and after
# (benchmarks/ilp_size.py --memory): 1,243 to 1,330 bytes on four models up to 1.13 M variables. It
# grows with size: llama3 at Llama3-8B shapes on 4x4x4 (12.25 M) peaked 1,550 bytes per variable
# above its enumeration, and a 1-layer Falcon-style LM on 2x2x2 (13.5 M) was killed at 23.2 GiB,
# over 1,780 per variable, before it finished (most likely while building). The guard takes the
# largest build measured to the end, so it is a lower bound at that scale.
BYTES_PER_VARIABLE = 1550
# What autoparallel's solve needs on top, with highs-lp (the default solver) and no plugin rows: the
# solve's peak resident memory above the built ILP, per variable (benchmarks/ilp_size.py --memory
# --solve): 627 on the seed block on 2x2x2, 700 on the Falcon-style LM and 761 on llama3 small
# (2x2; 895 on the seed block's 29 K variables, where fixed costs weigh). A build that cannot be
# solved is of no use. Not measured: CBC's solve (its own process), the plugin's rows, a MIP after
# a fractional relaxation.
SOLVE_BYTES_PER_VARIABLE = 800

TARGET = Target("autoparallel.optimize_sharding", "ShardingOptimizer._create_pulp_variables")

_budget: float | str | None = "available"


@dataclass(frozen=True, slots=True)
class IlpSize:
    """autoparallel's variables for one build: how many, and the ops holding the most."""

    variables: int
    nodes: int
    top_ops: tuple[tuple[str, int], ...]
    seconds: float  # to count them

    @property
    def estimate_bytes(self) -> int:
        """What building and solving these variables takes at least, measured per variable."""
        return self.variables * (BYTES_PER_VARIABLE + SOLVE_BYTES_PER_VARIABLE)


last_size: IlpSize | None = None


def set_build_budget(budget: float | str | None) -> float | str | None:
    """The memory, in GiB, autoparallel's ILP may take before a build is refused; returns the
    previous setting. ``"available"`` (the default): what the system reports available when the
    variables are counted. ``None``: no check (build whatever the size)."""
    global _budget
    if budget is not None and budget != "available" and (
        isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget < math.inf
    ):
        raise InvalidOptionError(
            f"set_build_budget takes a finite number of GiB above 0, 'available' or None, got {budget!r}"
        )
    previous, _budget = _budget, budget
    return previous


def count_variables(opt: Any) -> IlpSize:
    """The binary variables ``opt`` (a ``ShardingOptimizer`` whose strategies are enumerated) will
    create, as its ``walk_over_options`` yields them; nodes linked to an identical one (repeated
    layers) share that one's and count none, as in ``_create_pulp_variables``."""
    t0 = time.perf_counter()
    linked = {key[0] for key in getattr(opt, "cluster_links", {})}
    by_op: Counter[str] = Counter()
    nodes = 0
    for node, op_strategy in opt.strats.items():
        if node.op == "output" or opt.node_map[node] in linked:
            continue
        nodes += 1
        strategies = op_strategy.strategies
        n = sum(len(s.redistribute_cost[argi]) for argi in range(len(strategies[0].input_specs)) for s in strategies)
        by_op[str(node.target)] += n
    return IlpSize(sum(by_op.values()), nodes, tuple(by_op.most_common(3)), time.perf_counter() - t0)


def _available_bytes(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What the system reports available now: ``MemAvailable``, or a cgroup v2 limit less its
    usage when that is lower (page cache the kernel can drop, ``inactive_file``, not counted as
    used); None where neither can be read."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError, IndexError):
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text())
            for line in (cgroup / "memory.stat").read_text().splitlines():
                if line.startswith("inactive_file "):
                    used -= int(line.split()[1])
            found.append(int(limit) - used)
    return min(found) if found else None


def _check(opt: Any) -> None:
    global last_size
    size = last_size = count_variables(opt)
    logger.info("apc: autoparallel's ILP will have %d variables (counted in %.2f s)", size.variables, size.seconds)
    if _budget is None:
        return
    budget = _available_bytes() if _budget == "available" else int(_budget * 2**30)
    if budget is None or size.estimate_bytes <= budget:
        return
    gib = lambda b: f"{b / 2**30:.1f} GiB"  # noqa: E731
    where = "available now" if _budget == "available" else "the budget set with apc.set_build_budget"
    ops = ", ".join(f"{op} {n:,}" for op, n in size.top_ops)
    mesh = tuple(opt.mesh.shape)
    raise BuildTooLargeError(
        f"autoparallel's ILP for this model on mesh {mesh} would have {size.variables:,} binary variables "
        f"(most in {ops}): at least {gib(size.estimate_bytes)} to build and solve ({BYTES_PER_VARIABLE} "
        f"bytes each to build and {SOLVE_BYTES_PER_VARIABLE} more to solve with highs-lp, measured), more "
        f"than the {gib(budget)} {where}. Each mesh dim multiplies the strategies of every "
        "tensor, so a mesh with one dim fewer has tens of times fewer variables; or run on a machine with "
        "more memory, or call apc.set_build_budget(None) to build anyway.",
        size=size,
        budget_bytes=budget,
    )


@contextlib.contextmanager
def size_guard() -> Iterator[None]:
    """Within the block, autoparallel's ``_create_pulp_variables`` first counts the variables it
    will create and raises :class:`BuildTooLargeError` when they cannot fit the budget. Restores
    autoparallel's method on exit, also on error."""

    def _create_pulp_variables(self: Any) -> Any:
        _check(self)
        return original(self)

    with swapped("build_size_guard", TARGET, _create_pulp_variables) as original:
        yield


def around_build(call: Any, autop: Any) -> Any:
    """The ``build_size_guard`` shim's around on ``AutoParallel.__enter__``."""
    with size_guard():
        return call(autop)
