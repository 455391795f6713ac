"""The browser pages: one jinja2 base template, one page per app, and the index."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import jinja2
from aiohttp import web

from rtc_agent import __version__
from rtc_agent.server.capacity import capacity_summary
from rtc_agent.server.credentials import page_auth
from rtc_agent.server.health import readiness
from rtc_agent.server.keys import SETTINGS


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    path: str
    description: str
    app: str | None
    video: bool = False


PAGES = (
    Page("call", "Call", "/call",
         "A video call for up to six people: live captions of everyone, each hears the others in their language.",
         "call", video=True),
    Page("captions", "Live captions", "/captions",
         "Live captions of your speech, with commentary on what the camera shows.", "captions", video=True),
    Page("interpret", "Interpretation", "/interpret",
         "Simultaneous interpretation: translated captions and translated speech while you talk.", "interpret"),
    Page("agent", "Voice agent", "/agent",
         "A spoken assistant that answers, calls tools and stops when you talk over it.", "agent"),
    Page("echo", "Echo (diagnostic)", "/echo",
         "Plays your microphone back after one second: checks the audio path both ways.", "echo"),
)
INDEX = Page("index", "rtc-agent", "/", "Realtime media agent over WebRTC.", None)

PAGES_KEY = web.AppKey("pages_env", jinja2.Environment)


def make_environment(templates_dir: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        autoescape=jinja2.select_autoescape(("html",)),
        undefined=jinja2.StrictUndefined,
        auto_reload=False,
    )


#: The languages the pages offer (Whisper knows more; these are the ones the selects list).
PAGE_LANGUAGES = ("en", "zh", "es", "fr", "de", "it", "pt", "ru", "ja", "ko", "ar", "hi")


def capabilities(settings: Any, capacity: dict[str, Any] | None = None) -> dict[str, Any]:
    """What this server can do, for the pages to offer only that (``client_config.capabilities``).

    ``asr.languages``: the spoken languages recognised (an English-only Whisper, a ``.en`` model: ``["en"]``);
    ``st.targets``: the languages interpretation translates into (the embedded Whisper translate task: English
    only); ``agent.tools``: whether the agent offers its tools by default; ``engines``: ``embedded`` or ``remote``
    per kind with the model; ``setup``: notes for the operator about what a flag would add (shown in a closed
    "Server setup" box, not as instructions to end users); ``capacity``: per app the sessions this machine holds
    in real time and those running (``server.capacity.capacity_summary``; null when not given or unmeasured);
    ``listen``: per page language what a call listener gets in it (``apps.interpret.deliverable.listen_options``:
    ``{text, speech, engine, voice, quality, reason}``; ``reason`` says why not when text or speech is false);
    ``sfu``: whether call rooms can go through the SFU (``sfu_url`` is set: ``mode: "sfu"`` rooms, listeners).
    """
    from rtc_agent.apps.interpret.deliverable import listen_options
    from rtc_agent.engines import st
    from rtc_agent.engines.asr import english_only
    from rtc_agent.engines.llm import EMBEDDED_NAMES
    from rtc_agent.engines.llm.packaged import embedded_model_name, offers_tools_by_default

    def kind(name: str) -> str:
        value = (getattr(settings, f"{name}_engine", "embedded") or "embedded").strip().lower()
        return "embedded" if value in ("embedded", *EMBEDDED_NAMES) else "remote"

    english_asr = english_only(settings)
    sources = ["en"] if english_asr else list(PAGE_LANGUAGES)
    try:
        english_st = st.english_only(settings)
    except Exception:  # a misconfigured ST engine: the server refuses sessions with a clear error anyway
        english_st = True
    targets = ["en"] if english_st else list(PAGE_LANGUAGES)
    llm_embedded = kind("llm") == "embedded"
    tools = (not llm_embedded) or offers_tools_by_default(settings.llm_model)
    engines = {
        "asr": {"kind": kind("asr"), "model": settings.asr_model or "whisper-base"},
        "st": {"kind": "embedded" if english_st else "remote", "model": st.describe(settings)},
        "llm": {"kind": kind("llm"),
                "model": embedded_model_name(settings.llm_model) if llm_embedded else (settings.llm_model or "")},
        "tts": {"kind": kind("tts"), "model": settings.tts_model or "piper-joe"},
    }
    setup = []
    if english_st:
        setup.append("Speech translation gives English only with the embedded engine (Whisper's translate "
                     "task); other target languages are translated from the recognised text by the text "
                     "translator (--mt-engine, quality per language in the list). A speech LLM or a better text "
                     "model: --st-engine openai --st-url URL, --mt-url URL or --mt-model-dir DIR (see the README).")
    if not tools:
        setup.append(f"The embedded language model ({engines['llm']['model']}) is not offered the agent's tools "
                     "by default: it answers without them. Tools come with --llm-engine openai --llm-url URL, or "
                     "with the session config {\"tools\": true}.")
    if english_asr:
        setup.append("The speech recognizer is English-only; a multilingual Whisper model recognises other "
                     "languages (--asr-model).")
    return {"asr": {"languages": sources}, "st": {"targets": targets, "sources": sources},
            "agent": {"tools": tools}, "engines": engines, "setup": setup, "capacity": capacity,
            "listen": listen_options(settings, PAGE_LANGUAGES),
            "sfu": bool(getattr(settings, "sfu_url", ""))}  # rooms past a mesh go through the SFU (mode "sfu")


def render(request: web.Request, page: Page) -> str:
    app = request.app
    settings = app[SETTINGS]
    context: dict[str, Any] = {
        "page": asdict(page),
        "apps": [asdict(p) for p in PAGES],
        "client_config": {
            "app": page.app,
            "heartbeat_interval_ms": int(min(2000, settings.heartbeat_timeout_s * 1000 / 4)),
            "room_tile_grace_ms": int(settings.room_tile_grace_s * 1000),  # the call page's gone tiles
            "media": {"audio": True, "video": page.video},
            "session_config": {},
            "auth": page_auth(request),
            "capabilities": capabilities(settings, capacity_summary(app)),
            "readiness": readiness(app),
        },
        "version": __version__,
    }
    template = app[PAGES_KEY].get_template(f"{page.name}.html")
    return template.render(**context)


def page_handler(page: Page):
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=render(request, page), content_type="text/html",
                            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                     "Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff"})

    return handler


def add_routes(app: web.Application, templates_dir: str, static_dir: str) -> None:
    app[PAGES_KEY] = make_environment(templates_dir)
    app.router.add_get("/", page_handler(INDEX))
    for page in PAGES:
        app.router.add_get(page.path, page_handler(page))
    app.router.add_static("/static", static_dir, append_version=False)
