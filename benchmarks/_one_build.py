"""The build the one-build benchmarks (``solver_routes.py``, ``cbc_row_order.py``) share.

autoparallel's llama3 in the lab's configuration, taken up to its solve as ``_solve`` takes it
(the objective set, the memory rows added), and the table's sites found on it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


def spread(values: list[float], fmt: str = ".2f") -> str:
    """``median [min-max]`` of ``values``."""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def build_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of :func:`llama3_up_to_the_solve`, as both one-build benchmarks take them."""
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--mesh", default="8x8")
    parser.add_argument("--size", default="full", choices=("full", "tiny"), help="tiny: the tests' llama3 (seconds)")


@dataclass(frozen=True, slots=True)
class OneBuild:
    spec: Any  # the lab's ModelSpec
    opt: Any  # autoparallel's ShardingOptimizer, its problem ready to solve
    sites: Any  # the default table's sites on it (find_sites)
    seconds: float  # wall seconds of the build


@contextlib.contextmanager
def llama3_up_to_the_solve(
    *, mesh: str, layers: int, dim: int, size: str = "full", formulation: str | None = None, solver: str = "cbc"
) -> Iterator[OneBuild]:
    """Build, yield while ``AutoParallel`` is entered (the problem lives as long as the context).
    ``formulation``: ``add_op_constraints(formulation=..., solver=...)`` first, so the problem
    is the plugin's (its rows behind autoparallel's, its objective terms, its solver hook)."""
    from autoparallel.api import AutoParallel

    import autoparallel_constraints  # noqa: F401  (the plugin's patches, as users get them)
    from autoparallel_constraints.formulations._sites import find_sites
    from autoparallel_constraints.lab import lab_model
    from autoparallel_constraints.table import default_table
    from autoparallel_constraints.testing import cpu_mesh, device_name, fresh_strategy_cache

    shape = tuple(int(x) for x in mesh.lower().split("x"))
    spec = lab_model("llama3", shape, size=size, layers=layers, dim=dim)
    with device_name(), fresh_strategy_cache():
        t0 = time.perf_counter()
        with AutoParallel(spec.model, spec.input_fn, cpu_mesh(shape, spec.mesh_dim_names), spec.mp_policy) as autop:
            autop.add_input_constraints(list(spec.input_placements))
            autop.add_output_constraints(list(spec.output_placements))
            autop.add_parameter_memory_constraint()
            if formulation is not None:
                autop.add_op_constraints(formulation=formulation, solver=solver)
            opt = autop.sharding_optimizer
            opt._set_objective()
            opt._apply_memory_constraint()  # as autoparallel's _solve does first
            sites, _ = find_sites(opt, default_table().select(None))
            yield OneBuild(spec=spec, opt=opt, sites=sites, seconds=time.perf_counter() - t0)
