"""The HTTP server: app factory, signaling, pages, health and metrics."""

from rtc_agent.server.app import create_app

__all__ = ["create_app"]
