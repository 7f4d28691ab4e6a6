"""The multi-turn environment on scripted policies (pure logic: a fake generate, a fake pool)."""

from __future__ import annotations

import asyncio

import pytest

from rlrouter.pool.base import Candidate, CandidateResponse
from rlrouter.protocol import REPLY_GOLD
from rlrouter.rollout.env import LAST_CALL_NOTE, NO_ANSWER_NOTE, EnvConfig, RouterEnv, information_block, sample_seed


class CharTokenizer:
    """One token per character: makes masks easy to count by hand."""

    chat_template = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class FakePool:
    def __init__(self, fail: set[str] = frozenset()):
        self.cands = [Candidate("big", 10.0, 30.0, 100.0, backend="replay"),
                      Candidate("small", 0.5, 1.0, 7.0, backend="openai")]
        self.fail = fail
        self.calls: list[list[tuple[str, str]]] = []

    @property
    def names(self):
        return [c.name for c in self.cands]

    def get(self, name):
        return next(c for c in self.cands if c.name == name)

    async def route(self, calls, **kwargs):
        self.calls.append(list(calls))
        await asyncio.sleep(0)
        out = []
        for m, q in calls:
            if m in self.fail:
                out.append(CandidateResponse(text="", error="HTTP 503"))
            else:
                out.append(CandidateResponse(text=f"{m} says 42", prompt_tokens=10, completion_tokens=4,
                                             cost=self.get(m).cost(10, 4)))
        return out


def scripted(turns_by_item: dict[str, list[str]]):
    """A policy that replays a script per item, one chunk per turn (keyed by a marker in the prompt)."""
    def generate(prompts, specs):
        out = []
        for p, spec in zip(prompts, specs):
            text = "".join(chr(i) for i in p)
            key = next(k for k in turns_by_item if f"Question: {k}\n<think>" in text)
            # the turn is the number of information blocks after the question (the rules mention the tag too)
            turn = text[text.index(f"Question: {key}\n<think>"):].count("<information>")
            chunk = turns_by_item[key][min(turn, len(turns_by_item[key]) - 1)]
            assert spec.max_tokens >= 1
            out.append([ord(c) for c in chunk])
        return out

    return generate


def make_env(script, pool=None, **cfg):
    pool = pool or FakePool()
    env = RouterEnv(EnvConfig(prefill="<think>", **cfg), CharTokenizer(), pool, scripted(script))
    return env, pool


def test_route_then_answer_masks_only_policy_tokens():
    t1 = "plan</think><search>small: what is 6*7?</search>"
    t2 = "<think>ok</think><answer>42</answer>"
    env, pool = make_env({"q1": [t1, t2]}, max_turns=2)
    (traj,) = env.run([{"query": "q1", "id": "a"}])
    assert traj.answer == "42" and traj.done and traj.turns == 2 and traj.protocol_errors == 0
    assert [(r.model, r.query, r.completion_tokens) for r in traj.routes] == [("small", "what is 6*7?", 4)]
    assert traj.cost == pytest.approx((10 * 0.5 + 4 * 1.0) / 1e6)
    info = "\n\n<information>small says 42</information>\n\n"
    assert traj.text == "<think>" + t1 + info + t2
    mask = traj.tokens.loss_mask
    prompt_len = traj.tokens.prompt_length
    assert mask == [0] * prompt_len + [1] * len(t1) + [0] * len(info) + [1] * len(t2)
    assert sum(mask) == traj.tokens.num_policy_tokens == len(t1) + len(t2)


def test_replay_candidates_get_the_original_question():
    env, pool = make_env({"the real question": ["x</think><search>big: rephrased</search>", "<answer>1</answer>"]})
    env.run([{"query": "the real question", "id": "a"}])
    assert pool.calls[0] == [("big", "the real question")]
    env2, pool2 = make_env({"the real question": ["x</think><search>big: rephrased</search>", "<answer>1</answer>"]},
                           replay_query="subquery")
    env2.run([{"query": "the real question", "id": "a"}])
    assert pool2.calls[0] == [("big", "rephrased")]


