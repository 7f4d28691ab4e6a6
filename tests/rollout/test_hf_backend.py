"""The HF ``generate`` rollout backend (ToolRL's rollout.name=hf) driving the real environment."""

from __future__ import annotations

import pytest

from rlrouter.rollout.env import EnvConfig, RouterEnv, SamplingSpec
from tests.rollout.test_env import FakePool


@pytest.fixture(scope="module")
def gen():
    from rlrouter.rollout.hf_backend import HFGenerator

    return HFGenerator("smollm2-135m-instruct")


def test_stop_strings_seeds_and_greedy(gen):
    tok = gen.tokenizer
    ids = tok.encode("Count: one, two, three, four, five, six, seven,", add_special_tokens=False)
    greedy = SamplingSpec(max_tokens=12, stop=[","], temperature=0.0, top_p=1.0, seed=0)
    (out,) = gen.generate_ids([ids], [greedy])
    text = tok.decode(out, skip_special_tokens=True)
    assert "," in text and len(out) < 12, text  # stopped at the stop string, which is kept
    hot = SamplingSpec(max_tokens=8, stop=[], temperature=1.0, top_p=1.0, seed=7)
    a, b = gen.generate_ids([ids, ids], [hot, hot])
    assert a == b and len(a) == 8  # same seed, same sample; no stop string: max_tokens
    assert a.logprobs == b.logprobs and all(lp <= 0 for lp in a.logprobs)
    with pytest.raises(ValueError, match="specs"):
        gen.generate_ids([ids], [])


@pytest.mark.slow  # a few hundred prompt tokens per turn through plain transformers on CPU
def test_router_env_runs_on_the_hf_backend(gen):
    env = RouterEnv(EnvConfig(max_turns=1, max_new_tokens=16, max_total_tokens=2048), gen.tokenizer, FakePool(),
                    gen.generate_ids)
    trajs = env.run([{"id": "q", "query": "What is 6 * 7?"}], n_samples=2, seed=0)
    assert len(trajs) == 2 and all(t.turns >= 1 and t.tokens.num_policy_tokens > 0 for t in trajs)
    import math

    policy_lps = [lp for t in trajs for lp, m in zip(t.tokens.old_logprobs, t.tokens.loss_mask) if m]
    assert policy_lps and all(math.isfinite(lp) and lp <= 0 for lp in policy_lps)  # the engine's, not NaN
    assert gen.stats["generated_tokens"] > 0


def test_update_weights_loads_pushed_tensors(gen):
    import torch

    name, weight = next(iter(gen.model.state_dict().items()))
    original = weight.clone()
    gen.update_weights([(name, torch.zeros_like(weight))])
    assert float(gen.model.state_dict()[name].abs().sum()) == 0.0
    gen.update_weights([(name, original)])
    with pytest.raises(KeyError, match="not in the model"):
        gen.update_weights([("no.such.weight", original)])


def test_batched_generation_equals_one_request_at_a_time_when_greedy(gen):
    """batched=True: one left-padded generate; greedy rows equal the per-request path's, each cut at its
    own stop string and max_tokens (the TRL arm of bench_learning generates this way)."""
    from rlrouter.rollout.hf_backend import HFGenerator

    tok = gen.tokenizer
    prompts = [tok.encode(t, add_special_tokens=False) for t in
               ("Count: one, two, three, four,", "The capital of France is", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15")]
    specs = [SamplingSpec(max_tokens=m, stop=[","], temperature=0.0, top_p=1.0, seed=0) for m in (12, 6, 10)]
    batched = HFGenerator(gen.model, gen.tokenizer, batched=True)
    one = gen.generate_ids(prompts, specs)
    many = batched.generate_ids(prompts, specs)
    assert [list(x) for x in many] == [list(x) for x in one]
    assert all(len(x) <= s.max_tokens for x, s in zip(many, specs))
    for x, y in zip(many, one):
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-3)
    with pytest.raises(ValueError, match="one temperature"):
        batched.generate_ids(prompts[:2], [specs[0], SamplingSpec(4, [], 1.0, 1.0, 0)])


def test_frequency_penalty_subtracts_once_per_generated_occurrence():
    """The processor alone, by hand: only the generated columns (from ``start``) count."""
    import torch

    from rlrouter.rollout.hf_backend import frequency_penalty

    (proc,) = frequency_penalty(0.5, start=2)
    ids = torch.tensor([[3, 3, 1, 3, 3, 0]])  # prompt [3, 3]; generated 1, 3, 3, 0
    out = proc(ids, torch.zeros(1, 5))
    assert out.tolist() == [[-0.5, -0.5, 0.0, -1.0, 0.0]]


def test_a_greedy_loop_is_broken_by_the_frequency_penalty(gen):
    """Greedy decoding repeats a phrase; with the penalty the same prompt repeats its tokens less."""
    from collections import Counter

    tok = gen.tokenizer
    ids = tok.encode("She put both of these purchases on her credit card. " * 3, add_special_tokens=False)
    plain = SamplingSpec(max_tokens=40, stop=[], temperature=0.0, top_p=1.0, seed=0)
    penalised = SamplingSpec(max_tokens=40, stop=[], temperature=0.0, top_p=1.0, seed=0, frequency_penalty=1.0)
    (a,), (b,) = gen.generate_ids([ids], [plain]), gen.generate_ids([ids], [penalised])
    assert Counter(a).most_common(1)[0][1] > Counter(b).most_common(1)[0][1], (tok.decode(a), tok.decode(b))
