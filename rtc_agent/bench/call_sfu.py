"""``rtc-agent bench call --sfu --listeners N --sfu-languages es,de,it``: an interpreted webinar through Janus.

A real server process (every engine loaded) with ``sfu_url`` pointing at a Janus (``--sfu-url``, or one this
benchmark starts: :mod:`rtc_agent.bench.janus_local`). One speaker (English: espeak-ng, or with ``--sfu-voice
human`` a woman's recorded voice, the Asterisk prompts of the captions' speech set) holds its call session
for events and publishes its audio to Janus from an aiortc peer; N listener sessions (role ``listener``, listen
languages round-robin over ``--sfu-languages``) each subscribe, through Janus with their own token, to their
language's interpreter feed. Rooms of 3 listeners and of N are measured one after the other, after (unless
``--no-sfu-call``) the same speech in 2-person calls, the speaker and one listener, one call per listen language
(``calls``; ``call`` is the first language's), the interpretation lag target's baseline:

- ``lag_p90_vs_calls``: the room of N's lag p90 over the calls' (all their translations pooled), and
  ``lag_p90_vs_call_by_language``: per language, its listeners' p90 in the room over its call's: what the room adds,
  with a language that takes more tokens than another (German against Spanish) compared with itself;
- ``lag_p90_vs_call``: the room of N's p90 over the first language's call alone (the figure measured before the
  calls per language).

Per room (and call):

- server CPU: user + system seconds of the server process while the speech plays (and ``SETTLE_S`` after), per
  second; ``cpu_ratio_vs_3``: the room of N over the room of 3 (target: within 15 %);
- per listener: captions of the speaker received, translations in its language received, interpretation audio
  received from its feed (at least 200 ms of non-silent frames), waiting up to ``DELIVERY_WAIT_S`` after the CPU
  window for what is still on its way;
- interpretation lag: ``lag_ms`` of each ``caption.translation`` (server side: from the end of the translated
  speech on the speaker's clock to its emission), p50 / p90 over ``--sfu-sentences`` sentences per listener (every
  one in ``lags_ms``);
  ``lag_parts``: where it went, per translation (:func:`lag_parts`): the caption final (its ``behind_ms``), the
  wait for the ``mt`` engine (the rest), and the translation itself (its ``translation.chunk``'s ``latency_ms``);
- ``by_language``: the same per listen language, and whether the language had an interpreter feed to subscribe to
  within ``FEEDS_TIMEOUT_S`` (a language without a voice gets none); ``speech``: what its interpreter voice did
  (:func:`~rtc_agent.bench.common.speech_summary`: texts spoken, skipped to catch up, spoken by the catch-up
  voice, dropped); ``speech_lag_ms``: per text its voice spoke, from the end of the speech it translates to the
  moment its audio starts at the server (:func:`spoken_lags`), and ``speech_heard_ms``: from then to the voice
  onset the listener's subscriber heard through Janus (texts that start after a pause only).

The peers and Janus share this machine with the server: ``load_1min_before`` says how busy it was. The listeners'
media (every subscriber's Opus decoding: in deployment, on the listeners' own machines) runs in a child process
at ``LISTENER_NICE`` lower CPU priority (:mod:`rtc_agent.bench.sfu_listeners`), so it takes the cores the server
leaves idle; the speaker's publisher and every event channel stay in this process at its priority.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from typing import Any

import numpy as np

from rtc_agent.bench.audio import load_audio_48k
from rtc_agent.bench.common import local_server, machine, percentile_ms, speech_summary, write_json
from rtc_agent.bench.interpret import espeak_clip
from rtc_agent.bench.janus_local import local_janus
from rtc_agent.bench.sfu_listeners import ListenerMedia
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sfu import FeedPublisher, JanusClient
from rtc_agent.rtc.sources import PcmSourceTrack

SENTENCES = ["Please remember to bring your umbrella tomorrow morning.", "The library opens at nine on Saturday.",
             "Our team finished the report on Friday.", "The train to the airport leaves every twenty minutes.",
             "My sister bought a new bicycle last week.", "We will meet in the small room after lunch.",
             "The weather should be warm and sunny today.", "Could you send me the slides before the meeting?",
             "The museum is closed on Mondays in winter.", "He forgot his keys at the office again.",
             "Fresh bread is sold at the market every morning.", "The children played football in the park."]
DEFAULT_SENTENCES = 8
SETTLE_S = 20.0  # CPU is measured while the speech plays and this long after (the same window for every room)
DELIVERY_WAIT_S = 60.0  # then at most this long for every listener's translation and interpretation audio
FEEDS_TIMEOUT_S = 60.0
HEARD_FRAMES = 10  # 200 ms of non-silent audio from the interpreter feed
TARGETS = {"cpu_ratio_vs_3_max": 1.15}
LISTENER_NICE = 10  # the listeners' media process (in deployment: their own machines) yields to the server
ONSET_WINDOW_S = (-0.1, 2.0)  # a voice onset this close to a text's start (s) is that text heard


def _heard(media: ListenerMedia | None, fed: list[int], n: int) -> list[int]:
    """Per listener (of ``n``), the non-silent frames heard: ``media``'s counts for the ``fed`` ones, else 0."""
    heard = [0] * n
    for i, count in zip(fed, media.heard if media is not None else [], strict=False):
        heard[i] = count
    return heard