@pytest.mark.parametrize("chunk, expected", [
    ("x</think><search>gpt-9: hi</search>", "unknown model 'gpt-9'"),
    ("x</think><search>no colon here</search>", "Error:"),
    ("x</think> I will just ramble", "no action found"),
])
def test_bad_actions_become_error_information_and_count_against_format(chunk, expected):
    env, pool = make_env({"q": [chunk, "<answer>7</answer>"]}, max_turns=2)
    (traj,) = env.run([{"query": "q", "id": "a"}])
    assert traj.protocol_errors == 1 and traj.answer == "7"
    assert expected in traj.text.split("<information>")[1]
    assert pool.calls == []  # nothing valid to route


def test_failed_call_is_reported_not_raised():
    env, pool = make_env({"q": ["x</think><search>small: hi</search>", "<answer>7</answer>"]}, pool=FakePool({"small"}))
    (traj,) = env.run([{"query": "q", "id": "a"}])
    assert traj.routes[0].error == "HTTP 503" and traj.protocol_errors == 1
    assert "the call to small failed (HTTP 503)" in traj.text


def test_final_turn_must_answer_and_ends_the_trajectory():
    env, pool = make_env({"q": ["x</think><search>small: hi</search>"]}, max_turns=1)
    (traj,) = env.run([{"query": "q", "id": "a"}])
    # turn 1 routes, turn 2 (final) searches again instead of answering: unanswered, one protocol error
    assert traj.turns == 2 and traj.answer is None and traj.done and traj.protocol_errors == 1
    assert len(pool.calls) == 1


def test_route_calls_of_a_batch_go_out_together_and_samples_are_item_major():
    script = {"q1": ["a</think><search>small: 1</search>", "<answer>1</answer>"],
              "q2": ["b</think><search>big: 2</search>", "<answer>2</answer>"]}
    env, pool = make_env(script)
    trajs = env.run([{"query": "q1", "id": "1"}, {"query": "q2", "id": "2"}], n_samples=2)
    assert [(t.prompt_index, t.sample_index) for t in trajs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len(pool.calls) == 1 and len(pool.calls[0]) == 4  # one concurrent batch for the turn


def test_sample_seeds_are_stable_and_distinct():
    assert sample_seed(0, 1, 2, 3, 0) == sample_seed(0, 1, 2, 3, 0)
    assert len({sample_seed(0, 1, p, s, 0) for p in range(8) for s in range(4)}) == 32


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="rollout.env.replay_query"):
        EnvConfig(replay_query="nope")
    with pytest.raises(ValueError, match="rollout.env.max_new_tokens"):
        EnvConfig(max_new_tokens=0)


def test_the_greedy_frequency_penalty_reaches_greedy_turns_only():
    """Evaluation (temperature 0) asks the engine for the penalty; sampled training turns never do, so the
    learner's log-probs stay those of the tempered distribution the turn was sampled from."""
    seen = []
    script = scripted({"q": ["x</think><search>small: hi</search>", "<answer>7</answer>"]})

    def generate(prompts, specs):
        seen.extend((s.temperature, s.frequency_penalty) for s in specs)
        return script(prompts, specs)

    env = RouterEnv(EnvConfig(prefill="<think>", greedy_frequency_penalty=0.4), CharTokenizer(), FakePool(), generate)
    env.run([{"query": "q", "id": "a"}], temperature=0.0)
    env.run([{"query": "q", "id": "a"}])  # the config's temperature, 1.0
    assert seen == [(0.0, 0.4), (0.0, 0.4), (1.0, 0.0), (1.0, 0.0)]
    with pytest.raises(ValueError, match="rollout.env.greedy_frequency_penalty"):
        EnvConfig(greedy_frequency_penalty=-0.1)


def test_max_turns_zero_is_one_answer_only_turn_and_negative_is_refused():
    import pytest

    from rlrouter.rollout.env import EnvConfig

    assert EnvConfig(max_turns=0).max_turns == 0
    with pytest.raises(ValueError, match="rollout.env.max_turns"):
        EnvConfig(max_turns=-1)


