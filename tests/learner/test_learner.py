"""The Learner on the real SmolLM2 (LoRA), without Ray: updates, merged weights, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.learner.learner import Learner, LearnerConfig
from rlrouter.rollout.parsing import TrajectoryTokens


def _trajs(tok, n=4):
    out = []
    for i in range(n):
        t = TrajectoryTokens(tok.encode(f"Question {i}: what is {i}+{i}?", add_special_tokens=False))
        for text, policy in (("<think>easy</think><search>mixtral: sum</search>", True),
                             ("<information>it is even</information>", False), (f"<answer>{2 * i}</answer>", True)):
            ids = tok.encode(text, add_special_tokens=False)
            t.add_policy(ids, [0.0] * len(ids)) if policy else t.add_observation(ids)
        out.append(t)
    return out


@pytest.fixture(scope="module")
def learner():
    cfg = LearnerConfig(lr=5e-3, micro_batch_size=2, grpo={"group_size": 2, "kl": {"coef": 0.01}})
    return Learner(cfg)


def test_grpo_step_changes_only_the_adapter_and_merges_exactly(learner, tmp_path):
    before = {k: v.clone() for k, v in learner.trainable_state().items()}
    base_q = learner.policy.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight.clone()
    m = learner.train_step(_trajs(learner.tokenizer), [1.0, -1.0, 0.5, 0.0])
    after = learner.trainable_state()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert {"learner/pg_loss", "learner/kl", "learner/grad_norm", "learner/entropy"} <= set(m)
    assert m["learner/grad_norm"] > 0
    # the frozen base did not move; the merged tensor is W + (alpha / r) * B @ A
    q = learner.policy.get_base_model().model.layers[0].self_attn.q_proj
    assert torch.equal(q.base_layer.weight, base_q)
    merged = dict(learner.merged_weights())
    # q and v changed; k goes along because vLLM fuses q/k/v into one tensor
    n_layers = learner.policy.config.num_hidden_layers
    assert sorted(merged) == sorted(f"model.layers.{i}.self_attn.{m}_proj.weight"
                                    for i in range(n_layers) for m in "qkv")
    k = learner.policy.get_base_model().model.layers[0].self_attn.k_proj.weight
    assert torch.equal(merged["model.layers.0.self_attn.k_proj.weight"], k)
    expect = base_q + (16 / 8) * q.lora_B["default"].weight @ q.lora_A["default"].weight
    assert torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], expect, atol=1e-6)


def test_equal_rewards_give_no_update(learner):
    before = {k: v.clone() for k, v in learner.trainable_state().items()}
    m = learner.train_step(_trajs(learner.tokenizer), [1.0, 1.0, 0.0, 0.0])
    # GRPO: identical rewards within each group carry no signal; the KL term alone moves the policy
    assert abs(m["learner/pg_loss"]) < 1e-6


def test_learner_tokens_count_a_groups_shared_prompt_once(learner):
    """``learner/tokens``: the positions the update ran with gradients. A group of 2 routes after one prompt
    runs the prompt once (up to the position before the first policy token) and each row's own tokens; the
    reference and old-log-prob passes (no gradient) are not counted."""
    tok = learner.tokenizer
    prompt = tok.encode("Route the question to one candidate LLM. " * 4 + "Question: 2+2?", add_special_tokens=False)
    trajs = []
    for name in ("mixtral", "gpt-4"):
        t = TrajectoryTokens(list(prompt))
        ids = tok.encode(f"{name}</search>", add_special_tokens=False)
        t.add_policy(ids, [0.0] * len(ids))
        trajs.append(t)
    m = learner.train_step(trajs, [1.0, 0.0])
    width, shared = max(len(t) for t in trajs), len(prompt) - 1
    assert m["learner/tokens"] == shared + 2 * (width - shared)
    assert m["learner/tokens"] < 2 * width / 1.5  # the prompt is most of each row


def test_checkpoint_round_trip_restores_weights_optimizer_and_rng(learner, tmp_path):
    save_checkpoint(tmp_path / "ck", learner, step=7, extra={"reward": {"window": [0.1]}})
    state = learner.trainable_state()
    opt = learner.optimizer.state_dict()
    torch.manual_seed(1)
    expected_draw = torch.rand(3)
    fresh = Learner(learner.cfg)
    torch.manual_seed(999)
    st = load_checkpoint(tmp_path / "ck", fresh)
    assert st["step"] == 7 and st["extra"]["reward"] == {"window": [0.1]}
    for k, v in state.items():
        assert torch.equal(fresh.trainable_state()[k], v)
    fopt = fresh.optimizer.state_dict()
    assert all(torch.equal(fopt["state"][k]["exp_avg"], opt["state"][k]["exp_avg"]) for k in opt["state"])
    # adapter saved in peft format for serving
    assert (tmp_path / "ck" / "adapter" / "adapter_model.safetensors").exists()
    with pytest.raises(FileNotFoundError, match="not an rlrouter checkpoint"):
        load_checkpoint(tmp_path, fresh)
    del expected_draw


def test_ppo_learner_has_a_critic_and_reports_value_loss():
    cfg = LearnerConfig(algo="ppo", lr=1e-3, micro_batch_size=4, ppo={"kl": {"coef": 0.0}})
    lr = Learner(cfg)
    m = lr.train_step(_trajs(lr.tokenizer, 2), [1.0, -1.0])
    assert "learner/value_loss" in m and "value_head.proj.weight" in lr.trainable_state()


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="learner.algo"):
        LearnerConfig(algo="a2c")
    with pytest.raises(ValueError, match="train.sync"):
        RouterR1TrainConfig(sync="ipc")


def test_cold_start_sft_lowers_the_nll_of_policy_tokens_only(learner):
    trajs = _trajs(learner.tokenizer)
    first = learner.sft_step(trajs, lr=1e-3)["sft/nll"]
    for _ in range(3):
        last = learner.sft_step(trajs, lr=1e-3)["sft/nll"]
    assert last < first
    # the information block is not trained on: the token count is the policy tokens only
    assert learner.sft_step(trajs, lr=0.0)["sft/tokens"] == sum(t.num_policy_tokens for t in trajs)


TEMPLATE = ("You route questions to candidate LLMs. Think first, then call one candidate with "
            "<search>MODEL: query</search> or answer with <answer>...</answer>. Candidates: gpt-4, mixtral.\n")
COMPLETIONS = ["<think>13 is prime</think><answer>13</answer>", "<answer>17</answer>",
               "<think>eleven</think><search>gpt-4: primes?</search>"]


@pytest.fixture(scope="module")
def ppo_learner():
    lr = Learner(LearnerConfig(algo="ppo", lr=1e-3, micro_batch_size=3, ppo={"kl": {"coef": 0.0}}))
    with torch.no_grad():  # a non-zero adapter, so the LoRA path is exercised
        for n, p in lr.policy.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.02)
    return lr


def _matches_the_full_forward(lr, mb):
    """The learner's forward of ``mb`` against a plain full forward: the same log-probs, values and gradients
    on the loss mask. Returns the learner's log-probs (B, T)."""
    from rlrouter.algos.common import token_logprobs

    logp, _, values = lr._forward(lr.module, mb, with_values=True, with_entropy=False)
    (logp * mb["loss_mask"]).sum().backward()
    grads = {n: p.grad.clone() for n, p in lr.policy.named_parameters() if p.grad is not None}
    lr.optimizer.zero_grad(set_to_none=True)
    full = lr.policy(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], output_hidden_states=True)
    ref_logp = token_logprobs(full.logits, mb["input_ids"])
    ref_values = lr.value_head(full.hidden_states[-1])
    m = mb["loss_mask"].bool()
    assert torch.allclose(logp[m], ref_logp[m], atol=1e-4)
    assert torch.allclose(values[m], ref_values[m], atol=1e-5)
    (ref_logp * mb["loss_mask"]).sum().backward()
    assert grads and len(grads) == sum(1 for p in lr.policy.parameters() if p.grad is not None)
    for n, p in lr.policy.named_parameters():
        if p.grad is not None:
            assert torch.allclose(grads[n], p.grad, atol=1e-4, rtol=1e-3), n
    lr.optimizer.zero_grad(set_to_none=True)
    return logp


