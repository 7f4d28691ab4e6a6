"""FSDP2 and DDP learners on 2 CPU ranks with gloo (the CPU proxy of the GPU path, docs/gpu.md).

A tiny random Llama (SmolLM2's tokenizer and architecture, 2 layers of width 64) keeps it fast. Both
ranks train on the same trajectories, so the sharded run must match a single unsharded learner: the
gathered weights equal the unsharded ones at the start and after the cold start + one RL step, and a
checkpoint written by both ranks (each its optimizer shard) restores them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from rlrouter.learner.learner import Learner, LearnerConfig

REWARDS = [1.0, -1.0, 0.5, 0.0]


def _cases(model: str) -> dict[str, LearnerConfig]:
    common = dict(model=model, micro_batch_size=2, strategy="fsdp")
    return {
        # Router-R1's setup: full fine-tuning, PPO with a critic, KL to a (sharded) frozen reference
        "full_ppo": LearnerConfig(**common, lora=False, algo="ppo", lr=1e-3, critic_lr=1e-3,
                                  gradient_checkpointing=True, ppo={"kl": {"coef": 0.01}}),
        "lora_grpo": LearnerConfig(**common, lora=True, lr=1e-2, grpo={"group_size": 2, "kl": {"coef": 0.01}}),
    }


def _run_case(cfg: LearnerConfig, rank: int, world: int, out: Path | None, device: str = "cpu") -> dict[str, object]:
    from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint
    from tests.learner.test_learner import _trajs

    torch.manual_seed(0)
    lr = Learner(cfg, rank, world, device=device)
    res: dict[str, object] = {}
    if rank == 0:
        res["init"] = {k: v.clone() for k, v in lr.merged_weights(only_changed=False)}
    trajs = _trajs(lr.tokenizer)
    lr.sft_step(trajs[:2], lr=1e-3)  # PPO: the value head gets no gradient here (DDP must be told about unused parameters)
    # kl_reference: start: the adapter copy, or the full fine-tune's reference model (both sharded under FSDP)
    lr.set_reference_to_current()
    m = lr.train_step(trajs, REWARDS)
    if rank == 0:
        res["trained"] = {k: v.clone() for k, v in lr.merged_weights(only_changed=False)}
        res["trainable"] = lr.trainable_state()
        res["grad_norm"] = m["learner/grad_norm"]
    if out is not None:
        save_checkpoint(out / "ck", lr, step=1)
        torch.manual_seed(1)
        fresh = Learner(cfg, rank, world, device=device)
        load_checkpoint(out / "ck", fresh)
        m2, m2_fresh = lr.train_step(trajs, REWARDS), fresh.train_step(trajs, REWARDS)
        ref, ref_fresh = (lr.local_tensors(x.reference_state()) for x in (lr, fresh))
        if rank == 0:
            res["reference_restored"] = set(ref) == set(ref_fresh) and all(torch.equal(v, ref_fresh[k])
                                                                           for k, v in ref.items())
            res["resumed_equal"] = all(torch.equal(v, fresh.trainable_state()[k])
                                       for k, v in lr.trainable_state().items())
            res["resumed_loss"] = (m2["learner/loss"], m2_fresh["learner/loss"])
    return res


def _ranks(rank: int, world: int, port: int, model: str, out: str, backend: str = "gloo") -> None:
    """One rank: gloo on CPU (the proxy) or NCCL with one GPU per rank (tests/learner/test_gpu.py)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    device = "cpu" if backend == "gloo" else f"cuda:{rank}"
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        res = {name: _run_case(cfg, rank, world, Path(out) / name, device) for name, cfg in _cases(model).items()}
        # bf16 compute under FSDP2: master weights and AdamW state stay fp32
        torch.manual_seed(0)
        bf = Learner(LearnerConfig(model=model, lora=False, algo="grpo", lr=1e-3, micro_batch_size=2,
                                   strategy="fsdp", dtype="bfloat16", grpo={"group_size": 2}), rank, world, device)
        from tests.learner.test_learner import _trajs

        bf.train_step(_trajs(bf.tokenizer), REWARDS)
        # a GRPO group's samples share their prompt: training under FSDP must not run it once through the
        # KV cache (backward through a resharded layer failed: "setStorage ... storage of size 0")
        torch.manual_seed(0)
        shared = Learner(LearnerConfig(model=model, lora=False, algo="grpo", lr=1e-3, micro_batch_size=2,
                                       strategy="fsdp", grpo={"group_size": 2}), rank, world, device)
        res["shared_prompt_grad_norm"] = shared.train_step(_shared_prompt_trajs(shared.tokenizer),
                                                           REWARDS)["learner/grad_norm"]
        res["reduce_scatters"] = _reduce_scatters_per_step(model, rank, world, device)
        states = [s for st in bf.optimizer.state.values() for s in st.values() if s.dim() > 0]
        res["bf16_dtypes"] = sorted({str(p.dtype) for p in bf.policy.parameters()} | {str(s.dtype) for s in states})
        if rank == 0:
            res["bf16_sent_dtypes"] = sorted({str(t.dtype) for _, t in bf.merged_weights()})
        # DDP with PPO: a cold-start step leaves the value head unused; the next steps must not raise
        torch.manual_seed(0)
        ddp = Learner(LearnerConfig(model=model, lora=False, algo="ppo", lr=1e-3, micro_batch_size=2,
                                    strategy="ddp", ppo={"kl": {"coef": 0.0}}), rank, world, device)
        trajs = _trajs(ddp.tokenizer)
        ddp.sft_step(trajs[:2])
        res["ddp_ppo_value_loss"] = ddp.train_step(trajs, REWARDS)["learner/value_loss"]
        ddp.sft_step(trajs[:2])
        if rank == 0:
            torch.save(res, Path(out) / "res.pt")
    finally:
        dist.destroy_process_group()


