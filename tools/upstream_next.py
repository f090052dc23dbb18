"""Run the default tier against autoparallel's next commits: the pin with each open PR merged.

Given a git clone of meta-pytorch/autoparallel (``--repo``; by default the public repository,
cloned), the script makes one variant per PR (the pin with that PR's head merged), one of every PR
that merges cleanly together onto the pin (``combined``), and the pin itself; installs each into
its own virtual environment beside this machine's packages (``--system-site-packages``, the
variant's autoparallel ahead of the installed one, nothing else reinstalled); runs the default tier
(``python -m pytest -q``) with each; and writes a table of the results::

    python tools/upstream_next.py --repo https://github.com/meta-pytorch/autoparallel \\
        --prs 511 512 508 482 --out benchmarks/results/upstream_next

The clone must have the PRs' heads as ``refs/pull/N/head`` (GitHub serves them: the script fetches
``refs/pull/N/head`` from the clone's ``origin``, and uses refs already there when it cannot). A PR
that does not merge onto the pin is reported as such and skipped. ``--only NAME`` runs some variants,
``--pytest-args`` passes options on (e.g. ``-x``). Each variant's pytest output, its merge log and
``summary.json`` go under ``--out``; ``table.md`` is the table ``docs/versions.md`` quotes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = "a54c2529b1cb10b6b27a585b4a6fc2f84bc1d232"
PUBLIC = "https://github.com/meta-pytorch/autoparallel"


@dataclass
class Variant:
    name: str
    prs: tuple[int, ...]
    merged: bool = True
    merge_log: str = ""
    commit: str = ""
    passed: int = 0
    failed: int = 0
    errors: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    returncode: int | None = None


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "upstream-next", "GIT_AUTHOR_EMAIL": "upstream-next@localhost",
           "GIT_COMMITTER_NAME": "upstream-next", "GIT_COMMITTER_EMAIL": "upstream-next@localhost"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check, env=env)


def clone(repo: str, work: Path, prs: list[int]) -> Path:
    """A clone of ``repo`` in ``work/src`` with the pin and every PR head fetched."""
    src = work / "src"
    if not src.exists():
        subprocess.run(["git", "clone", "--quiet", "--no-checkout", repo, str(src)], check=True)
    refspecs = [f"+refs/pull/{n}/head:refs/pull/{n}/head" for n in prs]
    fetched = git(src, "fetch", "--quiet", "origin", *refspecs, check=False)
    if fetched.returncode != 0:  # a local clone that holds them already under another name
        for n in prs:
            git(src, "fetch", "--quiet", "origin", f"+refs/pull/{n}/head:refs/pull/{n}/head", check=False)
    missing = [n for n in prs if git(src, "rev-parse", "--verify", "--quiet", f"refs/pull/{n}/head", check=False).returncode]
    if missing:
        raise SystemExit(f"{repo} has no refs/pull/N/head for PR(s) {missing}: clone the public repository")
    return src


def checkout(src: Path, work: Path, variant: Variant) -> Path | None:
    """A worktree of the pin with ``variant.prs`` merged in order; None when one does not merge."""
    tree = work / "trees" / variant.name
    if tree.exists():
        git(src, "worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tree, ignore_errors=True)
    git(src, "worktree", "add", "--quiet", "--detach", str(tree), PIN)
    logs = []
    for n in variant.prs:
        out = git(tree, "merge", "--no-edit", "--quiet", f"refs/pull/{n}/head", check=False)
        logs.append(f"merge #{n}: {'ok' if out.returncode == 0 else 'CONFLICT'}\n{out.stdout}{out.stderr}")
        if out.returncode != 0:
            git(tree, "merge", "--abort", check=False)
            variant.merged, variant.merge_log = False, "\n".join(logs)
            return None
    variant.merge_log = "\n".join(logs)
    variant.commit = git(tree, "rev-parse", "HEAD").stdout.strip()
    return tree


def install(tree: Path, work: Path, name: str) -> Path:
    """A venv beside this machine's packages with the variant's autoparallel ahead of them."""
    env_dir = work / "envs" / name
    if env_dir.exists():
        shutil.rmtree(env_dir)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-installed", str(tree)],
                   check=True)
    return python


_SUMMARY_LINE = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+).* in [\d.]+s", re.M)
_COUNT = re.compile(r"(\d+) (passed|failed|error|errors)")


def parse(variant: Variant, text: str) -> None:
    """Counts and failing tests of a pytest ``-q -rfE`` output into ``variant``."""
    lines = _SUMMARY_LINE.findall(text)
    for count, kind in _COUNT.findall(lines[-1] if lines else ""):
        if kind == "passed":
            variant.passed = int(count)
        elif kind == "failed":
            variant.failed = int(count)
        else:
            variant.errors = int(count)
    variant.failures = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.M)))


def run_tier(python: Path, variant: Variant, out: Path, pytest_args: list[str]) -> None:
    """The default tier with ``python``; counts and failing tests into ``variant``."""
    t0 = time.perf_counter()
    env = {**os.environ, "APC_AUTOPARALLEL_UNDER_TEST": PIN if not variant.prs else variant.commit}
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-rfE", *pytest_args], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    variant.seconds = round(time.perf_counter() - t0, 1)
    variant.returncode = proc.returncode
    text = proc.stdout + proc.stderr
    (out / f"{variant.name}.log").write_text(text)
    parse(variant, text)


def table(variants: list[Variant]) -> str:
    rows = ["| variant | autoparallel | passed | failed | errors | seconds | failing |", "|---|---|---:|---:|---:|---:|---|"]
    for v in variants:
        what = "the pin" if not v.prs else " + ".join(f"#{n}" for n in v.prs)
        if not v.merged:
            rows.append(f"| {v.name} | {what} | does not merge onto the pin | | | | |")
            continue
        failing = "<br>".join(f"`{f}`" for f in v.failures) or "—"
        rows.append(f"| {v.name} | {what} (`{v.commit[:7]}`) | {v.passed} | {v.failed} | {v.errors} | {v.seconds:.0f} | {failing} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/upstream_next.py", description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=PUBLIC, help="a git clone (path or URL) of meta-pytorch/autoparallel")
    parser.add_argument("--prs", type=int, nargs="+", default=[511, 512, 508, 482])
    parser.add_argument("--work", type=Path, default=Path("/tmp/apc-upstream-next"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "upstream_next")
    parser.add_argument("--only", nargs="*", help="variant names to run (pin, pr511, ..., combined)")
    parser.add_argument("--pytest-args", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args(argv)

    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    src = clone(args.repo, args.work, args.prs)
    variants = [Variant("pin", ())] + [Variant(f"pr{n}", (n,)) for n in args.prs]
    clean = []  # the PRs that merge together, greedily in the order given
    for n in args.prs:
        probe = Variant("probe", (*clean, n))
        if checkout(src, args.work, probe) is not None:
            clean.append(n)
    if len(clean) > 1:
        variants.append(Variant("combined", tuple(clean)))
    for variant in variants:
        if args.only and variant.name not in args.only:
            continue
        tree = checkout(src, args.work, variant)
        print(f"== {variant.name}: {'merged' if tree else 'does not merge'}", flush=True)
        if tree is None:
            continue
        python = install(tree, args.work, variant.name)
        run_tier(python, variant, args.out, args.pytest_args)
        print(f"   {variant.passed} passed, {variant.failed} failed, {variant.errors} errors in {variant.seconds:.0f} s",
              flush=True)
    ran = [v for v in variants if not args.only or v.name in args.only]
    summary = {
        "date": dt.date.today().isoformat(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "command": " ".join([sys.executable, *sys.argv]),
        "pin": PIN,
        "variants": [asdict(v) for v in ran],
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "table.md").write_text(table(ran))
    print(table(ran))
    return 0 if all(v.failed == v.errors == 0 for v in ran if v.merged) else 1


if __name__ == "__main__":
    raise SystemExit(main())
