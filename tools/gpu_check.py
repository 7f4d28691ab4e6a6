"""The GPU path's device check: what a lent GPU must confirm, stage by stage, in at most 7 minutes.

Each stage runs in its own process (a CUDA failure or an out-of-memory cannot take the others down) and
prints one line, ``PASS <stage> {json}`` or ``FAIL <stage> {json}``; all of them go into one result file.
The same script runs on CPU at toy size in ``make test`` (``tests/ops/test_gpu_check.py``), so it cannot rot.

    python tools/gpu_check.py                      # CUDA: full size; CPU: toy size
    make gpu-check                                 # the same, with the project's .venv
    python tools/gpu_check.py --render             # the result files -> docs/gpu.md's "device check" table

On a lent machine (Python 3.12, torch with CUDA, transformers, peft, accelerate, safetensors, tokenizers,
pytest; no ray, vllm, hydra or network), from the tree's root: ``PYTHONPATH=. python tools/gpu_check.py``.
Nothing is downloaded: the models are built from a config with random weights, the tokenizer is built here.

Stages:

- ``env``: versions, the device, bf16, NCCL;
- ``logits``: the learner's log-prob + entropy pass at the presets' shape (4 rows x 3,500 positions x Qwen2.5's
  151,936 vocabulary; toy: 1 x 1,024 x 32,768), bytes per logits element against ``rlrouter/learner/memory.py``;
- ``scale``: a learner shaped like Qwen2.5-3B (hidden 2048, MLP 11008, 16/2 heads of 128, its vocabulary) with
  4 layers and random weights, FSDP2 on NCCL with one rank, bf16, gradient checkpointing, the PPO preset's
  micro-batch 4 and a 3,500-position window in 4,096: one GRPO step's peak memory against the plan, tokens/s;
- ``checkpoint``: a step, a save to a ``file://`` URI, a restore into a fresh learner, the next step equal;
- ``loop``: the training loop's path on the device without Ray or vLLM: multi-turn Router-R1 rollouts with the
  HF backend (``HFGenerator``, bf16 on CUDA) against a replay pool built here (each episode opens with a
  written call that the pool answers, then the policy samples two turns), one GRPO step of the learner
  (FSDP2, one rank), the packed weight push into the generator (``make_payload`` buckets, each as raw bytes
  through ``pack_named_tensors`` / ``unpack_named_tensors``, as a vLLM worker gets them; every tensor
  bit-exact), and the log-prob gap of fresh rollouts after it (the learner's against the generator's);
- ``gpu_tests``: the ``-m gpu`` tests (``tests/learner/test_gpu.py``: they skip on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
from rlrouter.provenance import write_result  # noqa: E402

# what the check's result depends on (rlrouter.provenance: the staleness report lists it when these change)
MEASURES = ("tools/gpu_check.py", "rlrouter/learner", "rlrouter/rollout", "rlrouter/sync", "rlrouter/engine.py",
            "rlrouter/distributed", "rlrouter/algos")
STAGES = ["env", "logits", "scale", "checkpoint", "loop", "gpu_tests"]
# the stage's wall-clock limit at full size; their sum stays under 7 minutes with the starts (420 s). The loop's
# 70 s came from env and logits (60 -> 40 each: imports and one pass), scale (150 -> 135) and checkpoint
# (90 -> 75); none of them has been timed on a GPU yet
LIMIT_S = {"env": 40, "logits": 40, "scale": 135, "checkpoint": 75, "loop": 70, "gpu_tests": 60}
QWEN = dict(hidden_size=2048, intermediate_size=11008, num_attention_heads=16, num_key_value_heads=2,
            head_dim=128, vocab_size=151_936)
TOY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
           vocab_size=8_192)


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# --- the pieces the stages share --------------------------------------------------------------------
def build_model(folder: Path, dims: dict[str, int], layers: int) -> str:
    """A Qwen2-shaped causal LM with random weights (seed 0) and a byte-level tokenizer built here: ``<pad>`` 0,
    ``<eos>`` 1, the 256 bytes, then 1,000 words ("w0", ...). Any text round-trips, so a Router-R1 turn written
    for the policy parses back (``loop``); the model's ids past the tokenizer's decode to nothing."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    cfg = Qwen2Config(num_hidden_layers=layers, tie_word_embeddings=True, max_position_embeddings=4096,
                      rope_theta=1e6, **dims)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(alphabet)},
             **{f"w{i}": i + 2 + len(alphabet) for i in range(1000)}}
    tok = Tokenizer(models.BPE(vocab, []))  # no merges: one token per byte
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>").save_pretrained(folder)
    return str(folder)


