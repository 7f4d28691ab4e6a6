"""Budgets through the running Serve app, over HTTP, with the official ``openai`` client.

Carol's key has a daily budget that re-routes (``fit``) and her tag ``team-x`` one that refuses (``reject``).
Named GPT-4 calls spend her budget until GPT-4 no longer fits: the next named call is a 429 naming the
budget, and ``auto`` then routes only to the candidate that still fits (Mixtral). The tag's small budget
then answers 429 in OpenAI's shape (``insufficient_quota``), which the openai client raises as a
``RateLimitError``. ``/v1/budgets`` and ``/metrics`` show the spend, and it survives the app's deletion and
redeployment (the ledger is read back).
"""

from __future__ import annotations

import re

import httpx
import pytest
import yaml

from tests.helpers import CONF_DIR, serve_app

pytestmark = [pytest.mark.ray, pytest.mark.slow]

KEY = "k-budget-user-00001"
HDR = {"Authorization": f"Bearer {KEY}"}
GPT4, MIXTRAL = "gpt-4-1106-preview", "mixtral-8x7b-instruct"


def _args(tmp_path_factory) -> tuple[dict, dict, object]:
    state = tmp_path_factory.mktemp("budgets")
    serving = {"dev": True, "budgets": {"path": str(state / "spend.log"), "limits": [
        {"name": "carol-daily", "user_id": "carol", "limit_usd": 0.03, "period": "day"},
        {"name": "team-x", "end_user": "team-x", "limit_usd": 0.0008, "period": "month", "on_exceed": "reject"}]}}
    args = {"pool": yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()),
            "selector": {"seed": 0, "storage_path": str(state / "state.json")}}
    return serving, args, state


def test_budgets_reroute_refuse_and_survive_a_redeploy(ray_cluster, shared_data, tmp_path_factory):
    import openai

    from rlrouter.data.logged import load_routellm

    prompts = load_routellm(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv").prompts[:40]
    serving, args, state = _args(tmp_path_factory)
    app = serve_app("rlrouter-budgets", KEY, "carol", serving, state, args)
    base = next(app)
    with httpx.Client(base_url=base, timeout=60) as client:
        def chat(model, i, **extra):
            return client.post("/v1/chat/completions", headers=HDR, json={
                "model": model, "messages": [{"role": "user", "content": prompts[i % len(prompts)]}], **extra})

        # GPT-4 by name until carol's budget cannot pay for another call
        codes = [chat(GPT4, i) for i in range(12)]
        refused = next(i for i, r in enumerate(codes) if r.status_code != 200)
        assert refused >= 1 and all(r.status_code == 200 for r in codes[:refused])
        err = codes[refused].json()["error"]
        assert codes[refused].status_code == 429 and err["type"] == "insufficient_quota"
        assert err["code"] == "budget_exceeded" and err["param"] == "budget" and "carol-daily" in err["message"]
        spent = client.get("/v1/budgets", headers=HDR).json()["accounts"][0]
        assert spent["budget"] == "carol-daily" and 0 < spent["remaining_usd"] < 0.03
        # 'auto' still answers, among the candidates that fit: only the cheap one
        routed = [chat("auto", i) for i in range(10)]
        assert all(r.status_code == 200 for r in routed), [r.text for r in routed if r.status_code != 200]
        assert {r.json()["model"] for r in routed} == {MIXTRAL}
        assert routed[0].json()["x_rlrouter"]["budget"]["accounts"][0]["budget"] == "carol-daily"

        # the tag's budget refuses once it is spent; the openai client sees a RateLimitError
        oai = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=60)
        ok = 0
        with pytest.raises(openai.RateLimitError) as e:
            for i in range(20):
                oai.chat.completions.create(model="auto", user="team-x",
                                            messages=[{"role": "user", "content": prompts[i]}])
                ok += 1
        assert ok >= 1 and e.value.body["code"] == "budget_exceeded" and "team-x" in e.value.body["message"]
        mine = client.get("/v1/budgets", headers=HDR, params={"end_user": "team-x"}).json()["accounts"]
        assert [a["budget"] for a in mine] == ["carol-daily", "team-x"]
        metrics = client.get("/metrics").text
        assert re.search(r'^rlrouter_budget_refusals_total\{budget="team-x"\} 1\.0$', metrics, re.M)
        assert re.search(r'^rlrouter_budget_spent_usd\{budget="carol-daily",tenant="user:carol"\} ', metrics, re.M)
    next(app, None)  # the app is deleted

    app = serve_app("rlrouter-budgets", KEY, "carol", serving, state, args)
    base = next(app)
    after = httpx.get(f"{base}/v1/budgets", headers=HDR, params={"end_user": "team-x"}, timeout=30).json()["accounts"]
    assert [round(a["spent_usd"], 9) for a in after] == [round(a["spent_usd"], 9) for a in mine]
    next(app, None)
