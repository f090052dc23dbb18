"""Guards the version report: ``python -m autoparallel_constraints doctor`` marks every package of
the shipped constraints file tested / untested / missing with a fix, reads autoparallel's commit
from pip's record or recognises the pinned source, and importing the plugin warns once on an
untested torch or autoparallel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoparallel_constraints.__main__ import main as cli_main
from autoparallel_constraints.core import _doctor
from autoparallel_constraints.errors import PIN_COMMIT

ROOT = Path(__file__).resolve().parents[1]


def _by_name(checks: list[_doctor.Check]) -> dict[str, _doctor.Check]:
    return {c.name: c for c in checks}


def test_the_shipped_constraints_pin_every_frozen_package():
    """constraints.txt is readable, pins exactly FROZEN, and torch without a build label."""
    pins = _doctor.read_constraints()
    assert list(pins) == [_doctor._canonical(n) for n in _doctor.FROZEN]
    assert "+" not in pins["torch"] and pins["torch"] in _doctor.TESTED_TORCH


def test_freeze_round_trips():
    """What --write-constraints writes reads back as the installed versions."""
    pins = _doctor.parse_constraints(_doctor.freeze())
    for name, version in pins.items():
        assert _doctor._public(_doctor.installed_version(name)) == version, name


def test_every_package_is_marked_with_a_fix_when_not_tested(monkeypatch):
    """A missing package and another version are named, with the pip line that fixes each."""
    pins = {"pulp": "3.3.2", "highspy": "0.0.1", "not-a-real-package": "1.0"}
    lines = _by_name(_doctor.checks(pins))
    assert lines["not-a-real-package"].status == "missing"
    assert lines["not-a-real-package"].fix == "pip install 'not-a-real-package==1.0'"
    assert lines["highspy"].status == "untested" and "highspy==0.0.1" in lines["highspy"].fix
    assert {"python", "torch", "autoparallel", "CBC (pulp)"} <= set(lines)
    text = _doctor.format_checks(list(lines.values()))
    summary = dict(line.split(": ", 1) for line in text.splitlines() if line.startswith(("missing:", "untested:")))
    assert summary["missing"] == "not-a-real-package" and "highspy" in summary["untested"]


def test_a_docs_package_not_installed_is_reported_but_not_missing(monkeypatch):
    """The docs site's packages are pinned, but one not installed reads "optional" with the docs
    extra as its fix, and the doctor still exits 0 (a core package missing exits 1)."""
    import argparse

    real = _doctor.installed_version
    monkeypatch.setattr(_doctor, "installed_version", lambda name: None if name == "mkdocs" else real(name))
    check = _by_name(_doctor.checks({"mkdocs": "1.6.1"}))["mkdocs"]
    assert check.status == "optional" and ".[docs]" in check.fix
    monkeypatch.setattr(_doctor, "read_constraints", lambda path=None: {"mkdocs": "1.6.1"})
    assert _doctor.run(argparse.Namespace(write_constraints=False)) == 0
    monkeypatch.setattr(_doctor, "read_constraints", lambda path=None: {"mkdocs": "1.6.1", "not-a-real-package": "1.0"})
    assert _doctor.run(argparse.Namespace(write_constraints=False)) == 1


def test_torch_outside_the_tested_releases_is_untested(monkeypatch):
    """torch's local build label is ignored; a release not in TESTED_TORCH is untested."""
    monkeypatch.setattr(_doctor, "installed_version", lambda name: {"torch": "2.99.0+cu130"}.get(name))
    check = _by_name(_doctor.checks({}))["torch"]
    assert check.status == "untested" and check.installed == "2.99.0+cu130"
    assert f"torch=={_doctor.TESTED_TORCH[-1]}" in check.fix
    monkeypatch.setattr(_doctor, "installed_version", lambda name: {"torch": _doctor.TESTED_TORCH[0] + "+cpu"}.get(name))
    assert _by_name(_doctor.checks({}))["torch"].status == "tested"


@pytest.mark.parametrize(
    ("requires", "triton", "status", "fix"),
    [
        (['triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"'], "3.8.0", "tested", ""),
        (['triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"'], "3.9.0", "untested",
         "pip install 'triton~=3.8.0' (the triton torch 2.14.1 requires)"),
        ([], "3.8.0", "untested", "pip install 'triton==3.9.0'"),  # a CPU build: the constraints file's
    ],
    ids=["cuda-build-own-triton", "cuda-build-other-triton", "cpu-build"],
)
def test_triton_beside_a_cuda_torch_is_the_one_torch_requires(monkeypatch, requires, triton, status, fix):
    """PyPI's CUDA builds of torch pin their own triton (2.14.1: ``~=3.8.0``), which the constraints
    file's 3.9.0 (tested beside the CPU build) cannot replace without breaking torch: the doctor
    checks triton against torch's requirement there, and against the constraints file otherwise."""
    versions = {"torch": "2.14.1", "triton": triton}
    monkeypatch.setattr(_doctor, "installed_version", lambda name: versions.get(name))
    monkeypatch.setattr(_doctor.metadata, "requires", lambda name: requires if name == "torch" else [])
    line = _by_name(_doctor.checks({"triton": "3.9.0"}))["triton"]
    assert (line.installed, line.status, line.fix) == (triton, status, fix), line
    assert line.tested == ("~=3.8.0 (torch's)" if requires else "3.9.0")


