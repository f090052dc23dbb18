"""What the partitioned forward saves for backward under activation checkpointing: autoparallel
alone against the plugin's default call, per checkpointing mode.

    python benchmarks/checkpoint_saved_bytes.py --json benchmarks/results/checkpoint_saved_bytes.json \\
        --txt benchmarks/results/checkpoint_saved_bytes.txt

One row per (model, checkpointing, call), each in its own process (a fresh strategy cache, memory
returned). A row builds the model with static shapes on a 2x2 CPU mesh over fake ranks, solves,
and applies with ``AutoParallel.apply_placement`` (autoparallel's own path: FSDP all-gathers marked
for recompute, then ``aot_compile_joint_with_descriptors``, whose default partitioner reads the
checkpoint tags). The forward graph handed to the compiler returns the user outputs, then what is
saved for backward; the row counts those saved tensors and their bytes at rank 0's local shapes:

* ``saved``: every saved tensor (the sharded parameters and inputs among them);
* ``activations``: the saved tensors that are not graph inputs (what checkpointing trades);
* ``plugin``: the saved tensors a plugin node produced (``meta["custom"]["apc_constraint"]``);
* ``bw coll``: collectives in the backward graph (a recomputed redistribution runs again there).

Models: ``models.CheckpointedBlock`` (fp32, batch 8 x seq 8 x dim 32: ``none``, ``full`` =
``checkpoint(use_reentrant=False)``, ``selective`` = ``create_selective_checkpoint_contexts`` with
matmuls saved) and torchtitan 0.3.0's Llama3 debug model, 2 layers, torchtitan's mixed precision
and constraints (``lab/_torchtitan.py``), with torchtitan's own ``FullAC`` / ``SelectiveAC``
applied to its layers (``none`` / ``full`` / ``selective``). Calls: ``alone`` (autoparallel on the
default solver, ``highs-lp``), ``default`` (``add_op_constraints()``), and on the block
``repair`` (the gate's ``mul`` pinned to a swapped strategy, as in tests/test_checkpointing.py, so
the default call inserts a redistribution inside the region) with the fix and ``repair-untagged``
(the same with the repair node's checkpoint tags not copied: the behaviour before the fix).

Counts are read from graphs, not timed: a row run again gives the same numbers for the same plan.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

MODES = ("none", "full", "selective")
CALLS = ("alone", "default")
REPAIR_CALLS = ("repair", "repair-untagged")


def _block(ac: str):
    import torch

    from autoparallel_constraints.models import CheckpointedBlock

    return lambda: CheckpointedBlock(ac=ac), (lambda: torch.randn(8, 8, 32)), None


def _llama3(ac: str):
    from autoparallel_constraints.lab._torchtitan import torchtitan_case

    case = torchtitan_case("llama3", layers=2)

    def model_fn():
        import torch

        model = case.model_fn()
        if ac != "none":
            from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

            (FullAC.Config() if ac == "full" else SelectiveAC.Config()).build().apply(model)
            # torchtitan's apply() turns dynamo's LRU cache off for its compile path; this run does not
            # compile with dynamo afterwards, so put it back
            torch._C._dynamo.eval_frame._set_lru_cache(True)
        return model

    return model_fn, case.input_fn, case


def _pin_the_gate(autop) -> None:
    import torch
    from torch.distributed.tensor.placement_types import Shard

    from autoparallel_constraints.testing import find_nodes, pin_strategy, strategy_index

    gate_p, up_p = (Shard(0), Shard(1)), (Shard(1), Shard(0))
    (gate,) = [n for n in find_nodes(autop, torch.ops.aten.mul.Tensor) if n.meta.get("partitioner_tag") == "is_forward"]
    pin_strategy(autop, gate, strategy_index(autop, gate, [gate_p, up_p], gate_p), name="pin_gate")


def _saved(autop, graphs: list) -> dict:
    """The forward graph's saved tensors (its outputs after the first ``num_forward``), in bytes."""
    import torch

    from autoparallel_constraints.core._tags import TAG

    forward = [gm for tagged, gm in graphs if tagged]
    if len(forward) != 1:
        raise RuntimeError(f"expected one forward graph handed to the compiler, got {len(forward)}")
    num_forward = autop.joint_with_descriptors._aot_state.fw_metadata.num_forward
    (output,) = forward[0].graph.find_nodes(op="output")
    saved = [n for n in output.args[0][num_forward:] if isinstance(n.meta.get("val"), torch.Tensor)]
    parallel = {n.name: n for n in autop.parallel_gm.graph.nodes}
    inputs = {n.name for n in autop.parallel_gm.graph.find_nodes(op="placeholder")}

    def nbytes(node) -> int:
        val = node.meta["val"]
        return int(val.numel()) * val.element_size()

    def from_plugin(node) -> bool:
        source = parallel.get(node.name)
        return source is not None and TAG in (source.meta.get("custom") or {})

    backward = [gm for tagged, gm in graphs
                if not tagged and any(str(p.target).startswith("tangents") for p in gm.graph.find_nodes(op="placeholder"))]
    bw_collectives = None
    if backward:
        bw_collectives = sum(1 for n in backward[0].graph.nodes
                             if n.op == "call_function" and str(n.target).startswith("_c10d_functional.")
                             and "wait_tensor" not in str(n.target))
    return {
        "n_saved": len(saved),
        "saved_bytes": sum(nbytes(n) for n in saved),
        "n_activations": sum(1 for n in saved if n.name not in inputs),
        "activation_bytes": sum(nbytes(n) for n in saved if n.name not in inputs),
        "n_plugin": sum(1 for n in saved if from_plugin(n)),
        "plugin_bytes": sum(nbytes(n) for n in saved if from_plugin(n)),
        "bw_collectives": bw_collectives,
        "plugin_saved": sorted(f"{n.name} {tuple(n.meta['val'].shape)}" for n in saved if from_plugin(n)),
    }