def _onsets(media: ListenerMedia | None, fed: list[int], n: int) -> list[list[float]]:
    """Per listener (of ``n``), the voice onsets heard: ``media``'s for the ``fed`` ones, else none."""
    onsets: list[list[float]] = [[] for _ in range(n)]
    for i, mine in zip(fed, media.onsets if media is not None else [], strict=False):
        onsets[i] = mine
    return onsets


def _translated(peer: ClientPeer) -> bool:
    """Whether ``peer`` got a translation into its listen language."""
    return any(e["type"] == "caption.translation" and e["language"] == peer.config["listen_language"]
               for e in peer.events)


def _joined(peer: ClientPeer) -> dict[str, Any]:
    return next(e for e in peer.events if e["type"] == "room.joined")


async def _feeds(peer: ClientPeer, languages: set[str], timeout: float) -> dict[str, int]:
    """The interpreter feeds (language -> feed id) once every one of ``languages`` has one (or the timeout)."""
    deadline = time.monotonic() + timeout
    feeds: dict[str, int] = {}
    while time.monotonic() < deadline:
        updates = [e for e in peer.events if e["type"] == "room.sfu.updated"]
        feeds = updates[-1]["interpreter_feeds"] if updates else _joined(peer)["sfu"]["interpreter_feeds"]
        if languages <= set(feeds):
            break
        await asyncio.sleep(0.2)
    return {lang: int(feed) for lang, feed in feeds.items()}


def lag_parts(events: list[dict[str, Any]]) -> list[dict[str, int]]:
    """One listener's translations split into where their ``lag_ms`` went, by the end of the speech they cover:
    ``caption_ms`` (the caption final's ``behind_ms``), ``mt_ms`` (the ``translation.chunk``'s ``latency_ms``: the
    ``mt`` call, its queue included) and ``wait_ms``: the rest (the final waiting for the previous one's
    translation). Translations without their final or chunk are left out."""
    finals = {e["audio_end_ms"]: e for e in events if e["type"] == "caption.final" and e.get("behind_ms") is not None}
    chunks = {e["audio_end_ms"]: e for e in events
              if e["type"] == "translation.chunk" and e.get("latency_ms") is not None}
    out = []
    for e in events:
        end = e.get("audio_end_ms")
        if e["type"] != "caption.translation" or e.get("lag_ms") is None or end not in finals or end not in chunks:
            continue
        caption, mt = int(finals[end]["behind_ms"]), round(chunks[end]["latency_ms"])
        out.append({"lag_ms": int(e["lag_ms"]), "caption_ms": caption, "mt_ms": mt,
                    "wait_ms": max(0, int(e["lag_ms"]) - caption - mt)})
    return out


def spoken_lags(events: list[dict[str, Any]], times: list[float], onsets: list[float]) -> list[dict[str, Any]]:
    """One listener's spoken interpretation, per ``translation.speech.started`` (``times``: each event's arrival,
    monotonic s; ``onsets``: the voice onsets its subscriber heard, :class:`ListenerMedia`): ``lag_ms``, from the
    end of the speech the text translates (the arrival of that segment's ``caption.translation`` of the same text,
    else its latest one before, less its ``lag_ms``) to the moment the text's audio starts at the server (the
    started event's arrival plus its ``starts_in_ms``: speech queued ahead of it); ``heard_ms``, from that moment
    to the listener's first voice onset within ``ONSET_WINDOW_S`` of it (None when there is none: the voice went
    on without a pause). Texts without a translation event are left out."""
    out: list[dict[str, Any]] = []
    translations: dict[str, list[tuple[dict[str, Any], float]]] = {}  # per segment, in arrival order
    for e, at in zip(events, times, strict=True):
        if e["type"] == "caption.translation" and e.get("lag_ms") is not None:
            translations.setdefault(e["segment_id"], []).append((e, at))
        if e["type"] != "translation.speech.started":
            continue
        pieces = translations.get(e.get("segment_id"), [])
        piece = next((p for p in reversed(pieces) if p[0]["text"] == e.get("text")), pieces[-1] if pieces else None)
        if piece is None:
            continue
        source_end = piece[1] - piece[0]["lag_ms"] / 1000
        starts = at + e.get("starts_in_ms", 0) / 1000
        heard = next((t for t in onsets if starts + ONSET_WINDOW_S[0] <= t <= starts + ONSET_WINDOW_S[1]), None)
        out.append({"lag_ms": round(1000 * (starts - source_end)),
                    "heard_ms": None if heard is None else round(1000 * (heard - starts))})
    return out


