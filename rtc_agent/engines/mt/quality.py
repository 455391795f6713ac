"""How good each engine's translations are, from measured chrF2 (``rtc-agent bench translate``,
``docs/benchmarks/translate.json``): a declared table, so the labels a page shows are figures, not hopes.

Labels (:func:`label`) by chrF2 on the Asterisk prompt set (0-100): ``good`` from 60 (what OPUS-MT-class models
reach on short sentences), ``fair`` from 45 (the meaning mostly through, wording off), ``rough`` below
(a gist at best). An engine and target never measured is ``unmeasured`` with ``chrf`` None.
"""

from __future__ import annotations

__all__ = ["MEASURED", "label", "quality"]

GOOD, FAIR = 60.0, 45.0

#: (engine label, target) -> chrF2 from the reference English text, measured by ``rtc-agent bench translate``
#: (see docs/benchmarks/translate.json for the method, the CPU and the per-source figures).
#: Embedded: 30 prompts per pair, 2026-12-02, Intel Xeon 2-core (shared) machine.
MEASURED: dict[tuple[str, str], float] = {
    ("embedded:Qwen2.5-Coder-0.5B-Instruct", "es"): 50.5,
    ("embedded:Qwen2.5-Coder-0.5B-Instruct", "fr"): 50.2,
    ("embedded:Qwen2.5-Coder-0.5B-Instruct", "it"): 40.8,
}


def label(chrf: float | None) -> str:
    """``good``, ``fair`` or ``rough`` for a chrF2 score; ``unmeasured`` for None."""
    if chrf is None:
        return "unmeasured"
    return "good" if chrf >= GOOD else "fair" if chrf >= FAIR else "rough"


def quality(engine: str, target: str) -> dict[str, object]:
    """``{"engine", "quality", "chrf"}`` of ``engine`` (a label such as ``embedded:Qwen2.5-Coder-0.5B-Instruct``)
    translating into ``target``."""
    chrf = MEASURED.get((engine, target))
    return {"engine": engine, "quality": label(chrf), "chrf": chrf}