def run_cell(model: str, ac: str, call: str) -> dict:
    import contextlib
    import warnings

    import torch
    from autoparallel.api import AutoParallel
    from torch.distributed.tensor.placement_types import Replicate, Shard

    import autoparallel_constraints as apc
    from autoparallel_constraints.apply import _materialize
    from autoparallel_constraints.harness._cpu import cpu_mesh, device_name
    from autoparallel_constraints.testing import offer_strategy

    warnings.simplefilter("ignore")
    model_fn, input_fn, case = (_block if model == "block" else _llama3)(ac)
    row: dict = {"model": model, "ac": ac, "call": call}
    t0 = time.perf_counter()
    if call == "repair-untagged":
        _materialize.REGION_META_KEYS = ()  # the behaviour before the fix
    offer = contextlib.nullcontext()
    if call.startswith("repair"):
        gate_p, up_p = (Shard(0), Shard(1)), (Shard(1), Shard(0))
        offer = offer_strategy(torch.ops.aten.mul.Tensor, input_placements=[gate_p, up_p], output_placements=gate_p,
                               where=lambda n: n.meta.get("partitioner_tag") == "is_forward")
    with torch.device("meta"):
        meta_model = model_fn()
    mesh = cpu_mesh((2, 2), ("dp", "tp"))
    graphs: list = []
    with offer, device_name(), AutoParallel(meta_model, input_fn, mesh,
                                            mp_policy=None if case is None else case.mp_policy) as autop:
        if case is None:
            io = [(Shard(0), Replicate())]
            autop.add_input_constraints(io)
            autop.add_output_constraints(io)
            autop.add_parameter_memory_constraint()
        else:
            case.configure(autop)
        if call.startswith("repair"):
            _pin_the_gate(autop)
        if call == "alone":
            apc.use_solver(autop, "highs-lp")
        else:
            autop.add_op_constraints()
        placement = autop.optimize_placement()
        compiler = autop.compiler_fn

        def capture(gm, example_inputs, tag_forward=False):
            graphs.append((tag_forward, gm))
            return compiler(gm, example_inputs, tag_forward=tag_forward)

        autop.compiler_fn = capture
        autop.apply_placement(placement)
        row.update(_saved(autop, graphs))
        audit = apc.audit(autop)
        row["audit"] = "clean" if audit.ok else "flagged"
        row["repairs"] = len(audit.redistributes)
    row["s"] = round(time.perf_counter() - t0, 1)
    return row


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:.1f}"


def render(rows: list[dict]) -> str:
    head = (f"{'model':<7} {'ac':<10} {'call':<16} {'saved':>6} {'KiB':>9} {'activ.':>6} {'KiB':>9} "
            f"{'plugin':>6} {'KiB':>7} {'bw coll':>7} {'repairs':>7} {'audit':<7} {'s':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:<7} {r['ac']:<10} {r['call']:<16} failed: {r['error'][:120]}")
            continue
        lines.append(
            f"{r['model']:<7} {r['ac']:<10} {r['call']:<16} {r['n_saved']:>6} {_kib(r['saved_bytes']):>9} "
            f"{r['n_activations']:>6} {_kib(r['activation_bytes']):>9} {r['n_plugin']:>6} {_kib(r['plugin_bytes']):>7} "
            f"{'-' if r['bw_collectives'] is None else r['bw_collectives']:>7} {r['repairs']:>7} {r['audit']:<7} {r['s']:>6}"
        )
        for saved in r.get("plugin_saved", [])[:4]:
            lines.append(f"    saved from a plugin node: {saved}")
    return "\n".join(lines)


def _cells(models: list[str]) -> list[tuple[str, str, str]]:
    cells = [(m, ac, call) for m in models for ac in MODES for call in CALLS]
    if "block" in models:
        cells += [("block", ac, call) for ac in ("full", "selective") for call in REPAIR_CALLS]
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="block,llama3")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--txt", type=Path, default=None)
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print("ROW " + json.dumps(run_cell(*args.cell.split(","))))
        return
    rows: list[dict] = []
    for model, ac, call in _cells(args.models.split(",")):
        cmd = [sys.executable, __file__, "--cell", f"{model},{ac},{call}"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
            found = [ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")]
            row = json.loads(found[-1][4:]) if found else {
                "model": model, "ac": ac, "call": call,
                "error": f"exited {out.returncode}: {out.stderr.strip().splitlines()[-1:] }"}
        except subprocess.TimeoutExpired:
            row = {"model": model, "ac": ac, "call": call, "error": f"timeout after {args.timeout} s"}
        rows.append(row)
        print(render([row]).split("\n", 2)[-1], flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    text = render(rows)
    print(text)
    if args.txt:
        import torch

        header = [
            "# python benchmarks/checkpoint_saved_bytes.py --json benchmarks/results/checkpoint_saved_bytes.json "
            "--txt benchmarks/results/checkpoint_saved_bytes.txt",
            f"# {time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores (shared with other jobs), "
            f"torch {torch.__version__}, autoparallel a54c252, torchtitan 0.3.0; 2x2 CPU mesh over fake ranks.",
            "# Per rank (rank 0's local shapes), what the partitioned forward saves for backward: saved = every",
            "# saved tensor (sharded parameters and inputs included), activ. = those that are not graph inputs,",
            "# plugin = those a plugin node produced; bw coll = collectives in the backward graph; s = the row's time.",
        ]
        args.txt.write_text("\n".join(header) + "\n" + text + "\n")


if __name__ == "__main__":
    main()