def test_a_records_candidate_models_restrict_and_price_its_routes():
    """A Router-R1 record's candidate_models limit that question's routes and set their price."""
    t_ok = "plan</think><search>small: what is 6*7?</search>"
    t_big = "plan</think><search>big: what is 6*7?</search>"
    answer = "<think>ok</think><answer>42</answer>"
    only_small = [{"name": "SMALL", "cost": 2.0, "latency": 1.0}]  # the pool's price_out for small is 1.0
    env, pool = make_env({"q1": [t_ok, answer], "q2": [t_big, answer]}, max_turns=2)
    ids_all = env.prompt_ids("q1")
    t1, t2 = env.run([{"query": "q1", "id": "a", "candidate_models": only_small},
                      {"query": "q2", "id": "b", "candidate_models": only_small}])
    # restricted: the prompt lists only 'small', and a route to 'big' is a protocol error, not a call
    prompt = "".join(chr(i) for i in t1.tokens.input_ids[:t1.tokens.prompt_length])
    assert "\n- small:" in prompt and "\n- big:" not in prompt
    assert t1.tokens.prompt_length < len(ids_all)
    assert t2.protocol_errors == 1 and not t2.routes and "unknown model 'big'" in t2.text
    assert all(m != "big" for call in pool.calls for m, _ in call)
    # priced: the record's 2.0 per 1M output tokens replaces the pool's 1.0 (input price scales alike)
    assert t1.cost == pytest.approx(2.0 * (10 * 0.5 + 4 * 1.0) / 1e6)
    # a record listing every candidate at the pool's prices changes nothing
    every = [{"name": "small", "cost": 1.0}, {"name": "big", "cost": pool.get("big").price_out}]
    env2, _ = make_env({"q1": [t_ok, answer]}, max_turns=2)
    (t3,) = env2.run([{"query": "q1", "id": "a", "candidate_models": every}])
    assert t3.tokens.input_ids[:t3.tokens.prompt_length] == ids_all
    assert t3.cost == pytest.approx((10 * 0.5 + 4 * 1.0) / 1e6)
    with pytest.raises(ValueError, match=r"candidate_models\[0\]\.name 'gpt-9'"):
        env2.run([{"query": "q1", "id": "a", "candidate_models": [{"name": "gpt-9", "cost": 1.0}]}])


def test_a_first_turn_written_for_the_policy_is_routed_but_not_learned_on():
    """``first_turn`` (``curriculum.no_answer_first_call``): the first turn is the item's text, an observation;
    the policy samples from the reply on, and only those turns are in the loss mask."""
    given = "I will ask small.</think>\n<search>small: what is 6*7?</search>"
    t2 = "<think>ok</think><answer>42</answer>"
    prompts_seen = []

    def generate(prompts, specs):
        texts = ["".join(chr(i) for i in p) for p in prompts]
        prompts_seen.extend(texts)
        return [[ord(c) for c in (t2 if "<information>" in text.split("Question: ")[-1]
                                  else "x</think><search>big: q</search>")] for text in texts]

    pool = FakePool()
    env = RouterEnv(EnvConfig(prefill="<think>", max_turns=2), CharTokenizer(), pool, generate)
    forced, free = env.run([{"query": "q1", "id": "a", "first_turn": given}, {"query": "q2", "id": "b"}])
    assert pool.calls[0] == [("small", "q1"), ("big", "q2")]  # the written call asks the whole question
    assert [r.model for r in forced.routes] == ["small"] and forced.answer == "42" and forced.turns == 2
    info = "\n\n<information>small says 42</information>\n\n"
    assert forced.text == "<think>" + given + info + t2
    assert forced.tokens.loss_mask == [0] * forced.tokens.prompt_length + [0] * len(given + info) + [1] * len(t2)
    assert forced.tokens.num_policy_tokens == len(t2)
    assert any(p.endswith("Question: q2\n<think>") for p in prompts_seen)  # q2's first turn was sampled,
    assert not any(p.endswith("Question: q1\n<think>") for p in prompts_seen)  # q1's was not
    assert [r.model for r in free.routes] == ["big"]  # the other item samples its first turn as before


