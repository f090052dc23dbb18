"""Guards the seam to autoparallel, torch and PuLP (``autoparallel_constraints/seam``): nothing
outside it patches or reads a private upstream name (an AST scan of the package, which also sees
instance shadows); every shim is a complete declaration whose docs page is generated; the import
attaches only shims that leave autoparallel's results alone, in one ordered install that
``uninstall`` undoes exactly (a fresh process compares every target's identity, the ILP's digest
and the plan with a process that never imported the package); a moved target raises the named
error; a probe that finds the upstream fix keeps its shim off; ``$APC_SHIMS`` selects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import autoparallel_constraints as apc
from autoparallel_constraints import seam
from autoparallel_constraints.seam import Effect, Verdict, When
from autoparallel_constraints.seam._docs import seam_markdown

from _seam_scan import touches

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autoparallel_constraints"


def _run(code: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=timeout, cwd=ROOT)


# -- one seam -----------------------------------------------------------------------------------


def test_nothing_outside_the_seam_touches_upstream_internals():
    """The scan finds no patch, instance shadow, private import, private read or wholesale state
    read of autoparallel, torch or PuLP in the package outside ``seam/``."""
    found = touches(PACKAGE)
    assert not found, "touches of upstream internals outside seam/:\n" + "\n".join(map(str, found))


SABOTAGE = '''
import autoparallel.api
from autoparallel.api import AutoParallel
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from ..seam.dtensor import OpSpec
import pulp

def f(opt, prob, spec):
    AutoParallel.__enter__ = None
    setattr(autoparallel.api, "x", 1)
    opt._solve = lambda *a: None
    opt._apc_state = 1
    n = prob._variables
    m = getattr(opt, "_constraint_log")
    d = vars(opt)
    OpSpec._private = 1
    ok = torch.ops.aten._to_copy.default, self._mine
    return spec._private_name
'''


def test_the_scan_sees_every_kind_of_touch(tmp_path):
    """The scan itself: a file outside the seam that patches, shadows an instance's method, imports
    or reads a private upstream name is reported line by line; the same file inside ``seam/`` and
    op overloads are not."""
    (tmp_path / "plan").mkdir()
    (tmp_path / "seam").mkdir()
    (tmp_path / "plan" / "bad.py").write_text(SABOTAGE)
    (tmp_path / "seam" / "ok.py").write_text(SABOTAGE)
    found = [(t.path, t.line, t.kind) for t in touches(tmp_path)]
    assert {path for path, _, _ in found} == {"plan/bad.py"}
    kinds = {line: kind for _, line, kind in found}
    assert kinds == {
        4: "private import", 9: "patch", 10: "patch", 11: "instance write", 12: "instance write",
        13: "private read", 14: "private read", 15: "state read", 16: "patch", 18: "private read",
    }, found


# -- each shim a declared record --------------------------------------------------------------------


def test_every_shim_is_declared_completely():
    """Every row names its targets, what it changes, why, what retires it (or that none is filed,
    or that it is no workaround), a one-line brief, and when it attaches; its limits entry, when it
    names one, is a heading of docs/limits.md; no shim that changes results attaches on import."""
    limits = (ROOT / "docs" / "limits.md").read_text()
    names = [row.name for row in seam.SHIMS]
    assert len(names) == len(set(names))
    for row in seam.SHIMS:
        assert row.targets and row.changes and row.why and row.stops and row.brief, row.name
        assert row.retired_by.startswith(("autoparallel PR", "none filed", "not a workaround")), row.name
        if row.limit:
            assert f"**{row.limit}.**" in limits, f"{row.name}: docs/limits.md has no entry **{row.limit}.**"
        if row.when is When.IMPORT:
            assert row.effect is not Effect.CHANGES and row.attach is not None, row.name


def test_the_docs_page_is_generated_from_the_table():
    """docs/seam.md is exactly what ``doctor --seam-md`` prints from the declarations."""
    assert (ROOT / "docs" / "seam.md").read_text() == seam_markdown(), (
        "docs/seam.md is stale: python -m autoparallel_constraints doctor --seam-md > docs/seam.md")


def test_doctor_prints_the_seam_one_line_per_shim():
    """``doctor`` (a real process) prints every shim with its state, what it changes and what
    retires it; on the pin the mesh-blind caches' guards say they attach on use."""
    out = _run("from autoparallel_constraints.__main__ import main; main(['doctor'])")
    lines = out.stdout.split("The seam to autoparallel, torch and PuLP")[1].splitlines()
    for row in seam.SHIMS:
        (line,) = [line for line in lines if line.startswith(row.name + " ")]
        assert row.brief in line and row.retired_by in line, line
    states = {line.split()[0]: line for line in lines[2:] if line.strip()}
    assert "attached" in states["view_skip"] or "not needed" in states["view_skip"]


