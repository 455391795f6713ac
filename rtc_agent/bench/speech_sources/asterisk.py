"""The speech set's first recorded speaker: the Asterisk core prompts (Debian ``asterisk-core-sounds-en-g722``, a
US English speaker, Allison, recorded at 16 kHz), with the text of every prompt from ``asterisk-core-sounds-en``'s
``core-sounds-en.txt``. The ``.deb`` files are fetched with ``apt-get download`` when they are not installed (no
root needed)."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

HUMAN_PACKAGES = ("asterisk-core-sounds-en", "asterisk-core-sounds-en-g722")
HUMAN_DIR = "usr/share/asterisk/sounds/en_US_f_Allison"
HUMAN_TEXT = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"


def unpack_debs(packages: tuple[str, ...] | list[str], debs: Path) -> Path:
    """``packages`` fetched with ``apt-get download`` into ``debs`` (those not there yet) and unpacked into
    ``debs/root``, which is returned. Raises SystemExit with the reason when apt-get is missing or fails."""
    if not shutil.which("apt-get"):
        raise SystemExit(f"recorded speech needs the Debian packages {' '.join(packages)}")
    debs.mkdir(parents=True, exist_ok=True)
    root = debs / "root"
    wanted = [p for p in packages if not any(debs.glob(f"{p}_*.deb"))]
    if wanted:
        done = subprocess.run(["apt-get", "download", *wanted], cwd=debs, capture_output=True, text=True,
                              timeout=300)
        if done.returncode:
            raise SystemExit(f"apt-get download {' '.join(wanted)} failed: {done.stderr.strip()[-400:]}")
    for package in packages:
        for deb in sorted(debs.glob(f"{package}_*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, capture_output=True, timeout=120)
    return root


def human_root(cache: Path) -> Path:
    """A folder holding ``HUMAN_DIR`` and ``HUMAN_TEXT``: the system's when the packages are installed, else the
    packages unpacked from ``apt-get download`` into ``cache/debs``."""
    for root in (Path("/"), cache / "debs" / "root"):
        if (root / HUMAN_DIR).is_dir() and (root / HUMAN_TEXT).exists():
            return root
    return unpack_debs(HUMAN_PACKAGES, cache / "debs")


def human_prompts(root: Path) -> list[tuple[str, str]]:
    """``(file stem, text)`` of the usable prompts: five to 28 words, no digits, symbols or trailing '...'."""
    with gzip.open(root / HUMAN_TEXT, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    prompts = []
    for line in lines:
        if line.startswith(";") or ":" not in line:
            continue
        name, text = (x.strip() for x in line.split(":", 1))
        if "/" in name or re.search(r"[0-9\[\]<>*#/]|\.\.\.", text):
            continue
        if 5 <= len(text.split()) <= 28 and (root / HUMAN_DIR / f"{name}.g722").exists():
            prompts.append((name, re.sub(r"\s+", " ", text)))
    return prompts
