"""Connect to Ray: the cluster a job was submitted to, the cluster running on this node, or an embedded one.

``ray job submit`` sets ``RAY_ADDRESS`` for the entry point. A job started by hand on a node of a running
cluster (the head of ``cluster.yaml``) has no ``RAY_ADDRESS``, but ``ray start`` left the cluster's
address in ``<ray temp dir>/ray_current_cluster``: the job joins that cluster, as ``ray.init()`` would,
and passes it no ``num_cpus`` / ``num_gpus`` (Ray refuses those for a cluster that exists). Only with
neither does the job start an embedded cluster of ``ray.num_cpus`` CPUs. So the same job file runs
all three ways.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def running_cluster_address() -> str | None:
    """The address of the Ray cluster ``ray start`` started on this machine (Ray's own lookup: the file
    ``ray_current_cluster`` in the Ray temp dir, ``$RAY_TMPDIR/ray`` or ``/tmp/ray``), or None. A head
    started with another ``--temp-dir`` is found only through ``RAY_ADDRESS`` or ``RAY_TMPDIR``."""
    from ray._private.services import get_ray_address_from_environment

    saved = os.environ.pop("RAY_ADDRESS", None)  # only the file: RAY_ADDRESS is handled by connect
    try:
        return get_ray_address_from_environment(None, None)
    finally:
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved


def connect(num_cpus: int | None = None, num_gpus: int | None = None, env_vars: dict[str, str] | None = None,
            include_dashboard: bool = False) -> dict[str, Any]:
    import ray

    if ray.is_initialized():
        return {"mode": "existing", "address": ray.get_runtime_context().gcs_address}
    env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "TOKENIZERS_PARALLELISM": "false", **(env_vars or {})}
    for k in ("TRANSFORMERS_OFFLINE", "RLROUTER_CACHE"):
        if k in os.environ:
            env.setdefault(k, os.environ[k])
    if os.environ.get("RAY_ADDRESS"):
        # a submitted job's runtime env may set these already; Ray refuses to merge a conflicting value
        env = {k: v for k, v in env.items() if k not in os.environ}
        ray.init(address=os.environ["RAY_ADDRESS"], runtime_env={"env_vars": env})
        return {"mode": "submitted", "address": os.environ["RAY_ADDRESS"]}
    # workers import rlrouter from this checkout, wherever the job was started from
    root = str(Path(__file__).resolve().parents[2])
    env.setdefault("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).strip(os.pathsep))
    running = running_cluster_address()
    if running:
        # the head of a running cluster (no RAY_ADDRESS): join it; ray.num_cpus sizes only an embedded cluster
        ray.init(address=running, runtime_env={"env_vars": env})
        return {"mode": "running", "address": running}
    ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=include_dashboard,
             runtime_env={"env_vars": env})
    return {"mode": "embedded", "address": ray.get_runtime_context().gcs_address}


def direct_ingress_port(app: str, proxy_port: int, timeout_s: float = 60.0) -> int:
    """The HTTP port of a Serve app's ingress replica (direct ingress: Serve allocates it from
    RAY_SERVE_DIRECT_INGRESS_MIN/MAX_HTTP_PORT, 30000-31000 by default, and lists it as a target)."""
    import ray
    from ray.serve.context import _get_global_client

    controller = _get_global_client()._controller
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        details = ray.get(controller.get_serve_instance_details.remote())
        for tg in details.get("target_groups", []):
            if tg.get("app_name") == app and str(tg.get("protocol")).upper().endswith("HTTP"):
                ports = [t["port"] for t in tg["targets"] if t["port"] != proxy_port]
                if ports:
                    return ports[0]
        time.sleep(0.5)
    raise TimeoutError(f"no direct-ingress HTTP target for app {app!r}: {details.get('target_groups')}")
