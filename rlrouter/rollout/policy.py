"""A trained Router-R1 policy answering the Router-R1 server protocol (``/router_r1/route``).

Loads a training checkpoint (``outputs/<run>/checkpoints/step_N``): the LoRA adapter is merged into
the base weights once into a cache folder, which a vLLM engine then serves at full speed (an adapter
served by vLLM runs at half speed on CPU). One query runs the policy's first turn: the candidate it
routes to is ``selected_model``; a policy that answers directly selects nobody, and the caller falls
back (``llm_routing_fallback``). A policy trained as a cascade's second stage (its run's
``eval.first_call_written``) is run with ``first_call_written=True`` instead: its episode starts after a
written call to the cheapest candidate, and ``selected_model`` is the last candidate it called.
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
from rlrouter.protocol import last_thinking
from rlrouter.rollout.demos import answer_turn, search_turn, with_first_turn
from rlrouter.rollout.env import EnvConfig, SamplingSpec, constrained, prompt_ids
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


def run_config(checkpoint: str | Path) -> dict[str, Any]:
    """The config of the run that saved ``checkpoint`` (``<run>/checkpoints/step_N`` -> ``<run>/config.yaml``);
    ``{}`` when the checkpoint is not inside such a run."""
    config = Path(checkpoint).resolve().parent.parent / "config.yaml"
    return (yaml.safe_load(config.read_text()) or {}) if config.exists() else {}


def trained_env(checkpoint: str | Path) -> dict[str, Any]:
    """The episode settings (``rollout.env``) of the run that saved ``checkpoint``, so the policy is served
    with the turn budget it learned under; ``{}`` when the checkpoint is not inside such a run."""
    env = (run_config(checkpoint).get("rollout") or {}).get("env") or {}
    return {k: v for k, v in env.items() if k in EnvConfig.__dataclass_fields__}


def trained_first_call(checkpoint: str | Path) -> tuple[bool, int]:
    """Whether the run that saved ``checkpoint`` evaluated its policy after a written call to the cheapest
    candidate (``eval.first_call_written``: the policy is the second stage of a cascade), and the words of
    the question that call's sub-query keeps (``train.warmup_query_words``)."""
    cfg = run_config(checkpoint)
    return (bool((cfg.get("eval") or {}).get("first_call_written", False)),
            int((cfg.get("train") or {}).get("warmup_query_words", 24)))


FIRST_CALLS = ("auto", "written", "policy")


def resolve_first_call(checkpoint: str | Path | None, first_call: str = "auto",
                       where: str = "first_call") -> tuple[bool, int]:
    """How to run a checkpoint: ``(first_call_written, query_words)`` for ``RouterR1Policy``. ``first_call``:
    ``auto`` (as the checkpoint's run evaluated it, ``trained_first_call``), ``written`` (a cascade's second
    stage: each episode starts after a written call to the cheapest candidate) or ``policy`` (the policy's own
    first turn). ``checkpoint=None``: the untrained base policy (its own first turn under ``auto``)."""
    if first_call not in FIRST_CALLS:
        raise ValueError(f"{where} must be 'auto', 'written' or 'policy', got {first_call!r}")
    written, query_words = trained_first_call(checkpoint) if checkpoint is not None else (False, 24)
    return (written if first_call == "auto" else first_call == "written"), query_words


ESCALATE_WORD = search_turn("m", "q").split()[0]
"""The first word of the demonstrated escalating turn ("I" of "I will ask"), the answering one's ("The" of "The reply
says") below: where a policy's turn after a reply chooses between them (``benchmarks/bench_escalation.py``)."""
ANSWER_WORD = answer_turn("a").removeprefix("<think>").split()[0]


def decision_index(pieces: Sequence[str]) -> int | None:
    """In a turn's tokens (decoded one by one), the index of the first token with text after the turn's ``<think>``:
    where a demonstrated escalating turn ("I will ask") and answering one ("The reply says") part. None when the turn
    opens no think block or writes nothing in it."""
    text = ""
    for i, piece in enumerate(pieces):
        if "<think>" in text and piece.strip():
            return i
        text += piece
    return None


