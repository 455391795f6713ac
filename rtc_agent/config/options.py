"""``opt``: one settings field with its default, its ``--help`` text and its group (the metadata the CLI and the
loaders read)."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Any

ENV_PREFIX = "RTC_AGENT_"
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


def opt(default: Any, help: str, group: str = "server", **extra: Any) -> Any:
    meta = {"help": help, "group": group, **extra}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)
