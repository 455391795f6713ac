"""The deployment starts: deploy/compose.yaml's two rtc-agent nodes (rtc-agent-1, rtc-agent-2), rendered the way
compose substitutes ``${VAR:?message}``, ``${VAR:-default}`` and ``${VAR}`` (and merges ``<<:`` keys), pass the
server's own settings loading, validation (replicas included: node_url, node_secret) and exposure rule (``rtc-agent
check-config``); they share the node secret, the Redis and the keys and differ in node_url; Caddy load-balances both
with health checks. Without API keys or the node secret compose refuses, naming the variable, and so does the
server. The Dockerfile's defaults need keys too, coturn starts with deploy/turnserver.conf, and (real path) two
``rtc-agent serve`` processes with the nodes' environments (moved to loopback, free ports and the test's Redis) are
healthy and a participant joining through node 2 lands in node 1's room. ``/health`` names a replica's node and
counts the room leases it holds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from rtc_agent.auth import check_exposure
from rtc_agent.config import SettingsError, load_settings, node_id_of
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.server.forwarding import FORWARDER
from tests.coturn import requires_coturn, run_coturn, stun_answers
from tests.nodes import Node
from tests.test_replicas import eventually, redis_clean, roster  # noqa: F401  (redis_clean: a fixture)
from tests.test_state_store import redis_url  # noqa: F401  (the Redis server fixture)

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
REPO = DEPLOY.parent
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:\?|:-)(?P<arg>[^}]*))?\}")
NODES = ("rtc-agent-1", "rtc-agent-2")
DOTENV = {
    "RTC_AGENT_API_KEYS": "deploy-test-key-0123456789abcdef",
    "RTC_AGENT_DOMAIN": "rtc.example.org",
    "PUBLIC_IP": "203.0.113.10",
    "RTC_AGENT_TURN_SECRET": "deploy-test-turn-secret",
    "RTC_AGENT_NODE_SECRET": "deploy-test-node-secret-0123456789",
    "REDIS_PASSWORD": "deploy-test-redis-password",
}
SECRETS = ("RTC_AGENT_API_KEYS", "RTC_AGENT_TURN_SECRET", "RTC_AGENT_NODE_SECRET", "REDIS_PASSWORD")


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
    """deploy/compose.yaml parsed (YAML merge keys resolved, as compose does) and interpolated with ``env``."""
    return interpolate(yaml.safe_load((DEPLOY / "compose.yaml").read_text()), env)


def server_env(env: dict[str, str], service: str) -> dict[str, str]:
    """The environment compose gives the rtc-agent service ``service``."""
    return {k: str(v) for k, v in compose(env)["services"][service]["environment"].items()}


def check_config(env: dict[str, str]) -> subprocess.CompletedProcess:
    """``rtc-agent check-config`` with exactly ``env`` (plus what Python needs to run)."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return subprocess.run([sys.executable, "-m", "rtc_agent", "check-config"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**keep, "PYTHONPATH": str(REPO), **env})


def seconds(duration: str) -> float:
    """A compose duration such as ``30s``, ``1m30s`` or ``500ms`` in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


@pytest.mark.parametrize("service", NODES)
def test_each_nodes_environment_passes_the_servers_own_checks(service: str) -> None:
    env = server_env(DOTENV, service)
    settings = load_settings(env=env)  # loading validates, replicas included (config/replicas.py)
    assert settings.host == "0.0.0.0" and settings.api_keys == [DOTENV["RTC_AGENT_API_KEYS"]]
    assert "API keys required" in check_exposure(settings)
    assert settings.allowed_hosts == ["rtc.example.org"]
    assert settings.trusted_proxies == ["127.0.0.1/32"], "Caddy on loopback names the client in X-Forwarded-For"
    assert settings.turn_secret == DOTENV["RTC_AGENT_TURN_SECRET"] and settings.turn_ttl_s == 600
    assert settings.turn_urls == ["turn:203.0.113.10:3478?transport=udp", "turn:203.0.113.10:3478?transport=tcp"]
    assert settings.state_url == f"redis://:{DOTENV['REDIS_PASSWORD']}@127.0.0.1:6379/0"
    assert settings.node_secret == DOTENV["RTC_AGENT_NODE_SECRET"] and node_id_of(settings) == service
    assert urlsplit(settings.node_url).port == settings.port, "node_url is this node's own HTTP port"
    assert settings.llm_engine == "embedded"
    done = check_config(env)
    assert done.returncode == 0, done.stderr
    assert "config ok" in done.stdout and "API keys required" in done.stdout
    assert f"node {service} at {settings.node_url}" in done.stdout
    assert "warning" not in done.stderr, done.stderr  # a Redis store with node_url set: nothing likely wrong
    for name in SECRETS:
        assert DOTENV[name] not in done.stdout + done.stderr


def test_the_nodes_share_secret_store_and_keys_and_differ_in_address() -> None:
    one, two = (load_settings(env=server_env(DOTENV, s)) for s in NODES)
    for field in ("node_secret", "state_url", "api_keys", "allowed_hosts", "turn_secret", "turn_urls", "host"):
        assert getattr(one, field) == getattr(two, field), field
    assert one.node_url != two.node_url and one.port != two.port and node_id_of(one) != node_id_of(two)
    assert one.state_url.startswith("redis://")


@pytest.mark.parametrize(("change", "reason"), [
    ({"RTC_AGENT_NODE_SECRET": "too-short"}, "node_secret must be at least 16 characters"),
    ({"RTC_AGENT_NODE_SECRET": ""}, "node_url needs node_secret"),
    ({"RTC_AGENT_NODE_URL": "http://127.0.0.1:8080/rtc"}, "node_url must be http(s)://HOST[:PORT]"),
    ({"RTC_AGENT_NODE_URL": "redis://127.0.0.1:8080"}, "node_url must be http(s)://HOST[:PORT]"),
])
def test_check_config_refuses_a_node_that_cannot_work(change: dict[str, str], reason: str) -> None:
    """The replica rules of config/replicas.py, through check-config, on a node's compose environment."""
    env = {**server_env(DOTENV, NODES[1]), **change}
    with pytest.raises(SettingsError, match=re.escape(reason)):
        load_settings(env=env)
    done = check_config(env)
    assert done.returncode == 1 and reason in done.stderr, done.stderr
    assert DOTENV["REDIS_PASSWORD"] not in done.stdout + done.stderr


