"""Starting the app from a config file (``python -m serve.run``) on the session's Ray cluster: a config
error stops the command with the builder's message instead of leaving a proxy that answers 404 everywhere."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.slow]

BOUND_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_placeholder_key_stops_serve_run_with_the_message(ray_cluster, tmp_path):
    config = yaml.safe_load((ROOT / "serve" / "config.yaml").read_text())
    config["http_options"]["port"] = _free_port()  # only used when Serve is not running yet
    app = config["applications"][0]
    # its own name and prefix: other modules' apps may be running on this cluster at "/"
    app.update(name="rlrouter-placeholder-key", route_prefix="/placeholder-key")
    app["runtime_env"]["env_vars"].update(RLROUTER_API_KEYS="change-me=alice", PYTHONPATH=str(ROOT))
    app["args"]["selector"]["storage_path"] = str(tmp_path / "state.json")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    address = ray_cluster.get_runtime_context().gcs_address
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "serve.run", str(path), "--address", address], cwd=ROOT,
                       capture_output=True, text=True, timeout=BOUND_S,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "placeholder key(s) for user(s) ['alice']" in out and "dev=true" in out, out
    assert "rlrouter serve: error: " in r.stderr, r.stderr
    assert took < BOUND_S
    from ray import serve

    assert "rlrouter-placeholder-key" not in serve.status().applications  # not left DEPLOY_FAILED
