"""The deployment starts: deploy/compose.yaml's environment for rtc-agent, rendered the way compose substitutes
``${VAR:?message}``, ``${VAR:-default}`` and ``${VAR}``, passes the server's own settings loading, validation and
exposure rule (``rtc-agent check-config``); without API keys it fails with the reason, at compose and at the
server. The Dockerfile's defaults need keys too, coturn starts with deploy/turnserver.conf, and the services
agree on the shared secrets.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rtc_agent.auth import check_exposure
from rtc_agent.config import SettingsError, load_settings
from tests.coturn import requires_coturn, run_coturn, stun_answers

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
REPO = DEPLOY.parent
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:\?|:-)(?P<arg>[^}]*))?\}")
DOTENV = {
    "RTC_AGENT_API_KEYS": "deploy-test-key-0123456789abcdef",
    "RTC_AGENT_DOMAIN": "rtc.example.org",
    "PUBLIC_IP": "203.0.113.10",
    "RTC_AGENT_TURN_SECRET": "deploy-test-turn-secret",
    "REDIS_PASSWORD": "deploy-test-redis-password",
}


class MissingVariable(Exception):
    pass


def substitute(text: str, env: dict[str, str]) -> str:
    """compose's interpolation: ``:?`` fails with its message when unset or empty, ``:-`` falls back."""
    def one(match: re.Match) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        value = env.get(name, "")
        if value:
            return value
        if op == ":?":
            raise MissingVariable(f"{name}: {arg}")
        return arg if op == ":-" else ""
    return VARIABLE.sub(one, text)


def interpolate(node: Any, env: dict[str, str]) -> Any:
    """Substitute in every string of the parsed file (compose interpolates values, not comments)."""
    if isinstance(node, str):
        return substitute(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    return node


def compose(env: dict[str, str]) -> dict:
    return interpolate(yaml.safe_load((DEPLOY / "compose.yaml").read_text()), env)


def server_env(env: dict[str, str]) -> dict[str, str]:
    return {k: str(v) for k, v in compose(env)["services"]["rtc-agent"]["environment"].items()}


def check_config(env: dict[str, str]) -> subprocess.CompletedProcess:
    """``rtc-agent check-config`` with exactly ``env`` (plus what Python needs to run)."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return subprocess.run([sys.executable, "-m", "rtc_agent", "check-config"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**keep, "PYTHONPATH": str(REPO), **env})


def test_compose_environment_passes_the_servers_own_checks() -> None:
    env = server_env(DOTENV)
    settings = load_settings(env=env)
    assert settings.host == "0.0.0.0" and settings.api_keys == [DOTENV["RTC_AGENT_API_KEYS"]]
    assert "API keys required" in check_exposure(settings)
    assert settings.allowed_hosts == ["rtc.example.org"]
    assert settings.turn_secret == DOTENV["RTC_AGENT_TURN_SECRET"] and settings.turn_ttl_s == 600
    assert settings.turn_urls == ["turn:203.0.113.10:3478?transport=udp", "turn:203.0.113.10:3478?transport=tcp"]
    assert settings.state_url == f"redis://:{DOTENV['REDIS_PASSWORD']}@127.0.0.1:6379/0"
    assert settings.llm_engine == "embedded"
    done = check_config(env)
    assert done.returncode == 0, done.stderr
    assert "config ok" in done.stdout and "API keys required" in done.stdout
    for secret in (DOTENV["RTC_AGENT_API_KEYS"], DOTENV["RTC_AGENT_TURN_SECRET"], DOTENV["REDIS_PASSWORD"]):
        assert secret not in done.stdout + done.stderr


def test_without_keys_compose_and_the_server_refuse_with_the_reason() -> None:
    missing = {k: v for k, v in DOTENV.items() if k != "RTC_AGENT_API_KEYS"}
    with pytest.raises(MissingVariable, match="RTC_AGENT_API_KEYS"):
        compose(missing)
    # past compose (the guard removed, an empty value): the server's own rule refuses, and says why
    env = {k: v for k, v in server_env(DOTENV).items() if k != "RTC_AGENT_API_KEYS"}
    with pytest.raises(SettingsError, match="without API keys"):
        check_exposure(load_settings(env=env))
    done = check_config(env)
    assert done.returncode == 1 and "refusing to listen on 0.0.0.0 without API keys" in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["RTC_AGENT_TURN_SECRET", "REDIS_PASSWORD", "RTC_AGENT_DOMAIN", "PUBLIC_IP"])
def test_every_required_value_is_named_when_missing(name: str) -> None:
    with pytest.raises(MissingVariable, match=name):
        compose({k: v for k, v in DOTENV.items() if k != name})


def test_services_share_their_secrets_and_addresses() -> None:
    services = compose(DOTENV)["services"]
    assert {"rtc-agent", "caddy", "coturn", "redis", "vllm"} <= set(services)
    assert services["vllm"]["profiles"] == ["llm"], "vLLM is optional"
    assert "vllm" not in services["rtc-agent"].get("depends_on", [])
    assert f"--static-auth-secret={DOTENV['RTC_AGENT_TURN_SECRET']}" in services["coturn"]["command"]
    redis = services["redis"]["command"]
    assert redis[redis.index("--requirepass") + 1] == DOTENV["REDIS_PASSWORD"]
    assert redis[redis.index("--bind") + 1] == "127.0.0.1"
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    port = services["rtc-agent"]["environment"]["RTC_AGENT_PORT"]
    assert f"reverse_proxy 127.0.0.1:{port}" in caddyfile and "{$RTC_AGENT_DOMAIN}" in caddyfile
    example = dict(line.split("=", 1) for line in (DEPLOY / "env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    raw = yaml.safe_dump(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))
    required = {m["name"] for m in VARIABLE.finditer(raw) if m["op"] == ":?"}
    assert required <= set(example), f"env.example lists every required variable: {required - set(example)}"


def test_dockerfile_defaults_need_keys() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    env = dict(re.findall(r"(RTC_AGENT_[A-Z_]+)=(\S+)", " ".join(ln for ln in text.splitlines()
                                                                   if ln.startswith("ENV "))))
    assert env["RTC_AGENT_HOST"] == "0.0.0.0" and "RTC_AGENT_API_KEYS" not in env
    assert "HEALTHCHECK" in text
    with pytest.raises(SettingsError, match="without API keys"):
        check_exposure(load_settings(env=env))
    check_exposure(load_settings(env={**env, "RTC_AGENT_API_KEYS": DOTENV["RTC_AGENT_API_KEYS"]}))


@requires_coturn
def test_coturn_starts_with_the_deployment_config(tmp_path) -> None:
    """deploy/turnserver.conf parses and serves (coturn quits on a bad line), on loopback for the test."""
    with run_coturn(tmp_path, config=DEPLOY / "turnserver.conf") as turn:
        assert stun_answers(turn.port)
        log = turn.log_text().lower()
        assert "config error" not in log and "bad configuration" not in log, turn.log_text()
