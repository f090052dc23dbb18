"""CPU test harness for autoparallel plans: fake ranks, CPU meshes, the cost model's device name,
mesh-safe caches, a LocalTensorMode numerics runner, strategy injection, Inductor lowering and the
mutation harness that proves the verifier against the numbers.

Importable by users' own tests; pytest fixtures live in
``autoparallel_constraints.testing.pytest_plugin``.
"""

from ..harness import (
    DEFAULT_DEVICE_NAME,
    NumericsReport,
    OfferedStrategy,
    ShardPerturbation,
    TensorCheck,
    apply_on_one_rank,
    chosen_strategy,
    cpu_mesh,
    device_name,
    explain,
    find_nodes,
    fresh_strategy_cache,
    init_fake_process_group,
    lower_with_inductor,
    offer_strategy,
    pin_strategy,
    rank_aware_all_to_all,
    reset_strategy_cache,
    run_numerics,
    run_parallel_graph,
    strategy_index,
)
from ..lab._mutants import OPERATORS, NotConstructible, Site, find_sites, make_mutant
from ..lab._mutate import (
    MutantId,
    MutantResult,
    MutationReport,
    Source,
    build_source,
    classify,
    run_mutations,
)

__all__ = [
    "DEFAULT_DEVICE_NAME",
    "OPERATORS",
    "MutantId",
    "MutantResult",
    "MutationReport",
    "NotConstructible",
    "NumericsReport",
    "OfferedStrategy",
    "ShardPerturbation",
    "Site",
    "Source",
    "TensorCheck",
    "apply_on_one_rank",
    "build_source",
    "chosen_strategy",
    "classify",
    "cpu_mesh",
    "device_name",
    "explain",
    "find_nodes",
    "find_sites",
    "fresh_strategy_cache",
    "init_fake_process_group",
    "lower_with_inductor",
    "make_mutant",
    "offer_strategy",
    "pin_strategy",
    "rank_aware_all_to_all",
    "reset_strategy_cache",
    "run_mutations",
    "run_numerics",
    "run_parallel_graph",
    "strategy_index",
]
