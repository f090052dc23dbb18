"""torchtitan's graph_trainer configs with the plugin switched on, for torchtitan's ``--module``.

torchtitan 0.3.0 imports the module its ``--module NAME`` names (``NAME.config_registry``, else
``NAME``) and calls the config function ``--config`` names. This module enables the plugin for
every ``AutoParallel`` (:func:`autoparallel_constraints.enable_from_env`: options from
``$APC_OPTIONS``, a JSON object) and re-exports torchtitan's graph_trainer configs for Llama3 and
DeepSeek-V3, so nothing in torchtitan is edited::

    APC_OPTIONS='{"formulation": "explicit"}' torchrun ... -m torchtitan.train \\
        --module autoparallel_constraints.torchtitan --config graph_trainer_llama3_debugmodel

(Older torchtitan releases took ``--experimental.custom_import autoparallel_constraints.torchtitan``.)
"""

from __future__ import annotations

from torchtitan.experiments.graph_trainer.deepseek_v3.config_registry import *  # noqa: F403
from torchtitan.experiments.graph_trainer.llama3.config_registry import *  # noqa: F403

from .plan._enable import enable_from_env

#: The add_op_constraints options this import enabled the plugin with.
OPTIONS = enable_from_env()
