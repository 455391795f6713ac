"""The translate benchmark's own chrF2 against a hand-computed value and sacreBLEU, and its parallel-set reader on
a small set written here in the Debian packages' format."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from rtc_agent.bench.translate import _TEXT, chrf, fold, parallel_prompts


def test_chrf_hand_computed() -> None:
    # "ab" against "abc": unigrams P 2/2, R 2/3; bigrams P 1/1, R 1/2; no trigrams in the hypothesis.
    # Averaged over the two orders: P = 1, R = 7/12; F2 = 5 * P * R / (4 * P + R) = (35/12) / (55/12) = 7/11.
    assert chrf(["ab"], ["abc"]) == pytest.approx(700 / 11)
    assert chrf(["a b"], ["ab c"]) == pytest.approx(700 / 11)  # spaces do not count
    assert chrf(["same text"], ["same text"]) == pytest.approx(100.0)
    assert chrf(["xyz"], ["abc"]) == 0.0 and chrf([""], ["abc"]) == 0.0
    with pytest.raises(ValueError):
        chrf(["a"], [])


def test_chrf_matches_sacrebleu() -> None:
    sacrebleu = pytest.importorskip("sacrebleu")
    hyps = ["the cat sat on the mat", "Por favor, deje su mensaje.", "Merci beaucoup", "ciao"]
    refs = ["the cat is on the mat", "Por favor deje su mensaje despues del tono", "Merci.", "arrivederci"]
    for n in range(1, len(hyps) + 1):
        expected = sacrebleu.CHRF().corpus_score(hyps[:n], [refs[:n]]).score
        assert chrf(hyps[:n], refs[:n]) == pytest.approx(expected, abs=1e-9)


def test_fold_removes_diacritics() -> None:
    assert fold("contraseña  número dièse") == "contrasena numero diese"


def _write(root: Path, code: str, lines: list[str]) -> None:
    path = root / _TEXT.format(code=code)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def test_parallel_prompts(tmp_path: Path) -> None:
    _write(tmp_path, "en", ["; comment", "vm-intro: Please leave your message after the tone. (a tone plays)",
                            "short: Thank you.", "digits: Press 1 for sales now please.",
                            "only-en: This prompt has no translation.", "dir/x: Please enter the code now.",
                            "agent-pass: Please enter your password followed by pound."])
    _write(tmp_path, "es", ["vm-intro: Por favor deje su mensaje despues del tono.", "short: Gracias",
                            "digits: Presione 1 para ventas.",
                            "agent-pass: Por favor ingrese su contrasena seguida de la tecla de numero"])
    prompts = parallel_prompts(tmp_path, "es", 10)
    assert [p[0] for p in prompts] == ["agent-pass", "vm-intro"]
    assert prompts[1][1] == "Please leave your message after the tone."  # the stage direction is dropped
    assert len(parallel_prompts(tmp_path, "es", 1)) == 1
