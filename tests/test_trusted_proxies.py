"""Client addresses behind a reverse proxy (``trusted_proxies``): the derivation, and through a real server: rate
budgets per client behind a trusted proxy, forwarding headers ignored from anyone else, open mode kept to this
machine, and the address a signed node-to-node forward carries."""

from __future__ import annotations

import random
import time

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict

from rtc_agent.auth import AUTH, AccessControl, check_exposure
from rtc_agent.auth.access import client_ip
from rtc_agent.auth.client_address import ClientAddress, TrustedProxies, forwarded_chain, parse_address
from rtc_agent.config import Settings, SettingsError, load_settings
from rtc_agent.server.node_link import CLIENT_IP, FORWARDED_AT, FORWARDED_BY, SIGNATURE, NodeLink, signature
from tests.conftest import free_port
from tests.test_session_hardening import client_offer

PROXY = "127.0.0.1"
KEY = "proxies-test-key-0123456789abcdef"
NODE_SECRET = "proxies-node-secret-0123456789ab"


def derive(remote: str | None, *headers: tuple[str, str], trusted: tuple[str, ...] = ("127.0.0.1/32",),
           header: str = "x-forwarded-for") -> ClientAddress:
    return TrustedProxies(trusted, header).derive(remote, CIMultiDict(headers))


# --- the derivation -----------------------------------------------------------------------------------------------

def test_without_trusted_proxies_the_peer_is_the_client_whatever_the_headers_say() -> None:
    address = derive("203.0.113.5", ("X-Forwarded-For", "198.51.100.1"), trusted=())
    assert (address.ip, address.peer) == ("203.0.113.5", "203.0.113.5")
    assert address.proxied and not address.local  # it says it was proxied: never local
    untrusted = derive("198.51.100.9", ("X-Forwarded-For", "10.0.0.1"))  # a peer not in the list
    assert untrusted.ip == "198.51.100.9"
    assert derive("127.0.0.1", trusted=()).local and derive("::1", trusted=()).local


def test_a_trusted_peer_names_the_right_most_untrusted_hop() -> None:
    assert derive(PROXY, ("X-Forwarded-For", "203.0.113.7")).ip == "203.0.113.7"
    # spoofed left-most entries (a client's own header, which an appending proxy keeps) do not count
    assert derive(PROXY, ("X-Forwarded-For", "6.6.6.6, 127.0.0.1, 203.0.113.7")).ip == "203.0.113.7"
    # a chain of trusted proxies: every trusted hop is skipped
    chain = derive(PROXY, ("X-Forwarded-For", "9.9.9.9, 203.0.113.8, 10.1.2.3 , 10.0.0.9"),
                   trusted=("127.0.0.1/32", "10.0.0.0/8"))
    assert chain.ip == "203.0.113.8" and chain.peer == PROXY and chain.proxied and not chain.local
    # several header lines are one list, in order
    lines = derive(PROXY, ("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-For", "203.0.113.9"))
    assert lines.ip == "203.0.113.9"
    # only trusted hops: the left-most; and a loopback client through the proxy is still not local
    only_trusted = derive(PROXY, ("X-Forwarded-For", "127.0.0.1"))
    assert only_trusted.ip == "127.0.0.1" and not only_trusted.local
    # ports are dropped
    assert derive(PROXY, ("X-Forwarded-For", "203.0.113.10:5555")).ip == "203.0.113.10"


def test_ipv6_peers_and_hops() -> None:
    v6 = ("::1/128", "2001:db8:ffff::/48")
    assert derive("::1", ("X-Forwarded-For", "2001:db8::1"), trusted=v6).ip == "2001:db8::1"
    assert derive("::1", ("X-Forwarded-For", "[2001:db8::2]:4711"), trusted=v6).ip == "2001:db8::2"
    assert derive("::1", ("X-Forwarded-For", "2001:db8::3, 2001:db8:ffff::1"), trusted=v6).ip == "2001:db8::3"
    assert derive("::1", ("X-Forwarded-For", "2001:DB8:0:0::4"), trusted=v6).ip == "2001:db8::4"  # normalised
    # a dual-stack socket's IPv4-mapped peer is the IPv4 address (and trusted as such)
    mapped = derive("::ffff:127.0.0.1", ("X-Forwarded-For", "::ffff:203.0.113.11"))
    assert (mapped.ip, mapped.peer) == ("203.0.113.11", "127.0.0.1")
    # an IPv4 network never trusts an IPv6 peer
    assert derive("::1", ("X-Forwarded-For", "203.0.113.12")).ip == "::1"


