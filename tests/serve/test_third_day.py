"""A user's third day, over real HTTP against the Serve app on the local Ray cluster (replay pool):

- API keys from the config (``serving.api_keys``) and from a key file (``serving.api_keys_file``) work, and
  neither reaches Ray's logs or Serve's status: the deployments get digests and a config without keys;
- the live hostile-input run of benchmarks/bench_fuzz.py, at a small size: schemathesis cases from the app's
  own schema, the hand-made attacks and the slow client, over HTTP through Ray Serve's proxy.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.helpers import serve_app

pytestmark = [pytest.mark.ray, pytest.mark.slow]

APP = "rlrouter-third-day"
ENV_KEY = "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e"       # RLROUTER_API_KEYS, as docs/serve.md says
CONFIG_KEY = "c0nf1g-9d8e7f6a5b4c3d2e1f0a9b8c7d6e"  # serving.api_keys: in the app's arguments
FILE_KEY = "f1le-8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"  # serving.api_keys_file: a path in the arguments


@pytest.fixture(scope="module")
def base(ray_cluster, tmp_path_factory, shared_data):
    from benchmarks.bench_fuzz import ADMIN_KEY, KEYS
    from tests.helpers import ROOT

    folder = tmp_path_factory.mktemp("keys")
    key_file = folder / "api_keys"
    key_file.write_text(f"# one key a line\n{FILE_KEY}=filer\n")
    keys = [{"key": k, "user_id": u} for k, u in KEYS.items()] + [{"key": ADMIN_KEY, "user_id": "ops", "admin": True},
                                                                  {"key": CONFIG_KEY, "user_id": "configured"}]
    # dev: bench_fuzz's example keys; a short body timeout, so the slow client's 408 comes soon
    serving = {"api_keys": keys, "api_keys_file": str(key_file), "dev": True, "body_timeout_s": 5}
    yield from serve_app(APP, ENV_KEY, "env-user", serving, tmp_path_factory.mktemp("sel"),
                         {"pool": str(ROOT / "conf" / "pool" / "routellm_replay.yaml")})


def test_keys_from_the_config_and_a_file_work_and_reach_no_log(base, ray_cluster):
    from ray import serve
    from ray._private import worker
    from ray.serve.context import _get_global_client

    for key, user in ((ENV_KEY, "env-user"), (CONFIG_KEY, "configured"), (FILE_KEY, "filer")):
        r = httpx.post(f"{base}/route", json={"query": "What is 2+2?"}, timeout=60,
                       headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
    session = Path(worker._global_node.get_session_dir_path())  # noqa: SLF001 - this cluster's own logs
    logs = [p for p in (session / "logs").rglob("*") if p.is_file()]
    assert any("controller" in p.name for p in logs), [p.name for p in logs][:20]  # Serve's controller log is read
    leaked = {}
    for p in logs:
        text = p.read_bytes()
        for key in (ENV_KEY, CONFIG_KEY, FILE_KEY):
            if key.encode() in text:
                leaked.setdefault(key[:6], []).append(str(p))
    assert not leaked, leaked
    shown = str(serve.status()) + json.dumps(_get_global_client().get_serve_details(), default=str)
    assert APP in shown and not [k for k in (ENV_KEY, CONFIG_KEY, FILE_KEY) if k in shown]


def test_live_fuzz_at_small_size(base):
    """benchmarks/bench_fuzz.py's live run (the same function), a few dozen cases: no 5xx, every 4xx in the
    error shape naming its field, every attack held, the slow client answered 408 once serving.body_timeout_s
    is up (before, Ray Serve's proxy held it open for ever)."""
    from benchmarks.bench_fuzz import fuzz_live

    res = fuzz_live(base, cases=40, seed=5, slow_wait_s=10)
    assert res["cases"] >= 40 and res["server_errors"] == 0, res["failures"][:5]
    assert not res["failures"], res["failures"][:5]
    # this app serves no router: the attacks aimed at the served router's release answer 404 (no such router)
    needs_router = {a["attack"] for a in res["attacks"] if a["status"] == 404 and not a["held"]}
    assert all(a["held"] for a in res["attacks"] if a["attack"] not in needs_router), res["attacks"]
    assert all(a["state_unchanged"] is not False for a in res["attacks"]), res["attacks"]
    assert len(needs_router) == 7, needs_router  # the 7 that need the served router (bench_fuzz.ROUTER)
    assert {"200", "401"} <= set(res["by_status"]), res["by_status"]  # past auth and validation, and not
    slow = res["slow_client"]
    assert slow["answer"] == "HTTP/1.1 408 Request Timeout" and 5 <= slow["after_s"] < 15, slow