def _reduce_scatters_per_step(model: str, rank: int, world: int, device: str) -> tuple[int, int]:
    """FSDP2's reduce-scatter calls in a step of one micro-batch, then in a step of two (gradient accumulation):
    equal when the gradients are reduced once a step, twice as many when every micro-batch reduces."""
    import torch.distributed as dist

    from tests.learner.test_learner import _trajs

    torch.manual_seed(0)
    acc = Learner(LearnerConfig(model=model, lora=False, algo="grpo", lr=1e-3, micro_batch_size=2, strategy="fsdp",
                                grpo={"group_size": 2}), rank, world, device)
    trajs = _trajs(acc.tokenizer)
    calls = [0]
    real = dist.reduce_scatter_single

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    dist.reduce_scatter_single = counted
    try:
        acc.train_step(trajs[:2], REWARDS[:2])
        one, calls[0] = calls[0], 0
        acc.train_step(trajs, REWARDS)
        return one, calls[0]
    finally:
        dist.reduce_scatter_single = real


def _shared_prompt_trajs(tok):
    """Two GRPO groups of 2, each pair reading one long prompt (well past ``MIN_SHARED_PREFIX`` tokens)."""
    from tests.learner.test_learner import _group_rows

    prompts = [f"Answer with one letter after thinking it through. Question {i // 2}: is {i // 2} even?" for i in range(4)]
    return _group_rows(tok, prompts, ["<answer>A</answer>", "<answer>B</answer>"] * 2)


def make_tiny_llama(out, hidden_size: int = 64, heads: int = 4, kv_heads: int = 2, head_dim: int = 16) -> str:
    """A 2-layer Llama with SmolLM2's tokenizer and tied embeddings (random weights, seed 0) in ``out``.
    ``RLROUTER_TINY_BASE``: a folder with SmolLM2's config and tokenizer files only, for a machine without
    the bundled model package (a GPU machine that gets the tests but not the weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from rlrouter.models import load_tokenizer, resolve_model

    base = os.environ.get("RLROUTER_TINY_BASE")
    cfg = AutoConfig.from_pretrained(base or resolve_model("smollm2-135m-instruct"))
    cfg.update(dict(num_hidden_layers=2, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                    num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                    tie_word_embeddings=True))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    (AutoTokenizer.from_pretrained(base) if base else load_tokenizer("smollm2-135m-instruct")).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """The learner tests' tiny Llama: width 64, 4 heads of 16."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_rank_results(tiny_model, tmp_path_factory):
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("fsdp")
    mp.spawn(_ranks, args=(2, _free_port(), tiny_model, str(out)), nprocs=2, join=True)
    return torch.load(out / "res.pt", weights_only=False), out


