"""The WebRTC edges (aiortc glue only; nothing here knows about models)."""

from rtc_agent.rtc.audio_input import AudioInput
from rtc_agent.rtc.clock import SessionClock
from rtc_agent.rtc.event_channel import EventChannel
from rtc_agent.rtc.resampler import thread_free_codecs
from rtc_agent.rtc.speech_output import SpeechOutput, Utterance
from rtc_agent.rtc.video_input import VideoInput

thread_free_codecs()  # aiortc's encoders, for every peer connection of the process (see rtc.resampler)

__all__ = ["AudioInput", "EventChannel", "SessionClock", "SpeechOutput", "Utterance", "VideoInput"]
