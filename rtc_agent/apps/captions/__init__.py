"""Live captions: VAD-delimited streaming recognition with LocalAgreement-2 commits."""

from rtc_agent.apps.captions.app import CaptionsApp

__all__ = ["CaptionsApp"]
