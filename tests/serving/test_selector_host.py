"""SelectorHost: the selector's process in the Serve app (serving.selector_in_ingress), in-process here.

The HTTP API answers around it exactly as around a separate selector actor: a feedback is acknowledged
only once it is in the write-ahead log, and a fresh host on the same file recovers it.
"""

import pytest
import yaml
from fastapi.testclient import TestClient

from rlrouter.pool.pool import CandidatePool
from rlrouter.selector import Selector, SelectorConfig
from rlrouter.serving.api import create_app, install
from rlrouter.serving.auth import ApiKeyAuth
from rlrouter.serving.config import ServingConfig, ServingConfigError
from rlrouter.serving.selector_host import SelectorHost
from rlrouter.serving.service import RouterService
from tests.helpers import CONF_DIR

ALICE = {"Authorization": "Bearer k-alice"}
GPT4, MIXTRAL = "gpt-4-1106-preview", "mixtral-8x7b-instruct"


@pytest.fixture(scope="module")
def pool(shared_data):
    return CandidatePool.from_config(yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()))


def _host(tmp_path, pool, seen=None):
    cfg = SelectorConfig(storage_path=str(tmp_path / "state.json"), seed=0, costs={GPT4: 20.0, MIXTRAL: 0.6},
                         auto_save_interval="1h")
    on_result = (lambda method, r: seen.append((method, r[0]))) if seen is not None else None
    return SelectorHost(Selector(cfg, pool.names), on_result=on_result), cfg


def _client(host, cfg, pool):
    serving = ServingConfig(api_keys=[{"key": "k-alice", "user_id": "alice"}])
    install(RouterService(host, cfg, serving, pool.names, pool=pool), ApiKeyAuth(serving.keys({})))
    return TestClient(create_app())


def test_http_api_around_the_host_acks_only_durable_feedback(tmp_path, pool):
    seen = []
    host, cfg = _host(tmp_path, pool, seen)
    client = _client(host, cfg, pool)
    r = client.post("/route", json={"query": "What is 2+2?", "category": "math"}, headers=ALICE)
    assert r.status_code == 200, r.text
    routed = r.json()
    r = client.post("/feedback", json={"request_id": routed["request_id"], "outcome": "win"}, headers=ALICE)
    assert r.status_code == 200 and r.json()["durable"] is True
    assert host.selector._wal.path.stat().st_size > 0  # in the log, though never saved (autosave: 1h)
    assert ("select", "ok") in seen and ("feedback", "ok") in seen  # the metrics hook saw both
    alpha = client.get("/stats", headers=ALICE).json()["global"][routed["model"]]["alpha"]
    assert alpha == 2.0

    # a new host on the same file (the replica restarted after a kill: no close, no save) has it
    again, cfg2 = _host(tmp_path, pool)
    assert _client(again, cfg2, pool).get("/stats", headers=ALICE).json()["global"][routed["model"]]["alpha"] == alpha
    again.close()
    host.close()


def test_reconfigure_keeps_the_storage_path(tmp_path, pool):
    host, _ = _host(tmp_path, pool)
    host.reconfigure({"exploration_rate": 0.2})
    assert host.selector.config.exploration_rate == 0.2
    with pytest.raises(ValueError, match="storage_path"):
        host.reconfigure({"storage_path": str(tmp_path / "other.json")})
    host.close()


def test_selector_in_ingress_is_a_bool():
    assert ServingConfig().selector_in_ingress is True
    with pytest.raises(ServingConfigError, match="selector_in_ingress"):
        ServingConfig.from_dict({"selector_in_ingress": "yes"})
