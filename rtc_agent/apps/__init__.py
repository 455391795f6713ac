"""The per-session policies, one module per app. ``APPS`` maps the ``app`` name of an offer to its class."""

from rtc_agent.apps.base import App, AppContext, SpeechSink
from rtc_agent.apps.captions import CaptionsApp
from rtc_agent.apps.echo import EchoApp

APPS: dict[str, type[App]] = {cls.name: cls for cls in (CaptionsApp, EchoApp)}

__all__ = ["APPS", "App", "AppContext", "CaptionsApp", "EchoApp", "SpeechSink"]