@pytest.mark.parametrize("case", ["one prompt", "shared template", "nothing shared"])
def test_windowed_shared_prefix_forward_equals_the_full_forward(ppo_learner, case):
    """The learner's forward (logits from the first policy token on; the rows' common prefix run once
    through a repeated KV cache) gives a plain full forward's log-probs, values and gradients."""
    from rlrouter.learner.model import MIN_SHARED_PREFIX, common_prefix_length, first_policy_position
    from rlrouter.rollout.parsing import collate

    lr = ppo_learner
    questions = {"one prompt": ["Name a prime between 10 and 20."] * 3,
                 "shared template": ["Name a prime between 10 and 20.", "What is 2+2?", "Capital of France, please?"],
                 "nothing shared": ["Name a prime.", "What is 2+2?", "Capital of France?"]}[case]
    prefix_text = "" if case == "nothing shared" else TEMPLATE
    mb = collate(_group_rows(lr.tokenizer, [prefix_text + q for q in questions], COMPLETIONS), lr.tokenizer.pad_token_id)
    mb["loss_mask"] = mb["loss_mask"].float()
    start = first_policy_position(mb["loss_mask"])
    shared = common_prefix_length(mb["input_ids"], mb["attention_mask"], start - 1)
    assert (shared >= MIN_SHARED_PREFIX) == (case != "nothing shared")
    if case == "one prompt":
        assert shared == start - 1

    logp = _matches_the_full_forward(lr, mb)


