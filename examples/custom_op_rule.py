"""A table row for your own op: a torch.library custom op whose DTensor rule is too generous.

``apcdemo::blend(x, y) = (x + y) / 2`` is elementwise, so x and y must be sharded alike. Its
sharding rule (``register_sharding``) also offers x ``S(0)`` with y ``S(1)``, which computes the
wrong thing. With the producers of x and y pinned to ``S(0)`` and ``S(1)`` on a 2-rank CPU mesh,
autoparallel alone picks that strategy (no communication) and the audit, once the op has a row,
flags it. ``register_rule`` adds the row (validated against the op's schema: a wrong argument
position is refused); ``add_op_constraints(["blend"])`` then keeps the plan co-sharded and the
audit is clean. Prints both verdicts and ``VERDICT: ok``.

    python examples/custom_op_rule.py
"""

import torch
from autoparallel.api import AutoParallel
from torch import nn
from torch.distributed.tensor.experimental import register_sharding
from torch.distributed.tensor.placement_types import Replicate, Shard

import autoparallel_constraints as apc
from autoparallel_constraints import ArgSpec, Linearity, OpRule
from autoparallel_constraints.testing import cpu_mesh, device_name, find_nodes, init_fake_process_group


@torch.library.custom_op("apcdemo::blend", mutates_args=())
def blend(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x + y) * 0.5


@blend.register_fake
def _(x, y):
    return torch.empty_like(x)


blend.register_autograd(lambda ctx, grad: (grad * 0.5, grad * 0.5))


@register_sharding(torch.ops.apcdemo.blend.default)
def blend_sharding(x, y):
    """(output placements, input placements) pairs; the last one is illegal."""
    return [
        ([Replicate()], [Replicate(), Replicate()]),
        ([Shard(0)], [Shard(0), Shard(0)]),
        ([Shard(1)], [Shard(1), Shard(1)]),
        ([Shard(0)], [Shard(0), Shard(1)]),
    ]


class TwoBranches(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.a = nn.Linear(dim, dim, bias=False)
        self.b = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.apcdemo.blend(self.a(x), self.b(x))


def run(with_plugin: bool) -> apc.AuditReport:
    with torch.device("meta"):
        model = TwoBranches()
    with AutoParallel(model, lambda: torch.randn(64, 64, 64), cpu_mesh((2,))) as autop:
        autop.add_input_constraints([(Shard(0),)])
        (node,) = find_nodes(autop, torch.ops.apcdemo.blend.default)
        autop.sharding_optimizer.add_node_constraint(node.args[0], (Shard(0),), constraint_name="pin_x")
        autop.sharding_optimizer.add_node_constraint(node.args[1], (Shard(1),), constraint_name="pin_y")
        if with_plugin:
            print(autop.add_op_constraints(["blend"], formulation="explicit"))
        autop.apply_placement(autop.optimize_placement())
        return apc.audit(autop)


if __name__ == "__main__":
    try:
        apc.register_rule(OpRule(torch.ops.apcdemo.blend.default, "apcdemo", (ArgSpec("x", 0), ArgSpec("y", 2))))
    except apc.InvalidRowError as exc:
        print("refused:", str(exc).splitlines()[0])
    apc.register_rule(OpRule(torch.ops.apcdemo.blend.default, "apcdemo", (ArgSpec("x", 0), ArgSpec("y", 1)),
                             linearity=Linearity.LINEAR))
    with device_name("H100"):
        init_fake_process_group()
        alone = run(with_plugin=False)
        print("autoparallel alone:", alone)
        fixed = run(with_plugin=True)
        print("with the row and add_op_constraints(['blend']): audit", fixed.verdict)
    ok = [v.node for v in alone.by_kind("not_cosharded")] == ["blend"] and fixed.ok
    print(f"VERDICT: {'ok' if ok else 'unexpected'}")
