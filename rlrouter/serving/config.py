"""Configuration of the serving layer (the HTTP API around the selector): auth, limits, routers.

Loaded from ``conf/selector/*.yaml`` (key ``serving``) or a plain mapping; every error names the
field. API keys (docs/serve.md "API keys"): the environment variable named by ``api_keys_env``
(default ``RLROUTER_API_KEYS``) of the Ray cluster the app runs on, formatted ``key=user_id[,key2=user2]``
(a trailing ``:admin`` marks an admin key, which may act for any user_id), the file named by
``api_keys_file`` (same entries, one a line), plus ``api_keys`` listed in the config (tests). Nothing in
serve/config.yaml sets that variable: a ``runtime_env`` value would win over the environment without a
word. :meth:`ServingConfig.startup_keys` refuses to start with no key, or with a placeholder key unless
``dev`` is set. The keys are read where the app is built; the deployments get their digests and a config
without ``api_keys`` (:meth:`ServingConfig.without_secrets`), so no key reaches Serve's logs or status.
"""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from rlrouter.serving.budgets import BudgetConfig, BudgetConfigError
from rlrouter.serving.peer import client_address
from rlrouter.serving.release import ReleaseRule
from rlrouter.serving.traffic import TrafficConfig


class ServingConfigError(ValueError):
    def __init__(self, field_path: str, message: str):
        self.field = field_path
        super().__init__(f"serving config field '{field_path}': {message}")


@dataclass(frozen=True)
class ApiKey:
    """One API key, bound to the user whose posteriors it may write."""

    key: str
    user_id: str
    admin: bool = False


def parse_key_list(spec: str, where: str) -> list[ApiKey]:
    """``key=user[,key2=user2:admin]`` -> keys."""
    keys = []
    for i, item in enumerate(p.strip() for p in spec.split(",")):
        if not item:
            continue
        key, sep, user = item.partition("=")
        admin = user.endswith(":admin")
        user = user[: -len(":admin")] if admin else user
        if not sep or not key.strip() or not user.strip():
            raise ServingConfigError(f"{where}[{i}]", "expected 'key=user_id' (optionally ':admin')")
        keys.append(ApiKey(key.strip(), user.strip(), admin))
    return keys


# Keys that appear in docs and examples: anyone can read them, so a server must not accept them.
PLACEHOLDER_KEYS = frozenset({"change-me", "changeme", "secret", "password", "test", "demo", "k-alice", "k-bob",
                              "k-ops", "k-admin", "sk-test"})
MIN_KEY_CHARS = 16


def is_placeholder(key: str) -> bool:
    """An example key or one too short to be a secret (shorter than ``MIN_KEY_CHARS``)."""
    return key.lower() in PLACEHOLDER_KEYS or len(key) < MIN_KEY_CHARS


