"""Ray Serve direct ingress (``RAY_SERVE_ENABLE_DIRECT_INGRESS=1``, Ray 2.60) with the selector replica
as the ingress, as serve/config.yaml runs it: HTTP goes to the replica's own port, no Serve proxy.

The flag is read when Ray's processes start, so the app runs on a Ray cluster of its own in a child
process (``python tests/serve/test_direct_ingress.py``), which prints what it saw.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def child(state: str) -> dict:
    import httpx
    import ray
    import yaml
    from ray import serve

    sys.path.insert(0, str(ROOT))
    from rlrouter.distributed.cluster import direct_ingress_port

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **ENV}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        proxy_port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": proxy_port})
    import serve.app as app_mod  # noqa: E402 - the repo's serve/ package (ROOT first on the path)

    args = {"pool": yaml.safe_load((ROOT / "conf" / "pool" / "routellm_replay.yaml").read_text()),
            "selector": {"storage_path": state, "seed": 0},
            "serving": {"api_keys": [{"key": "k-alice", "user_id": "alice"}], "dev": True}}
    serve.run(app_mod.build_app(args), name="rlrouter-direct", route_prefix="/")
    port = direct_ingress_port("rlrouter-direct", proxy_port)
    base, h = f"http://127.0.0.1:{port}", {"Authorization": "Bearer k-alice"}
    out = {"port": port, "proxy_port": proxy_port,
           "deployments": sorted(serve.status().applications["rlrouter-direct"].deployments)}
    out["unauthorised"] = httpx.post(f"{base}/route", json={"query": "hi"}, timeout=30).status_code
    r = httpx.post(f"{base}/route", json={"query": "What is 2+2?"}, headers=h, timeout=30)
    out["route"] = r.status_code
    r = httpx.post(f"{base}/feedback", json={"request_id": r.json()["request_id"], "outcome": "win"}, headers=h,
                   timeout=30)
    out["feedback"], out["durable"] = r.status_code, r.json().get("durable")
    out["wal_bytes"] = Path(state + ".wal").stat().st_size if Path(state + ".wal").exists() else 0
    out["stats_global"] = httpx.get(f"{base}/stats", headers=h, timeout=30).json()["global"]
    # the proxy's /health names the replica's port (it moves on redeploy)
    out["health"] = httpx.get(f"http://127.0.0.1:{proxy_port}/health", timeout=30).json()
    out["health_direct"] = httpx.get(f"{base}/health", timeout=30).json()
    serve.shutdown()
    ray.shutdown()
    return out


@pytest.mark.timeout(300)
def test_direct_ingress_to_the_selector_replica(tmp_path):
    state = str(tmp_path / "state.json")
    proc = subprocess.run([sys.executable, __file__, state], capture_output=True, text=True, timeout=280,
                          env={**os.environ, **ENV, "HF_HUB_OFFLINE": "1"}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["deployments"] == ["SelectorDeployment"]  # the selector replica is the ingress
    assert 30000 <= out["port"] <= 31000 and out["port"] != out["proxy_port"]
    assert out["unauthorised"] == 401 and out["route"] == 200
    assert out["feedback"] == 200 and out["durable"] is True and out["wal_bytes"] > 0
    assert sum(p["alpha"] for p in out["stats_global"].values()) == 3.0  # 2 priors of 1, plus the win
    assert out["health"]["direct_ingress_ports"] == [out["port"]] and out["health"]["port"] == out["proxy_port"]
    assert out["health_direct"]["port"] == out["port"]


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1])))
