"""Your own formulation, used and checked: ``prune`` (examples/prune.py) plus the conformance kit.

Registers ``Prune`` (40 lines, public API only: it fixes the variables of non-co-sharded
strategies to 0 by their bounds instead of adding rows), solves the forced #348 case (pre-fix
index_put strategy offered, producers pinned; seed block 10 heads x 16, batch 8, seq 16, 2x4 CPU
mesh) with ``prune`` and with strict's row mode (``Strict(forbid="row")``; by default strict
forbids by bounds, as prune does): both audit clean at the same objective, prune with no row
added. Then runs the conformance kit on it with pytest (about 35 s). Prints ``VERDICT: ok``.

    python examples/custom_formulation.py
"""

import tempfile
import textwrap
from pathlib import Path

import pytest
import torch
from autoparallel.api import AutoParallel
from prune import Prune
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints.models import SeedBlock, SeedConfig
from autoparallel_constraints.testing import (
    cpu_mesh,
    device_name,
    find_nodes,
    init_fake_process_group,
    offer_strategy,
)

INDEX_PUT = torch.ops.aten.index_put.default
RR, RS0, RS1 = (Replicate(), Replicate()), (Replicate(), Shard(0)), (Replicate(), Shard(1))
SMALL = SeedConfig(num_heads=10, head_dim=16, batch=8, seq=16)


def forced(formulation: str | apc.formulations.Formulation) -> tuple[float, int, apc.AuditReport]:
    """(objective, rows added by the formulation, audit) on the forced #348 case."""
    with torch.device("meta"):
        model = SeedBlock(SMALL)
    with offer_strategy(INDEX_PUT, input_placements=[RS0, RR, RS1], output_placements=RS0), \
            AutoParallel(model, model.make_input, cpu_mesh((2, 4))) as autop:
        autop.add_input_constraints([(Shard(0), Replicate())])
        (node,) = find_nodes(autop, INDEX_PUT)
        autop.sharding_optimizer.add_node_constraint(node.args[0], RS0, constraint_name="pin_self")
        autop.sharding_optimizer.add_node_constraint(node.args[2], RS1, constraint_name="pin_values")
        added = autop.add_op_constraints(formulation=formulation)
        print(added)
        autop.apply_placement(autop.optimize_placement())
        rows = sum(1 for n in added.constraint_names if n.startswith(added.formulation + "."))
        return float(autop.sharding_optimizer.prob.objective.value()), rows, apc.audit(autop)


KIT = '''
from autoparallel_constraints.testing.conformance import FormulationConformance
from prune import Prune


class TestPrune(FormulationConformance):
    formulation = Prune
'''

if __name__ == "__main__":
    apc.register_formulation(Prune)
    with device_name("H100"):
        init_fake_process_group()
        results = {"prune": forced("prune"), "strict": forced(apc.formulations.Strict(forbid="row"))}
    for name, (objective, rows, audit) in results.items():
        print(f"{name}: objective {objective:.4f}, {rows} rows added, audit {audit.verdict}")
    with tempfile.TemporaryDirectory() as tmp:
        test_file = Path(tmp) / "test_prune_conformance.py"
        test_file.write_text(textwrap.dedent(KIT))
        kit = pytest.main([str(test_file), "-q", "-p", "no:cacheprovider", "-W", "ignore"])
    (p_obj, p_rows, p_audit), (s_obj, s_rows, s_audit) = results["prune"], results["strict"]
    ok = p_audit.ok and s_audit.ok and p_rows == 0 and s_rows > 0 and abs(p_obj - s_obj) <= 1e-6 * abs(s_obj) and kit == 0
    print(f"conformance kit: {'passed' if kit == 0 else f'failed (pytest exit {int(kit)})'}")
    print(f"VERDICT: {'ok' if ok else 'unexpected'}")