@dataclass
class ServingConfig:
    """Knobs of the HTTP API."""

    api_keys: list[dict[str, Any]] = field(default_factory=list)
    """[{key, user_id, admin?}]; more may come from the environment (api_keys_env)."""
    api_keys_env: str = "RLROUTER_API_KEYS"
    """Environment variable with 'key=user_id,...' (read when the app starts)."""
    api_keys_file: str | None = None
    """A file of 'key=user_id[:admin]' entries, one a line ('#' starts a comment), read when the app starts:
    keys passed by reference, like the environment variable."""
    router_r1_keyless_networks: list[str] = field(default_factory=list)
    """CIDR ranges (e.g. 10.0.0.0/8) whose clients may call POST /router_r1/route without a key: VSR's
    Router-R1 client sends none. Empty (default): a key is required there too."""
    trusted_proxies: list[str] = field(default_factory=list)
    """CIDR ranges of the reverse proxies in front of the app whose X-Forwarded-For names the client for
    router_r1_keyless_networks. Empty (default): only the TCP peer counts, and a request carrying
    X-Forwarded-For has no known address (rlrouter.serving.peer says why)."""
    openai_user: str = "end_user"
    """What OpenAI's ``user`` field of a chat completion is: 'end_user' (default, as OpenAI means it: a tag
    of the caller's end user, echoed in x_rlrouter.end_user; the API key's user stays the identity) or
    'user_id' (the user whose posteriors to use: 403 unless it is the key's own user or an admin key)."""
    model_map: dict[str, str] = field(default_factory=dict)
    """A caller's model names -> candidate names (e.g. VSR's 'qwen3-8b' -> 'smollm2-135m'); /router_r1/route
    reads the offered models and answers in the caller's names."""
    dev: bool = False
    """Development mode: accept placeholder API keys (documented examples, 'change-me', < 16 characters)."""
    replay_miss: str = "fallthrough"
    """Chat completions when a replay candidate has no logged answer: 'fallthrough' ('auto' goes to the
    first live candidate instead) or 'error' (404). Never a 200 with a placeholder text."""
    max_body_bytes: int = 1_000_000
    """Requests with a larger body get 413 before they are parsed."""
    body_timeout_s: float = 30.0
    """A request whose whole body has not arrived this long after the app's first read of it gets 408."""
    max_query_chars: int = 32_000
    """A longer prompt (a query, or a chat completion's last user message) is a 400 ``context_length_exceeded``
    naming the field, as a prompt over a model's context is."""
    aggregation: str = "vote"
    """How multi-round / arena answers are combined: 'vote' or 'confidence'."""
    encoder: str = "minilm-l6"
    """Sentence encoder of the implicit-feedback classifier and of the contextual selector."""
    implicit_temperature: float = 0.05
    """Softmax temperature of the implicit-feedback classifier's confidence."""
    proxy_timeout_s: float = 120.0
    """Deadline of one proxied chat completion."""
    selector_in_ingress: bool = True
    """The selector's one replica answers HTTP itself: no actor hop on /route (latency). False: a
    separate, scalable ingress deployment calls the selector replica through its handle."""
    traffic: Any = field(default_factory=dict)
    """The opt-in traffic log (``rlrouter.serving.traffic.TrafficConfig``: enabled, path, store_prompts,
    max_segment_mb, retention_segments): every routed request and feedback, on disk before the reply."""
    release: Any = field(default_factory=dict)
    """The default rule of a served router's release (``rlrouter.serving.release.ReleaseRule``: canary_share,
    min_feedback, max_feedback, min_gain, level, cost_weight, auto); a release request may override it."""
    budgets: Any = field(default_factory=dict)
    """Spend limits per tenant (``rlrouter.serving.budgets.BudgetConfig``: limits, path, completion_tokens),
    enforced when a request is routed; none by default."""
    release_journal: str | None = None
    """The release journal's file (``rlrouter.serving.release_journal``): every version loaded, canary decision,
    reward and verdict of the served routers' releases, fsynced before the reply and replayed on start, so a
    restart resumes a release with its counts and keeps a promotion. None: releases live in memory, and a
    restart serves the configured versions with no release in progress."""

    def __post_init__(self) -> None:
        if self.release_journal is not None and (not isinstance(self.release_journal, str) or not self.release_journal):
            raise ServingConfigError("release_journal", f"a file path, or null, got {self.release_journal!r}")
        if not isinstance(self.release, ReleaseRule):
            if not isinstance(self.release, dict):
                raise ServingConfigError("release", f"expected a mapping of release rule settings, got {self.release!r}")
            try:
                self.release = ReleaseRule.from_dict(self.release)
            except (ValueError, TypeError) as e:
                where, _, why = str(e).partition(": ")
                raise ServingConfigError(where if where.startswith("release") else "release", why or str(e)) from None
        try:
            self.budgets = BudgetConfig.from_dict(self.budgets)
        except BudgetConfigError as e:
            raise ServingConfigError(e.field, str(e).partition(": ")[2]) from None
        if not isinstance(self.traffic, TrafficConfig):
            if not isinstance(self.traffic, dict):
                raise ServingConfigError("traffic", f"expected a mapping of traffic log settings, got {self.traffic!r}")
            unknown = sorted(set(self.traffic) - {f.name for f in fields(TrafficConfig)})
            if unknown:
                raise ServingConfigError(f"traffic.{unknown[0]}", "unknown field; known fields: "
                                         f"{sorted(f.name for f in fields(TrafficConfig))}")
            try:
                self.traffic = TrafficConfig(**self.traffic)
            except ValueError as e:
                where, _, why = str(e).partition(": ")
                raise ServingConfigError(where.removeprefix("serving."), why) from None
        if not isinstance(self.api_keys, list):
            raise ServingConfigError("api_keys", "expected a list of {key, user_id, admin}")
        for i, k in enumerate(self.api_keys):
            if not isinstance(k, dict) or not isinstance(k.get("key"), str) or not k.get("key"):
                raise ServingConfigError(f"api_keys[{i}].key", "expected a non-empty string")
            if not isinstance(k.get("user_id"), str) or not k.get("user_id"):
                raise ServingConfigError(f"api_keys[{i}].user_id", "expected a non-empty string")
            if not isinstance(k.get("admin", False), bool):
                raise ServingConfigError(f"api_keys[{i}].admin", "expected true/false")
        for f in ("max_body_bytes", "max_query_chars"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ServingConfigError(f, f"expected an integer >= 1, got {v!r}")
        if self.aggregation not in ("vote", "confidence"):
            raise ServingConfigError("aggregation", f"expected 'vote' or 'confidence', got {self.aggregation!r}")
        for f in ("implicit_temperature", "proxy_timeout_s", "body_timeout_s"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ServingConfigError(f, f"expected a number > 0, got {v!r}")
        for f in ("selector_in_ingress", "dev"):
            if not isinstance(getattr(self, f), bool):
                raise ServingConfigError(f, "expected true/false")
        if self.replay_miss not in ("fallthrough", "error"):
            raise ServingConfigError("replay_miss", f"expected 'fallthrough' or 'error', got {self.replay_miss!r}")
        for f in ("router_r1_keyless_networks", "trusted_proxies"):
            nets = getattr(self, f)
            if not isinstance(nets, list):
                raise ServingConfigError(f, "expected a list of CIDR ranges")
            for i, net in enumerate(nets):
                try:
                    ipaddress.ip_network(net, strict=False)
                except (TypeError, ValueError) as e:
                    raise ServingConfigError(f"{f}[{i}]", f"not a CIDR range: {e}") from None
        if self.openai_user not in ("end_user", "user_id"):
            raise ServingConfigError("openai_user", f"expected 'end_user' or 'user_id', got {self.openai_user!r}")
        if not isinstance(self.model_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.model_map.items()):
            raise ServingConfigError("model_map", "expected a mapping of model name -> candidate name")

    def keyless(self, host: str | None) -> bool:
        """Whether a client at ``host`` may call /router_r1/route without a key."""
        if not host or not self.router_r1_keyless_networks:
            return False
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(addr in ipaddress.ip_network(n, strict=False) for n in self.router_r1_keyless_networks)

    def client_address(self, reported: str | None, forwarded_for: list[str]) -> str | None:
        """The address ``keyless`` judges: the TCP peer, or behind ``trusted_proxies`` the forwarded client;
        None when the request carries X-Forwarded-For that no trusted proxy vouches for."""
        proxies = [ipaddress.ip_network(n, strict=False) for n in self.trusted_proxies]
        return client_address(reported, forwarded_for, proxies)

    def keys(self, environ: dict[str, str] | None = None) -> list[ApiKey]:
        """Config keys plus the environment's; a key listed twice must name the same user."""
        env = os.environ if environ is None else environ
        keys = [ApiKey(k["key"], k["user_id"], bool(k.get("admin", False))) for k in self.api_keys]
        if self.api_keys_env and env.get(self.api_keys_env):
            keys += parse_key_list(env[self.api_keys_env], self.api_keys_env)
        if self.api_keys_file:
            try:
                with open(os.path.expanduser(self.api_keys_file), encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise ServingConfigError("api_keys_file", f"cannot read {self.api_keys_file}: {e.strerror}") from None
            for n, line in enumerate(text.splitlines(), 1):
                line = line.split("#", 1)[0].strip()
                if line:
                    keys += parse_key_list(line, f"api_keys_file {self.api_keys_file} line {n}")
        seen: dict[str, ApiKey] = {}
        for k in keys:
            if k.key in seen and seen[k.key] != k:
                raise ServingConfigError("api_keys", f"a key is bound to two users ({seen[k.key].user_id}, {k.user_id})")
            seen[k.key] = k
        return list(seen.values())

    def startup_keys(self, environ: dict[str, str] | None = None) -> list[ApiKey]:
        """The keys the app starts with; refuses none at all, and placeholders unless ``dev``."""
        keys = self.keys(environ)
        if not keys:
            raise ServingConfigError("api_keys", f"no API key: set {self.api_keys_env}='<key>=<user_id>' in the "
                                                 "environment of the Ray cluster (docs/serve.md, 'API keys')")
        weak = sorted({k.user_id for k in keys if is_placeholder(k.key)})
        if weak and not self.dev:
            raise ServingConfigError("api_keys", f"placeholder key(s) for user(s) {weak} (an example key or shorter "
                                                 f"than {MIN_KEY_CHARS} characters); use secret keys, e.g. "
                                                 "`openssl rand -hex 16`, or start with dev=true to allow them")
        return keys

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> ServingConfig:
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        if "protect_router_r1" in d:
            raise ServingConfigError("protect_router_r1", "replaced by router_r1_keyless_networks: the CIDR "
                                                          "ranges allowed to call /router_r1/route without a key")
        for key in d:
            if key not in known:
                raise ServingConfigError(key, f"unknown field; known fields: {sorted(known)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def without_secrets(d: dict[str, Any] | None) -> dict[str, Any]:
        """A serving mapping as the deployments may see it: ``api_keys`` emptied (they get the keys'
        digests instead). Ray Serve logs a deployment's arguments and shows them in its status."""
        return {**(d or {}), "api_keys": []}
