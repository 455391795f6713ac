"""``PolicyConfig``: the knobs of the SimulInfer policy (:class:`~rtc_agent.apps.interpret.policy.SimulPolicy`)."""

from __future__ import annotations

from dataclasses import dataclass

from rtc_agent.apps.interpret.chunker import CHUNK_SIZES_MS, FIRST_CHUNK_MS

__all__ = ["PolicyConfig"]


@dataclass(frozen=True)
class PolicyConfig:
    """The policy's knobs, validated at construction (``ValueError`` naming the field).

    - ``first_chunk_ms``: exactly 1600. ``chunk_ms``: 800 or 1600.
    - ``max_waits``: consecutive WAITs that trigger a flush (0: never on WAITs; then ``max_backlog_ms`` bounds
      the backlog). ``silence_flush_ms``: silence after speech that triggers a flush.
    - ``max_backlog_ms``: the longest WAIT backlog a flush re-translates; older chunks are dropped from it.
    - ``max_model_len``: the model's context in tokens (``None``: no budget rule); ``budget_margin``: the tokens
      kept free (256).
    - ``window_s``: cut after this many seconds of speech in the dialogue (``None``: no window rule).
    """

    first_chunk_ms: int = FIRST_CHUNK_MS
    chunk_ms: int = 800
    max_waits: int = 4
    silence_flush_ms: int = 2400
    max_backlog_ms: int = 12_000
    max_model_len: int | None = None
    budget_margin: int = 256
    window_s: float | None = None

    def __post_init__(self) -> None:
        if self.first_chunk_ms != FIRST_CHUNK_MS:
            raise ValueError(f"first_chunk_ms must be exactly {FIRST_CHUNK_MS}, got {self.first_chunk_ms!r}")
        if self.chunk_ms not in CHUNK_SIZES_MS:
            raise ValueError(f"chunk_ms must be 800 or 1600, got {self.chunk_ms!r}")
        if not isinstance(self.max_waits, int) or self.max_waits < 0:
            raise ValueError(f"max_waits must be an integer >= 0, got {self.max_waits!r}")
        if not isinstance(self.silence_flush_ms, int) or self.silence_flush_ms < self.chunk_ms:
            raise ValueError(f"silence_flush_ms must be an integer >= chunk_ms, got {self.silence_flush_ms!r}")
        if not isinstance(self.max_backlog_ms, int) or self.max_backlog_ms < FIRST_CHUNK_MS:
            raise ValueError(f"max_backlog_ms must be an integer >= {FIRST_CHUNK_MS}, got {self.max_backlog_ms!r}")
        if self.max_model_len is not None and (not isinstance(self.max_model_len, int)
                                               or self.max_model_len <= self.budget_margin):
            raise ValueError(f"max_model_len must be an integer above budget_margin ({self.budget_margin}), "
                             f"got {self.max_model_len!r}")
        if not isinstance(self.budget_margin, int) or self.budget_margin < 0:
            raise ValueError(f"budget_margin must be an integer >= 0, got {self.budget_margin!r}")
        if self.window_s is not None and not 2.0 <= self.window_s <= 3600.0:
            raise ValueError(f"window_s must be None or 2..3600 seconds, got {self.window_s!r}")

