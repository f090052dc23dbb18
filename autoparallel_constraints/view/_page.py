"""The plan page: autoparallel's own visualizer with the plugin's marks on top, as one offline file.

:func:`render_page` draws one run (an :func:`~._export.export` dict): autoparallel's page
(``autoparallel/visualizer/build_display_from_json.py``: cost breakdown, execution overview,
architecture, all nodes) with a panel above it — the plugin's call, the audit's and the
verifier's verdicts, every inserted redistribution with its cost, one line per flag (its evidence
folded under it), and the nodes whose strategy differs from autoparallel alone's — and each marked
node badged in autoparallel's "All Nodes" table.

:func:`render_diff` draws two runs of one model (autoparallel alone against the default call,
or two formulations of a workbench): what the second changed against the first, node by node,
the redistributions each has and what they cost, and the flags each has; autoparallel's page of
the second run below.

The page needs no network: autoparallel's Perfetto tab (which loads ui.perfetto.dev) is left out.
"""

from __future__ import annotations

import copy
import html
import logging
from collections.abc import Sequence
from typing import Any

from ..seam import autop as upstream

logger = logging.getLogger(__name__)

__all__ = ["render_diff", "render_page"]

# What the plugin adds to autoparallel's page: its panel's look and the badges in "All Nodes".
_STYLE = """<style>
#apc-panel { font-family: system-ui, sans-serif; margin: 0 0 16px; padding: 14px 16px; border: 2px solid #7C3AED;
  border-radius: 10px; background: #FAF5FF; color: #1e1b4b; }
#apc-panel h2 { margin: 0 0 6px; font-size: 18px; }
#apc-panel h3 { margin: 14px 0 6px; font-size: 14px; }
#apc-panel table { border-collapse: collapse; font-size: 12px; width: 100%; background: #fff; }
#apc-panel th, #apc-panel td { border: 1px solid #e9d5ff; padding: 3px 6px; text-align: left; vertical-align: top; }
#apc-panel th { background: #EDE9FE; }
#apc-panel code { font-family: ui-monospace, monospace; }
#apc-panel .apc-ok { color: #047857; font-weight: 600; }
#apc-panel .apc-bad { color: #B91C1C; font-weight: 600; }
#apc-panel .apc-verdicts span { margin-right: 18px; }
#apc-panel details { margin: 0; } #apc-panel summary { cursor: pointer; }
#apc-panel pre { margin: 4px 0; font-size: 11px; white-space: pre-wrap; }
#apc-panel .apc-none { color: #64748b; font-size: 12px; }
.apc-badge { display: inline-block; margin-left: 6px; padding: 0 5px; border-radius: 4px; font-size: 10px;
  font-weight: 700; color: #fff; }
.apc-badge-redistribute { background: #7C3AED; } .apc-badge-flag { background: #DC2626; }
.apc-badge-changed { background: #D97706; }
tr.apc-marked td:first-child { box-shadow: inset 3px 0 0 #7C3AED; }
</style>
"""

# Badges the marked nodes in autoparallel's "All Nodes" table (rows carry data-node-name).
_SCRIPT = """<script>
(function () {
  var marks = JSON.parse(document.getElementById('apc-marks').textContent);
  Object.keys(marks).forEach(function (name) {
    document.querySelectorAll('tr[data-node-name]').forEach(function (row) {
      if (row.getAttribute('data-node-name') !== name) return;
      row.classList.add('apc-marked');
      var cell = row.querySelector('td');
      marks[name].forEach(function (m) {
        var b = document.createElement('span');
        b.className = 'apc-badge apc-badge-' + m.kind;
        b.setAttribute('data-apc-badge', m.kind);
        b.title = m.title;
        b.textContent = m.text;
        if (cell) cell.appendChild(b);
      });
    });
  });
})();
</script>
"""


_OPEN_ROWS = 12  # a longer table starts folded (the rows are in the page all the same)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cost(value: float) -> str:
    return f"{value:.3f}"


