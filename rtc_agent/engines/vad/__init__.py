"""Voice activity detection engines (Silero VAD, always local)."""

from rtc_agent.engines.vad.silero import WINDOW_SAMPLES, SileroVad, VadRequest, VadStream, engine_spec

__all__ = ["WINDOW_SAMPLES", "SileroVad", "VadRequest", "VadStream", "engine_spec"]
