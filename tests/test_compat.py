"""Guards the import-time check: without meta-pytorch/autoparallel, or with the unrelated PyPI
package of the same name, importing the plugin raises AutoParallelMissingError that names the
pinned commit and how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = "a54c2529b1cb10b6b27a585b4a6fc2f84bc1d232"


def _import_in_subprocess(prelude: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(prelude) + textwrap.dedent(
        """
        try:
            import autoparallel_constraints
        except Exception as exc:
            print(type(exc).__name__)
            print(exc)
            raise SystemExit(3)
        print("imported")
        """
    )
    env = dict(os.environ)
    paths = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_missing_autoparallel_names_the_install(tmp_path):
    """No autoparallel at all: the error says to install it from the repository at the pin."""
    blocker = """
        import sys
        class _Block:
            def find_spec(self, name, path=None, target=None):
                if name == "autoparallel" or name.startswith("autoparallel."):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None
        sys.meta_path.insert(0, _Block())
    """
    result = _import_in_subprocess(blocker)
    assert result.returncode == 3, result.stderr
    assert "AutoParallelMissingError" in result.stdout
    assert f"autoparallel@{PIN}" in result.stdout
    assert "unrelated" in result.stdout


def test_unrelated_pypi_autoparallel_is_refused(tmp_path):
    """A module named autoparallel without the internals (like the PyPI joblib decorator) is refused."""
    fake = tmp_path / "autoparallel"
    fake.mkdir()
    (fake / "__init__.py").write_text("def autoparallel(func):\n    return func\n")
    result = _import_in_subprocess("import sys\nsys.path.insert(0, %r)\n" % str(tmp_path))
    assert result.returncode == 3, result.stderr
    assert "AutoParallelMissingError" in result.stdout
    assert "lacks internals" in result.stdout and "autoparallel.api.AutoParallel" in result.stdout
    assert PIN in result.stdout


def test_real_autoparallel_imports():
    """With the pinned autoparallel installed the package imports (the control for the two above)."""
    result = _import_in_subprocess("")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "imported" in result.stdout


def test_autoparallel_without_needed_internals_names_them_and_the_commit():
    """The real autoparallel, but one internal the plugin hooks on each optimizer is gone (as at
    another commit): the import warns naming the shims that attach there, what stops working and
    the commit the plugin is tested with; the plugin's call then raises the named error."""
    prelude = """
        import warnings
        warnings.simplefilter("always")
        import autoparallel.optimize_sharding as o
        del o.ShardingOptimizer._set_objective
    """
    result = _import_in_subprocess(prelude)
    assert result.returncode == 0, result.stderr
    assert "UpstreamChangedWarning" in result.stderr and PIN[:7] in result.stderr
    assert "plugin_hooks (without it add_op_constraints)" in result.stderr
    assert "solver_route" in result.stderr
