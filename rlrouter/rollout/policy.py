"""A trained Router-R1 policy answering the Router-R1 server protocol (``/router_r1/route``).

Loads a training checkpoint (``outputs/<run>/checkpoints/step_N``): the LoRA adapter is merged into
the base weights once into a cache folder, which a vLLM engine then serves at full speed (an adapter
served by vLLM runs at half speed on CPU). One query runs the policy's first turn: the candidate it
routes to is ``selected_model``; a policy that answers directly selects nobody, and the caller falls
back (``llm_routing_fallback``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

import yaml

from rlrouter.models import cache_dir, resolve_model
from rlrouter.pool.base import Candidate
from rlrouter.rollout.env import EnvConfig, SamplingSpec, prompt_ids
from rlrouter.rollout.parsing import parse_turn
from rlrouter.rollout.worker import RolloutWorker


def merged_policy_dir(checkpoint: str | Path, base_model: str, cache: str | Path | None = None) -> str:
    """Base model + the checkpoint's adapter merged into one HF folder (cached by checkpoint content)."""
    ck = Path(checkpoint)
    if (ck / "model" / "config.json").exists():  # a full fine-tuning checkpoint is already whole
        return str(ck / "model")
    adapter = ck / "adapter"
    if not (adapter / "adapter_config.json").exists():
        raise FileNotFoundError(f"{ck}: no adapter/ or model/ folder (not an rlrouter Router-R1 checkpoint)")
    digest = hashlib.sha1((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()[:16]
    out = Path(cache or cache_dir() / "router_r1") / digest
    if (out / "config.json").exists():
        return str(out)
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_path = resolve_model(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    merged.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return str(out)


def trained_env(checkpoint: str | Path) -> dict[str, Any]:
    """The episode settings (``rollout.env``) of the run that saved ``checkpoint``, read from the run's
    ``config.yaml`` (``<run>/checkpoints/step_N`` -> ``<run>/config.yaml``), so the policy is served with
    the turn budget it learned under; ``{}`` when the checkpoint is not inside such a run."""
    config = Path(checkpoint).resolve().parent.parent / "config.yaml"
    if not config.exists():
        return {}
    env = ((yaml.safe_load(config.read_text()) or {}).get("rollout") or {}).get("env") or {}
    return {k: v for k, v in env.items() if k in EnvConfig.__dataclass_fields__}


class RouterR1Policy:
    """Serve a Router-R1 checkpoint: ``route(query) -> {selected_model, thinking, full_response}``."""

    def __init__(self, checkpoint: str | None, base_model: str, candidates: Sequence[dict[str, Any]],
                 env: dict[str, Any] | None = None, engine: dict[str, Any] | None = None):
        """``checkpoint=None`` serves the untrained ``base_model`` (the policy before any training).
        ``env=None``: the episode settings the checkpoint's run trained with (``trained_env``), else
        ``EnvConfig``'s defaults."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.candidates = [Candidate(**{k: v for k, v in c.items() if k in Candidate.__dataclass_fields__})
                           for c in candidates]
        if env is None and checkpoint is not None:
            env = trained_env(checkpoint)
        self.env_cfg = EnvConfig(**(env or {}))
        if checkpoint is None:
            path, self.name, self.step = resolve_model(base_model), f"router-r1:base:{base_model}", 0
        else:
            path, self.name = merged_policy_dir(checkpoint, base_model), f"router-r1:{Path(checkpoint).name}"
            meta = Path(checkpoint) / "state.json"
            self.step = json.loads(meta.read_text()).get("step") if meta.exists() else None
        self.worker = RolloutWorker(path, {"enable_lora": False, **(engine or {})}, self.env_cfg, pool=None)

    def route(self, query: str) -> dict[str, str | None]:
        return self.route_batch([query])[0]

    def route_batch(self, queries: Sequence[str]) -> list[dict[str, str | None]]:
        """The policy's first turn for each query, greedy, in one engine call."""
        tok = self.worker.tokenizer
        ids = [prompt_ids(tok, q, self.candidates, self.env_cfg) for q in queries]
        spec = SamplingSpec(max_tokens=self.env_cfg.max_new_tokens, stop=["</search>", "</answer>"],
                            temperature=0.0, top_p=1.0, seed=0,
                            frequency_penalty=self.env_cfg.greedy_frequency_penalty)
        names = [c.name for c in self.candidates]
        out = []
        for gen in self.worker.generate_ids(ids, [spec] * len(ids)):
            text = self.env_cfg.prefill + tok.decode(gen, skip_special_tokens=True)
            turn = parse_turn(text, names)
            thinking = text.split("</think>", 1)[0].replace("<think>", "").strip() if "</think>" in text else ""
            out.append({"selected_model": turn.call.model if turn.call is not None else None,
                        "thinking": thinking, "full_response": text})
        return out
