"""The per-session policies, one module per app. ``APPS`` maps the ``app`` name of an offer to its class."""

from rtc_agent.apps.agent.app import AgentApp
from rtc_agent.apps.base import App, AppContext, SpeechSink
from rtc_agent.apps.call import CallApp
from rtc_agent.apps.captions import CaptionsApp
from rtc_agent.apps.echo import EchoApp
from rtc_agent.apps.interpret import InterpretApp

APPS: dict[str, type[App]] = {cls.name: cls for cls in (AgentApp, CallApp, CaptionsApp, EchoApp, InterpretApp)}

__all__ = ["APPS", "AgentApp", "App", "AppContext", "CallApp", "CaptionsApp", "EchoApp", "InterpretApp", "SpeechSink"]
