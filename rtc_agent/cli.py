"""The ``rtc-agent`` command: ``serve`` runs the server, ``check-config`` checks its settings, ``bench``
measures it."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import sys
from collections.abc import Sequence

from rtc_agent import __version__
from rtc_agent.config import (
    ENV_PREFIX,
    SettingsError,
    add_arguments,
    node_id_of,
    replica_warnings,
    settings_from_args,
)
from rtc_agent.redact import install_log_redaction

log = logging.getLogger("rtc_agent")

# name -> (module, one-line help). Each module has add_arguments(parser) and main(args) -> dict.
BENCHMARKS = {
    "loop": ("rtc_agent.bench.loop_lag", "event-loop lag while engines are busy (worker scheduling)"),
    "captions": ("rtc_agent.bench.captions", "live captions through a real peer: WER, final latency, cadence, "
                                             "concurrent sessions"),
    "agent": ("rtc_agent.bench.agent", "voice agent through a real peer: voice-to-voice latency, stage timings, "
                                       "barge-in"),
    "vision": ("rtc_agent.bench.vision", "visual commentary: frame-to-text latency, sustained fps, precision and "
                                         "recall against known event times"),
    "interpret": ("rtc_agent.bench.interpret", "simultaneous interpretation: StreamLAAL latency, chrF/BLEU vs "
                                               "offline Whisper translate, model calls saved by VAD"),
    "call": ("rtc_agent.bench.call", "a call room of N peers: caption latency and interpretation lag at the "
                                     "listeners, server CPU per participant, largest real-time room"),
    "translate": ("rtc_agent.bench.translate", "text translation (mt engine): chrF2 per language pair on the "
                                               "Asterisk prompts, from text and from Whisper"),
    "flood": ("rtc_agent.bench.flood", "one client floods a message channel: other sessions' captions, loop lag"),
    "soak": ("rtc_agent.bench.soak", "create, stream and close sessions in a loop: server RSS, threads, fds and "
                                     "open sessions at checkpoints"),
}


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    install_log_redaction()  # secrets (keys, URL credentials) never reach a log line
    logging.getLogger("aioice").setLevel(max(logging.WARNING, logging.getLogger().level))
    logging.getLogger("aiortc").setLevel(max(logging.WARNING, logging.getLogger().level))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rtc-agent",
        description="A self-hosted realtime media agent: live captions, simultaneous interpretation and a "
                    "voice agent over WebRTC.",
        epilog="Run 'rtc-agent serve --help' for every server option. Each option can also be set in a TOML "
               f"file (--config) or as an environment variable ({ENV_PREFIX}<OPTION>).",
    )
    parser.add_argument("--version", action="version", version=f"rtc-agent {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve", help="run the server (pages, signaling, APIs)",
        description="Run the HTTP + WebRTC server. Precedence, lowest first: defaults, --config FILE, "
                    f"{ENV_PREFIX}* environment variables, command-line flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--config", metavar="FILE", default=None,
                       help=f"TOML file with settings (keys are the option names with underscores) "
                            f"[env {ENV_PREFIX}CONFIG]")
    add_arguments(serve)

    check = commands.add_parser(
        "check-config", help="check the settings serve would use, without starting anything; exit 0 or 1",
        description="Load the settings exactly as 'serve' does (the same options, TOML file and environment), "
                    "validate them and apply the exposure rule (no open server on a non-loopback address). "
                    "Prints the access mode and exits 0, or prints the reason and exits 1. Secrets are never "
                    "printed.",
    )
    check.add_argument("--config", metavar="FILE", default=None, help=f"TOML file [env {ENV_PREFIX}CONFIG]")
    add_arguments(check)

    bench = commands.add_parser("bench", help="measure speed and quality; writes JSON",
                                description="Benchmarks. Each writes its results as JSON (to --out or stdout).")
    kinds = bench.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    for name, (module, help_text) in BENCHMARKS.items():
        sub = kinds.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sub)
        sub.set_defaults(bench_module=module)
    return parser


def serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from rtc_agent.app import create_app

    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"rtc-agent: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level)
    try:
        app = create_app(settings)
    except SettingsError as exc:
        print(f"rtc-agent: {exc}", file=sys.stderr)
        return 2
    from rtc_agent.server.draining import drain_on_sigterm

    drain_on_sigterm(app)  # SIGTERM: /health 503 draining, new sessions refused, then server_shutdown and exit
    log.info("rtc-agent %s on http://%s:%d", __version__, settings.host, settings.port)
    web.run_app(app, host=settings.host, port=settings.port, print=None, access_log=None,
                shutdown_timeout=settings.shutdown_timeout_s)  # requests still running after the drain
    return 0


def check_config(args: argparse.Namespace) -> int:
    """``rtc-agent check-config``: the server's own loading, validation and exposure rule; 0 when it would
    start, 1 (reason on stderr) when it would refuse."""
    from rtc_agent.auth import check_exposure

    try:
        settings = settings_from_args(args)
        exposure = check_exposure(settings)
    except SettingsError as exc:
        print(f"rtc-agent: config error: {exc}", file=sys.stderr)
        return 1
    for warning in replica_warnings(settings):  # starts, but is likely a mistake
        print(f"rtc-agent: warning: {warning}", file=sys.stderr)
    replica = f"; node {node_id_of(settings)} at {settings.node_url}" if settings.node_url else ""  # validated
    print(f"rtc-agent: config ok: http://{settings.host}:{settings.port}; access: {exposure}{replica}")
    return 0


def bench(args: argparse.Namespace) -> int:
    setup_logging("info")
    module = importlib.import_module(args.bench_module)
    result = module.main(args)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    if not getattr(args, "out", None):
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "check-config":
        return check_config(args)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
