"""docs/serve.md "On a running Ray head", run as printed on a private token-auth head (``ray start --head``):
the app starts and answers; a shell without ``RAY_AUTH_MODE=token``, or with another token, gets
``python -m serve.run``'s error naming the fix instead of Ray's bare AuthenticationError."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import httpx
import pytest
import yaml

from tests.helpers import ROOT
from tests.ops.headnode import LocalHead

pytestmark = [pytest.mark.ray, pytest.mark.slow]

KEY = "5e1d9c3b7a2f4e6d8c0b1a3f5e7d9c2b"


def recipe() -> list[str]:
    """The recipe's shell lines, as docs/serve.md prints them (comments dropped)."""
    text = (ROOT / "docs" / "serve.md").read_text()
    section = text[text.index("### On a running Ray head"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [ln.split("   #")[0].strip() for ln in block.splitlines() if ln.strip()]


def test_the_recipe_says_what_the_test_does():
    lines = recipe()
    assert lines[0].startswith("export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=")
    assert any(ln.startswith("export RLROUTER_API_KEYS=") for ln in lines)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ray start --head"))
    assert start > next(i for i, ln in enumerate(lines) if ln.startswith("export RLROUTER_API_KEYS="))
    assert lines[-2:] == ["export RAY_ADDRESS=127.0.0.1:6379", "python -m serve.run serve/config.yaml --non-blocking"]


@pytest.mark.timeout(900)
def test_serve_md_recipe_on_a_token_head(tmp_path, shared_data):
    serve_line = shlex.split(recipe()[-1])
    # the head has the shell's environment: the mode, the token and the keys were exported before `ray start`
    head = LocalHead(num_cpus=3, extra_env={"RLROUTER_API_KEYS": f"{KEY}=alice"})
    config = yaml.safe_load((ROOT / "serve" / "config.yaml").read_text())
    config["http_options"]["port"] = head.serve_port  # the head's free port instead of 8000
    config["applications"][0]["args"]["selector"]["storage_path"] = str(tmp_path / "state.json")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [sys.executable if a == "python" else str(path) if a == "serve/config.yaml" else a for a in serve_line]
    try:
        head.start()
        env = {**head.env(), "RAY_ADDRESS": f"127.0.0.1:{head.gcs_port}"}
        # a shell that did not export the mode (Ray's default: disabled), then one with another token
        no_mode = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
        wrong = {**head.env(with_token=False), "RAY_ADDRESS": env["RAY_ADDRESS"]}
        for shell, fix in ((no_mode, "export RAY_AUTH_MODE=token"), (wrong, "point RAY_AUTH_TOKEN_PATH")):
            r = subprocess.run(cmd, cwd=ROOT, env=shell, capture_output=True, text=True, timeout=180)
            assert r.returncode == 1 and fix in r.stderr and "docs/serve.md" in r.stderr, r.stdout + r.stderr
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "RUNNING" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
        base = f"http://127.0.0.1:{head.serve_port}"
        assert httpx.get(f"{base}/health", timeout=30).json()["selector"] == "ok"
        routed = httpx.post(f"{base}/route", json={"query": "What is 2+2?"}, timeout=60,
                            headers={"Authorization": f"Bearer {KEY}"})
        assert routed.status_code == 200, routed.text
    finally:
        head.stop()
        head.cleanup()
