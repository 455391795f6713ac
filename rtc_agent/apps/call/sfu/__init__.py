"""Call rooms through an SFU (Janus): the bridge of one room to its VideoRoom, and the server's SFU rooms.

- :mod:`rtc_agent.apps.call.sfu.bridge`: :class:`SfuBridge`, one room's Janus VideoRoom: tokens, speakers' audio
  into their captions, one interpreter feed per listen language in use.
- :mod:`rtc_agent.apps.call.sfu.rooms`: :class:`SfuRooms` (which rooms are SFU rooms) and a participant's
  ``admit`` / ``joined`` / ``leave``.
"""

from rtc_agent.apps.call.sfu.bridge import SfuBridge
from rtc_agent.apps.call.sfu.rooms import SfuRooms, admit, check_mode, joined, leave, sfu_unavailable

__all__ = ["SfuBridge", "SfuRooms", "admit", "check_mode", "joined", "leave", "sfu_unavailable"]