@pytest.mark.parametrize("case", ["full_ppo", "lora_grpo"])
def test_fsdp_on_two_cpu_ranks_matches_one_unsharded_learner(two_rank_results, tiny_model, case):
    res, out = two_rank_results
    got = res[case]
    cfg = _cases(tiny_model)[case]
    cfg.strategy = "ddp"
    want = _run_case(cfg, 0, 1, None)  # one process, no sharding, same seeds and data
    assert set(got["init"]) == set(want["init"])
    for k, v in want["init"].items():  # gathered = unsharded, exactly (and none is a sharded view)
        assert got["init"][k].shape == v.shape and torch.equal(got["init"][k], v), k
    moved = 0
    for k, v in want["trained"].items():
        assert torch.allclose(got["trained"][k], v, atol=2e-5, rtol=1e-4), k
        moved += not torch.equal(v, want["init"][k])
    assert moved > 0
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)
    assert set(got["trainable"]) == set(want["trainable"])
    if case == "full_ppo":
        assert any(k.startswith("value_head.") for k in got["trainable"])
    # the checkpoint: weights from rank 0, one optimizer shard per rank; the restored learner trains alike
    ck = out / case / "ck"
    assert (ck / "optimizer.rank0.pt").exists() and (ck / "optimizer.rank1.pt").exists()
    assert (ck / "reference.rank0.safetensors").exists() and (ck / "reference.rank1.safetensors").exists()
    assert got["reference_restored"]
    assert got["resumed_equal"] and got["resumed_loss"][0] == pytest.approx(got["resumed_loss"][1], rel=1e-5)


def test_bf16_keeps_fp32_master_weights_and_optimizer_state(two_rank_results):
    res, _ = two_rank_results
    assert res["bf16_dtypes"] == ["torch.float32"]
    assert res["bf16_sent_dtypes"] == ["torch.bfloat16"]  # the engine gets what the learner computes with


def test_fsdp_trains_groups_that_share_a_prompt_like_one_unsharded_learner(two_rank_results, tiny_model):
    """The loop's batches: GRPO groups sharing a prompt. One unsharded learner runs the prompt once
    through the KV cache; FSDP runs each row whole: the same gradient."""
    res, _ = two_rank_results
    torch.manual_seed(0)
    one = Learner(LearnerConfig(model=tiny_model, lora=False, algo="grpo", lr=1e-3, micro_batch_size=2,
                                grpo={"group_size": 2}))
    want = one.train_step(_shared_prompt_trajs(one.tokenizer), REWARDS)["learner/grad_norm"]
    assert want > 0 and res["shared_prompt_grad_norm"] == pytest.approx(want, rel=1e-4)


def test_ddp_ppo_survives_the_cold_start(two_rank_results):
    res, _ = two_rank_results
    assert res["ddp_ppo_value_loss"] > 0


def test_full_fine_tune_keeps_its_start_reference_across_a_checkpoint(tiny_model, tmp_path):
    """kl_reference: start with full fine-tuning: the reference model is saved and restored,
    not reloaded from the base model."""
    from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint
    from tests.learner.test_learner import _trajs

    cfg = LearnerConfig(model=tiny_model, micro_batch_size=2, lora=False, lr=1e-2, grpo={"group_size": 2,
                                                                                         "kl": {"coef": 0.1}})
    torch.manual_seed(0)
    lr = Learner(cfg)
    trajs = _trajs(lr.tokenizer)
    lr.sft_step(trajs[:2], lr=1e-2)
    lr.set_reference_to_current()
    lr.train_step(trajs, REWARDS)
    save_checkpoint(tmp_path / "ck", lr, step=1)
    fresh = Learner(cfg)
    base = {n: p.detach().clone() for n, p in fresh.ref_model.named_parameters()}
    load_checkpoint(tmp_path / "ck", fresh)
    ref = dict(lr.ref_model.named_parameters())
    assert any(not torch.equal(base[n], ref[n]) for n in base)  # the start reference is not the base model
    assert all(torch.equal(p, ref[n]) for n, p in fresh.ref_model.named_parameters())
    assert lr.train_step(trajs, REWARDS)["learner/loss"] == pytest.approx(
        fresh.train_step(trajs, REWARDS)["learner/loss"], rel=1e-5)
    base_cfg = LearnerConfig(model=tiny_model, lora=False, kl_reference="base", grpo={"kl": {"coef": 0.1}})
    assert Learner(base_cfg).reference_state() is None  # the base model needs no copy in the checkpoint


def test_fsdp_reduces_gradients_once_a_step_not_once_a_micro_batch(two_rank_results):
    one, two = two_rank_results[0]["reduce_scatters"]
    assert one > 0 and two == one, (one, two)