def test_without_keys_compose_and_the_server_refuse_with_the_reason() -> None:
    missing = {k: v for k, v in DOTENV.items() if k != "RTC_AGENT_API_KEYS"}
    with pytest.raises(MissingVariable, match="RTC_AGENT_API_KEYS"):
        compose(missing)
    # past compose (the guard removed, an empty value): the server's own rule refuses, and says why
    env = {k: v for k, v in server_env(DOTENV, NODES[0]).items() if k != "RTC_AGENT_API_KEYS"}
    with pytest.raises(SettingsError, match="without API keys"):
        check_exposure(load_settings(env=env))
    done = check_config(env)
    assert done.returncode == 1 and "refusing to listen on 0.0.0.0 without API keys" in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["RTC_AGENT_TURN_SECRET", "RTC_AGENT_NODE_SECRET", "REDIS_PASSWORD",
                                  "RTC_AGENT_DOMAIN", "PUBLIC_IP"])
def test_every_required_value_is_named_when_missing(name: str) -> None:
    with pytest.raises(MissingVariable, match=name):
        compose({k: v for k, v in DOTENV.items() if k != name})


def test_nodes_are_health_checked_and_drain_within_their_grace_period() -> None:
    services = compose(DOTENV)["services"]
    for service in NODES:
        node = services[service]
        settings = load_settings(env=server_env(DOTENV, service))
        check = " ".join(node["healthcheck"]["test"])
        assert "/health" in check and "RTC_AGENT_PORT" in check, check  # 503 while draining: unhealthy
        assert seconds(node["stop_grace_period"]) > settings.shutdown_drain_s + settings.shutdown_timeout_s
        assert settings.shutdown_drain_s >= 2 * 2, "Caddy's 2 s health checks notice the drain before it ends"
        assert node["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "vllm" not in node["depends_on"], "vLLM is optional"
        assert node["network_mode"] == "host", "media: each node's own UDP ports, no mapping"
    assert services["vllm"]["profiles"] == ["llm"]


def test_the_proxy_balances_both_nodes_with_health_checks_and_no_stickiness() -> None:
    services = compose(DOTENV)["services"]
    assert {*NODES, "caddy", "coturn", "redis", "vllm"} <= set(services)
    assert set(NODES) <= set(services["caddy"]["depends_on"])
    caddyfile = (DEPLOY / "Caddyfile").read_text()
    lines = [ln.split("#")[0].strip() for ln in caddyfile.splitlines()]
    proxy = next(ln for ln in lines if ln.startswith("reverse_proxy "))
    upstreams = proxy.removeprefix("reverse_proxy ").removesuffix("{").split()
    expected = [f"127.0.0.1:{services[s]['environment']['RTC_AGENT_PORT']}" for s in NODES]
    assert upstreams == expected
    for service, upstream in zip(NODES, upstreams, strict=True):
        assert services[service]["environment"]["RTC_AGENT_NODE_URL"] == f"http://{upstream}"
    assert "health_uri /health" in lines and "{$RTC_AGENT_DOMAIN} {" in lines and "tls {$CADDY_TLS}" in lines
    assert not [ln for ln in lines if ln.startswith("lb_policy") and ln.split()[1] in ("cookie", "ip_hash",
                                                                                       "client_ip_hash")]


def test_services_share_their_secrets_and_env_example_names_every_required_variable() -> None:
    services = compose(DOTENV)["services"]
    assert f"--static-auth-secret={DOTENV['RTC_AGENT_TURN_SECRET']}" in services["coturn"]["command"]
    redis = services["redis"]["command"]
    assert redis[redis.index("--requirepass") + 1] == DOTENV["REDIS_PASSWORD"]
    assert redis[redis.index("--bind") + 1] == "127.0.0.1"
    example = dict(line.split("=", 1) for line in (DEPLOY / "env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    raw = yaml.safe_dump(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))  # values, not comments
    required = {m["name"] for m in VARIABLE.finditer(raw) if m["op"] == ":?"}
    assert required <= set(example), f"env.example lists every required variable: {required - set(example)}"
    assert all(not example[name] for name in SECRETS), "env.example carries no secret"


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


# --- /health of a replica -------------------------------------------------------------------------------------

async def test_health_names_a_replicas_node_and_counts_its_room_leases(start_server) -> None:
    single = await start_server()
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{single.url}/health") as r:
            body = await r.json()
        assert "node" not in body and "rooms_held" not in body, "a single node says nothing of nodes"
        secret = DOTENV["RTC_AGENT_NODE_SECRET"]
        replica = await start_server(node_url="http://127.0.0.1:9", node_id="edge-1", node_secret=secret)
        async with http.get(f"{replica.url}/health") as r:
            text = await r.text()
            body = await r.json()
        assert body["node"] == {"id": "edge-1", "url": "http://127.0.0.1:9"} and body["rooms_held"] == 0
        assert secret not in text
        leases = replica.app[FORWARDER].leases
        assert await leases.claim("standup") is None and await leases.claim("retro") is None
        async with http.get(f"{replica.url}/health") as r:
            assert (await r.json())["rooms_held"] == 2
        await leases.release_all()
        async with http.get(f"{replica.url}/health") as r:
            assert (await r.json())["rooms_held"] == 0


# --- real path: the two nodes' environments, two rtc-agent serve processes ---------------------------------------

#: what the test moves to this machine: Node sets host (loopback), port (free), node_url and node_id by option,
#: the state store is the test's Redis, and the browsers' STUN/TURN at the example public IP are left out
MOVED = ("RTC_AGENT_HOST", "RTC_AGENT_PORT", "RTC_AGENT_NODE_URL", "RTC_AGENT_NODE_ID", "RTC_AGENT_STATE_URL",
         "RTC_AGENT_STUN_URLS", "RTC_AGENT_TURN_URLS")


def loopback_node(folder: Path, service: str, state_url: str) -> Node:
    """``rtc-agent serve`` (the plain command) with compose's environment for ``service``, moved to loopback."""
    env = server_env(DOTENV, service)
    assert env["RTC_AGENT_NODE_ID"] == service
    rest = {k.removeprefix("RTC_AGENT_").lower(): v for k, v in env.items() if k not in MOVED}
    return Node(folder, service, state_url=state_url, scripted=False, secrets=rest)  # compose's node_secret


async def health_of(http: aiohttp.ClientSession, node: Node) -> dict[str, Any]:
    async with http.get(f"{node.url}/health") as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_two_nodes_from_the_compose_environments_serve_one_room(redis_clean: str, tmp_path: Path):  # noqa: F811
    one, two = (loopback_node(tmp_path, s, redis_clean).start() for s in NODES)
    key = DOTENV["RTC_AGENT_API_KEYS"]
    try:
        await one.ready()
        await two.ready()
        async with aiohttp.ClientSession() as http:
            for node in (one, two):
                body = await health_of(http, node)
                assert body["status"] == "ok" and body["node"] == {"id": node.name, "url": node.url}
                assert body["state"]["store"] == "redis" and DOTENV["REDIS_PASSWORD"] not in str(body)
            room = {"room": "standup", "language": "en"}
            async with ClientPeer(one.url, "call", config={**room, "name": "Ana"}, credential=key,
                                  receive_audio=False) as ana, \
                    ClientPeer(two.url, "call", config={**room, "name": "Ben"}, credential=key,
                               receive_audio=False):  # node 2 forwards Ben's offer to node 1, the room's host
                await eventually(lambda: roster(ana) == {"Ana", "Ben"}, 30, "Ben (through node 2) in Ana's room")
                held = [(await health_of(http, node))["rooms_held"] for node in (one, two)]
                assert held == [1, 0], held
                async with http.get(f"{two.url}/v1/sessions", headers={"Authorization": f"Bearer {key}"}) as r:
                    assert (await r.json())["sessions"] == [], "node 2 holds no session of the room"
    finally:
        one.stop()
        two.stop()
    logs = one.log_text(10**6) + two.log_text(10**6)
    for name in SECRETS:
        assert DOTENV[name] not in logs
