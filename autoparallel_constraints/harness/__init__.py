"""The CPU harness: fake ranks and CPU meshes, the cost model's device name, mesh-safe strategy
caches, strategy injection, Inductor lowering, and the LocalTensorMode numerics runner that proves
a parallel graph against the single-device model.

The lab and the public test kit (:mod:`autoparallel_constraints.testing`) build on it; it imports
nothing above the core.
"""

from ._cpu import (
    DEFAULT_DEVICE_NAME,
    cpu_mesh,
    device_name,
    fresh_strategy_cache,
    init_fake_process_group,
    reset_strategy_cache,
)
from ._explain import explain
from ._inject import (
    OfferedStrategy,
    chosen_strategy,
    find_nodes,
    lower_with_inductor,
    offer_strategy,
    pin_strategy,
    strategy_index,
)
from ._numerics import NumericsReport, TensorCheck, run_numerics
from ._parallel import ShardPerturbation, apply_on_one_rank, rank_aware_all_to_all, run_parallel_graph
from ._yardstick import YARDSTICK_FACTOR, against_float64, float64_results, yardstick_summary

__all__ = [
    "DEFAULT_DEVICE_NAME",
    "NumericsReport",
    "OfferedStrategy",
    "ShardPerturbation",
    "TensorCheck",
    "YARDSTICK_FACTOR",
    "against_float64",
    "apply_on_one_rank",
    "chosen_strategy",
    "cpu_mesh",
    "device_name",
    "explain",
    "find_nodes",
    "float64_results",
    "fresh_strategy_cache",
    "init_fake_process_group",
    "lower_with_inductor",
    "offer_strategy",
    "pin_strategy",
    "rank_aware_all_to_all",
    "reset_strategy_cache",
    "run_numerics",
    "run_parallel_graph",
    "strategy_index",
    "yardstick_summary",
]
