"""The learner on CUDA. Skipped without a GPU; docs/gpu.md records where these ran.

- a bf16 step: fp32 master weights and AdamW state on the GPU, bf16 weights handed to the engine;
- FSDP2 with world size 1 on NCCL: the gathered weights equal an unsharded learner's, before and after
  a cold-start + RL step, for full fine-tuning (PPO, sharded reference) and LoRA (GRPO);
- with >= 2 GPUs, the same two-rank comparison as the gloo proxy (tests/learner/test_fsdp.py) on NCCL.
"""

from __future__ import annotations

import os

import pytest
import torch

from rlrouter.learner.learner import Learner, LearnerConfig
from tests.learner.test_fsdp import REWARDS, _cases, _free_port, _ranks, _run_case, tiny_model  # noqa: F401
from tests.learner.test_learner import _trajs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_bf16_step_on_cuda_keeps_fp32_masters(tiny_model):  # noqa: F811 - the fixture
    torch.manual_seed(0)
    cfg = LearnerConfig(model=tiny_model, lora=False, algo="grpo", lr=1e-5, micro_batch_size=2, dtype="bfloat16",
                        gradient_checkpointing=True, grpo={"group_size": 2, "kl": {"coef": 0.01}})
    lr = Learner(cfg, device="cuda:0")
    before = lr.policy.model.layers[0].mlp.up_proj.weight.detach().clone()
    m = lr.train_step(_trajs(lr.tokenizer), REWARDS)
    assert m["learner/grad_norm"] > 0 and torch.isfinite(torch.tensor(m["learner/loss"]))
    w = lr.policy.model.layers[0].mlp.up_proj.weight
    assert w.is_cuda and w.dtype == torch.float32 and not torch.equal(w.detach(), before)
    assert {s.dtype for st in lr.optimizer.state.values() for s in st.values() if s.dim() > 0} == {torch.float32}
    assert {t.dtype for _, t in lr.merged_weights()} == {torch.bfloat16}
    assert lr.ref_model.dtype == torch.bfloat16  # frozen: no master copy needed


@pytest.fixture
def nccl_world_of_one():
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("case", ["full_ppo", "lora_grpo"])
def test_fsdp_world_size_one_on_nccl_gathers_the_unsharded_weights(nccl_world_of_one, tiny_model, case):
    from torch.distributed.tensor import DTensor

    cfg = _cases(tiny_model)[case]
    got = _run_case(cfg, 0, 1, None, device="cuda:0")
    sharded = Learner(cfg, 0, 1, device="cuda:0")
    assert sharded.fsdp and all(isinstance(p, DTensor) for p in sharded.policy.parameters())
    import torch.distributed as dist

    dist.destroy_process_group()  # the unsharded reference runs without a process group
    try:
        plain = LearnerConfig(**{**cfg.__dict__, "strategy": "ddp"})
        want = _run_case(plain, 0, 1, None, device="cuda:0")
    finally:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    for k, v in want["init"].items():
        assert torch.equal(got["init"][k], v), k
    for k, v in want["trained"].items():
        assert torch.allclose(got["trained"][k], v, atol=1e-4, rtol=1e-3), k


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_fsdp_two_ranks_on_nccl(tiny_model, tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_ranks, args=(2, _free_port(), tiny_model, str(tmp_path), "nccl"), nprocs=2, join=True)
    res = torch.load(tmp_path / "res.pt", weights_only=False)
    assert res["bf16_dtypes"] == ["torch.float32"] and res["ddp_ppo_value_loss"] > 0
    for case in ("full_ppo", "lora_grpo"):
        assert res[case]["resumed_equal"]