def trajectories(rows: int, prompt: int, window: int, vocab: int, seed: int = 0) -> list[Any]:
    """``rows`` trajectories of ``prompt`` prompt tokens then ``window`` policy tokens (random ids)."""
    import torch

    from rlrouter.rollout.parsing import TrajectoryTokens

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rows):
        ids = torch.randint(2, vocab, (prompt + window,), generator=g).tolist()
        t = TrajectoryTokens(ids[:prompt])
        t.add_policy(ids[prompt:], [0.0] * window)
        out.append(t)
    return out


def init_one_rank() -> str:
    """torch.distributed with one rank (NCCL on CUDA, gloo on CPU); the rank's device."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    backend = "nccl" if cuda() else "gloo"
    if cuda():
        torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=0, world_size=1)
    return "cuda:0" if cuda() else "cpu"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def learner_for(model: str, device: str, micro_batch: int, gradient_checkpointing: bool = True,
                dtype: str = "bfloat16", lr: float = 1e-5) -> Any:
    from rlrouter.learner.learner import Learner, LearnerConfig

    cfg = LearnerConfig(model=model, lora=False, algo="grpo", lr=lr, micro_batch_size=micro_batch,
                        strategy="fsdp", dtype=dtype, gradient_checkpointing=gradient_checkpointing,
                        grpo={"group_size": micro_batch})
    return Learner(cfg, 0, 1, device=device)


def rewards(n: int) -> list[float]:
    return [1.0 if i % 2 else -1.0 for i in range(n)]


# --- the stages: each returns (passed, facts) ------------------------------------------------------------
def stage_env(full: bool) -> tuple[bool, dict[str, Any]]:
    import peft
    import torch
    import torch.distributed as dist
    import transformers

    facts = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
             "peft": peft.__version__, "cuda": torch.version.cuda, "device": "cpu", "nccl": dist.is_nccl_available()}
    if cuda():
        facts.update(device=torch.cuda.get_device_name(0), bf16=torch.cuda.is_bf16_supported(),
                     gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
        return bool(facts["bf16"] and facts["nccl"]), facts
    return True, facts


def stage_logits(full: bool) -> tuple[bool, dict[str, Any]]:
    """Bytes per logits element of the learner's pass, forward + backward, beyond the bf16 logits."""
    from rlrouter.algos.common import LOGITS_CHUNK
    from rlrouter.learner.memory import CHUNK_BYTES, LOGITS_BYTES, measure_logits_bytes

    # toy: big enough that the process's own few MB of allocator noise stay under 0.3 B an element (at
    # 1 x 512 x 8,192 they were up to 2 B, and the stage failed now and then)
    rows, window, vocab = (4, 3500, QWEN["vocab_size"]) if full else (1, 1024, 32_768)
    plan = (LOGITS_BYTES - 2) + CHUNK_BYTES * min(LOGITS_CHUNK, window) / window
    if cuda():
        import torch

        from rlrouter.algos.common import chunked_logprobs_and_entropy

        logits = torch.randn(rows, window + 1, vocab, device="cuda", dtype=torch.bfloat16).requires_grad_()
        ids = torch.randint(0, vocab, (rows, window + 1), device="cuda")
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        logp, entropy = chunked_logprobs_and_entropy(logits, ids, 0.7, entropy_grad=True)
        (logp.sum() + entropy.sum()).backward()
        torch.cuda.synchronize()
        measured = (torch.cuda.max_memory_allocated() - base) / (rows * window * vocab)
        facts = {"rows": rows, "window": window, "vocab": vocab, "bytes_per_element": round(measured, 2)}
    else:
        m = measure_logits_bytes("chunked", rows, window, vocab, entropy_grad=True)
        facts = {"rows": rows, "window": window, "vocab": vocab,
                 "bytes_per_element": round(m["backward_bytes_per_element"], 2)}
    facts["plan_bytes_per_element"] = round(plan, 2)
    return facts["bytes_per_element"] <= plan, facts