def _spoken_summary(spoken: list[dict[str, Any]]) -> dict[str, Any]:
    """``speech_lag_ms`` and ``speech_heard_ms`` (p50 / p90 / count) of :func:`spoken_lags` over listeners."""
    lags = [s["lag_ms"] / 1000 for s in spoken]
    heard = [s["heard_ms"] / 1000 for s in spoken if s["heard_ms"] is not None]
    return {"speech_lag_ms": _lag_summary(lags), "speech_heard_ms": _lag_summary(heard)}


def _parts_summary(parts: list[dict[str, int]]) -> dict[str, Any]:
    """p50 / p90 of each part of :func:`lag_parts` over many listeners' translations."""
    return {key: {"p50": percentile_ms([p[key] / 1000 for p in parts], 50),
                  "p90": percentile_ms([p[key] / 1000 for p in parts], 90)}
            for key in ("caption_ms", "wait_ms", "mt_ms")} | {"count": len(parts)}


def speaker_speech(voice: str, count: int) -> np.ndarray:
    """What the speaker says, 48 kHz int16: ``count`` sentences with a second of silence between them (and before
    and after), spoken by espeak-ng (``voice`` ``espeak``: :data:`SENTENCES`) or recorded (``human``: every
    ``len/count``-th usable Asterisk prompt of 6-16 words, its own silence trimmed; packages as the speech set
    gets them)."""
    if voice == "espeak":
        return load_audio_48k(espeak_clip(SENTENCES[:count], "en", lead_s=1.0, gap_s=1.0, tail_s=1.0))
    from rtc_agent.bench.speech_set import HUMAN_DIR, default_dir, human_prompts, human_root, speech_span
    from rtc_agent.rtc.sources import load_audio

    root = human_root(default_dir())
    prompts = [p for p in human_prompts(root) if 6 <= len(p[1].split()) <= 16]
    chosen = prompts[::max(1, len(prompts) // count)][:count]
    gap = np.zeros(48000, dtype=np.int16)
    parts = [gap]
    for name, _ in chosen:
        pcm = load_audio(root / HUMAN_DIR / f"{name}.g722", 48000)
        start, end = speech_span(pcm, 48000)
        parts += [pcm[start:end], gap]
    return np.concatenate(parts)


async def run_room(base_url: str, server: Any, ws_url: str, secret: str, n: int,
                   languages: list[str], speech: np.ndarray) -> dict[str, Any]:
    room = f"sfu-bench-{n}-{int(time.time())}"
    janus = await JanusClient(ws_url, api_secret=secret).connect()
    speaker = ClientPeer(base_url, "call", receive_audio=False,
                         config={"room": room, "mode": "sfu", "name": "Speaker", "language": "en"})
    listeners = [ClientPeer(base_url, "call", receive_audio=False,
                            config={"room": room, "name": f"L{i}", "language": "en", "role": "listener",
                                    "listen_language": languages[i % len(languages)]}) for i in range(n)]
    media: ListenerMedia | None = None
    fed: list[int] = []  # the listeners subscribed to a feed, in the order of media's subscriptions
    publisher: FeedPublisher | None = None

    try:
        await speaker.connect()
        await speaker.wait_for("room.joined", timeout=60)
        for peer in listeners:
            await peer.connect()
            await peer.wait_for("room.joined", timeout=60)
        sfu = _joined(speaker)["sfu"]
        feeds = await _feeds(speaker, set(languages), FEEDS_TIMEOUT_S)
        # a listener whose language has no feed subscribes to nothing (it counts as not hearing)
        fed = [i for i, peer in enumerate(listeners) if peer.config["listen_language"] in feeds]
        media = ListenerMedia(ws_url, secret, sfu["room"], [
            {"feed": feeds[listeners[i].config["listen_language"]], "token": _joined(listeners[i])["sfu"]["token"]}
            for i in fed], nice=LISTENER_NICE)
        await media.start()
        cpu0, wall0 = server.cpu_seconds(), time.monotonic()
        publisher = FeedPublisher(janus, sfu["room"], PcmSourceTrack(speech, 48000, tail="silence"),
                                  display=sfu["display"], token=sfu["token"])
        await publisher.start()
        await asyncio.sleep(speech.size / 48000 + SETTLE_S)
        cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - wall0
        deadline = time.monotonic() + DELIVERY_WAIT_S  # then what is still on its way may arrive (not in the CPU)
        while time.monotonic() < deadline and not all(
                count >= HEARD_FRAMES and _translated(peer)
                for count, peer in zip(_heard(media, fed, n), listeners, strict=True)):
            await asyncio.sleep(0.5)
    finally:
        if media is not None:
            await media.close()
        if publisher is not None:
            await publisher.close()
        for peer in [speaker, *listeners]:
            with contextlib.suppress(Exception):
                await peer.close()
        await janus.close()
    heard = _heard(media, fed, n)
    onsets = _onsets(media, fed, n)
    spoken = [spoken_lags(peer.events, peer.event_times, onsets[i]) for i, peer in enumerate(listeners)]
    speaker_id = _joined(speaker)["participant_id"]
    lags = [e["lag_ms"] / 1000 for peer in listeners for e in peer.events
            if e["type"] == "caption.translation" and e.get("lag_ms") is not None]
    captions = sum(1 for peer in listeners if any(e["type"] == "caption.final" and (e.get("speaker") or {}).get(
        "participant_id") == speaker_id for e in peer.events))
    translated = sum(1 for peer in listeners if _translated(peer))
    subscribed = {lang for lang in languages if lang in feeds}
    return {"listeners": n, "languages": languages, "interpreter_feeds": sorted(feeds),
            "by_language": _by_language(listeners, heard, subscribed, spoken),
            "server_cpu_s": round(cpu, 2), "server_cpu_cores_used": round(cpu / wall, 3),
            "listeners_with_captions": captions, "listeners_with_translations": translated,
            "listeners_hearing_interpretation": sum(1 for count in heard if count >= HEARD_FRAMES),
            "listener_subscribe_errors": media.failed if media is not None else [],
            "interpretation_lag_ms": _lag_summary(lags), "lags_ms": [round(lag * 1000) for lag in lags],
            **_spoken_summary([s for mine in spoken for s in mine]),
            "lag_parts": _parts_summary([p for peer in listeners for p in lag_parts(peer.events)]),
            "lag_by_sentence": lag_parts(listeners[0].events) if listeners else []}


def _by_language(listeners: list[ClientPeer], heard: list[int], subscribed: set[str],
                 spoken: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Per listen language: its listeners, whether it had an interpreter feed to subscribe to, how many got a
    translation and heard the feed, the lag of its translations (p50 / p90 / count), what its voice did and when
    its listeners heard it (``spoken``: :func:`spoken_lags` per listener)."""
    out: dict[str, Any] = {}
    for lang in sorted({peer.config["listen_language"] for peer in listeners}):
        mine = [i for i, peer in enumerate(listeners) if peer.config["listen_language"] == lang]
        lags = [e["lag_ms"] / 1000 for i in mine for e in listeners[i].events
                if e["type"] == "caption.translation" and e.get("language") == lang and e.get("lag_ms") is not None]
        out[lang] = {"listeners": len(mine), "feed": lang in subscribed,
                     "with_translations": sum(1 for i in mine if _translated(listeners[i])),
                     "hearing_interpretation": sum(1 for i in mine if heard[i] >= HEARD_FRAMES),
                     "lag_ms": _lag_summary(lags), "speech": speech_summary(listeners[mine[0]].events) if mine else {},
                     **_spoken_summary([s for i in mine for s in spoken[i]])}
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    languages = [lang.strip() for lang in args.sfu_languages.split(",") if lang.strip()]
    if not languages or args.listeners < 3:
        raise SystemExit("--listeners must be at least 3 and --sfu-languages name at least one language")
    if not 1 <= args.sfu_sentences <= len(SENTENCES):
        raise SystemExit(f"--sfu-sentences must be 1 to {len(SENTENCES)}")
    speech = speaker_speech(args.sfu_voice, args.sfu_sentences)
    load_before = os.getloadavg()[0]
    async with contextlib.AsyncExitStack() as stack:
        if args.sfu_url:
            ws_url, secret = args.sfu_url, args.sfu_api_secret
        else:
            ws_url, secret = await stack.enter_async_context(local_janus())
        server = await stack.enter_async_context(local_server(
            sfu_url=ws_url, sfu_api_secret=secret, sfu_max_listeners=max(300, args.listeners),
            max_sessions=args.listeners + 8,  # (listeners do not count against the call capacity)
            admission_max_queue_delay_ms=0.0,  # the room is measured here, not admission
            also_load=("mt", "tts-kokoro")))
        calls: dict[str, dict[str, Any]] = {}
        for lang in dict.fromkeys(languages) if args.sfu_call else ():
            print(f"the same speech in a 2-person call (one listener, {lang}) ...", flush=True)
            calls[lang] = await run_room(server.base_url, server, ws_url, secret, 1, [lang], speech)
            print(calls[lang], flush=True)
        rooms = []
        for n in sorted({3, args.listeners}):
            print(f"SFU room with {n} listeners ...", flush=True)
            rooms.append(await run_room(server.base_url, server, ws_url, secret, n, languages, speech))
            print(rooms[-1], flush=True)
    ratio = rooms[-1]["server_cpu_s"] / rooms[0]["server_cpu_s"] if rooms[0]["server_cpu_s"] else None
    return {"benchmark": "call-sfu", "sentences": args.sfu_sentences, "voice": args.sfu_voice, "rooms": rooms,
            "calls": calls, "call": next(iter(calls.values()), None), **compare_with_calls(rooms[-1], calls),
            "cpu_ratio_vs_3": round(ratio, 3) if ratio else None,
            "targets": TARGETS, "listener_media": {"process": "child", "nice": LISTENER_NICE}, "note": args.sfu_note,
            "load_1min_before": round(load_before, 2),
            "machine": machine()}


def _lag_summary(lags: list[float]) -> dict[str, Any]:
    """p50 / p90 (ms) and count of lags in seconds."""
    return {"p50": percentile_ms(lags, 50), "p90": percentile_ms(lags, 90), "count": len(lags)}


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 3) if ours and theirs else None


def compare_with_calls(room: dict[str, Any], calls: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The room's interpretation lag p90 over the 2-person calls' (``calls``: per listen language; see the module
    docstring): ``lag_p90_vs_calls``, ``lag_p90_vs_call_by_language`` and ``lag_p90_vs_call`` (the first
    language's call); None where a side has no lag."""
    if not calls:
        return {"lag_p90_vs_calls": None, "lag_p90_vs_call_by_language": {}, "lag_p90_vs_call": None}
    pooled = [lag / 1000 for call in calls.values() for lag in call.get("lags_ms", [])]
    ours = room["interpretation_lag_ms"]["p90"]
    by_language = {lang: _ratio(room["by_language"].get(lang, {}).get("lag_ms", {}).get("p90"),
                                call["interpretation_lag_ms"]["p90"]) for lang, call in calls.items()}
    first = next(iter(calls.values()))
    return {"lag_p90_vs_calls": _ratio(ours, percentile_ms(pooled, 90)), "lag_p90_vs_call_by_language": by_language,
            "lag_p90_vs_call": _ratio(ours, first["interpretation_lag_ms"]["p90"])}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sfu", action="store_true", help="an interpreted webinar through Janus (one speaker, "
                                                           "--listeners aiortc listeners)")
    parser.add_argument("--listeners", type=int, default=30, help="with --sfu: listeners of the larger room")
    parser.add_argument("--sfu-languages", default="es,de,it",
                        help="with --sfu: the listeners' languages (each with a voice here: French is text only)")
    parser.add_argument("--sfu-sentences", type=int, default=DEFAULT_SENTENCES,
                        help=f"with --sfu: English sentences the speaker says (1-{len(SENTENCES)}; more: a steadier "
                             "lag p90)")
    parser.add_argument("--sfu-voice", choices=("espeak", "human"), default="espeak",
                        help="with --sfu: the speaker's voice: espeak-ng, or a woman's recorded voice (the Asterisk "
                             "prompts of the captions' speech set; Debian asterisk-core-sounds-en-g722, fetched with "
                             "apt-get download when not installed)")
    parser.add_argument("--sfu-call", action=argparse.BooleanOptionalAction, default=True,
                        help="with --sfu: first measure the same speech in 2-person calls (the speaker and one "
                             "listener, one call per language of --sfu-languages, through the same Janus): the lag "
                             "target's baseline, reported as calls, lag_p90_vs_calls and per language")
    parser.add_argument("--sfu-url", default="", help="with --sfu: a Janus WebSocket API (default: start one)")
    parser.add_argument("--sfu-api-secret", default="", help="with --sfu and --sfu-url: its api_secret")
    parser.add_argument("--sfu-note", default="", help="with --sfu: a note stored in the JSON")


def main(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out if args.out != "docs/benchmarks/call.json" else "docs/benchmarks/call-sfu.json"
    return write_json(asyncio.run(run(args)), out)
