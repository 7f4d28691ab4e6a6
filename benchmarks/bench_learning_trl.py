"""Helper of bench_learning.py: the ``trl`` arm, TRL's ``GRPOTrainer`` on the main job's task, in its own process.

    python benchmarks/bench_learning_trl.py SPEC.json OUT.json

Time to quality against TRL: the same model and start (the shared cold-start checkpoint's LoRA
adapter, trained further, as our GRPO arm does), the same data (the job's train split; the same 32
held-out questions), the same reward (the run's ``conf/reward`` group, scored by the loop's own
``score_trajectories``) and the same batch (``prompts_per_step`` x ``n_samples`` trajectories per
optimizer step, micro-batches of one GRPO group, lr, clip 0.2, token-mean loss, group-mean advantages without
the std division, as ``conf/algo/grpo.yaml``'s ``scale_by_std: false``: TRL's ``scale_rewards="none"``). The rollout
samples each question's ``n_samples`` trajectories in one ``RouterEnv.run`` call, seeded as our loop seeds its
batch (``seed * 1_000_003``, the step, the question's place in the batch, the sample), and every trajectory's
reward parts are written out (``trajectories``), so both arms' draws can be compared row by row.

The task is multi-turn: the policy writes ``<search>``, the pool's answer comes back as
``<information>``, the policy answers. TRL runs it through its ``rollout_func`` hook with our
``RouterEnv`` (same prompts, turn budget, stop strings, candidates), generating with the trainer's own
model through ``transformers.generate`` in one left-padded batch per turn (``HFGenerator(batched=True)``):
TRL's best configuration on this CPU is ``use_vllm=False`` (../shared/notes/vllm-cpu.md). The
``<information>`` tokens are masked out of the loss (``env_mask``), as in our learner.

Differences, stated: TRL's KL term would use the adapter-disabled base model as reference (our arm's KL
reference is the start policy, coefficient 0.001), so TRL runs with ``beta=0`` (its default). The held-out
evaluation here is greedy decoding through the same env on the trainer's model (HF ``generate``, not vLLM);
step 0 evaluates the cold start, so its figure can be compared with the vLLM one of our arm.
Wall time to quality excludes the evaluations, as in our arm.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_learning import compose  # noqa: E402 - needs ROOT on the path

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_learning_trl.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/rewards", "rlrouter/sync", "rlrouter/pool", "conf")
for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "TRL_EXPERIMENTAL_SILENCE": "1"}.items():
    os.environ.setdefault(_k, _v)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2])
    import torch
    import trl
    from datasets import Dataset
    from peft import PeftModel
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlrouter.data.build import load_router_r1_split
    from rlrouter.trainer.report import held_out_summary
    from rlrouter.config import to_plain
    from rlrouter.data.job import ensure_data
    from rlrouter.trainer.job import RouterR1JobConfig, set_reference
    from rlrouter.trainer.router_r1 import build_train_reward
    from rlrouter.rewards.router_r1 import score_trajectories
    from rlrouter.models import load_causal_lm, load_tokenizer
    from rlrouter.pool.pool import CandidatePool
    from rlrouter.rollout.env import EnvConfig, RouterEnv
    from rlrouter.rollout.hf_backend import HFGenerator

    cfg = compose(spec["overrides"])
    job = RouterR1JobConfig.from_cfg(cfg)
    train = job.train
    train.out_dir = str(out_path.parent / "trl_run")
    lcfg = train.learner_cfg
    torch.manual_seed(train.seed)
    train_path, test_path = ensure_data(cfg)
    items = load_router_r1_split(train_path)
    eval_items = load_router_r1_split(test_path)[: cfg.eval.num_questions]
    pool = CandidatePool.from_config(to_plain(cfg.pool))
    candidates = pool.names
    set_reference(train, pool, items)  # the job's reference cost scale, from the same training questions
    reward = build_train_reward(train, candidates)
    tok = load_tokenizer(cfg.model)
    base = load_causal_lm(cfg.model, dtype="float32")
    model = PeftModel.from_pretrained(base, str(Path(spec["init_from"]) / "adapter"), is_trainable=True)
    gen = HFGenerator(model, tok, batched=True)
    env = RouterEnv(EnvConfig(**job.env), tok, pool, gen.generate_ids)
    by_query = {it["query"]: it for it in items}

    def rollout_func(prompts: list[str], trainer) -> dict:
        was_training = trainer.model.training
        trainer.model.eval()
        g = train.n_samples  # TRL repeats each prompt num_generations times in a row (its RepeatSampler)
        if len(prompts) % g or any(prompts[i] != prompts[i - i % g] for i in range(len(prompts))):
            raise RuntimeError(f"rollout_func: expected each prompt {g} times in a row, got {len(prompts)} prompts")
        try:
            trajs = env.run([by_query[p] for p in prompts[::g]], n_samples=g, seed=train.seed * 1_000_003,
                            step=trainer.state.global_step)  # our loop seeds RL step k (from 0) so
        finally:
            trainer.model.train(was_training)
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "trajectory": trajs}
        for t in trajs:
            k = t.tokens.prompt_length
            ids, mask = list(t.tokens.input_ids), list(t.tokens.loss_mask)
            lps = [float(x) if m else 0.0 for x, m in zip(t.tokens.old_logprobs, mask)]
            out["prompt_ids"].append(ids[:k])
            out["completion_ids"].append(ids[k:])
            out["logprobs"].append(lps[k:])
            out["env_mask"].append([int(m) for m in mask[k:]])
        return out

    drawn: list[dict] = []  # every trajectory's reward parts, by step (the arms compared row by row)

    def router_r1(prompts, completions, trajectory, **kwargs):
        scores = score_trajectories(reward, list(trajectory))
        step = trainer.state.global_step + 1
        drawn.extend({"step": step, "question": prompts[k], "sample": k % train.n_samples, "reward": s.total,
                      "format": s.format, "outcome": s.outcome, "cost": s.cost, "calls": [r.model for r in t.routes]}
                     for k, (t, s) in enumerate(zip(trajectory, scores)))
        return [s.total for s in scores]

    router_r1.__name__ = "router_r1"
    evals: list[dict] = []

    def evaluate(trainer_model, step: int) -> None:
        t0 = time.perf_counter()
        was_training = trainer_model.training
        trainer_model.eval()
        try:
            trajs = env.run(list(eval_items), 1, train.eval_seed, -1, temperature=0.0)
        finally:
            trainer_model.train(was_training)
        s = held_out_summary(trajs, candidates, train.reward_spec, train.eval_reference)
        row = {"step": step, "eval/format_valid": s["format_valid"],
               "eval/mean_reward": s["mean_reward"], "eval/accuracy": s["accuracy"],
               "eval/cost_per_query": s["cost_per_query"], "eval/calls_per_query": s["calls_per_query"],
               "format_failures": s["format_failures"]}
        row["time/eval_s"] = time.perf_counter() - t0
        row["time"] = time.time()  # as our loop logs its rows: after the step and its evaluation
        evals.append(row)
        print(f"[trl] step {step}: held-out format_valid {s['format_valid']:.3f} reward {s['mean_reward']:.3f} "
              f"({row['time/eval_s']:.0f}s)", flush=True)

    marks: list[float] = []

    class WarmUp(TrainerCallback):
        """Our learner's warm-up (learner.lr_warmup_steps): update k of W at k/W of lr. HF's own warm-up
        starts at 0, so it is set here, before each optimizer step (the constant schedule restores it)."""

        def on_step_begin(self, args, state, control, optimizer=None, **kw):
            w = lcfg.lr_warmup_steps
            if w and optimizer is not None:
                for g in optimizer.param_groups:
                    g["lr"] = lcfg.lr * min(1.0, (state.global_step + 1) / w)

    class Held(TrainerCallback):
        """Held-out evaluations at step 0 and every ``eval_every`` steps (0: none, a timing run), and each
        step's end marked before its evaluation."""

        def on_train_begin(self, args, state, control, model=None, **kw):
            if spec["eval_every"]:
                evaluate(model, 0)
            marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, model=None, **kw):
            marks.append(time.perf_counter())
            if spec["eval_every"] and (state.global_step % spec["eval_every"] == 0
                                       or state.global_step == spec["steps"]):
                evaluate(model, state.global_step)

    per_step = train.prompts_per_step * train.n_samples
    micro = lcfg.micro_batch_size
    if per_step % micro:
        raise ValueError(f"prompts_per_step * n_samples ({per_step}) must be a multiple of micro_batch_size ({micro})")
    args = GRPOConfig(
        output_dir=str(out_path.parent / "trl_run"), max_steps=spec["steps"], learning_rate=lcfg.lr,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        per_device_train_batch_size=micro, gradient_accumulation_steps=per_step // micro,
        steps_per_generation=per_step // micro, num_generations=train.n_samples,
        max_completion_length=int(cfg.rollout.env.max_total_tokens), temperature=lcfg.temperature, top_p=1.0,
        beta=0.0, loss_type="dapo", scale_rewards="none", epsilon=0.2, max_grad_norm=lcfg.max_grad_norm,
        use_vllm=False, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, seed=train.seed,
        dataloader_num_workers=0, remove_unused_columns=False,
        # a given prompt order (our data cursor's, bench_trl_steps.py): taken as laid out, step by step
        shuffle_dataset="prompt_order" not in spec,
    )
    order = spec.get("prompt_order") or range(len(items))
    ds = Dataset.from_list([{"prompt": items[i]["query"]} for i in order])
    trainer = GRPOTrainer(model=model, reward_funcs=router_r1, args=args, train_dataset=ds, processing_class=tok,
                          rollout_func=rollout_func, callbacks=[WarmUp(), Held()])
    t0 = time.perf_counter()
    trainer.train()
    pool.close_sync()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    out = {"trl_version": trl.__version__, "torch_threads": torch.get_num_threads(), "wall_s": time.perf_counter() - t0,
           "step_s": [b - a for a, b in zip(marks, marks[1:])], "held_out": evals, "log_history": logs,
           "trajectories": drawn,
           "prompt_order": [sorted(spec["prompt_order"][k * train.prompts_per_step:(k + 1) * train.prompts_per_step])
                            for k in range(spec["steps"])] if "prompt_order" in spec else None,
           "config": {k: getattr(args, k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps",
                                                     "steps_per_generation", "num_generations", "beta", "loss_type",
                                                     "use_vllm", "learning_rate", "generation_batch_size")}}
    write_result(out_path, out, MEASURES, indent=1, default=str)


if __name__ == "__main__":
    main()
