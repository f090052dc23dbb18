"""Guards what a user sees of a plan (``autoparallel_constraints.view``, ``show``): ``apc.export``
is autoparallel's own JSON export with the plugin's marks on the nodes they name (inserted
redistributions with their costs, audit and verifier flags, strategies changed against
autoparallel alone) and reads back from JSON; the page is autoparallel's visualizer with the
plugin's panel, one file that loads nothing from the network; ``show`` writes it from run files;
and (full tier) headless Chromium renders the page of the forced #348 run and the diff of the
PR #517 case with those marks in its DOM, keeping a screenshot."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _upstream import AP_348_EXAMPLE_REPAIRS_VALUES

import autoparallel_constraints as apc
from autoparallel_constraints.errors import InvalidOptionError, PluginStateError
from autoparallel_constraints.lab._show import example_runs
from autoparallel_constraints.view import SCHEMA, compare_to, load_export, render_diff, render_page

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("APC_ARTIFACTS", ROOT / "build" / "test-artifacts"))


@pytest.fixture(scope="module")
def runs_348() -> tuple[dict[str, Any], dict[str, Any]]:
    """(alone, default call) of the forced #348 case on one build (seed sizes, 2x4)."""
    return example_runs("348")


def _by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in data["nodes"]}


#: What the default call inserts in front of index_put on the forced #348 example: (kind, arg,
#: source, target). Which plan is cheaper moves with torch's index_put strategies
#: (``_upstream.AP_348_EXAMPLE_REPAIRS_VALUES``).
INDEX_PUT_348 = (
    [("repair", "values", "(R, S(1))", "(R, S(0))")] if AP_348_EXAMPLE_REPAIRS_VALUES else
    [("materialized", "arg0", "(R, S(0))", "(S(0), S(1))"), ("materialized", "arg2", "(R, S(1))", "(S(0), S(1))")]
)


