"""Secrets at rest: API keys and tokens are kept only as SHA-256 digests and compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets as _secrets
from collections.abc import Iterable


def secret_hash(value: str) -> str:
    """The hex SHA-256 digest a secret is kept as."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret(prefix: str, nbytes: int = 24) -> str:
    """A fresh random secret such as ``ct_...`` (client token) or ``st_...`` (session token)."""
    return prefix + _secrets.token_urlsafe(nbytes)


def same_secret(value: str, digest: str) -> bool:
    """Whether ``value`` hashes to ``digest`` (constant time in the digest)."""
    return hmac.compare_digest(secret_hash(value), digest)


class ApiKeys:
    """The server API keys, held as digests. ``match`` compares against every key so timing says nothing."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [secret_hash(k) for k in keys if k]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def match(self, presented: str) -> str | None:
        """The matching key's id (a short digest prefix, safe to log) or None."""
        digest = secret_hash(presented)
        found: str | None = None
        for known in self._digests:
            if hmac.compare_digest(digest, known):
                found = known[:12]
        return found