def test_triton_requirement_is_read_as_pip_would():
    """``~=X.Y.Z``: the same X.Y and at least X.Y.Z; ``==``: exactly."""
    assert _doctor._satisfies("3.8.0", "~=3.8.0") and _doctor._satisfies("3.8.2", "~=3.8.0")
    assert not _doctor._satisfies("3.9.0", "~=3.8.0") and not _doctor._satisfies("3.7.9", "~=3.8.0")
    assert _doctor._satisfies("3.9.0", "==3.9.0") and not _doctor._satisfies("3.9.1", "==3.9.0")


def test_autoparallel_commit_is_read_from_pip_or_recognised_by_its_source(tmp_path, monkeypatch):
    """The installed autoparallel is recognised for what it is: the pin (recorded by pip or by its
    source), or, where ``$APC_AUTOPARALLEL_UNDER_TEST`` names another commit (tools/upstream_next.py
    installs the pin with open PRs merged), not the pin and untested; a copy with one byte changed
    is not recognised; pip's record wins when present."""
    commit, how = _doctor.autoparallel_commit()
    under_test = os.environ.get("APC_AUTOPARALLEL_UNDER_TEST", PIN_COMMIT)
    if under_test == PIN_COMMIT:
        assert commit == PIN_COMMIT, how
    else:
        assert commit != PIN_COMMIT and _doctor._check_autoparallel().status == "untested", how
    import autoparallel

    installed = Path(autoparallel.__file__).parent
    copy = tmp_path / "autoparallel"
    shutil.copytree(installed, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _doctor.source_fingerprint(copy) == _doctor.source_fingerprint(installed)
    assert (_doctor.source_fingerprint(copy) == _doctor.PIN_SOURCE_FINGERPRINT) == (under_test == PIN_COMMIT)
    (copy / "api.py").write_text((copy / "api.py").read_text() + "\n# changed\n")
    assert _doctor.source_fingerprint(copy) != _doctor.PIN_SOURCE_FINGERPRINT

    class _Dist:
        def read_text(self, name):
            return json.dumps({"url": "https://example.invalid/x", "vcs_info": {"vcs": "git", "commit_id": "f" * 40}})

    monkeypatch.setattr(_doctor.metadata, "distribution", lambda name: _Dist())
    assert _doctor.autoparallel_commit() == ("f" * 40, "pip's direct_url.json")
    assert _doctor._check_autoparallel().status == "untested"


def test_doctor_command_prints_the_table(capsys):
    """``python -m autoparallel_constraints doctor``: one line per package, exit 0 unless missing."""
    rc = cli_main(["doctor"])
    out = capsys.readouterr().out
    for name in ("torch", "autoparallel", "CBC (pulp)", *_doctor.read_constraints()):
        assert name in out, name
    assert rc == (1 if "missing:" in out else 0)


@pytest.mark.parametrize("torch_version", ["2.99.0+cu130", f"{_doctor.TESTED_TORCH[0]}+cpu"], ids=["untested", "tested"])
def test_import_warns_once_on_an_untested_torch(torch_version):
    """Importing the plugin with an untested torch warns once (UntestedVersionWarning); with a
    tested one it is silent (where autoparallel is the pin: test above; where it is not, the one
    warning names autoparallel only)."""
    patch = f"""
        import importlib.metadata as md
        _real = md.version
        md.version = lambda name: {torch_version!r} if name == "torch" else _real(name)
    """
    code = textwrap.dedent(patch) + textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            import autoparallel_constraints
        print([str(w.message) for w in seen if w.category.__name__ == "UntestedVersionWarning"])
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    said = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own list literal
    pinned = os.environ.get("APC_AUTOPARALLEL_UNDER_TEST", PIN_COMMIT) == PIN_COMMIT
    if torch_version.startswith(_doctor.TESTED_TORCH[0]):
        if pinned:
            assert said == []
        else:  # another autoparallel installed (tools/upstream_next.py): the one warning names it, not torch
            assert len(said) == 1 and "with autoparallel" in said[0] and f"torch {torch_version}" not in said[0], said
    else:
        assert len(said) == 1 and f"torch {torch_version}" in said[0] and "doctor" in said[0]