@pytest.mark.parametrize("questions", [("Name a prime between 10 and 20.", "What is 2+2?"),
                                       ("Capital of France?", "Name a prime between 10 and 20, and say why.")])
def test_grouped_forward_of_several_prompt_groups_equals_the_full_forward(ppo_learner, questions):
    """Two GRPO groups of two rows in one micro-batch, prompts of different lengths after a shared template:
    the grouped forward (template once, each group's prompt once, each row's own tokens) gives a plain full
    forward's log-probs, values and gradients, and runs fewer positions than the one-prefix forward would."""
    from rlrouter.learner.model import prompt_groups
    from rlrouter.rollout.parsing import collate

    lr = ppo_learner
    prompts = [TEMPLATE + questions[0]] * 2 + [TEMPLATE + questions[1]] * 2
    mb = collate(_group_rows(lr.tokenizer, prompts, ["<answer>13</answer>", "<search>gpt-4: primes?</search>",
                                                     "<answer>4</answer>", "<think>sum</think><answer>4</answer>"]),
                 lr.tokenizer.pad_token_id)
    mb["loss_mask"] = mb["loss_mask"].float()
    groups = prompt_groups(mb["input_ids"], mb["attention_mask"], mb["loss_mask"])
    assert groups is not None and groups.sizes == (2, 2) and groups.template >= len(lr.tokenizer.encode(TEMPLATE)) - 2
    before = lr.module.trained_tokens
    logp = _matches_the_full_forward(lr, mb)
    assert lr.module.trained_tokens - before == groups.tokens(mb["attention_mask"].sum(1).tolist())
    assert lr.module.trained_tokens - before < mb["attention_mask"].sum()
    for b, e in enumerate(g for g, n in zip(groups.ends, groups.sizes) for _ in range(n)):
        assert torch.equal(logp[b, :e], torch.zeros(e))  # the prompt: no logits formed, 0