CASCADE_UNTIL = ("answer", "route")


def check_until(until: str, where: str) -> str:
    """``until`` of a cascade's episodes (``RouterR1Policy``), or a ValueError naming ``where``."""
    if until not in CASCADE_UNTIL:
        raise ValueError(f"{where}: expected one of {CASCADE_UNTIL}, got {until!r}")
    return until


class RouterR1Policy:
    """Serve a Router-R1 checkpoint: ``route(query) -> {selected_model, thinking, full_response}``."""

    def __init__(self, checkpoint: str | None, base_model: str, candidates: Sequence[dict[str, Any]],
                 env: dict[str, Any] | None = None, engine: dict[str, Any] | None = None,
                 pool: dict[str, Any] | None = None, first_call_written: bool = False, query_words: int = 24,
                 until: str = "answer"):
        """``checkpoint=None`` serves the untrained ``base_model`` (the policy before any training).
        Episode settings: the checkpoint's run's (``trained_env``), else ``EnvConfig``'s defaults, with
        ``env``'s fields over them (e.g. ``{"greedy_frequency_penalty": 0}``). ``first_call_written``: each query's episode starts after a written call
        to the cheapest candidate (its first ``query_words`` words), and the policy decides, having read that
        reply, whether to call another (``cascade_batch``); it needs ``pool``, the pool config whose
        candidates answer the calls. ``until`` (a cascade's episodes): ``answer`` runs each to its end, as the
        training job evaluates it (the route is the last candidate called); ``route`` stops once the policy writes
        its call after the cheap reply, before that call is sent (no strong call inside the decision, no answer
        turn). The two differ only for a policy that calls a third time."""
        self.until = check_until(until, "RouterR1Policy: until")
        if first_call_written and pool is None:
            raise ValueError("RouterR1Policy: first_call_written needs a pool (the candidates that answer the "
                             "written call and any the policy makes after it)")
        self.first_call_written, self.query_words = bool(first_call_written), int(query_words)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.candidates = [Candidate(**{k: v for k, v in c.items() if k in Candidate.__dataclass_fields__})
                           for c in candidates]
        if checkpoint is not None:  # the settings it trained with, ``env``'s fields over them
            env = {**trained_env(checkpoint), **(env or {})}
        self.env_cfg = EnvConfig(**(env or {}))
        if checkpoint is None:
            path, self.name, self.step = resolve_model(base_model), f"router-r1:base:{base_model}", 0
        else:
            path, self.name = merged_policy_dir(checkpoint, base_model), f"router-r1:{Path(checkpoint).name}"
            meta = Path(checkpoint) / "state.json"
            self.step = json.loads(meta.read_text()).get("step") if meta.exists() else None
        self.worker = RolloutWorker(path, {"enable_lora": False, **(engine or {})}, self.env_cfg,
                                    pool=pool if first_call_written else None)
        self.cheap = min(self.candidates, key=lambda c: (c.price_out, c.name)).name

    def route(self, query: str) -> dict[str, str | None]:
        return self.route_batch([query])[0]

    def cascade_batch(self, queries: Sequence[str]) -> list[dict[str, Any]]:
        """Each query's episode, greedy, starting after the written call to the cheapest candidate
        (``with_first_turn``, as the training job's ``eval.first_call_written``), to its end or to the call after
        the cheap reply (``until``): ``calls`` (the candidates called, in order; under ``until="route"`` the last
        is written but not sent), ``selected_model`` (the last one called: the reply the policy copies) and
        ``escalated`` (whether it called another after reading the cheap reply), ``thinking`` (its last turn's)."""
        out = []
        for t in self._cascade_trajectories(queries):
            calls = self._calls(t)
            out.append({"selected_model": calls["calls"][-1] if calls["calls"] else None, **calls,
                        "thinking": last_thinking(t.text), "full_response": t.text})
        return out

    def _calls(self, t: Any) -> dict[str, Any]:
        """A cascade episode's ``calls`` (in order) and whether it ``escalated`` past the cheap call."""
        calls = [r.model for r in t.routes]
        return {"calls": calls, "escalated": any(c != self.cheap for c in calls[1:])}

    def _cascade_trajectories(self, queries: Sequence[str], until: str | None = None) -> list[Any]:
        if not self.first_call_written:
            raise ValueError("RouterR1Policy: a cascade's episodes need first_call_written=True (and a pool)")
        stop = {"stop_at_call": 2} if (until or self.until) == "route" else {}
        items = [with_first_turn({"query": q, "ground_truth": [], **stop}, self.cheap, self.query_words) for q in queries]
        return sorted(self.worker.rollout(items, n_samples=1, seed=0, step=0, temperature=0.0),
                      key=lambda t: t.prompt_index)

    def escalation_odds(self, queries: Sequence[str]) -> list[dict[str, Any]]:
        """For a cascade's second stage: each query's log-odds of escalating after reading the cheap reply, read
        where the policy's turn after that reply chooses (``decision_index``): log p(``ESCALATE_WORD``) - log
        p(``ANSWER_WORD``) as its next token, greedy episode up to there. With it the policy's escalations are a
        score a threshold can cut at any share of strong calls. Each row: ``odds`` (None when the turn has no
        decision point), ``word`` (what greedy decoding wrote there), ``escalated`` (what it did) and ``calls``
        (the episodes stop at the call after the cheap reply, unsent, whatever ``until``: nothing after it is read)."""
        tok = self.worker.tokenizer
        words = [tok.encode(w, add_special_tokens=False)[0] for w in (ESCALATE_WORD, ANSWER_WORD)]
        rows, read = [], []  # read: (row, the episode's tokens up to its decision point)
        for t in self._cascade_trajectories(queries, "route"):  # the score is read before the call after the reply
            row = {**self._calls(t), "odds": None, "word": None}
            segs = t.tokens.segments
            first = next((i for i, sg in enumerate(segs) if sg.policy), None)
            pieces = [] if first is None else [tok.decode([x]) for x in segs[first].token_ids]
            j = decision_index(pieces)
            if j is not None:
                row["word"] = pieces[j]  # what greedy decoding wrote there
                read.append((row, [x for sg in segs[:first] for x in sg.token_ids] + list(segs[first].token_ids[:j])))
            rows.append(row)
        if read:
            for (row, _), (up, down) in zip(read, self.worker.next_token_logprobs([p for _, p in read], words)):
                row["odds"] = up - down
        return rows

    def route_batch(self, queries: Sequence[str]) -> list[dict[str, Any]]:
        """The policy's first turn for each query, greedy, in one engine call (``first_call_written``: its
        whole episode after the cheap call, ``cascade_batch``)."""
        if self.first_call_written:
            return self.cascade_batch(queries)
        tok = self.worker.tokenizer
        ids = [prompt_ids(tok, q, self.candidates, self.env_cfg) for q in queries]
        names = [c.name for c in self.candidates]
        spec = constrained(SamplingSpec(max_tokens=self.env_cfg.max_new_tokens, stop=["</search>", "</answer>"],
                                        temperature=0.0, top_p=1.0, seed=0,
                                        frequency_penalty=self.env_cfg.greedy_frequency_penalty),
                           names, self.env_cfg)
        out = []
        for gen in self.worker.generate_ids(ids, [spec] * len(ids)):
            text = self.env_cfg.prefill + tok.decode(gen, skip_special_tokens=True)
            turn = parse_turn(text, names)
            out.append({"selected_model": turn.call.model if turn.call is not None else None,
                        "thinking": last_thinking(text), "full_response": text})
        return out
