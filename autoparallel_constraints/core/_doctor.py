"""What is installed, against what the suite was run with: ``python -m autoparallel_constraints doctor``.

Two facts decide whether a user's install is one we have seen work:

- ``constraints.txt`` (shipped in this package) lists the exact versions the full test tier last
  passed with; the README's install line and ``.ci/run`` install with ``-c`` on it. Refresh it with
  ``python -m autoparallel_constraints doctor --write-constraints`` after the full tier passes on
  newer versions.
- torch and autoparallel are special: :data:`TESTED_TORCH` lists every torch release the default
  tier was measured green on, and autoparallel must be the pinned commit. The installed
  autoparallel's commit is read from pip's ``direct_url.json`` (a ``git+`` install records it) or,
  failing that, recognised by a fingerprint of its source files (an install from a local copy).
- triton comes with PyPI's CUDA builds of torch, each pinning its own (torch 2.14.1: ``~=3.8.0``);
  the constraints file's triton was tested beside the CPU build, which brings none. Where the
  installed torch requires a triton, that requirement is the tested one.

This module uses the standard library only, so the report can be built even when the rest of the
package cannot import.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.metadata as metadata
import importlib.util
import json
import logging
import platform
import re
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import INSTALL_HINT, PIN_COMMIT, UntestedVersionWarning

__all__ = ["Check", "TESTED_TORCH", "autoparallel_commit", "checks", "format_checks", "warn_if_untested"]

logger = logging.getLogger(__name__)

#: torch releases the default tier passed on. The last is the one in constraints.txt, which the
#: full tier runs and the doctor's fix installs (the CPU build the others' PyPI wheels are not).
TESTED_TORCH: tuple[str, ...] = ("2.14.1", "2.15.0", "2.13.0")

#: sha256 over the pinned commit's ``autoparallel/**/*.py`` (relative path, NUL, bytes, NUL; sorted).
PIN_SOURCE_FINGERPRINT = "b2f6ced7d2ada0a20aea825d4789a0d2b64466774838714278c80ec60e1abac5"

#: What ``--write-constraints`` pins: every package the library or its tests import, and the
#: transformers stack whose internals the model tests rest on. torch and autoparallel are checked
#: apart (torch's build comes from the user's index; autoparallel is not on PyPI).
#: The torchtitan extra (``.[torchtitan]``) and what torchtitan pulls in: pinned like the rest, but
#: only the torchtitan cases need them, so an install without them is reported, not failed.
OPTIONAL_TORCHTITAN: tuple[str, ...] = (
    "torchtitan", "torch-checkpointing", "triton", "torchdata", "spmd-types", "tyro", "tensorboard",
    "datasets", "wandb", "einops",
)

#: The docs site's packages (the ``docs`` extra): pinned like the rest, but only the docs site and
#: its full-tier test need them, so an install without them is reported, not failed.
OPTIONAL_DOCS: tuple[str, ...] = ("mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python", "griffelib")

FROZEN: tuple[str, ...] = (
    "torch", "pulp", "highspy", "numpy", "transformers", "huggingface-hub", "tokenizers", "safetensors",
    "hypothesis", "matplotlib", "pytest", "pytest-xdist", *OPTIONAL_TORCHTITAN, *OPTIONAL_DOCS,
)

#: The pip line that installs the pinned autoparallel (the second line of the install hint).
_AUTOPARALLEL_FIX = INSTALL_HINT.splitlines()[1].strip()

#: How to get each package right, by name; ``{version}`` is the tested version.
_FIX = {
    "torch": "pip install 'torch=={version}' (the CPU build from your usual index is enough)",
    "pulp": "pip install 'pulp=={version}'",
    "highspy": "pip install 'highspy=={version}' (the default solver, highs-lp, and solver='highs')",
    "transformers": "pip install 'transformers=={version}' (only the model tests and the zoo use it)",
}


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report: ``status`` is ``tested``, ``untested``, ``missing`` or ``optional``
    (a package of the torchtitan or the docs extra that is not installed)."""

    name: str
    installed: str | None
    tested: str
    status: str
    fix: str = ""
    detail: str = ""


def constraints_path() -> Path:
    return Path(str(resources.files("autoparallel_constraints").joinpath("constraints.txt")))


def read_constraints(path: Path | None = None) -> dict[str, str]:
    """``name -> version`` from a pip constraints file; the shipped one by default."""
    path = path or constraints_path()
    return parse_constraints(path.read_text(), source=str(path))


