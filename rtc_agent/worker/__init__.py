"""The session worker: engine scheduling (batching, bounded queues, threads, leases), event-loop health, and
this machine's measured engine speed and capacity per app (:mod:`.speed`, :mod:`.capacity`).

See :class:`Worker` for the call contract and :class:`EngineSpec` for the per-engine knobs.
"""

from rtc_agent.worker.admission import LoadAdmission
from rtc_agent.worker.capacity import CapacityPlanner, app_capacity
from rtc_agent.worker.engine import Engine, EngineSpec, run_each
from rtc_agent.worker.failures import UnknownEngine
from rtc_agent.worker.loop_lag import LoopLagMonitor
from rtc_agent.worker.speed import ProbeResult, SpeedBook, SpeedProbe
from rtc_agent.worker.worker import Worker

__all__ = ["CapacityPlanner", "Engine", "EngineSpec", "LoadAdmission", "LoopLagMonitor", "ProbeResult", "SpeedBook",
           "SpeedProbe", "UnknownEngine", "Worker", "app_capacity", "run_each"]
