"""CPU test harness for autoparallel plans: fake ranks, CPU meshes, the cost model's device name,
mesh-safe caches, a LocalTensorMode numerics runner, strategy injection and Inductor lowering.

Importable by users' own tests; pytest fixtures live in
``autoparallel_constraints.testing.pytest_plugin``.
"""

from ._harness import (
    DEFAULT_DEVICE_NAME,
    cpu_mesh,
    device_name,
    fresh_strategy_cache,
    init_fake_process_group,
    reset_strategy_cache,
)
from ._numerics import (
    NumericsReport,
    ShardPerturbation,
    TensorCheck,
    apply_on_one_rank,
    rank_aware_all_to_all,
    run_numerics,
    run_parallel_graph,
)
from ._inject import (
    OfferedStrategy,
    chosen_strategy,
    find_nodes,
    lower_with_inductor,
    offer_strategy,
    pin_strategy,
    strategy_index,
)

__all__ = [
    "DEFAULT_DEVICE_NAME",
    "NumericsReport",
    "OfferedStrategy",
    "ShardPerturbation",
    "TensorCheck",
    "apply_on_one_rank",
    "rank_aware_all_to_all",
    "run_numerics",
    "run_parallel_graph",
    "chosen_strategy",
    "find_nodes",
    "lower_with_inductor",
    "offer_strategy",
    "pin_strategy",
    "strategy_index",
    "cpu_mesh",
    "device_name",
    "fresh_strategy_cache",
    "init_fake_process_group",
    "reset_strategy_cache",
]