def test_stop_at_call_ends_the_trajectory_at_that_call_unsent():
    """``stop_at_call`` (a served cascade's ``until: route``): the N-th call is recorded but never sent, and the
    trajectory ends there; a trajectory that answers first, and an item without the key, run as before."""
    given = "I will ask small.</think>\n<search>small: q</search>"
    env, pool = make_env({"q1": ["x", "<think>no</think><search>big: q1 again</search>", "<answer>1</answer>"],
                          "q2": ["x", "<think>ok</think><answer>42</answer>"],
                          "q3": ["x", "<think>no</think><search>big: q3 again</search>", "<answer>3</answer>"]},
                         max_turns=3)
    stopped, answered, full = env.run([{"query": "q1", "first_turn": given, "stop_at_call": 2},
                                       {"query": "q2", "first_turn": given, "stop_at_call": 2},
                                       {"query": "q3", "first_turn": given}])
    assert [r.model for r in stopped.routes] == ["small", "big"] and stopped.done and stopped.answer is None
    assert stopped.routes[1].cost == 0.0 and stopped.routes[1].correct is None  # not sent: nothing paid
    assert stopped.text.endswith("<search>big: q1 again</search>") and stopped.turns == 2
    assert [r.model for r in answered.routes] == ["small"] and answered.answer == "42"
    assert [r.model for r in full.routes] == ["small", "big"] and full.answer == "3" and full.turns == 3
    sent = [c for batch in pool.calls for c in batch]
    assert ("big", "q1") not in sent and ("big", "q3") in sent  # replay candidates get the original question
    # each written first call was sent once, with the whole question although its text shows a sub-query (small is
    # a live candidate: the policy's own calls to it send what the policy wrote)
    assert [c for c in sent if c[0] == "small"] == [("small", "q1"), ("small", "q2"), ("small", "q3")]


def test_mark_no_answer_notes_replies_without_a_final_answer_only():
    """``rollout.env.mark_no_answer``: the information block of a reply that states no final answer ends
    with the note; a reply that states one, an error and the default (off) are left as they were."""
    class Pool(FakePool):
        async def route(self, calls, **kwargs):
            out = await super().route(calls, **kwargs)
            return [CandidateResponse(text="So 6*7 = 42.\n#### 42", cost=r.cost) if m == "big" and r.ok else r
                    for (m, _), r in zip(calls, out)]

    script = {"q1": ["x</think><search>small: q</search>", "<think>ok</think><answer>42</answer>"],
              "q2": ["x</think><search>big: q</search>", "<think>ok</think><answer>42</answer>"],
              "q3": ["x</think><search>nobody: q</search>", "<think>ok</think><answer>42</answer>"]}
    items = [{"query": q, "id": q} for q in script]
    marked = RouterEnv(EnvConfig(prefill="<think>", mark_no_answer=True), CharTokenizer(), Pool(), scripted(script))
    small, big, bad = marked.run(items)
    assert "<information>small says 42\n" + NO_ANSWER_NOTE + "</information>" in small.text
    assert "<information>So 6*7 = 42.\n#### 42</information>" in big.text
    assert NO_ANSWER_NOTE not in bad.text and "<information>" in bad.text  # an error is not a reply
    assert all(t.answer == "42" for t in (small, big, bad))
    plain = RouterEnv(EnvConfig(prefill="<think>"), CharTokenizer(), Pool(), scripted(script)).run(items)
    assert not any(NO_ANSWER_NOTE in t.text for t in plain)
    assert [t.text.replace("\n" + NO_ANSWER_NOTE, "") for t in (small, big, bad)] == [t.text for t in plain]
    # the one rendering the demonstrations and the probe use too
    assert information_block("Error: x", 400, True, reply=False) == "\n\n<information>Error: x</information>\n\n"
    with pytest.raises(ValueError, match="rollout.env.mark_no_answer"):
        EnvConfig(mark_no_answer="yes")


def test_note_last_call_ends_only_the_block_that_the_answer_only_turn_follows():
    """``rollout.env.note_last_call``: the information after the last call ``max_turns`` allows ends with
    ``LAST_CALL_NOTE`` (after the reply's own note); earlier blocks, errors included, and the default do not."""
    script = {"q1": ["x</think><search>small: q</search>", "<think>y</think><search>nobody: q</search>",
                     "<think>ok</think><answer>42</answer>"],
              "q2": ["x</think><search>small: q</search>", "<think>ok</think><answer>42</answer>"]}
    items = [{"query": q, "id": q} for q in script]
    env = RouterEnv(EnvConfig(prefill="<think>", max_turns=2, note_last_call=True, mark_no_answer=True,
                              max_total_tokens=10**6),
                    CharTokenizer(), FakePool(), scripted(script))
    two, one = env.run(items)
    first, second = two.text.split("</information>")[:2]
    assert first.endswith("small says 42\n" + NO_ANSWER_NOTE) and LAST_CALL_NOTE not in first
    assert second.endswith("\n" + LAST_CALL_NOTE) and "<information>Error:" in second  # an error block too
    assert LAST_CALL_NOTE not in one.text and two.answer == one.answer == "42"
    plain = RouterEnv(EnvConfig(prefill="<think>", max_turns=2, mark_no_answer=True, max_total_tokens=10**6),
                      CharTokenizer(), FakePool(), scripted(script)).run(items)
    assert [t.text.replace("\n" + LAST_CALL_NOTE, "") for t in (two, one)] == [t.text for t in plain]
    assert information_block("#### 3", None, True, last_call=True) == (
        "\n\n<information>#### 3\n" + LAST_CALL_NOTE + "</information>\n\n")
    with pytest.raises(ValueError, match="rollout.env.note_last_call"):
        EnvConfig(note_last_call=1)


