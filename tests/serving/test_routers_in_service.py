"""GMTRouter and the intent classifier inside the service: known users routed by the graph model,
unknown ones by the bandit; the intent label fills the category scope and answers /classify."""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from rlrouter.pool.pool import CandidatePool
from rlrouter.selector import Selector, SelectorConfig
from rlrouter.serving.api import create_app, install
from rlrouter.serving.auth import ApiKeyAuth
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.service import LocalSelectorClient, RouterService
from tests.helpers import CONF_DIR

ALICE = {"Authorization": "Bearer k-alice"}
GPT4, MIXTRAL = "gpt-4-1106-preview", "mixtral-8x7b-instruct"
LOGGED_MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"


class FakeGMT:
    async def score(self, user_id, query):
        if user_id != "alice":
            raise KeyError(user_id)
        return {GPT4: 0.2, LOGGED_MIXTRAL: 0.9}  # logged model names, as GMTRouter learns them


class FakeIntent:
    def __init__(self):
        self.seen = []

    async def classify(self, texts):
        self.seen += texts
        return [("math" if any(ch.isdigit() for ch in t) else "other", 0.75) for t in texts]


@pytest.fixture
def client(tmp_path):
    pool_cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    pool = CandidatePool.from_config(pool_cfg)
    cfg = SelectorConfig(storage_path=str(tmp_path / "s.json"), seed=0)
    selector = Selector(cfg, pool.names)
    selector.load()
    serving = ServingConfig(api_keys=[{"key": "k-alice", "user_id": "alice"}, {"key": "k-bob", "user_id": "bob"}])
    name_map = {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in pool_cfg["candidates"]}
    intent = FakeIntent()
    svc = RouterService(LocalSelectorClient(selector), cfg, serving, pool.names, pool=pool, gmt=FakeGMT(),
                        intent=intent, name_map=name_map)
    install(svc, ApiKeyAuth(serving.keys({})))
    return TestClient(create_app()), selector, intent


def test_known_user_is_routed_by_gmtrouter_and_feedback_still_teaches(client):
    c, selector, _ = client
    r = c.post("/route", json={"query": "what is 2+2"}, headers=ALICE)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "gmtrouter" and body["model"] == MIXTRAL
    assert body["scores"] == {GPT4: 0.2, MIXTRAL: 0.9}
    assert c.post("/feedback", json={"request_id": body["request_id"], "outcome": "win"},
                  headers=ALICE).status_code == 200


def test_unknown_user_falls_back_to_the_bandit(client):
    c, _, _ = client
    r = c.post("/route", json={"query": "hello there"}, headers={"Authorization": "Bearer k-bob"})
    assert r.status_code == 200 and r.json()["mode"] != "gmtrouter"


def test_intent_label_scopes_the_decision_and_classify_answers(client):
    c, selector, intent = client
    r = c.post("/classify", json={"texts": ["what is 12*3", "tell me a story"]}, headers=ALICE)
    assert r.status_code == 200
    assert r.json() == {"labels": [{"label": "math", "confidence": 0.75}, {"label": "other", "confidence": 0.75}]}
    c.post("/route", json={"query": "what is 5*5"}, headers=ALICE)
    assert "what is 5*5" in intent.seen
    bad = c.post("/classify", json={"texts": []}, headers=ALICE)
    assert bad.status_code == 422 and "texts" in bad.json()["error"]["message"]
    assert c.post("/classify", json={"texts": ["x"]}).status_code == 401


def test_a_real_trained_intent_classifier_answers_classify_through_the_deployment_class(tmp_path):
    """The real classifier (2 supervised steps on MMLU), loaded by serve/routers.py's deployment class."""
    import torch

    from rlrouter.intent.data import load_mmlu, stratified_splits
    from rlrouter.intent.model import EncoderConfig, IntentClassifier, IntentModel
    from rlrouter.intent.supervised import SupervisedConfig, train_supervised
    from serve.routers import IntentDeployment

    s = stratified_splits(load_mmlu(), train_per_label=2, val_per_label=1, test_per_label=1, seed=3)
    torch.manual_seed(0)
    model = IntentModel(s.labels, EncoderConfig(max_length=32))
    train_supervised(model, s.train, s.val, SupervisedConfig(batch_size=14, max_steps=2, learning_rate=3e-3))
    model.save(tmp_path / "clf", "supervised")
    texts = [e.text for e in s.test[:3]]
    expected = IntentClassifier.load(tmp_path / "clf").classify(texts)

    deployment = IntentDeployment.func_or_class(str(tmp_path / "clf"))  # the class Serve would run

    class Local:
        async def classify(self, texts):
            return deployment.classify(texts)

    pool_cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    pool = CandidatePool.from_config(pool_cfg)
    cfg = SelectorConfig(storage_path=str(tmp_path / "s.json"), seed=0)
    selector = Selector(cfg, pool.names)
    selector.load()
    serving = ServingConfig(api_keys=[{"key": "k-alice", "user_id": "alice"}])
    install(RouterService(LocalSelectorClient(selector), cfg, serving, pool.names, pool=pool, intent=Local()),
            ApiKeyAuth(serving.keys({})))
    r = TestClient(create_app()).post("/classify", json={"texts": texts}, headers=ALICE)
    assert r.status_code == 200
    got = [(x["label"], x["confidence"]) for x in r.json()["labels"]]
    assert [g[0] for g in got] == [e[0] for e in expected]
    assert all(abs(g[1] - e[1]) < 1e-6 for g, e in zip(got, expected))
    assert {g[0] for g in got} <= set(s.labels)