# -- what import does ---------------------------------------------------------------------------------


def test_the_import_attaches_only_shims_that_leave_results_alone():
    """After ``import autoparallel_constraints`` (this process), every attached shim is an import
    shim whose effect is nothing, observing, or a crash turned into the fix or a clear error."""
    for name in seam.attached():
        row = seam.shim(name)
        if name in seam.FOR_USE or name == "enable_hook":
            continue  # attached by this test session's own calls (cpu_mesh, apc.enable)
        assert row.when is When.IMPORT, name
        assert row.effect in (Effect.NOTHING, Effect.OBSERVES, Effect.CRASH_TO_FIX, Effect.CRASH_TO_ERROR), name


#: A small build, plan and ILP digest, and every target's identity, written for a process that may
#: never import the package (so the cost model's device question is answered here, by hand).
BUILD = '''
import hashlib, json, sys
import torch, torch.distributed as dist
from torch import nn
from torch.testing._internal.distributed.fake_pg import FakeStore
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
torch.cpu.get_device_name = lambda device=None: "H100"
from torch.distributed.device_mesh import init_device_mesh
from autoparallel.api import AutoParallel

def digest(prob):
    h = hashlib.sha256()
    terms = lambda e: sorted((v.name, float(c)) for v, c in e.items())
    for name, c in sorted(prob.constraints.items()):
        h.update(repr(("row", name, c.sense, float(c.constant), terms(c))).encode())
    for v in sorted(prob.variables(), key=lambda v: v.name):
        h.update(repr(("var", v.name, v.lowBound, v.upBound, v.cat)).encode())
    h.update(repr(("objective", terms(prob.objective))).encode())
    return h.hexdigest()

def build():
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    with AutoParallel(model, lambda: torch.randn(16, 64), mesh) as autop:
        autop.add_input_constraints([(torch.distributed.tensor.Shard(0), torch.distributed.tensor.Replicate())])
        placement = autop.optimize_placement()
        return digest(autop.sharding_optimizer.prob), sorted((n.name, str(s)) for n, s in placement.items())

def resolve(key):
    import importlib
    module, path = key.split(":")
    obj = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj

def describe(obj):
    if obj is None:
        return None
    if not callable(obj):
        return [type(obj).__name__]
    code = getattr(obj, "__code__", None)
    return [getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj)),
            code.co_filename if code else None, code.co_firstlineno if code else None]
'''


def _targets() -> list[str]:
    return sorted({t.key for row in seam.SHIMS for t in row.targets
                   if t.kind is not seam.TargetKind.READ and t.module.startswith(("autoparallel", "torch.distributed"))})