@pytest.mark.parametrize("chunks", [((0, 2), (2, 4), (4, 5)), ((0, 4), (4, 5))], ids=["one group each", "grouped"])
def test_the_batch_template_run_once_gives_the_gradients_of_running_it_in_every_micro_batch(ppo_learner, chunks):
    """``learner.share_template``: the template every row of the batch shares runs once, and each micro-batch
    starts from its KV cache; the micro-batches' gradients go back through it once at the end. Log-probs,
    values and the summed gradients equal those of micro-batches that each run the template, for micro-batches
    of one group, of two groups (the grouped forward) and of a single row; the template's positions run once."""
    from rlrouter.rollout.parsing import collate

    lr = ppo_learner
    questions = ["Name a prime between 10 and 20.", "What is 2+2?", "Capital of France, and why?"]
    prompts = [TEMPLATE + questions[0]] * 2 + [TEMPLATE + questions[1]] * 2 + [TEMPLATE + questions[2]]
    batch = collate(_group_rows(lr.tokenizer, prompts, ["<answer>13</answer>", "<search>gpt-4: primes?</search>",
                                                        "<answer>4</answer>", "<think>sum</think><answer>4</answer>",
                                                        "<answer>Paris</answer>"]), lr.tokenizer.pad_token_id)
    batch["loss_mask"] = batch["loss_mask"].float()
    mbs = [{k: v[a:b] for k, v in batch.items()} for a, b in chunks]

    def run(template_of):
        template = template_of(batch)
        before = lr.module.trained_tokens
        logps, values = [], []
        for mb in mbs:
            logp, _, v = lr._forward(lr.module, mb, with_values=True, with_entropy=False, template=template)
            m = mb["loss_mask"].bool()
            ((logp * mb["loss_mask"]).sum() + v[m].sum()).backward()
            logps.append(logp.detach()), values.append(v.detach())
        if template is not None:
            template.backward()
        grads = {n: p.grad.clone() for n, p in lr.policy.named_parameters() if p.grad is not None}
        grads["value_head"] = next(lr.value_head.parameters()).grad.clone()
        lr.optimizer.zero_grad(set_to_none=True)
        return torch.cat(logps), torch.cat(values), grads, lr.module.trained_tokens - before

    shared = lr.model.shared_template(batch)
    assert shared is not None and shared.length >= len(lr.tokenizer.encode(TEMPLATE)) - 2
    shared.backward()  # (this one only measured the length)
    logp, values, grads, tokens = run(lr.model.shared_template)
    ref_logp, ref_values, ref_grads, ref_tokens = run(lambda _: None)
    m = batch["loss_mask"].bool()
    assert torch.allclose(logp[m], ref_logp[m], atol=1e-5) and torch.allclose(values[m], ref_values[m], atol=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) > 1
    for n, g in grads.items():
        assert torch.allclose(g, ref_grads[n], atol=1e-4, rtol=1e-3), n
    # the template ran once instead of once per micro-batch (the lone row ran it in full without the template)
    assert ref_tokens - tokens >= (len(chunks) - 2) * shared.length + shared.length // 2


def test_a_micro_batch_that_misses_the_template_is_refused(ppo_learner):
    from rlrouter.rollout.parsing import collate

    lr = ppo_learner
    batch = collate(_group_rows(lr.tokenizer, [TEMPLATE + "What is 2+2?"] * 2, COMPLETIONS[:2]), lr.tokenizer.pad_token_id)
    batch["loss_mask"] = batch["loss_mask"].float()
    with torch.no_grad():
        template = lr.model.shared_template(batch)
        other = collate(_group_rows(lr.tokenizer, ["Another template entirely. " * 4 + "2+2?"] * 2, COMPLETIONS[:2]),
                        lr.tokenizer.pad_token_id)
        other["loss_mask"] = other["loss_mask"].float()
        with pytest.raises(ValueError, match="shared template"):
            lr._forward(lr.module, other, with_values=False, template=template)


