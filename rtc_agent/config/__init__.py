"""Server settings: :class:`Settings` (the fields), :func:`validate` (what cannot work) and the loaders
(defaults < ``--config FILE`` TOML < ``RTC_AGENT_*`` environment < command-line flags)."""

from rtc_agent.config.loading import add_arguments, load_settings, settings_from_args
from rtc_agent.config.replicas import node_id_of, replica_warnings
from rtc_agent.config.settings import (
    ENGINE_KINDS,
    ENV_PREFIX,
    LLM_BATCH_INT8_MODES,
    LLM_PRECISIONS,
    PROJECT_ROOT,
    Settings,
    SettingsError,
)
from rtc_agent.config.validation import validate

__all__ = [
    "ENGINE_KINDS",
    "ENV_PREFIX",
    "LLM_BATCH_INT8_MODES",
    "LLM_PRECISIONS",
    "PROJECT_ROOT",
    "Settings",
    "SettingsError",
    "add_arguments",
    "load_settings",
    "node_id_of",
    "replica_warnings",
    "settings_from_args",
    "validate",
]
