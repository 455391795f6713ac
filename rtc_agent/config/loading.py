"""Reading settings: defaults, a TOML file, ``RTC_AGENT_*`` environment variables and command-line flags.

Precedence, lowest first: defaults < ``--config FILE`` (TOML) < environment < command line. Every field of
:class:`Settings` becomes a flag (``max_sessions`` -> ``--max-sessions``) and an environment variable
(``RTC_AGENT_MAX_SESSIONS``); its ``help`` metadata is what ``rtc-agent serve --help`` prints.

TOML keys are the field names. Tables are allowed for grouping and are flattened: ``[ice] turn_secret = "x"``
and a top-level ``turn_secret = "x"`` mean the same; ``[engines.asr] model = "large-v3"`` sets ``asr_model``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from rtc_agent.config.settings import ENV_PREFIX, Settings, SettingsError
from rtc_agent.config.validation import validate


def _field_type(f: dataclasses.Field) -> type:
    hints = typing.get_type_hints(Settings)
    t = hints[f.name]
    if isinstance(t, types.GenericAlias) and t.__origin__ is list:
        return list
    return t


def _coerce(f: dataclasses.Field, value: Any, source: str) -> Any:
    kind = _field_type(f)
    try:
        if kind is list:
            if isinstance(value, str):
                return [v.strip() for v in value.split(",") if v.strip()]
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
            raise TypeError("expected a list of strings")
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                return value.lower() in ("1", "true", "yes", "on")
            raise TypeError("expected true or false")
        if kind is int and isinstance(value, float):
            raise TypeError("expected an integer")
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}")
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{source}: bad value {value!r} for {f.name}: {exc}") from None


def _flatten_toml(data: dict[str, Any], names: set[str]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        key = key.replace("-", "_")
        if key == "engines" and isinstance(value, dict):
            for kind, table in value.items():
                if not isinstance(table, dict):
                    raise SettingsError(f"[engines.{kind}] must be a table")
                for k, v in table.items():
                    flat[f"{kind}_{k.replace('-', '_')}"] = v
        elif isinstance(value, dict) and key not in names:
            flat.update(_flatten_toml(value, names))
        else:
            flat[key] = value
    return flat


def load_settings(config_file: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                  overrides: dict[str, Any] | None = None) -> Settings:
    """Build settings from defaults, the TOML file, the environment and explicit overrides (highest)."""
    env = os.environ if env is None else env
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    values: dict[str, Any] = {}
    if config_file is None:
        config_file = env.get(ENV_PREFIX + "CONFIG") or None
    if config_file:
        path = Path(config_file)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise SettingsError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path}: invalid TOML: {exc}") from None
        for key, value in _flatten_toml(data, set(fields)).items():
            if key not in fields:
                raise SettingsError(f"{path}: unknown setting {key!r}")
            values[key] = _coerce(fields[key], value, str(path))
    for name, f in fields.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _coerce(f, raw, ENV_PREFIX + name.upper())
    for name, value in (overrides or {}).items():
        if name not in fields:
            raise SettingsError(f"unknown setting {name!r}")
        values[name] = _coerce(fields[name], value, "--" + name.replace("_", "-"))
    settings = Settings(**values)
    validate(settings)
    return settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, grouped, with its default and environment variable in the help."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        group_name = f.metadata.get("group", "server")
        group = groups.get(group_name) or groups.setdefault(
            group_name, parser.add_argument_group(f"{group_name} options")
        )
        default = getattr(defaults, f.name)
        shown = ",".join(default) if isinstance(default, list) else default
        if f.metadata.get("secret"):
            shown = "unset"
        help_text = f"{f.metadata['help']} [default: {shown!s}; env {ENV_PREFIX}{f.name.upper()}]"
        flag = "--" + f.name.replace("_", "-")
        kind = _field_type(f)
        if kind is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=help_text)
        else:
            metavar = {int: "N", float: "X", list: "A,B"}.get(kind, "VALUE")
            group.add_argument(flag, dest=f.name, default=argparse.SUPPRESS, metavar=metavar, help=help_text)


def settings_from_args(args: argparse.Namespace) -> Settings:
    names = {f.name for f in dataclasses.fields(Settings)}
    overrides = {k: v for k, v in vars(args).items() if k in names}
    return load_settings(getattr(args, "config", None), overrides=overrides)
