"""Pages render from one base template and carry the client configuration; static files are served."""

from __future__ import annotations

import json
import re

import aiohttp
import pytest


@pytest.mark.parametrize("path, app, video", [
    ("/captions", "captions", True), ("/interpret", "interpret", False), ("/agent", "agent", False),
    ("/echo", "echo", False), ("/", None, False),
])
async def test_pages_render(server, path, app, video):
    async with aiohttp.ClientSession() as http, http.get(server.url + path) as resp:
        assert resp.status == 200 and resp.content_type == "text/html"
        html = await resp.text()
    for href in ("/captions", "/interpret", "/agent"):
        assert f'href="{href}"' in html  # the shared navigation from the base template
    match = re.search(r'<script type="application/json" id="client-config">(.*?)</script>', html, re.S)
    assert match, "client-config missing"
    config = json.loads(match.group(1))
    assert config["app"] == app and config["media"] == {"audio": True, "video": video}
    assert config["heartbeat_interval_ms"] <= 2500
    if app is None:
        return
    for element in ("connection-state", "mic-select", "camera-select", "event-log", "rtt"):
        assert f'id="{element}"' in html, element


async def test_static_modules_are_served(server):
    async with aiohttp.ClientSession() as http:
        for path in ("/static/js/page.js", "/static/js/rtc-client.js", "/static/css/app.css"):
            async with http.get(server.url + path) as resp:
                assert resp.status == 200, path
                assert resp.content_type in ("application/javascript", "text/javascript", "text/css"), path
        async with http.get(server.url + "/static/../pyproject.toml") as resp:
            assert resp.status in (403, 404)
        async with http.get(server.url + "/nope") as resp:
            assert resp.status == 404
        async with http.get(server.url + "/v1/nope") as resp:
            assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


async def test_capabilities_say_what_each_listen_language_gets(server):
    async with aiohttp.ClientSession() as http, http.get(server.url + "/call") as resp:
        html = await resp.text()
    match = re.search(r'<script type="application/json" id="client-config">(.*?)</script>', html, re.S)
    capabilities = json.loads(match.group(1))["capabilities"]
    assert capabilities["st"]["targets"] and "en" in capabilities["listen"]  # st.targets stays beside listen
    for language, entry in capabilities["listen"].items():
        assert set(entry) == {"text", "speech", "engine", "voice", "quality", "reason"}, language
        assert (entry["reason"] is None) == (entry["text"] and entry["speech"]), language  # a reason for every no
        assert entry["text"] or not entry["speech"], language
