"""Text translation by a CTranslate2 translation model an operator supplies (``mt_model_dir``).

Three families, told apart by the model's target vocabulary (:func:`read_layout`, file reads only, no weights):

- **Marian / OPUS-MT, one target** (``opus-mt-en-es``): the pair comes from ``tokenizer_config.json``
  (``source_lang``/``target_lang``, which transformers' ``MarianTokenizer`` saves) or the folder's name
  (``...-en-es``);
- **Marian, many targets** (``opus-mt-en-mul``, ``opus-mt-en-roa``): the vocabulary holds ``>>spa<<``-style tokens;
  the source text is prefixed with the target's;
- **NLLB** (``nllb-200-distilled-600M``): the vocabulary holds FLORES-200 codes (``spa_Latn``); the source is
  tagged with its own code, the target given as the decoder's first token.

Convert a model with ``ct2-transformers-converter --model Helsinki-NLP/opus-mt-en-es --output_dir DIR
--copy_files source.spm target.spm vocab.json tokenizer_config.json`` (NLLB: ``sentencepiece.bpe.model``).
Tokenizing uses the SentencePiece files in the folder, or else a tokenizer transformers loads from it
(``tokenizer="transformers"``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtc_agent.engines.mt.base import DEFAULT_MAX_CHARS, TextTranslateRequest, TextTranslationEngine
from rtc_agent.engines.mt.languages import AUTO, ISO3, LANGUAGE_NAMES, NLLB_CODES, marian_tokens
from rtc_agent.errors import EngineError

__all__ = ["CTranslate2TranslationEngine", "ModelLayout", "read_layout"]

_PAIR_NAME = re.compile(r"(?:^|[-_])([a-z]{2,3})-([a-z]{2,3})$")
_VOCABULARIES = ("target_vocabulary", "shared_vocabulary")
TOKENIZERS = ("auto", "sentencepiece", "transformers")


@dataclass(frozen=True)
class ModelLayout:
    """What a model directory translates: ``family`` (``marian``, ``marian-multi``, ``nllb``), ``sources``
    (``None``: any), and per target language code the token that selects it (``""``: none needed)."""

    path: Path
    family: str
    sources: frozenset[str] | None
    targets: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name


def _vocabulary(path: Path) -> list[str]:
    for stem in _VOCABULARIES:
        if (path / f"{stem}.json").is_file():
            return [str(t) for t in json.loads((path / f"{stem}.json").read_text(encoding="utf-8"))]
        if (path / f"{stem}.txt").is_file():
            return (path / f"{stem}.txt").read_text(encoding="utf-8").splitlines()
    raise ValueError(f"{path} holds no CTranslate2 vocabulary (target_vocabulary or shared_vocabulary .json/.txt)")


def _pair(path: Path) -> tuple[str | None, str | None]:
    config = path / "tokenizer_config.json"
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        if data.get("source_lang") or data.get("target_lang"):
            return data.get("source_lang") or None, data.get("target_lang") or None
    match = _PAIR_NAME.search(path.name.lower())
    return (match.group(1), match.group(2)) if match else (None, None)


def _our_code(code: str | None) -> str | None:
    """An OPUS/ISO code (639-1 or 639-3) as one of ours, or None."""
    if not code:
        return None
    code = code.lower()
    if code in LANGUAGE_NAMES:
        return code
    return next((ours for ours, three in ISO3.items() if three == code), None)


def read_layout(model_dir: str | os.PathLike[str]) -> ModelLayout:
    """The :class:`ModelLayout` of a converted model folder; ``ValueError`` saying what is missing."""
    path = Path(model_dir).expanduser()
    if not (path / "model.bin").is_file():
        raise ValueError(f"{path} is not a CTranslate2 model folder (no model.bin)")
    vocabulary = set(_vocabulary(path))
    nllb = {code: token for code, token in NLLB_CODES.items() if token in vocabulary}
    if nllb:
        return ModelLayout(path, "nllb", frozenset(nllb) | {AUTO}, nllb)
    source, target = _pair(path)
    ours = _our_code(source)
    sources = frozenset({ours, AUTO}) if ours else None
    multi = {code: next(t for t in marian_tokens(code) if t in vocabulary) for code in LANGUAGE_NAMES
             if any(t in vocabulary for t in marian_tokens(code))}
    if multi:
        return ModelLayout(path, "marian-multi", sources, multi)
    target_code = _our_code(target)
    if target_code is None:
        raise ValueError(f"cannot tell which language {path} translates into: save tokenizer_config.json with "
                         "target_lang beside the model, or name the folder ...-SRC-TGT (e.g. opus-mt-en-es)")
    return ModelLayout(path, "marian", sources, {target_code: ""})


class _Tokenizer:
    """Text <-> model tokens: SentencePiece files of the folder, or a transformers tokenizer loaded from it."""

    def __init__(self, layout: ModelLayout, kind: str) -> None:
        path = layout.path
        spm_source = next((path / n for n in ("source.spm", "sentencepiece.bpe.model") if (path / n).is_file()), None)
        if kind == "sentencepiece" or (kind == "auto" and spm_source is not None):
            if spm_source is None:
                raise ValueError(f"{path} has no source.spm or sentencepiece.bpe.model")
            import sentencepiece

            target = path / "target.spm"
            self.source_sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_source))
            self.target_sp = (sentencepiece.SentencePieceProcessor(model_file=str(target)) if target.is_file()
                              else self.source_sp)
            self.hf: Any = None
        else:
            from transformers import AutoTokenizer

            self.hf = AutoTokenizer.from_pretrained(str(path))

    def encode(self, text: str, nllb_source: str | None) -> list[str]:
        if self.hf is not None:
            if nllb_source is not None:
                self.hf.src_lang = nllb_source
            return list(self.hf.convert_ids_to_tokens(self.hf(text).input_ids))
        pieces = list(self.source_sp.encode(text, out_type=str))
        return ([nllb_source] if nllb_source else []) + pieces + ["</s>"]

    def decode(self, tokens: list[str], special: set[str]) -> str:
        tokens = [t for t in tokens if t not in special]
        if self.hf is not None:
            return str(self.hf.convert_tokens_to_string(tokens))
        return str(self.target_sp.decode_pieces(tokens))


class CTranslate2TranslationEngine(TextTranslationEngine):
    """An ``mt`` engine over a CTranslate2 model folder (see the module docstring). ``beam``: beam size;
    ``threads``: CTranslate2 intra-op threads (0: its default); ``tokenizer``: ``auto``, ``sentencepiece`` or
    ``transformers``. A batch is translated in one ``translate_batch`` call per target language."""

    def __init__(self, model_dir: str | os.PathLike[str], *, beam: int = 2, threads: int = 0,
                 tokenizer: str = "auto", max_chars: int = DEFAULT_MAX_CHARS) -> None:
        super().__init__(max_chars=max_chars)
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}")
        self.layout = read_layout(model_dir)
        self.beam, self.threads, self.tokenizer_kind = beam, threads, tokenizer
        self.label = f"ctranslate2:{self.layout.name}"
        self.targets = frozenset(self.layout.targets)
        self.sources = self.layout.sources
        self._special = {"</s>", "<s>", "<pad>", "<unk>", *self.layout.targets.values()} - {""}
        self._translator: Any = None
        self._tokenizer: _Tokenizer | None = None

    def load(self, progress: Callable[[str], None]) -> None:
        import ctranslate2

        progress(f"loading {self.layout.family} model {self.layout.name}")
        self._tokenizer = _Tokenizer(self.layout, self.tokenizer_kind)
        self._translator = ctranslate2.Translator(str(self.layout.path), device="cpu", inter_threads=1,
                                                  intra_threads=self.threads)

    def close(self) -> None:
        self._translator = None

    def source_tokens(self, request: TextTranslateRequest) -> list[str]:
        assert self._tokenizer is not None
        if self.layout.family == "nllb":
            source = NLLB_CODES["en" if request.source == AUTO else request.source]
            return self._tokenizer.encode(request.text, source)
        tokens = self._tokenizer.encode(request.text, None)
        prefix = self.layout.targets[request.target]
        return [prefix, *tokens] if prefix else tokens

    def translate(self, request: TextTranslateRequest) -> str:
        [text] = self.translate_many([request])
        if isinstance(text, Exception):
            raise text
        return text

    def translate_many(self, requests: list[TextTranslateRequest],
                       finished: Callable[[int, str | Exception], object] | None = None) -> list[str | Exception]:
        """One CTranslate2 batch per target language (``finished`` is not called: every result comes at the end)."""
        if self._translator is None or self._tokenizer is None:
            raise EngineError(f"{self.label} is not loaded", code="engine_error")
        out: list[str | Exception] = [""] * len(requests)
        for target in sorted({r.target for r in requests}):
            indexes = [i for i, r in enumerate(requests) if r.target == target]
            batch = [self.source_tokens(requests[i]) for i in indexes]
            prefix = [[self.layout.targets[target]]] * len(batch) if self.layout.family == "nllb" else None
            results = self._translator.translate_batch(
                batch, target_prefix=prefix, beam_size=self.beam,
                max_decoding_length=min(1024, 2 * max(len(t) for t in batch) + 16))
            for i, result in zip(indexes, results, strict=True):
                out[i] = self._tokenizer.decode(list(result.hypotheses[0]), self._special)
        return out
