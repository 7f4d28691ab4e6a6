"""Thin Serve deployment around ``rlrouter.rollout.policy.RouterR1Policy`` (one vLLM engine).

Enable it in the app config:
    router_r1:
      import_path: serve.router_r1:RouterR1Deployment
      args: {checkpoint: outputs/<run>/checkpoints/step_000012, base_model: smollm2-135m-instruct,
             pool: conf/pool/routellm_replay.yaml}

A checkpoint whose run evaluated it as a cascade's second stage (``eval.first_call_written``) is served that
way (``first_call: auto``): each query's episode starts after a written call to the pool's cheapest candidate,
the policy reads that reply and may call another, and ``selected_model`` is the last candidate it called. Those
calls run inside the decision, on the pool's candidates, and by default (``until: route``) the decision ends once the
policy writes its call after the cheap reply, before that call is sent; ``until: answer`` runs the whole episode.
``first_call: policy`` serves its first turn only.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ray import serve

ROOT = Path(__file__).resolve().parents[1]


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64)
class RouterR1Deployment:
    def __init__(self, checkpoint: str, base_model: str = "smollm2-135m-instruct",
                 pool: str | list[dict[str, Any]] = "conf/pool/routellm_replay.yaml",
                 env: dict[str, Any] | None = None, engine: dict[str, Any] | None = None, first_call: str = "auto",
                 until: str = "route"):
        """``pool``: a pool config file, or its candidate list (``router_model_path`` passes the app's);
        ``first_call``: ``auto``, ``written`` or ``policy`` (``rlrouter.rollout.policy.resolve_first_call``);
        ``until`` (a cascade): ``route`` ends the decision once the policy writes its call after the cheap reply,
        unsent; ``answer`` runs the whole episode, as the training job evaluated it."""
        from rlrouter.pool import read_pool_config
        from rlrouter.rollout.policy import RouterR1Policy, check_until, resolve_first_call

        pool_cfg = read_pool_config(pool, ROOT, "router_r1.args.pool")
        check_until(until, "router_r1.args.until")
        ck = Path(checkpoint)
        ck = ck if ck.is_absolute() else ROOT / ck
        written, query_words = resolve_first_call(ck, first_call, "router_r1.args.first_call")
        self.policy = RouterR1Policy(str(ck), base_model, pool_cfg["candidates"], env=env, engine=engine,
                                     pool=pool_cfg if written else None, first_call_written=written,
                                     query_words=query_words, until=until)
        self.lock = threading.Lock()  # Serve runs this sync method in a thread pool; one engine call at a time

    def route(self, query: str) -> dict[str, Any]:
        with self.lock:
            return self.policy.route(query)