def _upstream_data(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with autoparallel's own keys only (what its visualizer reads)."""
    plain = copy.deepcopy({k: data[k] for k in ("mesh", "nodes", "summary")})
    for n in plain["nodes"]:
        n.pop("apc", None)
    return plain


def _verdicts(apc: dict[str, Any]) -> str:
    parts = []
    plugin = apc.get("plugin")
    if plugin:
        parts.append(f"<span>call: <code>add_op_constraints(formulation={plugin['formulation']!r}, "
                     f"materialize={plugin['materialize']!r}, solver={plugin['solver']!r})</code></span>")
    else:
        parts.append("<span>autoparallel alone (no add_op_constraints)</span>")
    for key in ("audit", "verify"):
        v = apc.get(key)
        if v is None:
            parts.append(f'<span data-apc-{key}="not applied">{key}: not applied</span>')
        else:
            cls = "apc-ok" if v["ok"] else "apc-bad"
            verdict = _e(v["verdict"])
            parts.append(f'<span data-apc-{key}="{verdict}">{key}: <b class="{cls}">{verdict}</b></span>')
    if apc.get("objective") is not None:
        parts.append(f"<span>objective {apc['objective']:.3f}</span>")
    return '<div class="apc-verdicts">' + "".join(parts) + "</div>"


def _redistribute_table(redistributes: Sequence[dict[str, Any]], table_id: str, title: str) -> str:
    if not redistributes:
        return f'<h3>{_e(title)}</h3><div class="apc-none" id="{table_id}">none</div>'
    total = sum(r["cost"] for r in redistributes)
    rows = "".join(
        f'<tr data-apc-node="{_e(r["node"])}" data-apc-cost="{_cost(r["cost"])}">'
        f'<td><code>{_e(r["node"])}</code></td><td>{_e(r["arg"])}</td><td><code>{_e(r["source"])} &rarr; '
        f'{_e(r["target"])}</code></td><td>{_cost(r["cost"])}</td><td>{_e(r["kind"])}</td>'
        f'<td><code>{_e(r.get("parallel_node") or "-")}</code></td></tr>'
        for r in redistributes
    )
    opened = " open" if len(redistributes) <= _OPEN_ROWS else ""
    return (
        f"<h3>{_e(title)}: {len(redistributes)}, cost {_cost(total)}</h3>"
        f"<details{opened}><summary>{len(redistributes)} rows</summary>"
        f'<table id="{table_id}"><tr><th>in front of</th><th>argument</th><th>placements</th><th>cost</th>'
        f"<th>kind</th><th>node in the parallel graph</th></tr>{rows}</table></details>"
    )


def _flag_table(flags: Sequence[dict[str, Any]], table_id: str, title: str) -> str:
    if not flags:
        return f'<h3>{_e(title)}</h3><div class="apc-none" id="{table_id}">none</div>'
    rows = "".join(
        f'<tr data-apc-node="{_e(f.get("node") or "-")}" data-apc-kind="{_e(f["kind"])}">'
        f'<td>{_e(f["source"])}</td><td class="apc-bad">{_e(f["kind"])}</td>'
        f'<td><code>{_e(f.get("node") or "-")}</code></td>'
        f'<td><details><summary>{_e(f["summary"])}</summary><pre>{_e(chr(10).join(f.get("evidence", [])))}</pre>'
        "</details></td></tr>"
        for f in flags
    )
    return (
        f"<h3>{_e(title)}: {len(flags)}</h3>"
        f'<table id="{table_id}"><tr><th>by</th><th>kind</th><th>node</th><th>what (click for the evidence)</th></tr>'
        f"{rows}</table>"
    )


def _changed_table(rows: Sequence[tuple[str, str, str, str]], heads: tuple[str, str], table_id: str, title: str) -> str:
    if not rows:
        return f'<h3>{_e(title)}</h3><div class="apc-none" id="{table_id}">none</div>'
    body = "".join(
        f'<tr data-apc-node="{_e(name)}"><td><code>{_e(name)}</code></td><td>{_e(op)}</td>'
        f"<td><code>{_e(a)}</code></td><td><code>{_e(b)}</code></td></tr>"
        for name, op, a, b in rows
    )
    return (
        f"<h3>{_e(title)}: {len(rows)}</h3>"
        f'<table id="{table_id}"><tr><th>node</th><th>op</th><th>{_e(heads[0])}</th><th>{_e(heads[1])}</th></tr>'
        f"{body}</table>"
    )


def _marks(data: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """node name -> badges for autoparallel's "All Nodes" table."""
    apc = data.get("apc") or {}
    out: dict[str, list[dict[str, str]]] = {}
    for r in apc.get("redistributes", []):
        out.setdefault(r["node"], []).append({
            "kind": "redistribute", "text": f"+{r['arg']} {r['source']}\u2192{r['target']} cost {_cost(r['cost'])}",
            "title": f"{r['kind']} redistribution {r['name']}",
        })
    for f in apc.get("flags", []):
        if f.get("node"):
            badge = {"kind": "flag", "text": f"{f['source']}: {f['kind']}", "title": f["summary"]}
            out.setdefault(f["node"], []).append(badge)
    for n in data["nodes"]:
        mark = n.get("apc") or {}
        if mark.get("changed"):
            badge = {"kind": "changed", "text": "changed", "title": f"alone: {mark['alone']}"}
            out.setdefault(n["name"], []).append(badge)
    return out


def _ops(data: dict[str, Any]) -> dict[str, str]:
    return {n["name"]: n.get("op", "") for n in data["nodes"]}


def _page(data: dict[str, Any], panel: str, marks: dict[str, list[dict[str, str]]]) -> str:
    """autoparallel's page for ``data`` with the plugin's panel at the top and its badges script at the end."""
    script = f'<script type="application/json" id="apc-marks">{_e_json(marks)}</script>\n{_SCRIPT}'
    return upstream.visualizer_page(_upstream_data(data), head=_STYLE, top=panel, tail=script)


def _e_json(value: Any) -> str:
    import json

    return json.dumps(value).replace("</", "<\\/")


def render_page(data: dict[str, Any]) -> str:
    """One run's page (see the module docstring): a complete, self-contained HTML document."""
    apc = data.get("apc") or {}
    ops = _ops(data)
    changed = [
        (n["name"], ops[n["name"]], n["apc"]["alone"], n["apc"]["strategy"])
        for n in data["nodes"] if (n.get("apc") or {}).get("changed")
    ]
    alone = apc.get("alone")
    panel = (
        '<section id="apc-panel" data-apc-view="run">'
        f"<h2>What autoparallel_constraints did: {_e(apc.get('label', 'run'))}</h2>"
        + _verdicts(apc)
        + _redistribute_table(apc.get("redistributes", []), "apc-redistributes", "Redistributions the plugin inserted")
        + _flag_table(apc.get("flags", []), "apc-flags", "Flags (audit and verifier)")
        + (_changed_table(changed, (f"{alone}", "this run"), "apc-changed", f"Strategies changed against {alone}")
           if alone else '<h3>Strategies changed</h3><div class="apc-none" id="apc-changed">not compared '
           "(export(autop, alone=row) compares against autoparallel alone)</div>")
        + "</section>"
    )
    return _page(data, panel, _marks(data))


def _key(r: dict[str, Any]) -> tuple[str, str, str, str]:
    return (r["node"], r["arg"], r["source"], r["target"])


def render_diff(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Two runs of one model: what ``after`` changed against ``before`` (module docstring)."""
    a, b = before.get("apc") or {}, after.get("apc") or {}
    la, lb = a.get("label", "before"), b.get("label", "after")
    sa = {n["name"]: (n.get("apc") or {}).get("strategy") for n in before["nodes"]}
    sb = {n["name"]: (n.get("apc") or {}).get("strategy") for n in after["nodes"]}
    ops = _ops(after)
    changed = [(name, ops.get(name, ""), sa[name], sb[name]) for name in sb if name in sa and sa[name] != sb[name]]
    only = [name for name in sb if name not in sa] + [name for name in sa if name not in sb]
    ra, rb = {_key(r) for r in a.get("redistributes", [])}, {_key(r) for r in b.get("redistributes", [])}
    new = [r for r in b.get("redistributes", []) if _key(r) not in ra]
    gone = [r for r in a.get("redistributes", []) if _key(r) not in rb]
    summary_rows = "".join(
        f"<tr><td>{_e(what)}</td><td>{x}</td><td>{y}</td></tr>"
        for what, x, y in (
            ("audit", _verdict(a, "audit"), _verdict(b, "audit")),
            ("verify", _verdict(a, "verify"), _verdict(b, "verify")),
            ("objective", _num(a.get("objective")), _num(b.get("objective"))),
            ("autoparallel's comm cost", _cost(before["summary"]["comm"]), _cost(after["summary"]["comm"])),
            ("redistributions (cost)", f"{len(a.get('redistributes', []))} ({_cost(a.get('redistribute_cost', 0.0))})",
             f"{len(b.get('redistributes', []))} ({_cost(b.get('redistribute_cost', 0.0))})"),
            ("flags", str(len(a.get("flags", []))), str(len(b.get("flags", [])))),
        )
    )
    panel = (
        '<section id="apc-panel" data-apc-view="diff">'
        f"<h2>{_e(lb)} against {_e(la)}</h2>"
        f'<table id="apc-diff-summary"><tr><th></th><th>{_e(la)}</th><th>{_e(lb)}</th></tr>{summary_rows}</table>'
        + _changed_table(changed, (la, lb), "apc-changed", "Strategies changed")
        + (f'<div class="apc-none">nodes in one run only: {_e(", ".join(only))}</div>' if only else "")
        + _redistribute_table(new, "apc-redistributes", f"Redistributions in {lb}, not in {la}")
        + _redistribute_table(gone, "apc-redistributes-gone", f"Redistributions in {la}, not in {lb}")
        + _flag_table(a.get("flags", []), "apc-flags-before", f"Flags of {la}")
        + _flag_table(b.get("flags", []), "apc-flags", f"Flags of {lb}")
        + f'<h3>Below: autoparallel\'s page of {_e(lb)}</h3></section>'
    )
    marks = _marks(after)
    for name, *_ in changed:
        marks.setdefault(name, []).append({"kind": "changed", "text": f"changed vs {la}", "title": f"{la}: {sa[name]}"})
    return _page(after, panel, marks)


def _verdict(apc: dict[str, Any], key: str) -> str:
    return _e((apc.get(key) or {}).get("verdict", "not applied"))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