def _index_put_marks(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's redistributions in front of index_put, the costly one first."""
    marks = [r for r in run["apc"]["redistributes"] if r["node"] == "index_put"]
    return sorted(marks, key=lambda r: -r["cost"])


# ---------------------------------------------------------------------------------------------
# the export


def test_export_is_autoparallels_format_with_the_plugins_marks(runs_348):
    """autoparallel's keys are there; the redistributions the default call inserts in front of
    index_put (torch 2.13: the plugin's repair of values; 2.14+: the plan's own edges into a
    co-sharded strategy, see ``INDEX_PUT_348``) are on that node with their costs; alone's
    not_cosharded flag is on index_put; every solved node has a strategy."""
    alone, run = runs_348
    for data in (alone, run):
        assert {"mesh", "nodes", "summary", "apc"} <= set(data) and data["apc"]["schema"] == SCHEMA
        assert all("strategy" in n["apc"] for n in data["nodes"] if n["op"] != "output")
    marks = _index_put_marks(run)
    assert sorted((r["kind"], r["arg"], r["source"], r["target"]) for r in marks) == INDEX_PUT_348, marks
    assert marks[0]["cost"] > 0 and all(r["parallel_node"] for r in marks)
    node = _by_name(run)["index_put"]["apc"]
    assert {run["apc"]["redistributes"][i]["kind"] for i in node["redistributes"]} == {k for k, *_ in INDEX_PUT_348}
    assert node["rule"]["name"] == "aten.index_put.default"
    assert run["apc"]["audit"]["ok"] and run["apc"]["flags"] == []
    assert not alone["apc"]["audit"]["ok"] and alone["apc"]["redistributes"] == []
    flagged = [alone["apc"]["flags"][i] for i in _by_name(alone)["index_put"]["apc"]["flags"]]
    assert [(f["source"], f["kind"]) for f in flagged] == [("audit", "not_cosharded")]
    assert run["apc"]["alone"] == "autoparallel alone (highs-lp)"


def test_export_round_trips_through_json(tmp_path, runs_348):
    """What ``json.dump`` writes, ``load_export`` reads back equal; a file that is not a run is refused."""
    _, run = runs_348
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    assert load_export(path) == json.loads(json.dumps(run))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nodes": []}))
    with pytest.raises(InvalidOptionError, match="not an autoparallel export"):
        load_export(bad)
    other = dict(run, apc=dict(run["apc"], schema="autoparallel_constraints.export/0"))
    bad.write_text(json.dumps(other))
    with pytest.raises(InvalidOptionError, match="schema"):
        load_export(bad)


def test_compare_to_marks_exactly_the_nodes_whose_strategy_differs(runs_348):
    """Against a plan with one node's strategy changed, that node and only it is marked."""
    _, run = runs_348
    data = json.loads(json.dumps(run))
    theirs = {n["name"]: n["apc"]["strategy"] for n in data["nodes"] if "apc" in n}
    theirs["index_put"] = "(S(0), R) <- (S(0), R)"
    compare_to(data, theirs)
    assert data["apc"]["changed"] == ["index_put"]
    assert _by_name(data)["index_put"]["apc"]["alone"] == "(S(0), R) <- (S(0), R)"
    with pytest.raises(InvalidOptionError, match="WorkbenchRow"):
        compare_to(data, 3)


def test_export_needs_a_solved_plan():
    """Before optimize_placement there is no plan: a package error says when to call it."""
    import torch
    from autoparallel.api import AutoParallel

    from autoparallel_constraints.models import SeedBlock, SeedConfig
    from autoparallel_constraints.testing import cpu_mesh

    with torch.device("meta"):
        model = SeedBlock(SeedConfig(num_heads=2, head_dim=4, batch=4, seq=4))
    with AutoParallel(model, model.make_input, cpu_mesh((2, 2))) as autop:
        with pytest.raises(PluginStateError, match="optimize_placement"):
            apc.export(autop)


# ---------------------------------------------------------------------------------------------
# the page


def test_page_has_the_panel_autoparallels_page_and_no_network(runs_348):
    """One document: the plugin's panel (its repair with its cost), autoparallel's visualizer, the
    badge data for index_put, and no URL that a browser would load."""
    _, run = runs_348
    page = render_page(run)
    repair = _index_put_marks(run)[0]
    assert page.count("<html") == 1 and 'id="apc-panel"' in page and "AutoParallel Strategy Visualizer" in page
    assert f'data-apc-node="index_put" data-apc-cost="{repair["cost"]:.3f}"' in page
    assert re.search(r'(src|href|data-src)="https?://', page) is None
    marks = json.loads(re.search(r'<script type="application/json" id="apc-marks">(.*?)</script>', page).group(1))
    # 2.14+: index_put runs another strategy than alone's, which the page marks too
    changed = [] if AP_348_EXAMPLE_REPAIRS_VALUES else ["changed"]
    assert [m["kind"] for m in marks["index_put"]] == ["redistribute"] * len(INDEX_PUT_348) + changed


def test_diff_shows_what_the_call_added_and_what_alone_was_flagged_for(runs_348):
    """alone -> default call: the repair is new in the second run, alone's flag is listed."""
    alone, run = runs_348
    page = render_diff(alone, run)
    new = page[page.index('id="apc-redistributes"'):page.index('id="apc-redistributes-gone"')]
    assert 'data-apc-node="index_put"' in new
    before = page[page.index('id="apc-flags-before"'):]
    assert 'data-apc-node="index_put" data-apc-kind="not_cosharded"' in before


def test_show_writes_the_page_and_the_diff_from_run_files(tmp_path, runs_348):
    """``show RUN.json`` and ``show BEFORE.json AFTER.json`` write pages; three runs are refused."""
    from autoparallel_constraints.__main__ import main

    alone, run = runs_348
    a, b = tmp_path / "alone.json", tmp_path / "run.json"
    a.write_text(json.dumps(alone))
    b.write_text(json.dumps(run))
    assert main(["show", str(b), "-o", str(tmp_path / "plan.html")]) == 0
    assert 'data-apc-view="run"' in (tmp_path / "plan.html").read_text()
    assert main(["show", str(a), str(b), "-o", str(tmp_path / "diff.html")]) == 0
    assert 'data-apc-view="diff"' in (tmp_path / "diff.html").read_text()
    assert main(["show", str(a), str(b), str(b)]) == 2


# ---------------------------------------------------------------------------------------------
# a real browser (full tier)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "chromium is not installed (.ci/run installs Debian's `chromium`; apt-get install -y chromium)"
        print(f"SKIP browser test: {reason}", file=sys.stderr)
        pytest.skip(reason)
    return path


def _browser(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def _rows(dom: str, table_id: str) -> list[str]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert table is not None, f"no table #{table_id} in the rendered DOM"
    return re.findall(r"<tr data-apc-node=.*?</tr>", table.group(1), re.S)


@pytest.mark.full
def test_chromium_renders_the_348_page_with_the_inserted_node_and_its_cost(tmp_path, runs_348):
    """The rendered DOM (after the page's scripts ran) has the repair's row with its cost and
    parallel-graph node, and the badge the script put on index_put in "All Nodes"; a screenshot is kept."""
    _, run = runs_348
    page = tmp_path / "plan_348.html"
    page.write_text(render_page(run))
    dom = _browser(page, "--dump-dom").stdout
    rows = [r for r in _rows(dom, "apc-redistributes") if 'data-apc-node="index_put"' in r]
    assert len(rows) == len(INDEX_PUT_348)
    for repair in _index_put_marks(run):
        assert any(f"{repair['cost']:.3f}" in row and repair["parallel_node"] in row for row in rows)
    badge_row = re.search(r'<tr[^>]*data-node-name="index_put".*?</tr>', dom, re.S)
    assert badge_row is not None and 'data-apc-badge="redistribute"' in badge_row.group(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "plan_348.png"
    _browser(page, f"--screenshot={shot}", "--window-size=1400,1400")
    assert shot.stat().st_size > 10_000


@pytest.mark.full
def test_chromium_renders_the_517_diff_with_the_materialized_edges_and_alones_flags(tmp_path):
    """alone vs the default call on the PR #517 case: the rendered diff lists every redistribution
    the call inserted with its cost, and alone's edge_diverges flag; a screenshot is kept."""
    alone, run = example_runs("517")
    page = tmp_path / "diff_517.html"
    page.write_text(render_diff(alone, run))
    dom = _browser(page, "--dump-dom").stdout
    rows = _rows(dom, "apc-redistributes")
    assert len(rows) == len(run["apc"]["redistributes"]) > 0
    for r in run["apc"]["redistributes"]:
        assert any(f'data-apc-cost="{r["cost"]:.3f}"' in row and r["parallel_node"] in row for row in rows)
    kinds = {re.search(r'data-apc-kind="(\w+)"', r).group(1) for r in _rows(dom, "apc-flags-before")}
    assert "edge_diverges" in kinds
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "diff_517.png"
    _browser(page, f"--screenshot={shot}", "--window-size=1400,1400")
    assert shot.stat().st_size > 10_000


def test_show_example_prints_the_story_not_upstreams_logger(tmp_path):
    """``show --example 348`` as a user runs it: its own lines only (no autoparallel "implicitly
    registering" warnings, no torch all_to_all fallback note), and both runs written as JSON."""
    out = tmp_path / "plan.html"
    proc = subprocess.run([sys.executable, "-m", "autoparallel_constraints", "show", "--example", "348", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert "implicitly registering" not in text and "alltoall" not in text, text
    # the package's one warning when another autoparallel is installed (tools/upstream_next.py) is not the story's
    lines = [line for line in text.splitlines() if line.strip() and "UntestedVersionWarning" not in line]
    assert all(line.startswith(("wrote ", "show: ")) for line in lines), text
    assert load_export(tmp_path / "plan.alone.json")["apc"]["flags"] and out.stat().st_size > 50_000
