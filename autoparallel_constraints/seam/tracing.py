"""torch's tracing internals the package reads (FX, pytree, fake tensors, AOTAutograd, Inductor,
structured logging, op schemas), under the names the rest of it uses. Nothing here changes torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch.utils._pytree as pytree
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_map_only, tree_unflatten

__all__ = [
    "OpOverload",
    "OpOverloadPacket",
    "TorchDispatchMode",
    "aot_descriptors",
    "compile_fx_inner",
    "copy_codegen",
    "custom_op_overload",
    "grouped_mm",
    "inductor_config",
    "last_node",
    "nodes_after",
    "param_nodes",
    "pytree",
    "rename_node",
    "schema_of",
    "trace_structured",
    "tracing_context",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_map_only",
    "tree_unflatten",
    "unset_fake_temporarily",
]


def schema_of(op: Any) -> Any:
    """An op overload's ``FunctionSchema`` (``op._schema``)."""
    return op._schema


def custom_op_overload(target: Any) -> Any:
    """The ``OpOverload`` behind a ``torch.library.custom_op`` (its ``CustomOpDef._opoverload``), or None."""
    return getattr(target, "_opoverload", None)


def last_node(graph: Any) -> Any:
    """The last node of an FX graph so far, or None when it has none (FX's root sentinel read)."""
    root = graph._root
    return None if root.prev is root else root.prev


def nodes_after(graph: Any, last: Any) -> Iterator[Any]:
    """The nodes of ``graph`` after ``last`` (all of them for None), walked from it, not from the top."""
    root = graph._root
    node = root.next if last is None else last.next
    while node is not root:
        yield node
        node = node.next


def rename_node(node: Any, name: str) -> None:
    """Give an FX node a new unique name (FX's ``Node._rename``)."""
    node._rename(name)


def copy_codegen(source: Any, target: Any) -> None:
    """Give FX graph ``target`` a deep copy of ``source``'s code generator (pytree in/out specs)."""
    import copy

    target._codegen = copy.deepcopy(source._codegen)


def aot_descriptors() -> Any:
    """AOTAutograd's input/output descriptor module (``ParamAOTInput``, ``PlainAOTInput``, ...)."""
    from torch._functorch._aot_autograd import descriptors

    return descriptors


def param_nodes(*args: Any, **kwargs: Any) -> Any:
    """AOTAutograd's ``fx_utils.get_param_nodes``."""
    from torch._functorch._aot_autograd.fx_utils import get_param_nodes

    return get_param_nodes(*args, **kwargs)


def inductor_config() -> Any:
    """``torch._inductor.config``."""
    from torch._inductor import config

    return config


def compile_fx_inner(*args: Any, **kwargs: Any) -> Any:
    """Inductor's ``compile_fx_inner`` (lowering one graph without running it)."""
    from torch._inductor.compile_fx import compile_fx_inner as inner

    return inner(*args, **kwargs)


def tracing_context(fake_mode: Any) -> Any:
    """``torch._guards.tracing(TracingContext(fake_mode))``: a block Inductor lowers in."""
    from torch._guards import TracingContext, tracing

    return tracing(TracingContext(fake_mode))


def trace_structured(*args: Any, **kwargs: Any) -> Any:
    """``torch._logging.trace_structured`` (a TORCH_TRACE artifact)."""
    from torch._logging import trace_structured as trace

    return trace(*args, **kwargs)


def grouped_mm() -> Any:
    """``torch._grouped_mm``, the MoE experts' grouped matmul."""
    import torch

    return torch._grouped_mm
