"""Command line: ``python -m autoparallel_constraints demo``.

doctor installed torch, autoparallel (its commit), pulp/CBC, highspy, transformers, ... against
       the versions the suite was run with, each marked tested / untested / missing, with the fix.
demo   the bug, the fix, the price: upstream #348 forced at the seed's sizes on 2x4 (Inductor's
       crash without the plugin, clean with it, and what it costs), a swapped sharding with
       matching shapes and wrong numbers, the PR #517 class of wrong gradients, and the plugin's
       build+solve time against autoparallel alone (medians of interleaved repeats, with spread).
compare  the formulation lab: formulations x solvers on seed, falcon or llama3, one table with
       medians and spreads of interleaved repeats, JSON and a PNG with error bars.
coverage  ops with two or more tensor inputs in a model's joint graph, and the row of each.
crosscheck  DTensor/autoparallel strategies the table rejects, checked by numerics.
groundtruth  every row checked against numerics on simulated ranks (``--full`` for the sweep).
distributed-seed  one forward+backward step of the seed block on real ranks (under ``torchrun``).
mutate  proof by mutation: correct parallel graphs broken one thing at a time, each run under
       LocalTensorMode and given to the verifier; a table of caught / MISS / fine / flagged.
show   the plan page: autoparallel's own viewer of a run (``json.dump(apc.export(autop), f)``) with
       what the plugin did on top (inserted redistributions and their costs, flags, changed
       strategies); two runs: the diff; ``--example 348|517|llama3`` builds a known run here.
zoo    tiny transformers causal LMs (llama, mistral, qwen2, gpt2, gpt_neox, phi, gemma, opt, bloom,
       mixtral) through the default call on 2x2 and 2x4, dynamic and static: audit, numerics, one table.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence

from .core._doctor import add_subcommand as add_doctor_subcommand
from .errors import ConstraintsError
from .lab._compare import add_compare_subcommand
from .lab._coverage import add_subcommands as add_coverage_subcommands
from .lab._demo import add_demo_subcommand
from .lab._groundtruth import add_subcommand as add_groundtruth_subcommand
from .lab._mutate import add_subcommand as add_mutate_subcommand
from .lab._show import add_show_subcommand
from .lab._zoo import add_zoo_subcommand
from .testing.distributed_seed import add_subcommand as add_distributed_seed_subcommand

logger = logging.getLogger("autoparallel_constraints.cli")

#: Loggers whose warnings are autoparallel's and torch's working notes, not the command's story
#: (e.g. "implicitly registering `aten...` with `replicate_op_strategy`" once per op, the CPU
#: all_to_all fallback): shown only with ``--verbose``.
UPSTREAM_LOGGERS = ("autoparallel", "torch.distributed.tensor._collective_utils")
#: Modules whose deprecation warnings are upstream's business, shown only with ``--verbose``: torch
#: 2.14 and 2.15 warn (``FutureWarning``) each time autoparallel's apply reads
#: ``torch.distributed.config.compile_on_one_rank``, which they moved to ``torch.compiler.config``.
UPSTREAM_WARNING_MODULES = r"autoparallel(\.|$)"


def configure_logging(verbose: bool) -> None:
    """The command line's logging: warnings of this package; upstream's working notes only when verbose."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in UPSTREAM_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.ERROR)
    if not verbose:
        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category, module=UPSTREAM_WARNING_MODULES)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autoparallel_constraints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log at INFO, autoparallel's and torch's warnings included")
    sub = parser.add_subparsers(dest="command", required=True)
    add_doctor_subcommand(sub)
    add_demo_subcommand(sub)
    add_compare_subcommand(sub)
    add_coverage_subcommands(sub)
    add_groundtruth_subcommand(sub)
    add_distributed_seed_subcommand(sub)
    add_mutate_subcommand(sub)
    add_zoo_subcommand(sub)
    add_show_subcommand(sub)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.func(args))
    except ConstraintsError as exc:  # the package's errors say what to fix: no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