@pytest.mark.parametrize("value", ["", "not-an-ip", "unknown", "203.0.113.7, garbage", "1.2.3.4:port",
                                   "[2001:db8::1", "256.1.1.1", ",,,", "_hidden", "1.2.3.4 5.6.7.8"])
def test_garbage_where_it_matters_gives_the_peer(value: str) -> None:
    address = derive(PROXY, ("X-Forwarded-For", value))
    assert address.ip == PROXY and address.proxied and not address.local


def test_garbage_left_of_the_client_is_the_clients_own_and_ignored() -> None:
    assert derive(PROXY, ("X-Forwarded-For", "garbage, ???, 203.0.113.13")).ip == "203.0.113.13"


def test_rfc_7239_forwarded_only_when_it_is_the_header_named() -> None:
    value = 'for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711"'
    assert forwarded_chain([value]) == ["192.0.2.60", "[2001:db8:cafe::17]:4711"]
    assert derive(PROXY, ("Forwarded", value), header="forwarded").ip == "2001:db8:cafe::17"
    assert derive(PROXY, ("Forwarded", 'for=6.6.6.6, for="203.0.113.14";proto=https'),
                  header="forwarded").ip == "203.0.113.14"
    # Caddy maintains X-Forwarded-For and passes a client's own Forwarded through: not read in that mode
    assert derive(PROXY, ("Forwarded", "for=6.6.6.6"), ("X-Forwarded-For", "203.0.113.15")).ip == "203.0.113.15"
    assert derive(PROXY, ("X-Forwarded-For", "6.6.6.6"), ("Forwarded", "for=203.0.113.16"),
                  header="forwarded").ip == "203.0.113.16"
    for broken in ("for", "for=unknown", 'for="[2001:db8::1"', "proto=https", "for=1.2.3.4;;x", '"for=1.2.3.4'):
        assert derive(PROXY, ("Forwarded", broken), header="forwarded").ip == PROXY, broken
    assert forwarded_chain(["for=1.2.3.4 junk"]) is None


