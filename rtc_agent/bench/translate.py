"""``rtc-agent bench translate``: chrF2 of the text translation engine (``mt``) per language pair, on a parallel
set we did not make.

The set: the Asterisk core prompts, whose text Debian ships per language (``asterisk-core-sounds-en``/``-es``/
``-fr``/``-it``: ``core-sounds-XX.txt.gz``, one ``name: text`` line per prompt, the same names in every language,
written by Digium's translators). Pairs are the prompts present in English and the target, without digits or
symbols, 4 to 28 English words; stage directions in parentheses are dropped. The Spanish file is written without
accents, so every pair is scored with diacritics folded on both sides (NFKD, marks removed). German has no Asterisk
set in Debian and is not measured. ``--limit`` prompts per pair are taken evenly spread over the sorted names.

Two English inputs: the reference text, and (``--whisper``) what the worker's ``asr`` engine (Whisper base)
hears in the English human recordings of the same prompts (``asterisk-core-sounds-en-g722``): the cascade a call
room runs. Each translation goes through a real :class:`~rtc_agent.worker.Worker` and the configured engine, so the
figures include nothing the server would not do. Scores are corpus chrF2 (:func:`chrf`: character 6-grams, beta 2,
spaces removed, precision and recall averaged over the orders, as sacreBLEU's ``CHRF()``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import re
import time
import unicodedata
from pathlib import Path
from typing import Any

from rtc_agent.bench.common import machine, write_json
from rtc_agent.bench.speech_set import HUMAN_DIR, human_root, unpack_debs

__all__ = ["chrf", "fold", "parallel_prompts"]

PAIRS = ("es", "fr", "it")
SET_PACKAGES = tuple(f"asterisk-core-sounds-{code}" for code in ("en", *PAIRS))
_TEXT = "usr/share/doc/asterisk-core-sounds-{code}/core-sounds-{code}.txt.gz"


def _ngrams(text: str, n: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in range(len(text) - n + 1):
        counts[text[i:i + n]] = counts.get(text[i:i + n], 0) + 1
    return counts


def chrf(hypotheses: list[str], references: list[str], *, order: int = 6, beta: float = 2.0) -> float:
    """Corpus chrF (0-100): per character n-gram order 1..``order``, matched/hypothesis/reference counts summed
    over the sentences (spaces removed); precision and recall averaged over the orders both sides have, then their
    F-beta (sacreBLEU 2's default ``CHRF()``)."""
    if len(hypotheses) != len(references):
        raise ValueError("chrf needs one reference per hypothesis")
    stats = [[0, 0, 0] for _ in range(order)]  # per order: matched, hypothesis, reference n-grams
    for hyp, ref in zip(hypotheses, references, strict=True):
        hyp, ref = re.sub(r"\s+", "", hyp), re.sub(r"\s+", "", ref)
        for n in range(1, order + 1):
            h, r = _ngrams(hyp, n), _ngrams(ref, n)
            stats[n - 1][0] += sum(min(c, r.get(g, 0)) for g, c in h.items())
            stats[n - 1][1] += sum(h.values())
            stats[n - 1][2] += sum(r.values())
    orders = [(matched / hyp_count, matched / ref_count) for matched, hyp_count, ref_count in stats
              if hyp_count and ref_count]
    if not orders:
        return 0.0
    precision, recall = (sum(values) / len(orders) for values in zip(*orders, strict=True))
    factor = beta ** 2
    if not precision + recall:
        return 0.0
    return 100.0 * (1 + factor) * precision * recall / (factor * precision + recall)


def fold(text: str) -> str:
    """``text`` without diacritics (NFKD, combining marks dropped) and with single spaces."""
    decomposed = unicodedata.normalize("NFKD", text)
    return re.sub(r"\s+", " ", "".join(c for c in decomposed if not unicodedata.combining(c))).strip()


def _prompts(root: Path, code: str) -> dict[str, str]:
    with gzip.open(root / _TEXT.format(code=code), "rt", encoding="utf-8-sig", errors="replace") as f:
        lines = f.read().splitlines()
    out = {}
    for line in lines:
        name, sep, text = line.partition(":")
        if sep and not line.startswith(";") and "/" not in name:
            text = re.sub(r"\s+", " ", re.sub(r"\([^)]*\)|\[[^\]]*\]", " ", text)).strip()
            if text:
                out[name.strip()] = text
    return out


def parallel_prompts(root: Path, target: str, limit: int) -> list[tuple[str, str, str]]:
    """``(name, English, target)`` of up to ``limit`` usable prompts, evenly spread over the sorted names."""
    english, other = _prompts(root, "en"), _prompts(root, target)
    usable = sorted(name for name, text in english.items() if name in other and 4 <= len(text.split()) <= 28
                    and not re.search(r"[0-9<>*#/@%]|\.\.\.", text + other[name]))
    step = max(1, len(usable) // max(1, limit))
    return [(name, english[name], other[name]) for name in usable[::step][:limit]]


def set_root(cache: Path) -> Path:
    """The unpacked text packages of every language (fetched once into ``cache``)."""
    root = cache / "mt-debs" / "root"
    if all((root / _TEXT.format(code=c)).exists() for c in ("en", *PAIRS)):
        return root
    return unpack_debs(SET_PACKAGES, cache / "mt-debs")


async def _heard(worker: Any, names: list[str], cache: Path) -> dict[str, str]:
    """What the ``asr`` engine hears in the English recordings of ``names`` (those that exist)."""
    from rtc_agent.engines.asr.base import TranscribeRequest
    from rtc_agent.rtc.sources import load_audio

    audio_root = human_root(cache / "speech")
    heard = {}
    for name in names:
        path = audio_root / HUMAN_DIR / f"{name}.g722"
        if path.exists():
            audio = load_audio(path, 16000).astype("float32") / 32768.0  # int16 -> -1..1
            result = await worker.call("asr", TranscribeRequest(audio, language="en"), timeout=300)
            heard[name] = result.text.strip()
    return heard


async def _translate(worker: Any, texts: list[str], target: str) -> tuple[list[str], list[float], int]:
    from rtc_agent.engines.mt import ENGINE_NAME, TextTranslateRequest
    from rtc_agent.errors import AgentError

    out, times, failed = [], [], 0
    for text in texts:
        start = time.perf_counter()
        try:
            result = await worker.call(ENGINE_NAME, TextTranslateRequest(text, "en", target), timeout=600)
            out.append(result.text)
        except AgentError:
            failed += 1
            out.append("")
        times.append(time.perf_counter() - start)
    return out, times, failed


def _score(hyps: list[str], refs: list[str], times: list[float], failed: int) -> dict[str, Any]:
    ordered = sorted(times)
    return {"chrf": round(chrf([fold(h) for h in hyps], [fold(r) for r in refs]), 1),
            "chrf_unfolded": round(chrf(hyps, refs), 1), "sentences": len(hyps), "failed": failed,
            "median_s": round(ordered[len(ordered) // 2], 3) if ordered else None}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from rtc_agent.config import Settings
    from rtc_agent.engines import asr, mt
    from rtc_agent.worker import Worker

    settings = dataclasses.replace(Settings(), **{k: v for k, v in (
        ("mt_engine", args.engine), ("mt_model_dir", args.model_dir), ("mt_url", args.url),
        ("mt_model", args.model)) if v})
    cache, worker = Path(args.cache).expanduser(), Worker()
    for spec in mt.engine_specs(settings) + ([asr.engine_spec(settings)] if args.whisper else []):
        worker.add(spec)
    root, pairs, samples = set_root(cache), {}, {}
    try:
        load_start = time.perf_counter()
        await worker.load(mt.ENGINE_NAME)
        load_s = time.perf_counter() - load_start
        for target in args.pairs:
            prompts = parallel_prompts(root, target, args.limit)
            refs = [p[2] for p in prompts]
            hyps, times, failed = await _translate(worker, [p[1] for p in prompts], target)
            entry = {"text": _score(hyps, refs, times, failed)}
            samples[target] = [{"en": p[1], "ref": p[2], "hyp": h} for p, h in zip(prompts[:3], hyps, strict=False)]
            if args.whisper:
                heard = await _heard(worker, [p[0] for p in prompts], cache)
                kept = [p for p in prompts if p[0] in heard]
                hyps, times, failed = await _translate(worker, [heard[p[0]] for p in kept], target)
                entry["whisper"] = {**_score(hyps, [p[2] for p in kept], times, failed), "asr": settings.asr_model
                                    or "whisper-base"}
                samples[f"{target}-whisper"] = [{"heard": heard[p[0]], "ref": p[2], "hyp": h}
                                                for p, h in zip(kept[:3], hyps, strict=False)]
            pairs[f"en-{target}"] = entry
            print(f"en-{target}: {entry}", flush=True)
    finally:
        await worker.close()
    return {"benchmark": "translate", "engine": mt.describe(settings), "load_s": round(load_s, 1),
            "set": "Asterisk core prompts (Debian asterisk-core-sounds-en/-es/-fr/-it 1.6.1 text; English audio "
                   "asterisk-core-sounds-en-g722)", "limit": args.limit, "pairs": pairs, "samples": samples,
            "not_measured": {"de": "no German Asterisk prompt set in Debian"}, "machine": machine()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", default="", help="mt_engine to measure (default: the settings' choice)")
    parser.add_argument("--model-dir", default="", help="mt_model_dir for --engine ctranslate2")
    parser.add_argument("--url", default="", help="mt_url for --engine openai")
    parser.add_argument("--model", default="", help="mt_model")
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=PAIRS, help="targets from English")
    parser.add_argument("--limit", type=int, default=40, help="prompts per pair (default 40)")
    parser.add_argument("--whisper", action="store_true", help="also translate what Whisper hears in the English "
                                                               "recordings")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "rtc-agent"), help="download cache")
    parser.add_argument("--out", help="write the JSON results here (e.g. docs/benchmarks/translate.json)")


def main(args: argparse.Namespace) -> Any:
    return _finish(args)


async def _finish(args: argparse.Namespace) -> dict[str, Any]:
    return write_json(await run(args), args.out)
