"""WebRTC to an SFU (Janus): its API client, its VideoRoom requests and aiortc peers to it. No app knowledge."""

from rtc_agent.rtc.sfu.janus_client import JanusClient, JanusError, JanusHandle, PluginReply
from rtc_agent.rtc.sfu.peers import FeedPublisher, FeedSubscriber

__all__ = ["FeedPublisher", "FeedSubscriber", "JanusClient", "JanusError", "JanusHandle", "PluginReply"]
