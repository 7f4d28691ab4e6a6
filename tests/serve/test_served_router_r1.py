"""End to end: a Router-R1 policy saved by ``python jobs/train_router.py eval/router@router=router_r1`` (the
command docs/selector.md gives, run as a subprocess) and served by the running app: ``model: "router-router_r1"``
on ``/route`` and chat completions, one greedy policy turn on vLLM per request.

The policy is the untrained base SmolLM2-135M (``checkpoint: base``, no training fixture needed): it often
answers without routing, and then the router's ``default`` (weak) serves the call, as evaluate_router counts it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.helpers import ROOT, serve_app

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

APP = "rlrouter-served-router-r1"
KEY = "served-router-r1-test-key-0123456789"
H = {"Authorization": f"Bearer {KEY}"}
GPT4, MIXTRAL = "gpt-4-1106-preview", "mixtral-8x7b-instruct"


@pytest.fixture(scope="module")
def router_dir(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("r1") / "router_r1"
    cmd = [sys.executable, "jobs/train_router.py", "eval=smoke", "eval.max_prompts=50", "eval/router@router=router_r1",
           "router.checkpoint=base", f"output_dir={out}", f"hydra.run.dir={out.parent / 'hydra'}"]
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "train_router: saved 'router_r1' (router_r1, no threshold)" in done.stdout
    return out


@pytest.fixture(scope="module")
def base(ray_cluster, router_dir, tmp_path_factory):
    yield from serve_app(APP, KEY, "dana", {}, tmp_path_factory.mktemp("sel"),
                         args={"routers": {"router_r1": str(router_dir)}})


def test_router_r1_policy_through_the_running_app(base, router_dir, shared_data):
    from rlrouter.data.logged import load_routellm
    from rlrouter.routers.saved import read_manifest

    m = read_manifest(router_dir)
    assert m.type == "router_r1" and m.calibration is None and m.spec["checkpoint"] == "base"
    query = load_routellm(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv").prompts[7]
    r = httpx.post(f"{base}/route", json={"query": query, "model": "router-router_r1"}, headers=H, timeout=900)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "router:router_r1" and body["model"] in (GPT4, MIXTRAL)
    routes = body["router"]["report"]["policy_routes"]  # what the policy named ("none": it routed nowhere)
    assert sum(routes.values()) == 1
    if "none" in routes or body["router"]["report"]["unrouted"]:
        assert body["model"] == MIXTRAL  # the default: weak
    fb = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": "win"}, headers=H,
                    timeout=60)
    assert fb.status_code == 200 and fb.json()["router"]["learned"] is False, fb.text
    r = httpx.post(f"{base}/v1/chat/completions", headers=H, timeout=900,
                   json={"model": "router-router_r1", "messages": [{"role": "user", "content": query}]})
    assert r.status_code == 200, r.text
    assert r.json()["x_rlrouter"]["router"]["name"] == "router_r1"
    r = httpx.post(f"{base}/route", json={"query": query, "model": "router-router_r1-0.5"}, headers=H, timeout=60)
    assert r.status_code == 400 and "takes no threshold" in r.text
