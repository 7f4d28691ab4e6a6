"""Thin Serve deployment around ``rlrouter.rollout.policy.RouterR1Policy`` (one vLLM engine).

Enable it in the app config:
    router_r1:
      import_path: serve.router_r1:RouterR1Deployment
      args: {checkpoint: outputs/<run>/checkpoints/step_000012, base_model: smollm2-135m-instruct,
             pool: conf/pool/routellm_replay.yaml}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ray import serve

ROOT = Path(__file__).resolve().parents[1]


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64)
class RouterR1Deployment:
    def __init__(self, checkpoint: str, base_model: str = "smollm2-135m-instruct",
                 pool: str | list[dict[str, Any]] = "conf/pool/routellm_replay.yaml",
                 env: dict[str, Any] | None = None, engine: dict[str, Any] | None = None):
        """``pool``: a pool config file, or its candidate list (``router_model_path`` passes the app's)."""
        from rlrouter.rollout.policy import RouterR1Policy

        if isinstance(pool, str):
            p = Path(pool)
            candidates = yaml.safe_load((p if p.is_absolute() else ROOT / p).read_text())["candidates"]
        else:
            candidates = list(pool)
        ck = Path(checkpoint)
        self.policy = RouterR1Policy(str(ck if ck.is_absolute() else ROOT / ck), base_model,
                                     candidates, env=env, engine=engine)

    def route(self, query: str) -> dict[str, Any]:
        return self.policy.route(query)
