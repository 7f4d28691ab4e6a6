"""API-key authentication bound to a user_id (a key may act only for its own user).

A key is accepted from ``Authorization: Bearer <key>`` (what the ``openai`` client sends) or
``X-API-Key``. Keys are compared by SHA-256 digest in constant time. A key is bound to one user:
a request naming another ``user_id`` is refused with 403 (only admin keys may act for others), so
no key can write another user's posteriors.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from rlrouter.serving.config import ApiKey


class AuthError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None):
        self.status = status
        self.message = message
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Principal:
    user_id: str
    admin: bool = False

    def user_for(self, requested: str | None, field: str = "user_id") -> str:
        """The user_id a request acts for: its own, or (admins only) the one it names."""
        if requested is None or requested == self.user_id:
            return self.user_id
        if self.admin:
            return requested
        raise AuthError(403, f"field '{field}': this API key is bound to user '{self.user_id}' "
                             f"and may not act for '{requested}'", field)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class ApiKeyAuth:
    def __init__(self, keys: list[ApiKey]):
        self._keys = [(_digest(k.key), Principal(k.user_id, k.admin)) for k in keys]

    def digests(self) -> list[dict[str, object]]:
        """The keys as SHA-256 digests bound to their users: what crosses to the replicas."""
        return [{"sha256": d.hex(), "user_id": p.user_id, "admin": p.admin} for d, p in self._keys]

    @classmethod
    def from_digests(cls, digests: list[dict[str, object]]) -> ApiKeyAuth:
        auth = cls([])
        auth._keys = [(bytes.fromhex(str(d["sha256"])), Principal(str(d["user_id"]), bool(d["admin"])))
                      for d in digests]
        return auth

    def __len__(self) -> int:
        return len(self._keys)

    def authenticate(self, authorization: str | None, x_api_key: str | None) -> Principal:
        key = None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                key = value.strip()
        if key is None and x_api_key:
            key = x_api_key.strip()
        if not key:
            raise AuthError(401, "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'")
        d = _digest(key)
        found = None
        for digest, principal in self._keys:  # no early exit: constant time in the number of keys
            if hmac.compare_digest(digest, d):
                found = principal
        if found is None:
            raise AuthError(401, "invalid API key")
        return found
