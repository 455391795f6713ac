"""rtc-agent: a self-hosted realtime media agent over WebRTC."""

__version__ = "0.1.0"