def stage_scale(full: bool) -> tuple[bool, dict[str, Any]]:
    """One GRPO step of a Qwen2.5-3B-shaped learner (4 layers) under FSDP2 with one rank: peak memory
    against ``learner_memory_gib`` for the same shape, tokens/s."""
    import torch

    from rlrouter.learner.memory import ModelDims, learner_memory_gib

    dims, layers, rows, prompt, window = (QWEN, 4, 4, 596, 3500) if full else (TOY, 2, 2, 16, 48)
    device = init_one_rank()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        model = build_model(Path(d), dims, layers)
        learner = learner_for(model, device, rows)
        params = sum(p.numel() for p in learner.policy.parameters())
        emb = dims["vocab_size"] * dims["hidden_size"]
        trajs = trajectories(rows, prompt, window, dims["vocab_size"])
        learner.train_step(trajs, rewards(rows))  # warm-up: allocator, kernels
        if cuda():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        m = learner.train_step(trajs, rewards(rows))
        if cuda():
            torch.cuda.synchronize()
        took = time.perf_counter() - t0
    plan = learner_memory_gib(ModelDims(params=params, hidden=dims["hidden_size"], intermediate=dims["intermediate_size"],
                                        layers=layers, vocab=dims["vocab_size"], layer_params=(params - emb) / layers,
                                        embedding_params=emb),
                              ranks=1, micro_batch=rows, seq_len=prompt + window, logits_window=window)
    facts = {"layers": layers, "params_m": round(params / 1e6, 1), "rows": rows, "tokens": prompt + window,
             "window": window, "step_s": round(took, 2), "tokens_per_s": round(rows * (prompt + window) / took, 1),
             "loss": m.get("learner/loss"), "plan_gib": round(plan["total"], 2)}
    if not cuda():
        return bool(m.get("learner/grad_norm", 0) > 0), facts
    facts["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    # the plan counts the CUDA context, which max_memory_allocated does not see
    return facts["peak_gib"] <= plan["total"], facts


def stage_checkpoint(full: bool) -> tuple[bool, dict[str, Any]]:
    """A step, a save to a file:// URI, a restore into a fresh learner: the next step is the same."""
    import torch

    from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint

    dims, layers = (QWEN, 2) if full else (TOY, 2)
    device = init_one_rank()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        model = build_model(Path(d) / "model", dims, layers)
        trajs = trajectories(4, 32, 96, dims["vocab_size"])
        torch.manual_seed(0)
        a = learner_for(model, device, 2, gradient_checkpointing=False)
        a.train_step(trajs, rewards(4))
        uri = f"file://{d}/bucket/step_000001"
        save_checkpoint(uri, a, step=1)
        torch.manual_seed(1)
        b = learner_for(model, device, 2, gradient_checkpointing=False)
        load_checkpoint(uri, b)
        ma, mb = a.train_step(trajs, rewards(4)), b.train_step(trajs, rewards(4))
        same = all(torch.equal(v, b.trainable_state()[k]) for k, v in a.trainable_state().items())
    facts = {"loss_after": [ma["learner/loss"], mb["learner/loss"]], "weights_equal": same}
    return same and ma["learner/loss"] == mb["learner/loss"], facts


# the loop stage's logged outcomes (RouteLLM's CSV layout, rlrouter.data.logged): question, gold answer, and per
# candidate whether it was right and what it replied
LOGGED = [("What is 6 times 7?", "42", (False, "6 times 7 is 40. #### 40"), (True, "6 times 7 is 42. #### 42")),
          ("What is 12 plus 30?", "42", (True, "12 plus 30 is 42. #### 42"), (True, "12 + 30 = 42. #### 42")),
          ("What is 9 minus 4?", "5", (True, "9 minus 4 is 5. #### 5"), (False, "9 - 4 = 4. #### 4"))]
LOOP_CANDIDATES = (("small", 0.1, 0.2), ("big", 1.0, 3.0))  # name, USD per 1M prompt / completion tokens
# The loop's pass bound on the log-prob gap after the push, (max, mean) over the policy tokens of fresh rollouts.
# The generator and the learner then hold the same weights but compute differently: HF generate decodes token
# by token with a KV cache, the learner runs one windowed forward (a shared-prefix cache, FSDP2, chunked
# log-softmax). fp32 (CPU, toy, 2026-11-29): max 1.9e-6, mean 3e-7 over 64 tokens; 1e-3 (max) and 1e-4 (mean),
# the bound tests/trainer/test_router_r1_e2e.py holds vLLM's fp32 gap to, are far above that noise and far
# below what the learner's one step moves (the stale gap, the stepped learner against the rollouts before the
# push: mean 0.13-0.16). bf16 (CUDA): 8 mantissa bits; a logit of
# magnitude 2-4 is known to +-0.008-0.016 in each computation, so a few hundredths per token are noise, and
# the largest of a few hundred tokens may reach a few tenths: mean 0.05, max 0.5, guesses until a GPU has run
# the stage (then tighten them to a few times what it measured).
GAP_BOUND = {"float32": (1e-3, 1e-4), "bfloat16": (0.5, 0.05)}


def logged_table(path: Path) -> Path:
    """``LOGGED`` as a RouteLLM CSV at ``path`` (its name says gsm8k, so a replayed call returns the reply)."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    names = [c[0] for c in LOOP_CANDIDATES]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", *names, *(f"{n}_response" for n in names)])
        for q, _, *outcomes in LOGGED:
            w.writerow([q, *(ok for ok, _ in outcomes), *(text for _, text in outcomes)])
    return path


def logprob_gap(learner: Any, trajs: list[Any]) -> dict[str, float]:
    """The learner's log-probs of the trajectories' policy tokens against the generator's sampling log-probs:
    ``_GapMeter``'s mean (the loop's ``rollout/logprob_gap``) and the largest |difference|."""
    import torch

    from rlrouter.learner.update import _GapMeter
    from rlrouter.rollout.parsing import collate

    batch = collate([t.tokens for t in trajs], learner.tokenizer.pad_token_id)
    batch = {k: v.to(learner.device) for k, v in batch.items()}
    batch["loss_mask"] = batch["loss_mask"].float()
    learner.module.eval()
    with torch.no_grad():
        logp, _, _ = learner._forward(learner.module, batch, False, with_entropy=False)
    meter = _GapMeter()
    meter.add(logp, batch["old_logprobs"], batch["loss_mask"])
    sel = batch["loss_mask"].bool() & torch.isfinite(batch["old_logprobs"])
    m = meter.metrics()
    return {"max": float((logp - batch["old_logprobs"])[sel].abs().max()) if bool(sel.any()) else float("nan"),
            "mean": m.get("rollout/logprob_gap", float("nan")), "tokens": int(m.get("rollout/logprob_tokens", 0))}


def stage_loop(full: bool) -> tuple[bool, dict[str, Any]]:
    """Rollouts with the HF backend against a replay pool, one GRPO step, the packed push into the generator
    (bit-exact), the log-prob gap of fresh rollouts after it."""
    import torch

    from rlrouter.pool.pool import CandidatePool
    from rlrouter.rewards.router_r1 import RouterR1Reward, score_trajectories
    from rlrouter.rollout.demos import with_first_turn
    from rlrouter.rollout.env import EnvConfig, RouterEnv
    from rlrouter.rollout.hf_backend import HFGenerator
    from rlrouter.sync.transports import apply_payload, make_payload
    from rlrouter.sync.vllm_ext import pack_named_tensors, unpack_named_tensors

    # full: Qwen2.5-3B's shape with 2 layers, as ``checkpoint``; buckets of the loop's default 64 MB. Toy: buckets
    # of 50 kB, so the push takes many (fused groups kept whole) as the full model's does; 8 tokens a turn
    dims, layers, new_tokens, bucket_mb = (QWEN, 2, 32, 64.0) if full else (TOY, 2, 8, 0.05)
    dtype = "bfloat16" if cuda() else "float32"
    prompts, group = 2, 2  # 2 questions x a GRPO group of 2
    device = init_one_rank()
    took: dict[str, float] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        model = build_model(Path(d) / "model", dims, layers)
        table = logged_table(Path(d) / "logged" / "gsm8k_responses.csv")
        pool = CandidatePool.from_config({"candidates": [
            {"name": n, "price_in": pi, "price_out": po, "backend": "replay", "options": {"source": str(table)}}
            for n, pi, po in LOOP_CANDIDATES]})
        try:
            gen = HFGenerator(model, dtype=dtype, device=device)
            # every episode opens with a written call to the cheap candidate (curriculum.no_answer_first_call), so
            # the pool answers whatever the random policy writes; then the policy samples 2 turns (the last may only
            # answer), with <information> blocks between them that the loss masks out
            env = RouterEnv(EnvConfig(max_turns=2, max_new_tokens=new_tokens, max_total_tokens=4096), gen.tokenizer,
                            pool, gen.generate_ids)
            items = [with_first_turn({"id": f"q{i}", "query": q, "ground_truth": [a]}, LOOP_CANDIDATES[0][0])
                     for i, (q, a, *_) in enumerate(LOGGED[:prompts])]
            # lr 1e-3, not the presets' 1e-5: AdamW's first step moves each weight by about lr, so the matrices'
            # weights (~0.02, a bf16 step of 1.2e-4 there) change by several bf16 steps and the push carries a
            # change the generator has to take (1e-5 would round away in most of them)
            learner = learner_for(model, device, group, gradient_checkpointing=False, dtype=dtype, lr=1e-3)
            took["build_s"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            trajs = env.run(items, n_samples=group, seed=0, step=0)
            took["rollout_s"] = time.perf_counter() - t0
            generated = gen.stats["generated_tokens"]
            # the loop's reward; a random policy never writes the protocol, so every trajectory gets the format
            # penalty and GRPO's advantages are 0: then +-1 stands in, so that the step moves the weights
            totals = [s.total for s in score_trajectories(RouterR1Reward(0.0, candidates=pool.names), trajs)]
            spread = any(len(set(totals[i:i + group])) > 1 for i in range(0, len(totals), group))

            t0 = time.perf_counter()
            m = learner.train_step([t.tokens for t in trajs], totals if spread else rewards(len(trajs)))
            if cuda():
                torch.cuda.synchronize()
            took["step_s"] = time.perf_counter() - t0
            stale = logprob_gap(learner, trajs)  # the stepped learner against the rollouts before the push

            t0 = time.perf_counter()
            payload = make_payload("tensors", learner, learner.version, bucket_mb=bucket_mb)
            before = gen.model.state_dict()
            sent = [(n, v) for b in payload.buckets or [] for n, v in b]
            changed = sum(n in before and not torch.equal(before[n].cpu(), v) for n, v in sent)

            class Packed:
                """The generator behind the bytes a vLLM worker gets (``RolloutWorker.update_weights``)."""

                packed_bytes = 0

                def update_weights(self, named: list, version: int, last: bool = True) -> float:
                    packed = pack_named_tensors(named)
                    self.packed_bytes += sum(len(p[3]) for p in packed)
                    return gen.update_weights(unpack_named_tensors(packed), version, last)

            wire = Packed()
            apply_payload(wire, payload)
            if cuda():
                torch.cuda.synchronize()
            took["push_s"] = time.perf_counter() - t0
            want = dict(learner.merged_weights())
            state = gen.model.state_dict()
            pushed_ptrs = {v.data_ptr() for n, v in state.items() if n in want}
            # a generator tensor the push did not name must be an alias of one it did (the tied lm_head)
            unpushed = [n for n, v in state.items() if n not in want and v.data_ptr() not in pushed_ptrs]
            exact = not unpushed and all(n in state and state[n].dtype == v.dtype and torch.equal(state[n].cpu(), v)
                                         for n, v in want.items())

            t0 = time.perf_counter()
            fresh = env.run(items, n_samples=group, seed=1, step=1)
            took["rollout_fresh_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            gap = logprob_gap(learner, fresh)
            took["gap_s"] = time.perf_counter() - t0
        finally:
            pool.close_sync()
    every = trajs + fresh
    routes = [r for t in every for r in t.routes]
    bound_max, bound_mean = GAP_BOUND[dtype]
    facts = {"layers": layers, "dtype": dtype, "trajectories": len(trajs), "group": group,
             "policy_turns": min(sum(s.policy for s in t.tokens.segments) for t in every),
             "tokens": sum(len(t.tokens) for t in trajs), "tokens_generated": generated,
             "policy_tokens": sum(t.tokens.num_policy_tokens for t in trajs),
             "pool_calls": len(routes), "pool_answers": sum(r.error is None for r in routes),
             "reward_mean": round(sum(totals) / len(totals), 3), "reward_stand_in": not spread,
             "step_loss": m.get("learner/loss"), "step_grad_norm": m.get("learner/grad_norm"),
             "step_logprob_gap": m.get("rollout/logprob_gap"),
             "tensors_pushed": len(sent), "tensors_changed": changed, "buckets": len(payload.buckets or []),
             "bytes": payload.nbytes, "packed_bytes": wire.packed_bytes, "unpushed": unpushed[:3], "bit_exact": exact,
             "logprob_gap_max": gap["max"], "logprob_gap_mean": gap["mean"], "logprob_tokens": gap["tokens"],
             "gap_bound_max": bound_max, "gap_bound_mean": bound_mean, "logprob_gap_stale_mean": stale["mean"],
             **{k: round(v, 2) for k, v in took.items()}}
    known = all(s.logprobs is not None for t in every for s in t.tokens.segments if s.policy)
    passed = (exact and changed > 0 and known and facts["pool_answers"] == facts["pool_calls"] > 0
              and facts["policy_turns"] == 2 and gap["tokens"] > 0 and gap["max"] <= bound_max
              and gap["mean"] <= bound_mean and (m.get("learner/grad_norm") or 0) > 0)
    return passed, facts


def stage_gpu_tests(full: bool) -> tuple[bool, dict[str, Any]]:
    files = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("test_*.py"))
             if "pytest.mark.gpu" in p.read_text()]
    # -p no:hydra_pytest: where hydra is installed (not on the lent machine) its plugin would import it
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-p",
                        "no:hydra_pytest", *files],
                       cwd=ROOT, capture_output=True, text=True, timeout=LIMIT_S["gpu_tests"] * 3)
    tail = (r.stdout.strip().splitlines() or [""])[-1]
    return r.returncode in (0, 5), {"files": files, "summary": tail}


STAGE_FNS: dict[str, Callable[[bool], tuple[bool, dict[str, Any]]]] = {
    "env": stage_env, "logits": stage_logits, "scale": stage_scale, "checkpoint": stage_checkpoint,
    "loop": stage_loop, "gpu_tests": stage_gpu_tests}


# --- the driver -------------------------------------------------------------------------------------
def run_stage(name: str, full: bool) -> dict[str, Any]:
    """``name`` in a process of its own, within its limit (x3 at toy size on a slow CPU)."""
    limit = LIMIT_S[name] * (1 if full else 3)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    try:
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--stage", name,
                            "--size", "full" if full else "toy"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=limit)
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(("PASS ", "FAIL "))), None)
        if line is None:
            row = {"stage": name, "passed": False, "error": (r.stderr or r.stdout)[-1500:]}
        else:
            verdict, _, rest = line.split(" ", 2)
            row = {"stage": name, "passed": verdict == "PASS", **json.loads(rest)}
    except subprocess.TimeoutExpired:
        row = {"stage": name, "passed": False, "error": f"over its {limit} s limit"}
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def render(paths: list[Path]) -> str:
    """docs/gpu.md's "device check" table from result files."""
    lines = ["| where | when | stage | result | facts |", "|---|---|---|---|---|"]
    for p in paths:
        res = json.loads(p.read_text())
        for row in res["stages"]:
            facts = {k: v for k, v in row.items() if k not in ("stage", "passed", "seconds", "error")}
            what = row.get("error") or ", ".join(f"{k} {v}" for k, v in facts.items() if k != "files")
            lines.append(f"| {res['device']} ({res['size']}) | {res['date']} | {row['stage']} | "
                         f"{'PASS' if row['passed'] else 'FAIL'} ({row['seconds']} s) | {what.replace('|', '/')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["full", "toy"], default=None, help="default: full on CUDA, toy on CPU")
    ap.add_argument("--stage", choices=STAGES, help="run one stage in this process (the driver does this)")
    ap.add_argument("--stages", nargs="*", default=STAGES)
    ap.add_argument("--out", default=None, help="default: benchmarks/results/gpu_check_<cuda|cpu>.json")
    ap.add_argument("--render", action="store_true", help="write docs/gpu.md's table from the result files")
    args = ap.parse_args(argv)
    if args.render:
        from rlrouter.eval.pool_report import replace_doc_block

        files = [p for p in (RESULTS / "gpu_check_cpu.json", RESULTS / "gpu_check_cuda.json") if p.exists()]
        return 0 if replace_doc_block(ROOT / "docs" / "gpu.md", "gpu check", render(files)) else 1
    full = (args.size or ("full" if cuda() else "toy")) == "full"
    if args.stage:
        try:
            passed, facts = STAGE_FNS[args.stage](full)
        except Exception as e:  # noqa: BLE001 - the stage's failure is its result line
            passed, facts = False, {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        print(f"{'PASS' if passed else 'FAIL'} {args.stage} {json.dumps(facts, default=str)}", flush=True)
        return 0 if passed else 1
    t0 = time.perf_counter()
    rows = []
    for name in args.stages:
        row = run_stage(name, full)
        rows.append(row)
        print(f"{'PASS' if row['passed'] else 'FAIL'} {name} {json.dumps(row, default=str)}", flush=True)
    device = "cuda" if cuda() else "cpu"
    res = {"device": rows[0].get("device", device) if rows and rows[0]["stage"] == "env" else device,
           "size": "full" if full else "toy", "date": time.strftime("%Y-%m-%d"),
           "wall_s": round(time.perf_counter() - t0, 1), "stages": rows, "not_built": [],
           "command": " ".join(["tools/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])}
    out = Path(args.out or RESULTS / f"gpu_check_{device}.json")
    write_result(out, res, MEASURES, indent=2, default=str)
    print(f"gpu check: {sum(r['passed'] for r in rows)}/{len(rows)} stages passed in {res['wall_s']} s -> {out}")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
