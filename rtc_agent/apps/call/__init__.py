"""The ``call`` app: one participant of a multi-party call room (see :mod:`rtc_agent.rooms`)."""

from rtc_agent.apps.call.app import CallApp

__all__ = ["CallApp"]
