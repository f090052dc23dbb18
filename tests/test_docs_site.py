"""Guards the docs site (``mkdocs.yml``, full tier): ``mkdocs build --strict`` passes (a broken
link, a missing snippet or an unresolved reference fails it), every public name of ``apc``,
``formulations``, ``testing``, ``testing.conformance`` and ``view`` has a docstring as the API
reference reads it (griffe) and a heading in the built reference, and the front page is the README."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# module -> its page under docs/reference/
REFERENCE = {
    "autoparallel_constraints": "apc",
    "autoparallel_constraints.formulations": "formulations",
    "autoparallel_constraints.testing": "testing",
    "autoparallel_constraints.testing.conformance": "conformance",
    "autoparallel_constraints.view": "view",
}


def _public_without_docstring(module: str) -> list[str]:
    """Names in ``module.__all__`` whose object has no docstring, as griffe (mkdocstrings) reads them."""
    import griffe

    package = griffe.load("autoparallel_constraints", search_paths=[str(ROOT)], resolve_aliases=True,
                          resolve_external=False)
    mod = package if module == "autoparallel_constraints" else package[module.removeprefix("autoparallel_constraints.")]
    missing = []
    for name in (getattr(e, "name", e) for e in mod.exports or ()):
        obj = mod.members.get(name)
        target = obj.final_target if obj is not None and obj.is_alias else obj
        if target is None or not target.docstring:
            missing.append(name)
    return missing


@pytest.mark.full
def test_every_public_name_has_a_docstring():
    """Each module's ``__all__`` (as importing it gives) is what griffe sees, each with a docstring."""
    import importlib

    for module in REFERENCE:
        names = importlib.import_module(module).__all__
        assert names, module
        assert _public_without_docstring(module) == [], module


@pytest.mark.full
def test_mkdocs_build_strict(tmp_path):
    """The site builds with --strict; every public name is a heading of its reference page; the
    front page carries the README's title and its picture of the plan page."""
    import importlib

    t0 = time.perf_counter()
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", **_env()})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"mkdocs build --strict: {time.perf_counter() - t0:.1f}s")
    for module, page in REFERENCE.items():
        html = (site / "reference" / page / "index.html").read_text()
        ids = set(re.findall(r'id="([\w.]+)"', html))
        absent = [n for n in importlib.import_module(module).__all__ if f"{module}.{n}" not in ids]
        assert absent == [], (page, absent)
    front = (site / "index.html").read_text()
    assert "autoparallel_constraints" in front and 'src="img/diff_517.png"' in front


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
