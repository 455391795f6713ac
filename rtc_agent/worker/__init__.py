"""The session worker: engine scheduling (batching, bounded queues, threads, leases) and event-loop health.

See :class:`Worker` for the call contract and :class:`EngineSpec` for the per-engine knobs.
"""

from rtc_agent.worker.admission import LoadAdmission
from rtc_agent.worker.engine import Engine, EngineSpec, run_each
from rtc_agent.worker.loop_lag import LoopLagMonitor
from rtc_agent.worker.worker import UnknownEngine, Worker

__all__ = ["Engine", "EngineSpec", "LoadAdmission", "LoopLagMonitor", "UnknownEngine", "Worker", "run_each"]
