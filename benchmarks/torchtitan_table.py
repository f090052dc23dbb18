"""torchtitan's models the way torchtitan runs them through autoparallel, alone and with the
plugin's default call: the rows of ``python -m autoparallel_constraints zoo --torchtitan``
(``autoparallel_constraints/lab/_torchtitan_zoo.py`` says what a row is and how it is judged).

    python benchmarks/torchtitan_table.py --families llama3,deepseek_v3 --meshes 2x2,2x4 \\
        --calls alone,default --precisions fp32,bf16 --json benchmarks/results/torchtitan_table.json
"""

from __future__ import annotations

import argparse
import sys

from autoparallel_constraints.lab._torchtitan_zoo import add_arguments, run_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=None, help="comma list (default: every family torchtitan ships)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--resume", action="store_true")
    add_arguments(parser)
    return run_table(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
