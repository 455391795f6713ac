"""The WebRTC edges (aiortc glue only; nothing here knows about models)."""

from rtc_agent.rtc.audio_input import AudioInput
from rtc_agent.rtc.clock import SessionClock
from rtc_agent.rtc.event_channel import EventChannel
from rtc_agent.rtc.speech_output import SpeechOutput, Utterance
from rtc_agent.rtc.video_input import VideoInput

__all__ = ["AudioInput", "EventChannel", "SessionClock", "SpeechOutput", "Utterance", "VideoInput"]
