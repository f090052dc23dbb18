"""Random small models from a menu of table-relevant patterns, for fuzzing plans end to end.

A :class:`ModelSpec` is plain data (sizes and a list of :class:`Step`), so hypothesis can draw and
shrink it, and :meth:`ModelSpec.to_code` prints a failing case as a self-contained model. The
running tensor is ``x: [batch, seq, heads * head_dim]`` throughout; every step maps it to the same
shape, so steps compose in any order.

Menu (each step names the pattern whose joint graph it brings in):

* ``linear``       x @ W                               (mm / einsum, Partial sums)
* ``index_put``    h + h[..., [k], :] broadcast         (index, and index_put in the backward)
* ``slice``        cat(2 * h[..., :m, :], h[..., m:, :]) (slice, cat; slice_scatter backward)
* ``bias_add``     x + b, b: [hidden]                   (broadcast add; sum in the backward)
* ``scale_mul``    x * s, s: [seq, 1]                   (broadcast mul over the last dim)
* ``where``        where(x > 0, x, 0.1 * x)             (where.self, comparison)
* ``cat``          cat(x[..., :h/2], 2 * x[..., h/2:])  (cat on the last dim)
* ``scatter``      x.scatter_add(-1, perm, 0.5 * x)     (scatter_add with a fixed permutation)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["MENU", "FuzzModel", "ModelSpec", "Step"]

MENU = ("linear", "index_put", "slice", "bias_add", "scale_mul", "where", "cat", "scatter")


@dataclass(frozen=True, slots=True)
class Step:
    kind: str
    arg: int = 0  # head index for index_put, split for slice


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Sizes, steps, mesh and pins of one fuzz case."""

    batch: int
    seq: int
    heads: int
    head_dim: int
    steps: tuple[Step, ...]
    mesh: tuple[int, ...] = (2,)
    input_placements: tuple[str, ...] = ("S0",)  # per mesh dim: "R" or "S<d>"
    pin_output: bool = False
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim

    def to_code(self) -> str:
        """A self-contained reproduction: the model class and the autoparallel call to run."""
        lines = [
            "import torch",
            "from torch import nn",
            "from torch.distributed.tensor.placement_types import Replicate, Shard",
            "from autoparallel_constraints.testing import run_numerics",
            "",
            "class Repro(nn.Module):",
            "    def __init__(self):",
            "        super().__init__()",
        ]
        for i, step in enumerate(self.steps):
            lines += [f"        {line}" for line in _init_code(step, i, self)]
        lines += ["", "    def forward(self, x):", f"        B, S, NH, HD = {self.batch}, {self.seq}, {self.heads}, {self.head_dim}"]
        for i, step in enumerate(self.steps):
            lines += [f"        {line}" for line in _forward_code(step, i)]
        lines += ["        return x", ""]
        place = ", ".join("Replicate()" if p == "R" else f"Shard({p[1:]})" for p in self.input_placements)
        lines += [
            f"pins = [({place},)]",
            "report = run_numerics(Repro, lambda: torch.randn("
            f"{self.batch}, {self.seq}, {self.hidden}), {self.mesh}, input_placements=pins,",
            f"    output_placements={'pins' if self.pin_output else '[None]'}, parameter_memory_constraint=False,",
            "    configure=lambda autop: autop.add_op_constraints(materialize='all'))",
            "print(report)",
        ]
        return "\n".join(lines)


def _init_code(step: Step, i: int, spec: ModelSpec) -> list[str]:
    h = spec.hidden
    if step.kind == "linear":
        return [f"self.w{i} = nn.Parameter(torch.randn({h}, {h}) / {h ** 0.5:.4f})"]
    if step.kind == "bias_add":
        return [f"self.b{i} = nn.Parameter(torch.randn({h}))"]
    if step.kind == "scale_mul":
        return [f"self.s{i} = nn.Parameter(torch.randn({spec.seq}, 1))"]
    if step.kind == "scatter":
        return [f"self.register_buffer('perm{i}', torch.randperm({h}, generator=torch.Generator().manual_seed({i}))"
                f".expand({spec.batch}, {spec.seq}, {h}).clone())"]
    return []


def _forward_code(step: Step, i: int) -> list[str]:
    if step.kind == "linear":
        return [f"x = x @ self.w{i}"]
    if step.kind == "index_put":
        return ["h = x.view(B, S, NH, HD)", f"x = (h + h[..., [{step.arg}], :]).reshape(B, S, NH * HD)"]
    if step.kind == "slice":
        return ["h = x.view(B, S, NH, HD)",
                f"x = torch.cat([2 * h[..., :{step.arg}, :], h[..., {step.arg}:, :]], dim=2).reshape(B, S, NH * HD)"]
    if step.kind == "bias_add":
        return [f"x = x + self.b{i}"]
    if step.kind == "scale_mul":
        return [f"x = x * self.s{i}"]
    if step.kind == "where":
        return ["x = torch.where(x > 0, x, 0.1 * x)"]
    if step.kind == "cat":
        return ["half = x.shape[-1] // 2", "x = torch.cat([x[..., :half], 2 * x[..., half:]], dim=-1)"]
    if step.kind == "scatter":
        return [f"x = x.scatter_add(-1, self.perm{i}, 0.5 * x)"]
    raise ValueError(f"unknown step {step.kind!r}; the menu is {MENU}")


class FuzzModel(nn.Module):
    """The model a :class:`ModelSpec` describes (the same code :meth:`ModelSpec.to_code` prints)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        namespace: dict = {"torch": torch, "nn": nn}
        source = "\n".join(
            ["def init(self):"] + [f"    {line}" for i, s in enumerate(spec.steps) for line in _init_code(s, i, spec)]
            + ["    pass", "", "def forward(self, x):",
               f"    B, S, NH, HD = {spec.batch}, {spec.seq}, {spec.heads}, {spec.head_dim}"]
            + [f"    {line}" for i, s in enumerate(spec.steps) for line in _forward_code(s, i)]
            + ["    return x"]
        )
        exec(compile(source, "<fuzz-model>", "exec"), namespace)  # noqa: S102 - our own generated code
        namespace["init"](self)
        self._forward = namespace["forward"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(self, x)