def test_uninstall_leaves_autoparallel_as_if_never_imported():
    """Three fresh processes build the same model on (2, 4): one never imports the package; one
    imports it and calls nothing; one imports it and uninstalls. The last has every patched target
    back as the very object it was before the import (identity), none of the names the package
    adds, and all three have the same ILP (digest) and the same plan."""
    targets = json.dumps(_targets())
    never = _run(BUILD + f"""
print(json.dumps([build(), {{k: describe(resolve(k)) for k in {targets}}}]))
""")
    assert never.returncode == 0, never.stderr[-3000:]
    imported = _run(BUILD + """
import autoparallel_constraints
print(json.dumps([build(), None]))
""")
    assert imported.returncode == 0, imported.stderr[-3000:]
    uninstalled = _run(BUILD + f"""
before = {{k: resolve(k) for k in {targets}}}
import autoparallel_constraints
from autoparallel_constraints import seam
patched = sorted(k for k in before if resolve(k) is not before[k])
seam.uninstall()
same = all(resolve(k) is before[k] for k in before)
print(json.dumps([build(), {{k: describe(resolve(k)) for k in before}}, patched, same, seam.patches()]))
""")
    assert uninstalled.returncode == 0, uninstalled.stderr[-3000:]
    (built, described), (built_imported, _) = (json.loads(p.stdout.splitlines()[-1]) for p in (never, imported))
    built_un, described_un, patched, same, left = json.loads(uninstalled.stdout.splitlines()[-1])
    assert patched, "the import patched nothing: the test would prove nothing"
    assert same and left == {}, (patched, left)
    assert described_un == described
    assert described["autoparallel.api:AutoParallel.add_op_constraints"] is None
    assert built == built_imported == built_un


def test_a_moved_target_fails_at_install_with_the_shim_name():
    """A target gone from autoparallel (here the view rule's ``propagate_shape_and_sharding``,
    deleted before the import) makes ``import autoparallel_constraints`` raise
    UpstreamChangedError naming the shim, the target and what stops working, and how to go on
    without it; ``APC_SHIMS=-view_skip`` imports."""
    code = """
import autoparallel.shardings.propagation_rules as rules
del rules.propagate_shape_and_sharding
import autoparallel_constraints
print("imported")
"""
    out = _run(code)
    assert out.returncode != 0
    assert "UpstreamChangedError: shim 'view_skip'" in out.stderr, out.stderr[-2000:]
    assert "propagate_shape_and_sharding is not there" in out.stderr
    assert seam.shim("view_skip").stops in out.stderr and "APC_SHIMS=-view_skip" in out.stderr
    assert "imported" in _run(code, env={"APC_SHIMS": "-view_skip"}).stdout


def test_a_renamed_method_under_a_per_object_hook_raises(monkeypatch):
    """A per-optimizer hook checks autoparallel still calls the method it shadows: with
    ``ShardingOptimizer._solve`` gone the plugin's hook raises the named error (a shadow of a name
    nobody calls would be a silent no-op)."""
    import types

    from autoparallel.optimize_sharding import ShardingOptimizer

    from autoparallel_constraints.seam._optimizer import hook_plugin

    monkeypatch.delattr(ShardingOptimizer, "_solve")
    with pytest.raises(apc.UpstreamChangedError, match="plugin_hooks.*ShardingOptimizer._solve"):
        hook_plugin(types.SimpleNamespace(), solve=None, set_objective=None, apply_memory=None)


# -- probes: both sides of an upstream fix --------------------------------------------------------------


def _asserts_the_wrapper_name(function) -> bool:
    """Read off the source, apart from the probe: does autoparallel's check name the wrapper?"""
    import inspect

    return '"call_local_map" in str(node.target)' in inspect.getsource(function)


def test_a_probe_that_finds_the_fix_keeps_its_shim_off(monkeypatch):
    """The local_map_hop probe agrees with autoparallel's source (needed where its check names the
    wrapper, the pin; not needed where PRs #511 and #512 relax it). With the check relaxed as they
    relax it (the function reads the region past the name check), the probe says not needed,
    attaching is refused and doctor's state says upstream fixed; with the pin's check, needed and
    attached. Both on any autoparallel installed."""
    from autoparallel.shardings import placement_options

    original = placement_options.get_local_map_placement_option
    needed = _asserts_the_wrapper_name(original)
    assert (seam.probe("local_map_hop").verdict is Verdict.NEEDED) == needed

    def relaxed(mesh, specs, user_args, node, local_map_kwargs):
        assert "local_map" in str(node.target)
        return node.meta["val"]

    def strict(mesh, specs, user_args, node, local_map_kwargs):
        assert "call_local_map" in str(node.target) or "call_local_map_backward" in str(node.target)
        return node.meta["val"]

    with seam.detached("local_map_hop"):
        monkeypatch.setattr(placement_options, "get_local_map_placement_option", relaxed)
        assert seam.probe("local_map_hop").verdict is Verdict.FIXED
        assert seam.attach("local_map_hop") is False
        (row,) = [r for r in seam.status() if r.name == "local_map_hop"]
        assert row.state == "not needed: upstream fixed"
        monkeypatch.setattr(placement_options, "get_local_map_placement_option", strict)
        assert seam.probe("local_map_hop").verdict is Verdict.NEEDED
        assert seam.attach("local_map_hop") is True
        seam.detach("local_map_hop")
        monkeypatch.setattr(placement_options, "get_local_map_placement_option", original)
    assert seam.is_attached("local_map_hop") == needed