def parse_constraints(text: str, *, source: str = "constraints") -> dict[str, str]:
    """``name -> version`` from ``name==version`` lines (``#`` comments, blank lines ignored)."""
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==\s*([^\s;]+)", line)
        if match is None:
            raise ValueError(f"{source}: cannot read {raw!r} (expected name==version)")
        pins[_canonical(match.group(1))] = match.group(2)
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _public(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0``: the local label names the build, not the release."""
    return version.split("+", 1)[0]


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def source_fingerprint(package_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts):
        digest.update(path.relative_to(package_dir).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _find_autoparallel() -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec("autoparallel")
    except ImportError:  # a finder that refuses the name, or a broken package
        return None


def autoparallel_commit(spec: importlib.machinery.ModuleSpec | None = None) -> tuple[str | None, str]:
    """``(commit, how it was found)`` for the importable ``autoparallel``; ``(None, why)`` when unknown.

    pip records the commit of a ``git+`` install in ``direct_url.json``; an install from a local
    copy records none, so the source itself is compared with the pinned commit's.
    """
    spec = spec or _find_autoparallel()
    if spec is None or not spec.submodule_search_locations:
        return None, "not importable"
    try:
        dist = metadata.distribution("autoparallel")
        direct = dist.read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        direct = None
    if direct:
        commit = json.loads(direct).get("vcs_info", {}).get("commit_id")
        if commit:
            return commit, "pip's direct_url.json"
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    if source_fingerprint(package_dir) == PIN_SOURCE_FINGERPRINT:
        return PIN_COMMIT, "its source matches the pinned commit's"
    return None, f"no commit recorded, and the source in {package_dir} differs from {PIN_COMMIT[:7]}'s"


def _check_autoparallel() -> Check:
    spec = _find_autoparallel()
    tested = PIN_COMMIT[:7]
    if spec is None:
        return Check("autoparallel", None, tested, "missing", _AUTOPARALLEL_FIX)
    commit, how = autoparallel_commit(spec)
    if commit == PIN_COMMIT:
        return Check("autoparallel", commit[:7], tested, "tested", detail=how)
    return Check("autoparallel", commit[:7] if commit else "unknown commit", tested, "untested", _AUTOPARALLEL_FIX, how)


def _check_torch() -> Check:
    version = installed_version("torch")
    tested = ", ".join(TESTED_TORCH)
    fix = _FIX["torch"].format(version=TESTED_TORCH[-1])
    if version is None:
        return Check("torch", None, tested, "missing", fix)
    status = "tested" if _public(version) in TESTED_TORCH else "untested"
    return Check("torch", version, tested, status, "" if status == "tested" else fix)


def torch_requires_triton() -> str | None:
    """The triton the installed torch requires of its own (``~=3.8.0``: PyPI's CUDA builds), or None.

    Those builds pin the triton they were built with, so the constraints file's triton (tested with
    the CPU build, which brings none) cannot be installed beside them; the triton that goes with a
    tested torch is that torch's own.
    """
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for line in requires:
        match = re.match(r"triton\s*(~=|==)\s*([0-9][0-9.]*)\s*(;|$)", line)
        if match:
            return match.group(1) + match.group(2)
    return None


def _satisfies(version: str, spec: str) -> bool:
    """``version`` meets ``==X.Y.Z`` or ``~=X.Y.Z`` (the same X.Y, at least X.Y.Z)."""
    op, want = spec[:2], spec[2:]
    have_parts = [int(p) for p in re.findall(r"\d+", _public(version))]
    want_parts = [int(p) for p in want.split(".")]
    if op == "==":
        return have_parts[: len(want_parts)] == want_parts and len(have_parts) >= len(want_parts)
    return have_parts[: len(want_parts) - 1] == want_parts[:-1] and have_parts >= want_parts


def _check_triton_of_torch(spec: str) -> Check:
    version = installed_version("triton")
    torch_version = installed_version("torch")
    tested = f"{spec} (torch's)"
    fix = f"pip install 'triton{spec}' (the triton torch {torch_version} requires)"
    if version is None:
        return Check("triton", None, tested, "optional",
                     "only the torchtitan cases need it: " + fix)
    torch_tested = torch_version is not None and _public(torch_version) in TESTED_TORCH
    status = "tested" if torch_tested and _satisfies(version, spec) else "untested"
    return Check("triton", version, tested, status, "" if status == "tested" else fix)


def _check_cbc() -> Check:
    try:
        import pulp
    except ImportError:
        return Check("CBC (pulp)", None, "bundled", "missing", "install pulp (its line below)")
    ok = bool(pulp.PULP_CBC_CMD(msg=False).available())
    return Check("CBC (pulp)", "bundled" if ok else None, "bundled", "tested" if ok else "missing",
                 "" if ok else "reinstall pulp: its bundled CBC binary is missing or not executable")


def checks(constraints: dict[str, str] | None = None) -> list[Check]:
    """The report's lines: python, torch, autoparallel, CBC, then every other pinned package."""
    pins = read_constraints() if constraints is None else constraints
    out = [
        Check("python", platform.python_version(), ">=3.10", "tested"),
        _check_torch(),
        _check_autoparallel(),
        _check_cbc(),
    ]
    triton_of_torch = torch_requires_triton()
    for name, tested in pins.items():
        if name == "torch":
            continue
        if name == "triton" and triton_of_torch is not None:
            out.append(_check_triton_of_torch(triton_of_torch))
            continue
        version = installed_version(name)
        fix = _FIX.get(name, "pip install '{name}=={version}'").format(name=name, version=tested)
        if version is None and name in OPTIONAL_TORCHTITAN:
            out.append(Check(name, None, tested, "optional",
                             "only the torchtitan cases need it: pip install -c "
                             "autoparallel_constraints/constraints.txt -e '.[torchtitan]'"))
        elif version is None and name in OPTIONAL_DOCS:
            out.append(Check(name, None, tested, "optional", "only the docs site needs it: pip install -e '.[docs]'"))
        elif version is None:
            out.append(Check(name, None, tested, "missing", fix))
        elif _public(version) == tested:
            out.append(Check(name, version, tested, "tested"))
        else:
            out.append(Check(name, version, tested, "untested", fix))
    return out


def format_checks(lines: list[Check]) -> str:
    width = max(len(c.name) for c in lines)
    rows = [f"{'package':<{width}}  {'installed':<16}  {'tested':<16}  status"]
    for c in lines:
        rows.append(f"{c.name:<{width}}  {c.installed or '-':<16}  {c.tested:<16}  {c.status}")
        if c.detail:
            rows.append(f"{'':<{width}}    ({c.detail})")
        if c.fix:
            rows.append(f"{'':<{width}}    fix: {c.fix}")
    missing = [c.name for c in lines if c.status == "missing"]
    untested = [c.name for c in lines if c.status == "untested"]
    if missing or untested:
        rows.append("")
        if missing:
            rows.append(f"missing: {', '.join(missing)}")
        if untested:
            rows.append(f"untested: {', '.join(untested)} (the plugin may work; the suite has not been run there)")
        rows.append(f"to get the tested set: pip install -c {constraints_path()} ...")
    else:
        rows.append("\nevery package is the version the suite was run with")
    return "\n".join(rows)


def freeze() -> str:
    """A constraints file of the installed versions of :data:`FROZEN` (torch without its build label)."""
    lines = [
        "# The exact versions the full test tier last passed with. Install with",
        "#   pip install -c autoparallel_constraints/constraints.txt ...",
        "# Refresh after the full tier passes on newer ones:",
        "#   python -m autoparallel_constraints doctor --write-constraints",
    ]
    for name in FROZEN:
        version = installed_version(name)
        if version is None:
            raise RuntimeError(f"{name} is not installed: install the test extra before freezing")
        lines.append(f"{name}=={_public(version)}")
    return "\n".join(lines) + "\n"


def warn_if_untested() -> None:
    """One :class:`UntestedVersionWarning` at import when torch or autoparallel is not a tested one."""
    problems = [c for c in (_check_torch(), _check_autoparallel()) if c.status != "tested"]
    if problems:
        said = "; ".join(f"{c.name} {c.installed} (tested: {c.tested})" for c in problems)
        warnings.warn(
            f"autoparallel_constraints has not been tested with {said}. "
            "`python -m autoparallel_constraints doctor` lists every version and how to get the tested ones.",
            UntestedVersionWarning, stacklevel=3,
        )


def format_seam() -> str:
    """The seam's table on the autoparallel installed: one line per shim, its state (attached,
    attaches on use, not needed: upstream fixed, target missing, ...), what it changes and what
    upstream change retires it."""
    from ..seam import status

    rows = status()
    name_w = max(len(r.name) for r in rows)
    state_w = max(len(r.state) for r in rows)
    brief_w = max(len(r.brief) for r in rows)
    lines = [f"{'shim':<{name_w}}  {'state':<{state_w}}  {'what it changes':<{brief_w}}  retired by"]
    lines += [f"{r.name:<{name_w}}  {r.state:<{state_w}}  {r.brief:<{brief_w}}  {r.retired_by}" for r in rows]
    missing = [r.name for r in rows if r.state == "target missing"]
    if missing:
        lines.append(f"target missing: {', '.join(missing)} (autoparallel or torch moved what they attach to)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.write_constraints:
        path = constraints_path()
        path.write_text(freeze())
        print(f"wrote {path}")
        return 0
    if getattr(args, "seam_md", False):
        from ..seam._docs import seam_markdown

        print(seam_markdown(), end="")
        return 0
    lines = checks()
    print(format_checks(lines))
    if any(c.name == "autoparallel" and c.status != "missing" for c in lines):
        print("\nThe seam to autoparallel, torch and PuLP (docs/seam.md):")
        print(format_seam())
    return 1 if any(c.status == "missing" for c in lines) else 0


def add_subcommand(sub: Any) -> None:
    parser = sub.add_parser("doctor", help="installed versions against the tested ones, with fixes; the seam's shims")
    parser.add_argument("--write-constraints", action="store_true",
                        help="pin the installed versions in the package's constraints.txt")
    parser.add_argument("--seam-md", action="store_true",
                        help="print docs/seam.md, the seam's table, generated from its declarations")
    parser.set_defaults(func=run)