def test_a_micro_batch_runs_only_its_own_columns(ppo_learner):
    """A batch is padded to its longest trajectory, which may sit in another micro-batch: the forward
    runs the micro-batch's own columns only, and gives the same log-probs, values and gradients as the
    same rows padded no further, with 0 in the columns it did not run."""
    from rlrouter.rollout.parsing import collate

    lr = ppo_learner
    rows = _group_rows(lr.tokenizer, [TEMPLATE + "Name a prime between 10 and 20."] * 3, COMPLETIONS)
    tight = collate(rows, lr.tokenizer.pad_token_id)
    T = tight["input_ids"].shape[1]
    wide = collate(rows, lr.tokenizer.pad_token_id, pad_to=T + 40)
    seen: list[int] = []

    def module(input_ids, attention_mask, with_values, start, **kw):
        seen.append(input_ids.shape[1])
        return lr.module(input_ids, attention_mask, with_values, start, **kw)

    out = {}
    for name, mb in (("tight", tight), ("wide", wide)):
        mb["loss_mask"] = mb["loss_mask"].float()
        logp, entropy, values = lr._forward(module, mb, with_values=True, with_entropy=True)
        (logp * mb["loss_mask"]).sum().backward()
        grads = {n: p.grad.clone() for n, p in lr.policy.named_parameters() if p.grad is not None}
        lr.optimizer.zero_grad(set_to_none=True)
        out[name] = (logp.detach(), entropy.detach(), values.detach(), grads)
    assert seen == [T, T]  # the wide batch's 40 padding columns never reached the model
    for a, b in zip(out["tight"][:3], out["wide"][:3]):
        assert b.shape == (3, T + 40) and torch.all(b[:, T:] == 0)
        assert torch.allclose(a, b[:, :T], atol=1e-6)
    assert out["tight"][3].keys() == out["wide"][3].keys() and out["tight"][3]
    for n, g in out["tight"][3].items():
        assert torch.allclose(g, out["wide"][3][n], atol=1e-6), n


def _group_rows(tok, prompts: list[str], completions: list[str]) -> list[TrajectoryTokens]:
    out = []
    for prompt, text in zip(prompts, completions):
        t = TrajectoryTokens(tok.encode(prompt, add_special_tokens=False))
        ids = tok.encode(text, add_special_tokens=False)
        t.add_policy(ids, [0.0] * len(ids))
        out.append(t)
    return out