def test_a_compact_route_opened_by_the_prefill_asks_the_question_itself():
    """``action: compact`` with the turn opened by ``<search>``: the policy writes only the name, the prefill
    and the name parse as one route, and the call sends the trajectory's question, to a live candidate too."""
    pool = FakePool()

    def generate(prompts, specs):
        texts = ["".join(chr(i) for i in p) for p in prompts]
        if not texts[0].endswith("<search>"):  # the answer-only turn after the call
            return [[ord(c) for c in "<answer>42</answer>"] for _ in prompts]
        assert all("<search>MODEL</search>" in t and t.endswith("<search>") for t in texts)  # compact, opened
        return [[ord(c) for c in "small</search>"] for _ in prompts]

    env = RouterEnv(EnvConfig(prefill="<search>", action="compact", max_turns=1), CharTokenizer(), pool, generate)
    routed, stopped = env.run([{"query": "what is 6*7?", "id": "a"},
                               {"query": "what is 6*8?", "id": "b", "stop_at_call": 1}])
    assert [(r.model, r.query) for r in routed.routes] == [("small", "")] and routed.protocol_errors == 0
    assert routed.answer == "42"
    assert pool.calls[0] == [("small", "what is 6*7?")]  # only the unstopped one was sent
    assert stopped.done and stopped.text == "<search>small</search>" and stopped.tokens.num_policy_tokens == 14
    with pytest.raises(ValueError, match="rollout.env.action"):
        EnvConfig(action="short")


class LoggedPool(FakePool):
    """``big`` replays a logged reply with its logged outcome; ``small`` is live (no outcome)."""

    async def route(self, calls, **kwargs):
        out = await super().route(calls, **kwargs)
        return [CandidateResponse(text="The answer is B", prompt_tokens=10, completion_tokens=4, cost=r.cost,
                                  correct=False) if m == "big" and r.ok else r for (m, _), r in zip(calls, out)]


def test_answer_reply_ends_at_the_first_reply_and_the_reward_grades_that_reply():
    """``answer: reply``: the route is the policy's only turn. The reply is the answer: a logged one graded by
    its logged outcome, a live one by the answer it states; the learner's tokens stop at the route; no
    ``<think>`` is required by the format check; a failed call ends the trajectory unanswered."""
    from rlrouter.eval.route_scores import policy_rows
    from rlrouter.rewards.router_r1 import RouterR1Reward, score_trajectories
    from rlrouter.rewards.spec import RewardSpec
    from rlrouter.trainer.report import held_out_summary

    pool = LoggedPool(fail={"none"})

    def generate(prompts, specs):
        assert all(s.stop == ["</search>", "</answer>"] for s in specs)  # never the answer-only turn
        texts = ["".join(chr(i) for i in p) for p in prompts]
        return [[ord(c) for c in ("big" if "6*8" in t else "small") + "</search>"] for t in texts]

    env = RouterEnv(EnvConfig(prefill="<search>", action="compact", max_turns=2, answer="reply"), CharTokenizer(),
                    pool, generate)
    live, logged = env.run([{"query": "what is 6*7?", "id": "a", "ground_truth": ["42"]},
                            {"query": "what is 6*8?", "id": "b", "ground_truth": ["B"]}])
    for t in (live, logged):
        assert t.done and t.reply_answer and t.turns == 1 and len(t.routes) == 1 and t.protocol_errors == 0
        assert t.tokens.input_ids[-len("</search>"):] == [ord(c) for c in "</search>"]  # no reply tokens
        assert t.text.endswith(f"<answer>{t.answer}</answer>")
    assert live.answer == "42" and live.item["ground_truth"] == ["42"]
    # the logged reply states B, the gold letter, but its logged outcome is wrong: the outcome grades it
    assert logged.answer == "big" and logged.item["ground_truth"] == [REPLY_GOLD]
    scores = score_trajectories(RouterR1Reward(alpha=0.0, candidates=["big", "small"]), [live, logged])
    assert [(s.format, s.outcome) for s in scores] == [(0.0, 1.0), (0.0, 0.0)]
    # the held-out scoring checks the format as the training reward does
    held = held_out_summary([live, logged], ["big", "small"], RewardSpec())
    assert held["format_valid"] == 1.0 and held["format_failures"] == {}
    assert policy_rows([live, logged], ["big", "small"], "big", 0.0, (0.0, 1.0)).format_valid.tolist() == [1.0, 1.0]
    # the same texts without the flag fail the format (no <think>): the flag is what lets them pass
    live.reply_answer = False
    assert score_trajectories(RouterR1Reward(alpha=0.0, candidates=["big", "small"]), [live])[0].format == -1.0
    assert held_out_summary([live], ["big", "small"], RewardSpec())["format_valid"] == 0.0

    failing = RouterEnv(EnvConfig(prefill="<search>", action="compact", max_turns=2, answer="reply"),
                        CharTokenizer(), FakePool(fail={"small"}), generate)
    (t,) = failing.run([{"query": "what is 6*7?", "id": "a", "ground_truth": ["42"]}])
    assert t.done and t.answer is None and t.protocol_errors == 1 and "HTTP 503" in t.text
    with pytest.raises(ValueError, match="rollout.env.answer"):
        EnvConfig(answer="candidate")
    with pytest.raises(ValueError, match="max_turns >= 1"):
        EnvConfig(answer="reply", max_turns=0)


