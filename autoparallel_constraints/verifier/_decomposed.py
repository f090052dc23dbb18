"""Ops a decomposition put into the local graph, checked against DTensor's rule for the op they
came from.

autoparallel traces ``embedding_dense_backward`` whole and plans it with DTensor's rule for it;
the parallel graph, traced again per rank with the decomposition table, holds its decomposition
(``torch._decomp``)::

    mask = unsqueeze((indices >= 0) & (indices < num_weights) & (indices != padding_idx), -1)
    grad_weight = new_zeros(grad_output, (num_weights, *grad_output.shape[indices.ndim:]))
    _unsafe_masked_index_put_accumulate(grad_weight, mask, [indices], grad_output)

DTensor has no rule for ``_unsafe_masked_index_put_accumulate``, and on llama3 8x8 the embedding's
gradient arrives sharded (unknown, and the embedding weight's gradient unproven). Its meaning is
``destination + (rows of values scattered at indices, masked)``; the scatter is exactly
``embedding_dense_backward(values, indices)``, so:

* the values and the indices must fit one of that rule's strategies (column-wise
  ``S(last) + R -> S(1)``, batch ``S(i) + S(i) -> Partial``, ``Partial + R -> Partial``, all
  Replicate), with no redistribution DTensor would insert;
* the mask is computed from the indices elementwise and unsqueezed: it must be placed as they are;
* the destination is a zero fill (valid in any placement, Partial included) or a tensor placed as
  the result (an accumulation of two tensors in one placement);
* indices that are a fill (BERT-style models' default ``token_type_ids``: zeros, so the mask is a
  fill too) hold the same value on every rank, so they can be read in any placement that is not
  Partial: the values' placements (Partial read as Replicate) are tried first, then Replicate.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.fx
from torch.distributed.tensor.placement_types import Partial, Replicate

from ..core._placements import fmt_spec
from ._values import _Fill, _is_spec, _specs_differ, _unique, _Unknowable, _Violation, aten

logger = logging.getLogger(__name__)

_MASKED_ACCUMULATE = aten._unsafe_masked_index_put_accumulate.default


class _Decomposed:
    """The walk's methods for ops DTensor has no rule for, read as the op they decompose."""

    def _decomposed(self, node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        """The output placement of a decomposed op, or NotImplemented when ``node`` is none."""
        if node.target is _MASKED_ACCUMULATE:
            return self._masked_accumulate(node, *args, **kwargs)
        return NotImplemented

    def _masked_accumulate(self, node: torch.fx.Node, destination: Any, mask: Any, indices: Any, values: Any) -> Any:
        from ..seam.dtensor import OpSchema

        if len(indices) != 1 or indices[0] is None:
            raise _Unknowable(f"{len(indices)} index tensors: only the embedding backward's one is interpreted")
        if isinstance(indices[0], _Fill) or isinstance(mask, _Fill):
            return self._masked_accumulate_of_fills(node, destination, mask, indices[0], values)
        index = self._dist(indices[0], "the indices")
        values = self._dist(values, "the values")
        mask = self._dist(mask, "the mask")
        if isinstance(destination, _Fill):
            num_weights = destination.local_shape[0]  # no strategy of the rule shards the vocabulary
        else:
            destination = self._dist(destination, "the destination")
            num_weights = int(destination.tensor_meta.shape[0])

        op = aten.embedding_dense_backward.default
        info = self.propagator.op_to_schema_info.get(op) or self.propagator.op_to_schema_info_for_single_dim_strategy.get(op)
        schema = OpSchema(op, (values, index, num_weights, -1, False), {}, schema_info=info)
        out = self.propagator.propagate_op_sharding(schema)
        want = out.redistribute_schema
        if want is not None and _specs_differ(schema.args_spec, want.args_spec):
            raise _Violation(
                "hidden_redistribution",
                "the values and the indices of the embedding backward's scatter fit none of its strategies",
                inferred=", ".join(fmt_spec(s) for s in schema.args_spec),
                expected=", ".join(fmt_spec(s) for s in want.args_spec),
            )
        result = out.output_spec
        if tuple(mask.placements) != tuple(index.placements):
            raise _Violation("hidden_redistribution", "the mask is not placed as the indices it is computed from",
                             inferred=fmt_spec(mask), expected=fmt_spec(index))
        if isinstance(destination, _Fill):
            if destination.value != 0.0 and any(isinstance(p, Partial) for p in result.placements):
                raise _Violation("hidden_redistribution", "a Partial sum accumulated into a non-zero fill counts it once per rank",
                                 inferred=fmt_spec(result))
        elif tuple(destination.placements) != tuple(result.placements):
            raise _Violation("hidden_redistribution", "the destination is not placed as the scattered rows",
                             inferred=fmt_spec(destination), expected=fmt_spec(result))
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            self._check_local_val(node, result, val)
        return result

    def _masked_accumulate_of_fills(self, node: torch.fx.Node, destination: Any, mask: Any, index: Any, values: Any) -> Any:
        """:meth:`_masked_accumulate` with fill indices (and mask) read in the first placement that
        fits: the values' own (Partial read as Replicate), then Replicate."""
        n_mesh = len(self.sizes)
        own = [tuple(Replicate() if isinstance(p, Partial) else p for p in values.placements)] if _is_spec(values) else []
        tried: list[_Violation] = []
        for cand in _unique([*own, tuple(Replicate() for _ in range(n_mesh))]):
            bound_index, bound_mask = (self._fill_spec(x, cand) if isinstance(x, _Fill) else x for x in (index, mask))
            if bound_index is None or bound_mask is None:
                continue
            try:
                return self._masked_accumulate(node, destination, bound_mask, [bound_index], values)
            except _Violation as v:
                tried.append(v)
        if tried:
            raise tried[0]
        raise _Unknowable("no placement of the fill indices fits the values")