def test_random_headers_never_raise_and_never_invent_an_address() -> None:
    rng = random.Random(7239)
    alphabet = "0123456789abcdef:.,;=[]\" _-for\\/%"
    proxies = TrustedProxies(["127.0.0.1/32", "::1/128"])
    forwarded = TrustedProxies(["127.0.0.1/32"], "forwarded")
    for _ in range(2000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        hops = {str(a) for hop in value.split(",") if (a := parse_address(hop)) is not None}
        via_xff = proxies.derive(PROXY, CIMultiDict({"X-Forwarded-For": value}))
        assert via_xff.ip in hops | {PROXY} and via_xff.proxied, (value, via_xff)
        via_forwarded = forwarded.derive(PROXY, CIMultiDict({"Forwarded": value}))
        assert via_forwarded.ip == PROXY or parse_address(via_forwarded.ip) is not None, (value, via_forwarded)
    assert proxies.derive(None, CIMultiDict()).ip == "unknown"  # a Unix socket peer


def test_settings_refuse_what_would_let_a_client_choose_its_address() -> None:
    ok = load_settings(env={"RTC_AGENT_TRUSTED_PROXIES": "127.0.0.1/32,10.0.0.0/8,::1",
                            "RTC_AGENT_TRUSTED_PROXY_HEADER": "forwarded"})
    assert ok.trusted_proxies == ["127.0.0.1/32", "10.0.0.0/8", "::1"] and ok.trusted_proxy_header == "forwarded"
    for value, reason in (("0.0.0.0/0", "trusts every address"), ("::/0", "trusts every address"),
                          ("10.0.0.1/8", "host bits"), ("caddy", "not an IP address or CIDR")):
        with pytest.raises(SettingsError, match=reason):
            load_settings(env={"RTC_AGENT_TRUSTED_PROXIES": value})
    with pytest.raises(SettingsError, match="trusted_proxy_header"):
        load_settings(env={"RTC_AGENT_TRUSTED_PROXY_HEADER": "x-real-ip"})


def test_an_open_server_behind_a_trusted_proxy_refuses_to_start_unless_told() -> None:
    behind = Settings(host="127.0.0.1", trusted_proxies=["127.0.0.1/32"])
    with pytest.raises(SettingsError, match="behind trusted_proxies"):
        check_exposure(behind)
    assert "open mode" in check_exposure(Settings(host="127.0.0.1", trusted_proxies=["127.0.0.1/32"],
                                                  insecure_open=True))
    assert "API keys required" in check_exposure(Settings(host="127.0.0.1", trusted_proxies=["127.0.0.1/32"],
                                                          api_keys=[KEY]))


def test_https_is_what_the_trusted_proxy_next_to_us_says() -> None:
    def https(*headers: tuple[str, str], remote: str = PROXY, header: str = "x-forwarded-for") -> bool:
        return TrustedProxies(("127.0.0.1/32",), header).https(remote, CIMultiDict(headers))

    assert https(("X-Forwarded-Proto", "https"))
    assert https(("X-Forwarded-Proto", "http, https"))  # the right-most: what the proxy next to us received
    assert not https(("X-Forwarded-Proto", "https, http"))
    assert not https(("X-Forwarded-Proto", "https"), remote="203.0.113.9")  # an untrusted peer says nothing
    assert not https() and not https(("X-Forwarded-Proto", "ftp"))
    assert not https(("X-Forwarded-Proto", "https"), header="forwarded")  # only the named header's family counts
    assert https(("Forwarded", "for=6.6.6.6;proto=http, for=203.0.113.14;proto=https"), header="forwarded")
    assert not https(("Forwarded", "for=203.0.113.14;proto=https, for=10.0.0.2"), header="forwarded")
    assert not https(("Forwarded", '"for=1.2.3.4;proto=https'), header="forwarded")  # unreadable: not https
    assert not TrustedProxies().https(PROXY, CIMultiDict([("X-Forwarded-Proto", "https")]))


# --- through a real server ----------------------------------------------------------------------------------------

async def login_statuses(http: aiohttp.ClientSession, url: str, client: str | None, times: int,
                         extra: dict[str, str] | None = None) -> list[int]:
    """POST /login with a wrong key ``times`` times, as ``client`` (its X-Forwarded-For; None: no header)."""
    headers = {"Content-Type": "application/x-www-form-urlencoded", **(extra or {})}
    if client is not None:
        headers["X-Forwarded-For"] = client
    statuses = []
    for _ in range(times):
        async with http.post(f"{url}/login", data="key=wrong&next=/", headers=headers,
                             allow_redirects=False) as r:
            statuses.append(r.status)
    return statuses


async def test_clients_behind_a_trusted_proxy_get_their_own_budgets(start_server) -> None:
    # rate_logins_per_minute=6: a burst of 3 sign-in attempts per client
    server = await start_server(api_keys=[KEY], trusted_proxies=["127.0.0.1/32"], rate_logins_per_minute=6)
    async with aiohttp.ClientSession() as http:
        first = await login_statuses(http, server.url, "6.6.6.6, 203.0.113.1", 4)
        assert first == [303, 303, 303, 429], first
        # another client behind the same proxy: its own budget, even if it claims the first one's address
        assert await login_statuses(http, server.url, "203.0.113.1, 203.0.113.2", 3) == [303] * 3
        assert await login_statuses(http, server.url, "2001:db8::5", 3) == [303] * 3
        assert await login_statuses(http, server.url, "203.0.113.1", 1) == [429]  # the first is still spent


async def test_the_same_headers_from_an_untrusted_peer_are_ignored(start_server) -> None:
    server = await start_server(api_keys=[KEY], rate_logins_per_minute=6)  # no trusted_proxies
    async with aiohttp.ClientSession() as http:
        assert await login_statuses(http, server.url, "203.0.113.1", 3) == [303] * 3
        # a "different client" by its header is the same peer: the budget is the peer's, and spent
        assert await login_statuses(http, server.url, "203.0.113.2", 1) == [429]
        assert await login_statuses(http, server.url, None, 1) == [429]


async def test_open_mode_serves_this_machine_only_not_what_a_loopback_proxy_passes_on(start_server) -> None:
    server = await start_server()  # open mode on loopback, no trusted_proxies (a Caddy in front, misconfigured)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{server.url}/v1/ice-servers") as r:
            assert r.status == 200, await r.text()  # a client on this machine
        for name, value in (("X-Forwarded-For", "203.0.113.20"), ("Forwarded", "for=203.0.113.20"),
                            ("X-Forwarded-For", "127.0.0.1"), ("Via", "1.1 caddy")):
            async with http.get(f"{server.url}/v1/ice-servers", headers={name: value}) as r:
                body = await r.json()
                assert r.status == 403 and body["error"]["code"] == "open_mode_local_only", (name, body)
                assert "api_keys" in body["error"]["message"]
    with pytest.raises(SettingsError, match="behind trusted_proxies"):
        await start_server(trusted_proxies=["127.0.0.1/32"])  # open behind a trusted proxy: refused at start


async def test_insecure_open_behind_a_trusted_proxy_budgets_each_client(start_server) -> None:
    server = await start_server(insecure_open=True, trusted_proxies=["127.0.0.1/32"], rate_tokens_per_minute=10)
    async with aiohttp.ClientSession() as http:
        async def mint(client: str) -> int:
            async with http.post(f"{server.url}/v1/rooms", json={}, headers={"X-Forwarded-For": client}) as r:
                return r.status

        first = [await mint("203.0.113.30") for _ in range(6)]  # a burst of 5
        assert first[:5] != [429] * 5 and first[-1] == 429, first
        assert await mint("203.0.113.31") != 429


async def test_a_signed_forward_carries_the_address_the_forwarding_node_derived(start_server) -> None:
    """The forwarding node sends the client address it derived through its trusted_proxies; the host takes that
    signed address, not the client's forwarding headers (which travel along unchanged)."""
    host = await start_server(api_keys=[KEY], node_secret=NODE_SECRET, trusted_proxies=["127.0.0.1/32"],
                              rate_logins_per_minute=6)
    link = NodeLink("forwarder", NODE_SECRET, 10.0)
    seen: list[str] = []

    async def forward(request: web.Request) -> web.StreamResponse:  # the forwarding node's side, with its AUTH
        seen.append(client_ip(request))
        return await link.forward(request, host.url, await request.read())

    settings = Settings(api_keys=[KEY], trusted_proxies=["127.0.0.1/32"])
    edge = web.Application()
    edge[AUTH] = AccessControl(settings)
    edge.router.add_post("/login", forward)
    runner = web.AppRunner(edge)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await link.start()
    try:
        async with aiohttp.ClientSession() as http:
            through = await login_statuses(http, f"http://127.0.0.1:{port}", "6.6.6.6, 203.0.113.40", 4)
            assert through == [303, 303, 303, 429], through
            # on the host, 203.0.113.40 (the signed address) spent its budget, not 6.6.6.6 (in the header)
            assert await login_statuses(http, host.url, "203.0.113.40", 1) == [429]
            assert await login_statuses(http, host.url, "6.6.6.6", 1) == [303]
            # the signature covers the address: another address under that signature is refused
            at = str(int(time.time()))
            sig = signature(NODE_SECRET, "gamma", at, "POST", "/login", "203.0.113.41")
            forged = {FORWARDED_BY: "gamma", FORWARDED_AT: at, CLIENT_IP: "198.51.100.1", SIGNATURE: sig}
            assert await login_statuses(http, host.url, None, 1, forged) == [403]
    finally:
        await link.close()
        await runner.cleanup()
    assert seen == ["203.0.113.40"] * 4


async def test_pending_caps_per_network_count_the_clients_behind_the_proxy(start_server) -> None:
    """max_pending_sessions_per_network keys on each client's network, not the proxy's, through real offers."""
    server = await start_server(insecure_open=True, trusted_proxies=["127.0.0.1/32"],
                                max_pending_sessions_per_network=3, connect_timeout_s=30.0)
    client, sdp = await client_offer(strip_candidates=True)  # its answers are never applied: the sessions wait

    async def offer(forwarded_for: str) -> tuple[int, dict]:
        async with aiohttp.ClientSession() as http, http.post(
                f"{server.url}/v1/sessions", json={"app": "echo", "sdp": sdp},
                headers={"X-Forwarded-For": forwarded_for}) as r:
            return r.status, await r.json()

    try:
        for i in range(1, 4):
            status, body = await offer(f"6.6.6.6, 198.51.100.{i}")
            assert status == 201, body
        status, body = await offer("198.51.100.4")
        assert (status, body["error"]["code"]) == (429, "too_many_pending_sessions"), body
        assert "network" in body["error"]["message"]
        status, body = await offer("198.51.100.9, 203.0.113.50")  # another network behind the same proxy
        assert status == 201, body
    finally:
        await client.close()


async def test_the_sign_in_cookie_is_secure_when_a_trusted_proxy_terminated_tls(start_server) -> None:
    def form(extra: dict[str, str]) -> dict[str, str]:
        return {"Content-Type": "application/x-www-form-urlencoded", "X-Forwarded-For": "203.0.113.7", **extra}

    async def cookie(url: str, extra: dict[str, str]) -> str:
        async with aiohttp.ClientSession() as http, http.post(
                f"{url}/login", data=f"key={KEY}&next=/", headers=form(extra), allow_redirects=False) as r:
            assert r.status == 303
            return r.headers["Set-Cookie"]

    behind = await start_server(api_keys=[KEY], trusted_proxies=["127.0.0.1/32"])
    assert "Secure" in await cookie(behind.url, {"X-Forwarded-Proto": "https"})
    assert "Secure" not in await cookie(behind.url, {"X-Forwarded-Proto": "http"})
    direct = await start_server(api_keys=[KEY])  # no trusted proxy: a client's own header changes nothing
    assert "Secure" not in await cookie(direct.url, {"X-Forwarded-Proto": "https"})
