"""End to end: the Serve app composes the selector with a trained GMTRouter and a trained intent
classifier, both loaded from real checkpoints, and is driven over real HTTP.

Both routers are trained here, small: GMTRouter on the simulated personalization set of tests/gmt (real
RouteLLM rows, real MiniLM), the intent classifier for 2 supervised steps on MMLU. The app is deployed
with ``build_app({"gmtrouter": {"checkpoint": ...}, "intent": {"checkpoint": ...}})``, as serve/config.yaml
would. No vLLM engine is started: torch-geometric is imported in this process.
"""

from __future__ import annotations

import importlib

import httpx
import pytest
import yaml

from tests.gmt.conftest import small_graph, small_logged, small_sim  # noqa: F401 - fixtures, reused
from tests.helpers import CONF_DIR
from tests.serve.test_app_e2e import _free_port, _wait_healthy

pytestmark = [pytest.mark.ray, pytest.mark.slow]

APP = "rlrouter-e2e-trained"
OPS = {"Authorization": "Bearer k-ops"}


@pytest.fixture(scope="module")
def gmt_checkpoint(small_graph, tmp_path_factory):  # noqa: F811 - the imported fixture
    import torch

    from rlrouter.gmt.train import GMTModelConfig, GMTTrainConfig, fit, save_checkpoint, temporal_split

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny graph: one thread avoids spin-waits on 2 cores (tests/gmt/conftest.py)
    try:
        split = temporal_split(small_graph, 0.2, 0.2)
        res = fit(small_graph, split, GMTModelConfig(hidden_dim=32), GMTTrainConfig(epochs=4, eval_every=2, seed=0))
    finally:
        torch.set_num_threads(before)
    return save_checkpoint(tmp_path_factory.mktemp("gmt") / "ckpt", res.model, small_graph)


@pytest.fixture(scope="module")
def intent_checkpoint(tmp_path_factory):
    """The 2-step supervised recipe of tests/serving/test_routers_in_service.py, and 3 held-out texts."""
    import torch

    from rlrouter.intent.data import load_mmlu, stratified_splits
    from rlrouter.intent.model import EncoderConfig, IntentModel
    from rlrouter.intent.supervised import SupervisedConfig, train_supervised

    s = stratified_splits(load_mmlu(), train_per_label=2, val_per_label=1, test_per_label=1, seed=3)
    torch.manual_seed(0)
    model = IntentModel(s.labels, EncoderConfig(max_length=32))
    train_supervised(model, s.train, s.val, SupervisedConfig(batch_size=14, max_steps=2, learning_rate=3e-3))
    path = tmp_path_factory.mktemp("intent") / "clf"
    model.save(path, "supervised")
    return path, [e.text for e in s.test[:3]], s.labels


@pytest.fixture(scope="module")
def trained_app(ray_cluster, shared_data, small_sim, gmt_checkpoint, intent_checkpoint,  # noqa: F811
                tmp_path_factory):
    from ray import serve
    from ray.serve.context import _get_global_client

    app_mod = importlib.import_module("serve.app")  # the repo's serve/ package, not ray.serve
    serve.start(http_options={"host": "127.0.0.1", "port": _free_port()})
    port = _get_global_client().http_config.port  # an already-running Serve keeps its port
    known = small_sim.records[0].user_id
    keys = [{"key": "k-known", "user_id": known}, {"key": "k-new", "user_id": "newcomer"},
            {"key": "k-ops", "user_id": "ops", "admin": True}]
    state = tmp_path_factory.mktemp("selector") / "state.json"
    args = {"pool": yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()),
            "selector": {"storage_path": str(state), "seed": 0},
            "serving": {"api_keys": keys, "dev": True},
            "gmtrouter": {"checkpoint": str(gmt_checkpoint)},
            "intent": {"checkpoint": str(intent_checkpoint[0])}}
    serve.run(app_mod.build_app(args), name=APP, route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{port}"
    _wait_healthy(base)
    yield base, known
    serve.delete(APP)


def test_trained_gmtrouter_and_intent_classifier_inside_the_running_app(
        trained_app, small_sim, gmt_checkpoint, intent_checkpoint):  # noqa: F811
    from rlrouter.gmt.scorer import GMTRouterScorer
    from rlrouter.intent.model import IntentClassifier

    base, known = trained_app
    pool_cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    logged_name = {c["name"]: c["options"]["model"] for c in pool_cfg["candidates"]}

    # --- /classify: the deployed classifier gives the local classifier's labels and confidences
    ckpt, texts, labels = intent_checkpoint
    expected = IntentClassifier.load(ckpt).classify(texts)
    r = httpx.post(f"{base}/classify", json={"texts": texts}, headers=OPS, timeout=60)
    assert r.status_code == 200, r.text
    got = r.json()["labels"]
    assert [g["label"] for g in got] == [e[0] for e in expected]
    assert all(g["confidence"] == pytest.approx(e[1], abs=1e-5) for g, e in zip(got, expected))
    assert {g["label"] for g in got} <= set(labels)

    # --- /route for a user in the GMTRouter graph: mode "gmtrouter", the checkpoint's best model
    query = small_sim.records[0].interactions[0].query
    local = GMTRouterScorer.load(gmt_checkpoint).score(known, query)  # {logged model name: score}
    r = httpx.post(f"{base}/route", json={"query": query}, headers={"Authorization": "Bearer k-known"}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "gmtrouter", body
    assert logged_name[body["model"]] == max(local, key=local.get)
    assert set(body["scores"]) == set(logged_name)
    for name, score in body["scores"].items():
        assert score == pytest.approx(local[logged_name[name]], abs=1e-5)

    # the intent label filled the decision's category scope: the win lands there
    (label, _), = IntentClassifier.load(ckpt).classify([query])
    r = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": "win"},
                   headers={"Authorization": "Bearer k-known"}, timeout=60)
    assert r.status_code == 200 and r.json()["durable"] is True, r.text
    stats = httpx.get(f"{base}/stats", headers=OPS, timeout=30).json()
    assert stats["categories"][label][body["model"]]["alpha"] > 1.0

    # --- a user GMTRouter has never seen goes to the bandit
    r = httpx.post(f"{base}/route", json={"query": query}, headers={"Authorization": "Bearer k-new"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["mode"] != "gmtrouter"