@pytest.mark.parametrize("n,group,mbs,expected", [
    (8, 4, 8, [(0, 8)]),                  # whole GRPO groups, as many as fit
    (12, 4, 8, [(0, 8), (8, 12)]),
    (12, 4, 6, [(0, 4), (4, 8), (8, 12)]),  # one group fits: chunks never split or mix groups
    (8, 4, 3, [(0, 3), (3, 4), (4, 7), (7, 8)]),
    (8, 4, 2, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    (6, 1, 4, [(0, 4), (4, 6)]),          # PPO (no groups): plain chunks
])
def test_micro_batches_follow_group_boundaries(n, group, mbs, expected):
    from types import SimpleNamespace

    fake = SimpleNamespace(cfg=SimpleNamespace(micro_batch_size=mbs), algo=SimpleNamespace(group_size=group))
    rows = torch.arange(n).unsqueeze(1)
    chunks = Learner._micro_batches(fake, {"input_ids": rows})
    assert [(int(c["input_ids"][0, 0]), int(c["input_ids"][-1, 0]) + 1) for c in chunks] == expected


def test_lr_warms_up_linearly_over_the_first_rl_updates_and_resumes(tmp_path):
    """learner.lr_warmup_steps=3: updates 1, 2, 3, 4 use 1/3, 2/3, 1, 1 of lr (the cold start's SFT steps
    do not count); a checkpoint keeps the clock."""
    cfg = LearnerConfig(lr=3e-3, lr_warmup_steps=3, micro_batch_size=2, grpo={"group_size": 2})
    lrn = Learner(cfg)
    tok = lrn.tokenizer
    lrn.sft_step(_trajs(tok, 2), lr=1e-3)
    seen = [lrn.train_step(_trajs(tok), [1.0, -1.0, 0.5, 0.0])["learner/lr"] for _ in range(2)]
    save_checkpoint(tmp_path / "ck", lrn, step=2, extra={})
    again = Learner(cfg)
    load_checkpoint(tmp_path / "ck", again)
    seen += [again.train_step(_trajs(tok), [1.0, -1.0, 0.5, 0.0])["learner/lr"] for _ in range(2)]
    assert seen == pytest.approx([1e-3, 2e-3, 3e-3, 3e-3])
    with pytest.raises(ValueError, match="lr_warmup_steps"):
        LearnerConfig(lr_warmup_steps=-1)


def test_a_checkpoint_at_a_uri_goes_up_from_the_rank_and_comes_back(learner, tmp_path):
    """storage=s3://... : the rank writes in a folder of its own node and uploads, state.json last; a rank
    on another node downloads it. ``file://`` stands in for the bucket (the same pyarrow.fs calls)."""
    from rlrouter.learner.checkpoint import check_visible, latest_checkpoint

    bucket = f"file://{tmp_path}/bucket/run/checkpoints"
    save_checkpoint(f"{bucket}/step_000003", learner, step=3, extra={"reward": {}})
    stored = tmp_path / "bucket" / "run" / "checkpoints" / "step_000003"
    assert {"state.json", "trainable.safetensors", "optimizer.pt", "rng.safetensors", "adapter"} <= {
        p.name for p in stored.iterdir()}
    assert latest_checkpoint(bucket) == f"{bucket}/step_000003"
    fresh = Learner(learner.cfg)
    assert load_checkpoint(latest_checkpoint(bucket), fresh)["step"] == 3
    for k, v in learner.trainable_state().items():
        assert torch.equal(fresh.trainable_state()[k], v)
    check_visible(bucket, 0)  # a URI is reachable from any node
    with pytest.raises(FileNotFoundError, match=r"does not exist on learner rank 1's node.*URI \(s3://"):
        check_visible(str(tmp_path / "not-mounted-here"), 1)


def test_a_restore_from_a_uri_fetches_the_ranks_own_files_and_leaves_no_folder(learner, tmp_path, monkeypatch):
    """Each restore used to download every rank's shards (about 46 GiB for the 3B preset) into a temporary
    folder per rank, never deleted: a few restarts filled the disk. Now: this rank's files only, folder gone."""
    import rlrouter.learner.checkpoint as ck

    bucket = f"file://{tmp_path}/bucket/run/checkpoints"
    save_checkpoint(f"{bucket}/step_000004", learner, step=4)
    stored = tmp_path / "bucket" / "run" / "checkpoints" / "step_000004"
    (stored / "optimizer.rank7.pt").write_bytes(b"another rank's shard" * 1000)  # an FSDP neighbour's files
    (stored / "reference.rank7.safetensors").write_bytes(b"x" * 1000)
    fetched: list[tuple[Path, set[str]]] = []
    real = ck.download

    def spy(location, local_dir, only=None):
        out = real(location, local_dir, only=only)
        fetched.append((Path(local_dir), {p.name for p in Path(local_dir).iterdir()}))
        return out

    monkeypatch.setattr(ck, "download", spy)
    for load in (ck.load_checkpoint, ck.load_weights):
        fetched.clear()
        assert load(f"{bucket}/step_000004", Learner(learner.cfg))["step"] == 4
        [(folder, names)] = fetched
        assert not folder.exists()  # removed once the restore is done
        assert "optimizer.rank7.pt" not in names and "reference.rank7.safetensors" not in names and "adapter" not in names
        assert names == ({"state.json", "trainable.safetensors", "rng.safetensors", "optimizer.pt"}
                         if load is ck.load_checkpoint else {"state.json", "trainable.safetensors"})


def test_a_step_without_gradient_leaves_the_weights_and_a_reset_forgets_the_momentum():
    """Tied groups and no KL term give no gradient: the weights stay put although AdamW holds momentum from
    the step before; ``reset_moments`` (RL's start after the cold start) empties the optimizer's state."""
    lr = Learner(LearnerConfig(lr=5e-3, micro_batch_size=2, grpo={"group_size": 2}))
    trajs = _trajs(lr.tokenizer)
    lr.train_step(trajs, [1.0, -1.0, 0.5, 0.0])
    assert lr.optimizer.state  # momentum from a real step
    before = {k: v.clone() for k, v in lr.trainable_state().items()}
    m = lr.train_step(trajs, [1.0, 1.0, 0.0, 0.0])
    assert m["learner/grad_norm"] == 0.0 and m["learner/skipped_updates"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in lr.trainable_state().items())
    lr.reset_moments()
    assert not lr.optimizer.state


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_an_update_with_the_template_run_once_moves_the_weights_as_one_without(algo):
    """The whole update (``train_step``: GRPO's one pass, PPO's old-log-prob pass and critic) with
    ``learner.share_template`` on and off, from the same weights on the same batch of three prompt groups:
    the same gradients (the update leaves them on the parameters), and fewer positions run."""
    prompts = [TEMPLATE + q for q in ("Name a prime between 10 and 20.", "What is 2+2?", "Capital of France?")
               for _ in range(2)]
    completions = ["<answer>13</answer>", "<search>gpt-4: primes?</search>", "<answer>4</answer>",
                   "<think>sum</think><answer>4</answer>", "<answer>Paris</answer>", "<answer>Lyon</answer>"]
    rewards = [1.0, 0.2, 0.9, 0.0, 1.0, -0.5]
    knobs = {"grpo": {"kl": {"coef": 0.0}}} if algo == "grpo" else {"ppo": {"kl": {"coef": 0.0}}}
    out = {}
    for share in (True, False):
        torch.manual_seed(0)
        cfg = LearnerConfig(algo=algo, lr=1e-2, micro_batch_size=2, share_template=share,
                            **({"grpo": {"group_size": 2, **knobs["grpo"]}} if algo == "grpo" else knobs))
        lr = Learner(cfg)
        m = lr.train_step(_group_rows(lr.tokenizer, prompts, completions), rewards)
        grads = {n: p.grad.clone() for n, p in lr.model.module.named_parameters() if p.grad is not None}
        out[share] = (grads, m["learner/tokens"])
    (on, tokens_on), (off, tokens_off) = out[True], out[False]
    assert on.keys() == off.keys() and any(float(g.abs().max()) > 0 for k, g in on.items() if "lora_B" in k)
    assert any("value_head" in k for k in on) == (algo == "ppo")
    for k in on:
        assert torch.allclose(on[k], off[k], atol=1e-6, rtol=1e-3), k
    assert tokens_on < tokens_off


def test_the_learner_takes_the_well_formed_baseline_from_the_driver():
    """``learner.grpo.baseline: well_formed``: the flags the driver passes set each group's baseline. A
    failure (-1) beside a well-formed 0.5: with the group's mean the two get +-0.75 (pg_loss ~0); with the
    well-formed mean the failure alone carries -1.5 (pg_loss > 0)."""
    cfg = LearnerConfig(lr=1e-5, micro_batch_size=4, grpo={"group_size": 2, "kl": {"coef": 0.0},
                                                           "baseline": "well_formed"})
    lrn = Learner(cfg)
    trajs = _trajs(lrn.tokenizer)
    rewards, formed = [0.5, -1.0, 0.5, -1.0], [True, False, True, False]
    m = lrn.train_step(trajs, rewards, well_formed=formed)
    assert m["learner/pg_loss"] > 0.5
    with pytest.raises(ValueError, match="not told which samples"):
        lrn.train_step(trajs, rewards)
