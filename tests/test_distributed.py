"""Guards the real distributed run (opt-in: ``python -m pytest -m ondemand tests/test_distributed.py``):
4 processes under torchrun on the CPU gloo backend, one forward+backward step of the seed block,
loss and every gradient compared with the single-device model. Without the plugin the natural
Partial divergence (2x proj.weight gradient) and the swapped index_put plan are wrong on real
ranks; with the plugin both are exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ondemand

ROOT = Path(__file__).resolve().parents[1]
DIVERGENCE = ["--config", "16,64,8,64", "--io", "S0,S1", "--memory"]


def _torchrun(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           "-m", "autoparallel_constraints", "distributed-seed", *args, "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (proc.returncode == 0) == result["ok"], proc.stderr[-4000:]
    assert len(result["ranks"]) == 4 and len({r.get("plan") for r in result["ranks"]}) == 1
    return result


@pytest.mark.parametrize(
    ("args", "expect_ok", "audit"),
    [
        (["--formulation", "none", *DIVERGENCE], False, "1 edge_diverges"),
        (["--formulation", "explicit", "--materialize", "all", *DIVERGENCE], True, "clean"),
        (["--formulation", "none", "--inject-swapped"], False, "1 not_cosharded"),
        (["--formulation", "explicit", "--materialize", "table", "--inject-swapped"], True, "clean"),
    ],
)
def test_four_gloo_processes(tmp_path, args, expect_ok, audit):
    """torchrun, 4 ranks, 2x2 mesh: exact exactly when the plugin is on; the audit agrees."""
    result = _torchrun(tmp_path, *args)
    assert result["ok"] is expect_ok, json.dumps(result, indent=1)[:3000]
    assert all(r["audit"] == audit for r in result["ranks"])
