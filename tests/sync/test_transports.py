"""Weight-sync buckets: a fused group (q/k/v, gate/up) is never split, whatever ``bucket_mb`` is."""

from __future__ import annotations

import pytest
import torch

from rlrouter.sync.transports import bucket_tensors, fused_group_key, make_payload


class _Source:
    """Merged tensors in the order a LoRA learner gives them: changed q/v first, their k partners last."""

    def __init__(self, layers: int = 3, width: int = 64):
        changed, rest = [], []
        for i in range(layers):
            p = f"model.layers.{i}.self_attn"
            changed += [(f"{p}.q_proj.weight", torch.ones(width, width)), (f"{p}.v_proj.weight", torch.ones(16, width))]
            rest += [(f"{p}.k_proj.weight", torch.ones(16, width)), (f"{p}.q_proj.bias", torch.ones(width)),
                     (f"{p}.o_proj.weight", torch.ones(width, width)),
                     (f"model.layers.{i}.mlp.gate_proj.weight", torch.ones(128, width)),
                     (f"model.layers.{i}.mlp.up_proj.weight", torch.ones(128, width)),
                     (f"model.layers.{i}.mlp.down_proj.weight", torch.ones(width, 128))]
        self.named = changed + rest + [("model.embed_tokens.weight", torch.ones(100, width))]

    def merged_weights(self, only_changed: bool = True):
        return list(self.named)


def test_group_keys():
    assert fused_group_key("model.layers.3.self_attn.k_proj.weight") == "model.layers.3.self_attn.q_proj+k_proj+v_proj"
    assert fused_group_key("model.layers.3.self_attn.q_proj.bias") == "model.layers.3.self_attn.q_proj+k_proj+v_proj"
    assert fused_group_key("model.layers.3.mlp.up_proj.weight") == "model.layers.3.mlp.gate_proj+up_proj"
    assert fused_group_key("model.layers.3.mlp.down_proj.weight") == "model.layers.3.mlp.down_proj.weight"


@pytest.mark.parametrize("bucket_mb", [1e-6, 0.01, 0.05, 64.0])
def test_buckets_never_split_a_fused_group(bucket_mb):
    src = _Source()
    payload = make_payload("tensors", src, version=1, bucket_mb=bucket_mb)
    sent = [name for b in payload.buckets for name, _ in b]
    assert sorted(sent) == sorted(n for n, _ in src.named)  # each tensor exactly once
    where = {}
    for i, b in enumerate(payload.buckets):
        for name, _ in b:
            where.setdefault(fused_group_key(name), set()).add(i)
    assert all(len(v) == 1 for v in where.values()), where
    limit = bucket_mb * 2**20
    for b in payload.buckets:  # over the limit only when one group alone exceeds it
        size = sum(t.numel() * t.element_size() for _, t in b)
        assert size <= limit or len({fused_group_key(n) for n, _ in b}) == 1
    if bucket_mb == 1e-6:  # 3 layers x (qkv, gate/up, o, down) + embeddings, one group per bucket
        assert len(payload.buckets) == 3 * 4 + 1
    if bucket_mb == 64.0:
        assert len(payload.buckets) == 1


def test_the_old_sequential_cut_would_split_groups():
    """The same tensors cut in arrival order (what make_payload did before) split q/v from their k."""
    src = _Source()
    limit, size, buckets = 0.05 * 2**20, 0, [[]]
    for name, t in src.named:
        n = t.numel() * t.element_size()
        if buckets[-1] and size + n > limit:
            buckets.append([])
            size = 0
        buckets[-1].append(name)
        size += n
    homes = {}
    for i, b in enumerate(buckets):
        for name in b:
            homes.setdefault(fused_group_key(name), set()).add(i)
    assert any(len(v) > 1 for v in homes.values())
    assert len(bucket_tensors(src.named, 0.05)) >= 2


def test_bad_bucket_size_names_the_field():
    with pytest.raises(ValueError, match="train.sync_bucket_mb"):
        make_payload("tensors", _Source(), version=1, bucket_mb=0)


def test_nccl_client_gives_each_engine_its_own_ranks():
    """Each engine is its own vLLM instance: its TP workers must not reuse another engine's NCCL ranks."""
    from rlrouter.sync.nccl import MergedWeightsSource, RolloutWorkersClient

    client = RolloutWorkersClient(workers=[object()] * 3, tensor_parallel_size=2)
    payloads = client.init_payloads({"master_address": "10.0.0.1", "master_port": 1234, "rank_offset": 1,
                                     "world_size": 7})
    ranks = [p["rank_offset"] + r for p in payloads for r in range(2)]
    assert ranks == [1, 2, 3, 4, 5, 6] and all(p["world_size"] == 7 for p in payloads)
    src = MergedWeightsSource([("a.weight", torch.ones(2, 3, dtype=torch.bfloat16))], "cpu")
    assert [(m.name, m.dtype, m.shape) for m in src.metadata()] == [("a.weight", torch.bfloat16, (2, 3))]
    assert [n for n, _ in src] == ["a.weight"]


def test_packed_tensors_survive_vllms_msgpack_and_come_back_bit_exact():
    """What crosses into an engine in its own process: vLLM's own encoder/decoder, untyped."""
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    from rlrouter.sync.vllm_ext import pack_named_tensors, unpack_named_tensors

    named = [("a.q_proj.weight", torch.randn(300, 70)), ("b.bias", torch.randn(5).to(torch.bfloat16)),
             ("c.scalar", torch.tensor(3.0)), ("d.empty", torch.empty(0, 4)),
             ("e.strided", torch.randn(8, 6).t())]
    raw = MsgpackDecoder().decode(MsgpackEncoder().encode((named,)))
    assert not isinstance(raw[0][0][1], torch.Tensor)  # the bug: tensors do not come back as tensors
    got = unpack_named_tensors(MsgpackDecoder().decode(MsgpackEncoder().encode((pack_named_tensors(named),)))[0])
    assert [n for n, _ in got] == [n for n, _ in named]
    for (_, a), (_, b) in zip(named, got):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    with pytest.raises(TypeError, match="pack_named_tensors"):
        unpack_named_tensors([["x", [1, 2]]])
