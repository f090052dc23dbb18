"""Where a package touches autoparallel's, torch's or PuLP's internals, read off its source (AST).

A *touch* is any of:

* an import of a private upstream module or name (``torch.distributed.tensor._dtensor_spec``,
  ``from autoparallel.apply_sharding import _VIEW_OPS``);
* a read of a private attribute (``x._name``, ``getattr(x, "_name")``) of anything but ``self`` /
  ``cls``, a module of the package itself or a standard-library module; op overloads
  (``torch.ops.aten._to_copy``, ``aten._unsafe_view``) are public API and not counted;
* a write: an assignment, ``del``, ``setattr`` or ``delattr`` on an attribute of a name imported
  from upstream (a patch), or on a private attribute of anything but ``self`` / ``cls`` (an
  instance shadow such as ``opt._solve = ...``);
* ``vars(x)`` or ``x.__dict__`` on anything but ``self`` / ``cls`` (private state read wholesale).

:func:`touches` lists them for every file of a package outside an allowed folder (the seam).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOTS = ("autoparallel", "torch", "pulp", "highspy")
OP_NAMESPACES = {"ops", "aten", "prims"}


@dataclass(frozen=True, order=True)
class Touch:
    path: str
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind} {self.text}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _chain(node: ast.AST) -> list[str]:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def file_touches(path: Path, rel: str) -> list[Touch]:
    tree = ast.parse(path.read_text(), str(path))
    upstream: set[str] = set()  # names bound to upstream modules or objects
    local: set[str] = set()  # names bound by relative imports or to other (stdlib, third-party) modules
    out: list[Touch] = []

    def add(node: ast.AST, kind: str, text: str) -> None:
        out.append(Touch(rel, getattr(node, "lineno", 0), kind, text))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = (alias.asname or alias.name).split(".")[0] if alias.asname is None else alias.asname
                if alias.name.split(".")[0] in ROOTS:
                    upstream.add(bound)
                    if any(_private(part) for part in alias.name.split(".")):
                        add(node, "private import", alias.name)
                else:
                    local.add(bound)
        elif isinstance(node, ast.ImportFrom):
            names = [alias.asname or alias.name for alias in node.names]
            from_seam = node.level > 0 and (node.module or "").split(".")[0] == "seam"
            if from_seam:  # the seam re-exports upstream objects: they stay upstream's
                upstream.update(names)
            elif node.level == 0 and node.module and node.module.split(".")[0] in ROOTS:
                upstream.update(names)
                private = [a.name for a in node.names if _private(a.name)]
                if any(_private(part) for part in node.module.split(".")) or private:
                    add(node, "private import", f"from {node.module} import {', '.join(a.name for a in node.names)}")
            else:
                local.update(names)
    mine = ("self", "cls")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            base = chain[0] if chain else None
            if OP_NAMESPACES & set(chain[:-1]) or base in mine:
                continue
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                if base in upstream:
                    add(node, "patch", ast.unparse(node))
                elif _private(node.attr):
                    add(node, "instance write", ast.unparse(node))
            elif _private(node.attr) and base not in local:
                add(node, "private read", ast.unparse(node))
            elif node.attr == "__dict__":
                add(node, "state read", ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            func = node.func.id
            chain = _chain(node.args[0])
            base = chain[0] if chain else None
            if base in mine:
                continue
            name = node.args[1] if len(node.args) > 1 else None
            private = isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value)
            if func in ("setattr", "delattr") and (base in upstream or private):
                add(node, "patch" if base in upstream else "instance write", ast.unparse(node))
            elif func in ("getattr", "hasattr") and private and base not in local:
                add(node, "private read", ast.unparse(node))
            elif func == "vars":
                add(node, "state read", ast.unparse(node))
    return out


def touches(package: Path, allowed: str = "seam") -> list[Touch]:
    """Every touch in ``package``'s files outside its folder ``allowed``."""
    found: list[Touch] = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.split("/")[0] == allowed:
            continue
        found.extend(file_touches(path, rel))
    return sorted(set(found))


if __name__ == "__main__":
    hits = touches(Path(sys.argv[1] if len(sys.argv) > 1 else "autoparallel_constraints"))
    print("\n".join(map(str, hits)))
    print(f"{len(hits)} touches in {len({h.path for h in hits})} files")