def test_the_cache_probes_read_the_key(monkeypatch):
    """The cache probes read the key each cache is looked up by: a key with the mesh in it (as PR
    #511 writes the strategy cache's) reads as fixed, a key without it (the pin's, and the comm-cost
    cache's at #511 too) as needed; on the autoparallel installed they agree with its source."""
    import inspect

    from autoparallel.cost_models import collective_runtime_estimation as comms
    from autoparallel.shardings import placement_options

    def key_of(function, name):
        source = inspect.getsource(function)
        start = source.index(f"{name} = (")
        return source[start:source.index("\n    )", start)]

    installed = key_of(placement_options.get_placement_options, "cache_key")
    assert (seam.probe("mesh_strategy_cache").verdict is Verdict.FIXED) == ("mesh" in installed)
    installed = key_of(comms.estimate_strategy_comms_cost, "key")
    assert (seam.probe("mesh_comm_cost_cache").verdict is Verdict.FIXED) == ("mesh" in installed)

    def keyed(src_spec, tgt_spec):
        key = (src_spec.mesh, src_spec.placements, tgt_spec.placements)
        return key

    def blind(src_spec, tgt_spec):
        key = (src_spec.placements, src_spec.tensor_meta, tgt_spec.placements)
        return key

    monkeypatch.setattr(comms, "estimate_strategy_comms_cost", keyed)
    assert seam.probe("mesh_comm_cost_cache").verdict is Verdict.FIXED
    monkeypatch.setattr(comms, "estimate_strategy_comms_cost", blind)
    assert seam.probe("mesh_comm_cost_cache").verdict is Verdict.NEEDED


# -- switching ----------------------------------------------------------------------------------------


def test_apc_shims_selects_at_install_and_install_is_idempotent():
    """``APC_SHIMS=-view_skip`` leaves that shim off (doctor says why), ``none`` attaches none and
    ``+build_memo`` adds one back; an unknown name is refused with the known ones;
    installing twice keeps one dispatcher per target with each around once, in the table's order."""
    from autoparallel.api import AutoParallel

    use_attached = [name for name in seam.FOR_USE if seam.is_attached(name)]
    try:
        seam.uninstall()
        seam.install({seam.ENV: "-view_skip"})
        assert not seam.is_attached("view_skip") and seam.is_attached("build_memo")
        (row,) = [r for r in seam.status() if r.name == "view_skip"]
        assert row.state == "off ($APC_SHIMS)"
        seam.uninstall()
        assert seam.install({seam.ENV: "none, +build_memo"}) == ["build_memo"]
        seam.uninstall()
        with pytest.raises(apc.InvalidOptionError, match="no shim named 'view_skipp'.*view_skip"):
            seam.install({seam.ENV: "-view_skipp"})
    finally:
        seam.uninstall()
        seam.install({})
        for name in use_attached:
            seam.attach(name)
    enter = AutoParallel.__enter__
    seam.install({})
    assert AutoParallel.__enter__ is enter
    order = [row.name for row in seam.SHIMS]
    shims = list(enter.__apc_shims__)
    assert shims == sorted(shims, key=order.index) and len(shims) == len(set(shims))
    assert enter.__wrapped__ is seam.get_original("autoparallel.api:AutoParallel.__enter__")
    assert seam.is_patched("autoparallel.api:AutoParallel.__enter__")