def test_answer_reply_ends_a_malformed_route_at_once():
    """``answer: reply``: a route that names no candidate ends the trajectory unanswered in the same turn: no
    error block, no second turn (one rollout round for the batch, and the learner's rows stop at the route),
    while ``answer: policy`` keeps Router-R1's error block and a turn to recover."""
    rounds: list[int] = []

    def generate(prompts, specs):
        rounds.append(len(prompts))
        return [[ord(c) for c in ("nobody" if "6*7" in "".join(chr(i) for i in p) else "small") + "</search>"]
                for p in prompts]

    items = [{"query": "what is 6*7?", "id": "a", "ground_truth": ["42"]},
             {"query": "what is 6*8?", "id": "b", "ground_truth": ["48"]}]
    bad, good = RouterEnv(EnvConfig(prefill="<search>", action="compact", max_turns=1, answer="reply"),
                          CharTokenizer(), FakePool(), generate).run(items)
    assert rounds == [2]
    assert bad.done and bad.answer is None and bad.protocol_errors == 1 and bad.turns == 1 and not bad.routes
    assert "<information>" not in bad.text and bad.tokens.input_ids[-len("</search>"):] == [ord(c) for c in "</search>"]
    assert good.routes and good.answer is not None and good.protocol_errors == 0
    rounds.clear()
    policy = RouterEnv(EnvConfig(prefill="<search>", action="compact", max_turns=1), CharTokenizer(), FakePool(),
                       generate).run(items[:1])[0]
    assert rounds == [1, 1] and "<information>" in policy.text and policy.turns == 2


def test_a_constrained_route_asks_the_engine_for_the_candidates_names_only():
    """``rollout.env.constrain_route``: the first turn's spec lists ``NAME</search>`` for each of the item's
    candidates; later turns and unconstrained runs list none; the config refuses it outside a compact route."""
    seen = []

    def generate(prompts, specs):
        seen.extend(s.choices for s in specs)
        assert all(s.max_tokens >= len("small</search>") for s in specs if s.choices)  # any spelling fits
        return [[ord(c) for c in "small</search>"] for _ in prompts]

    items = [{"query": "what is 6*7?", "id": "a", "ground_truth": ["42"]}]
    for constrain in (True, False):
        env = RouterEnv(EnvConfig(prefill="<search>", action="compact", max_turns=2, answer="reply", max_new_tokens=4,
                                  constrain_route=constrain), CharTokenizer(), LoggedPool(fail={"none"}), generate)
        (t,) = env.run(items)
        assert t.routes[0].model == "small"
    assert seen == [("big</search>", "small</search>"), None]
    with pytest.raises(ValueError, match="rollout.env.constrain_route: needs rollout.env.action=compact"):
        EnvConfig(constrain_route=True)
    with pytest.raises(ValueError, match="constrain_route"):
        EnvConfig(action="compact", prefill="<think>", constrain_route=True)
