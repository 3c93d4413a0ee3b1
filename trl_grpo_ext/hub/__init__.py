"""Everything between a finished run and the Hugging Face Hub: the model card, the merged export, secret scrubbing,
the push and its command line.

Modules, each importing only those listed before it (no circle):

- :mod:`~trl_grpo_ext.config.secrets`: :func:`scrub_secrets`, :func:`redact_text`, :func:`is_secret_key` (standard
  library only; the recipe's ``run_config.json`` is written through it too).
- :mod:`~trl_grpo_ext.hub.merge`: the adapter merged into its de-quantized base (:func:`export_merged`) and the
  choices of a push (``PUSH_MODES``, ``MERGE_DTYPES``, ``MERGE_METHODS``).
- :mod:`~trl_grpo_ext.hub.card_template` and :mod:`~trl_grpo_ext.hub.card`: the model card of a finished run
  (:func:`build_model_card`).
- :mod:`~trl_grpo_ext.hub.push`: :func:`prepare_upload`, :func:`push_run`, :func:`push_settings`, :class:`HubPushError`;
  the recipe's push fields, :class:`HubPushArguments`, live in ``config/push_settings`` (lent here).
- :mod:`~trl_grpo_ext.hub.cli`: ``trl-grpo-ext push``.

Importing this package imports neither torch nor huggingface_hub; they are imported by the functions that need them.
"""

from ..config.secrets import is_secret_key, redact_text, scrub_secrets
from .card import build_model_card
from .merge import MERGE_DTYPES, MERGE_METHODS, PUSH_MODES, export_merged  # the choices from config/push_settings
from .push import (
    HubPushArguments,
    HubPushError,
    HubPushInterrupted,
    HubPushSettings,
    prepare_upload,
    push_run,
    push_settings,
    retry_command,
)

__all__ = [
    "MERGE_DTYPES",
    "MERGE_METHODS",
    "PUSH_MODES",
    "HubPushArguments",
    "HubPushError",
    "HubPushInterrupted",
    "HubPushSettings",
    "build_model_card",
    "export_merged",
    "is_secret_key",
    "prepare_upload",
    "push_settings",
    "push_run",
    "redact_text",
    "retry_command",
    "scrub_secrets",
]
