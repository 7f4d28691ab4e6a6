"""Paths and small utilities shared by tests."""

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"


def hash_embed(texts: list[str]) -> np.ndarray:
    """Deterministic stand-in for MiniLM: graph construction is pure bookkeeping."""
    out = []
    for t in texts:
        seed = int.from_bytes(t.encode()[:8].ljust(8, b"\0"), "little") ^ len(t)
        out.append(np.random.default_rng(seed).normal(size=8))
    return np.asarray(out, dtype=np.float32)


def serve_app(name: str, key: str, user: str, serving: dict, state_dir: Path, args: dict | None = None,
              timeout_s: float = 180.0):
    """Deploy the Serve app (``serve.app.build_app``: the default config and pool) as ``name`` on the
    session's Ray cluster, with ``key`` for ``user`` in ``RLROUTER_API_KEYS`` (what docs/serve.md has a user
    export), ``serving`` overrides and more app ``args`` (e.g. ``routers``); yields its base URL once
    ``/health`` says the selector is up, and deletes the app after."""
    import importlib
    import socket
    import time

    import httpx
    import pytest
    from ray import serve
    from ray.serve.context import _get_global_client

    app_mod = importlib.import_module("serve.app")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": free})
    port = _get_global_client().http_config.port
    mp = pytest.MonkeyPatch()
    mp.setenv("RLROUTER_API_KEYS", f"{key}={user}")
    try:
        app = app_mod.build_app({"selector": {"storage_path": str(state_dir / "state.json"), "seed": 0},
                                 "serving": serving, **(args or {})})
    finally:
        mp.undo()
    serve.run(app, name=name, route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).json().get("selector") == "ok":
                break
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    yield url
    serve.delete(name)


def kill_train_worker_after_step_1(metrics: Path, timeout_s: float = 600):
    """Start a thread that SIGKILLs one of this process's Ray Train workers once ``metrics`` (the run's
    metrics.jsonl) holds its first row; returns (thread, the list of killed pids it fills)."""
    import os
    import signal
    import threading
    import time

    import psutil

    killed: list[int] = []

    def kill() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not killed:
            if metrics.exists() and metrics.read_text().strip():
                for p in psutil.Process(os.getpid()).children(recursive=True):
                    try:
                        if "ray::RayTrainWorker" in " ".join(p.cmdline()):
                            os.kill(p.pid, signal.SIGKILL)
                            killed.append(p.pid)
                            break
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        continue
            time.sleep(0.2)

    th = threading.Thread(target=kill, daemon=True)
    th.start()
    return th, killed
