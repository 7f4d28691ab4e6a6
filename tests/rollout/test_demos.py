"""Cold-start demonstrations from the real replay pool are well-formed Router-R1 trajectories."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlrouter.pool.pool import CandidatePool
from rlrouter.rewards.router_r1 import RouterR1FormatReward, RouterR1OutcomeReward
from rlrouter.rollout.demos import build_demonstrations, demo_tokens, fit_search_turn, search_turn, short_query
from rlrouter.rollout.env import EnvConfig
from tests.helpers import CONF_DIR


def _pool():
    return CandidatePool.from_config(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pool" / "routellm_replay.yaml")))


def test_demonstrations_route_at_random_and_copy_the_reply(shared_data):
    """The default demonstrations: a random candidate, its real reply, and the answer that reply states,
    so the demonstration is right exactly when the routed model's logged answer is."""
    from rlrouter.data.sources import gsm8k

    pool = _pool()
    qs = gsm8k(shared_data / "routellm" / "gsm8k")[:40]
    items = [{"query": q.query, "ground_truth": q.ground_truth, "optimal_model": "mixtral-8x7b-instruct"} for q in qs]
    demos = build_demonstrations(items, pool, n=40, seed=0)
    models = [d["model"] for d in demos]
    assert set(models) == set(pool.names)  # both routes, although every item names an optimal model
    assert 0.25 <= models.count("gpt-4-1106-preview") / len(models) <= 0.75
    cfg = EnvConfig(prefill="<think>\n")
    texts = [cfg.prefill + "".join(t for t, _ in d["segments"]) for d in demos]
    assert RouterR1FormatReward(pool.names)([d["query"] for d in demos], texts) == [0.0] * 40
    golds = {q.query: q.ground_truth for q in qs}
    em = RouterR1OutcomeReward()([d["query"] for d in demos], texts, ground_truth=[golds[d["query"]] for d in demos])
    logged = [r.correct for r in pool.route_sync([(d["model"], d["query"]) for d in demos])]
    # the copied answer is right where the logs say the routed model was right (and wrong where it was wrong)
    assert sum(e == float(c) for e, c in zip(em, logged)) >= 38
    assert 0 < sum(em) < 40
    # the answer is the one the shown reply states (its final number, thousands separators dropped)
    for d in demos:
        assert d["answer"] in d["segments"][1][0].replace(",", "")


def test_gold_demonstrations_to_the_optimal_model_are_kept_for_comparison(shared_data):
    from rlrouter.data.sources import gsm8k

    pool = _pool()
    qs = gsm8k(shared_data / "routellm" / "gsm8k")[:6]
    items = [{"query": q.query, "ground_truth": q.ground_truth, "optimal_model": None} for q in qs]
    demos = build_demonstrations(items, pool, n=6, seed=0, route="optimal", answer="gold")
    cfg = EnvConfig(prefill="<think>\n")
    texts = [cfg.prefill + "".join(t for t, _ in d["segments"]) for d in demos]
    fmt = RouterR1FormatReward(pool.names)([d["query"] for d in demos], texts)
    assert fmt == [0.0] * 6
    golds = {q.query: q.ground_truth for q in qs}
    assert RouterR1OutcomeReward()([d["query"] for d in demos], texts,
                                   ground_truth=[golds[d["query"]] for d in demos]) == [1.0] * 6
    # no optimal model known -> the strongest candidate, whose real logged reply is in <information>
    assert all("gpt-4-1106-preview:" in d["segments"][0][0] for d in demos)
    with pytest.raises(ValueError, match="train.warmup_route"):
        build_demonstrations(items, pool, n=2, route="best")
    with pytest.raises(ValueError, match="train.warmup_answer"):
        build_demonstrations(items, pool, n=2, answer="oracle")

    class CharTok:
        chat_template = None

        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    wide = EnvConfig(prefill="<think>\n", max_new_tokens=4096)  # every turn fits: nothing is cut
    t = demo_tokens(demos[0], CharTok(), [pool.get(n) for n in pool.names], wide)
    policy_text = demos[0]["segments"][0][0] + demos[0]["segments"][2][0]
    assert t.num_policy_tokens == len(policy_text)


def test_short_query_keeps_the_first_line():
    assert short_query("What is 2+2?\nA. 3\nB. 4") == "What is 2+2?"
    assert short_query("a " * 30, max_words=3) == "a a a ..."


def test_a_demonstrated_search_turn_fits_the_rollout_turn_budget():
    from rlrouter.rewards.router_r1 import RouterR1FormatReward

    class WordTok:  # one token per whitespace-separated word
        def encode(self, text, add_special_tokens=False):
            return text.split()

    model, query = "mixtral-8x7b-instruct", short_query("word " * 40)
    assert len(WordTok().encode(search_turn(model, query))) > 20
    text = fit_search_turn(model, query, WordTok(), budget=20)
    assert len(WordTok().encode(text)) <= 20
    assert text.endswith(" ...</search>") and text.startswith("I will ask mixtral-8x7b-instruct.</think>")
    # still a well-formed route once the information and an answer follow
    full = "<think>\n" + text + "\n\n<information>4</information>\n\n<think>ok</think>\n<answer>4</answer>"
    assert RouterR1FormatReward([model])(["q"], [full]) == [0.0]
    # a turn that already fits is unchanged
    assert fit_search_turn(model, "What is 2+2?", WordTok(), budget=20) == search_turn(model, "What is 2+2?")


def test_second_call_demonstrations_ask_another_candidate_at_random(shared_data):
    """With curriculum.demo_second_call, that share of demonstrations asks a second candidate (the other one, drawn
    without looking at the first reply) and answers what the second reply states; the format holds."""
    from rlrouter.data.sources import gsm8k
    from rlrouter.rollout.demos import demo_tokens

    pool = _pool()
    qs = gsm8k(shared_data / "routellm" / "gsm8k")[:60]
    items = [{"query": q.query, "ground_truth": q.ground_truth} for q in qs]
    demos = build_demonstrations(items, pool, n=60, seed=1, second_call=0.5)
    two = [d for d in demos if len(d["calls"]) == 2]
    assert 15 <= len(two) <= 45 and all(len(d["calls"]) in (1, 2) for d in demos)
    assert all(d["calls"][0] != d["calls"][1] for d in two)
    cfg = EnvConfig(prefill="<think>\n")
    texts = [cfg.prefill + "".join(t for t, _ in d["segments"]) for d in demos]
    assert RouterR1FormatReward(pool.names)([d["query"] for d in demos], texts) == [0.0] * 60
    for d in two:
        assert len(d["segments"]) == 5 and d["segments"][2][0].startswith("<think>I will ask " + d["calls"][1])
        assert d["answer"] in d["segments"][3][0].replace(",", "")  # the second reply's answer
    # the second search turn is fitted to the turn budget too (character tokens: a budget of 100)

    class CharTok:
        chat_template = None

        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

        def decode(self, ids, skip_special_tokens=False):
            return "".join(map(chr, ids))

    t = demo_tokens(two[0], CharTok(), [pool.get(n) for n in pool.names], EnvConfig(max_new_tokens=108))
    policy = "".join(chr(i) for i, m in zip(t.input_ids, t.loss_mask) if m)
    assert policy.count("<search>") == 2 and policy.count("</search>") == 2
    turns = [seg + "</search>" for seg in policy.split("</search>")[:2]]
    assert all(len(turn) <= 100 for turn in turns) and "..." in turns[1] and turns[1].startswith("<think>I will ask ")
    assert build_demonstrations(items, pool, n=10, seed=1)[0]["calls"] == [build_demonstrations(items, pool, n=10, seed=1)[0]["model"]]
    with pytest.raises(ValueError, match="curriculum.demo_second_call"):
        build_demonstrations(items, pool, n=2, second_call=1.5)


def test_a_written_first_turn_is_the_demonstrated_search_turn():
    from rlrouter.rollout.demos import with_first_turn

    item = {"query": "How many legs do 3 spiders have?\nExplain.", "id": 7}
    out = with_first_turn(item, "mixtral", query_words=4)
    assert out["first_turn"] == search_turn("mixtral", "How many legs do ...") and "first_turn" not in item
    assert {k: v for k, v in out.items() if k != "first_turn"} == item


def test_marked_demonstrations_show_the_note_where_the_reply_states_no_answer(shared_data):
    """Under ``rollout.env.mark_no_answer`` the demonstrations show each reply as the rollout will, note
    included, and still answer what the reply states (the note is not part of it); the draw is unchanged."""
    from rlrouter.data.sources import gsm8k
    from rlrouter.rollout.env import NO_ANSWER_NOTE
    from rlrouter.selector.aggregate import states_answer

    pool = _pool()
    qs = gsm8k(shared_data / "routellm" / "gsm8k")[:120]
    items = [{"query": q.query, "ground_truth": q.ground_truth} for q in qs]
    plain = build_demonstrations(items, pool, n=120, seed=3, second_call=0.5)
    marked = build_demonstrations(items, pool, n=120, seed=3, second_call=0.5, mark_no_answer=True)
    assert [d["calls"] for d in marked] == [d["calls"] for d in plain]
    assert [d["answer"] for d in marked] == [d["answer"] for d in plain]
    n_marked = 0
    for p, m in zip(plain, marked):
        for (pt, _), (mt, _) in zip(p["segments"], m["segments"]):
            if mt != pt:  # only an information block gains the note, and only after a reply without an answer
                assert mt == pt.replace("</information>", "\n" + NO_ANSWER_NOTE + "</information>")
                n_marked += 1
            elif "<information>" in pt:
                assert states_answer(pt)
    assert n_marked >= 3  # about 1 in 10 of Mixtral's GSM8K replies states no final answer
    cfg = EnvConfig(prefill="<think>\n")
    texts = [cfg.prefill + "".join(t for t, _ in d["segments"]) for d in marked]
    assert RouterR1FormatReward(pool.names)([d["query"] for d in marked], texts) == [0.0] * 120


def test_demonstrations_note_the_last_call_as_the_rollout_does(shared_data):
    """``last_call=2`` (``rollout.env.note_last_call`` with ``max_turns: 2``): the reply to a second call ends
    with ``LAST_CALL_NOTE``, a first reply does not; the draw and the answers are unchanged, and the texts
    still pass the format reward."""
    from rlrouter.data.sources import gsm8k
    from rlrouter.rollout.demos import shown_text
    from rlrouter.rollout.env import LAST_CALL_NOTE

    pool = _pool()
    qs = gsm8k(shared_data / "routellm" / "gsm8k")[:60]
    items = [{"query": q.query, "ground_truth": q.ground_truth} for q in qs]
    plain = build_demonstrations(items, pool, n=60, seed=3, second_call=0.5, mark_no_answer=True)
    noted = build_demonstrations(items, pool, n=60, seed=3, second_call=0.5, mark_no_answer=True, last_call=2)
    assert [(d["calls"], d["answer"]) for d in noted] == [(d["calls"], d["answer"]) for d in plain]
    twos = 0
    for p, d in zip(plain, noted):
        infos = [t for t, policy in d["segments"] if not policy]
        assert LAST_CALL_NOTE not in infos[0]
        if len(infos) == 2:
            twos += 1
            assert infos[1].rstrip().endswith(LAST_CALL_NOTE + "</information>")
            assert shown_text(infos[1]) == shown_text([t for t, pol in p["segments"] if not pol][1])
    assert twos >= 10
    cfg = EnvConfig(prefill="<think>\n")
    texts = [cfg.prefill + "".join(t for t, _ in d["segments"]) for d in noted]
    assert RouterR1FormatReward(pool.names)([d["query"] for d in noted], texts) == [0.0] * 60


def test_per_task_demonstrations_follow_the_rule_and_answer_programs_by_reference(shared_data):
    """``route="per_task"`` on RouterBench's replay: each demonstration calls its task's route; an MBPP
    question (graded by reference) is answered with the name of the candidate called, and the outcome
    reward then gives that call's logged correctness."""
    from rlrouter.data.sources import routerbench
    from rlrouter.protocol import REPLY_GOLD

    cfg = OmegaConf.load(CONF_DIR / "pool" / "routerbench_replay.yaml")
    cfg.candidates = [c for c in cfg.candidates if c.name in ("yi-34b", "gpt-3.5")]
    for c in cfg.candidates:
        c.options.source = str(shared_data / "routerbench")
    pool = CandidatePool.from_config(OmegaConf.to_container(cfg))
    qs = routerbench(shared_data / "routerbench", split="train")
    picked = [q for q in qs if q.source == "mbpp"][:6] + [q for q in qs if q.source == "arc-challenge"][:6]
    items = [{"query": q.query, "ground_truth": q.ground_truth, "source": q.source} for q in picked]
    rule = {"mbpp": "gpt-3.5", "arc-challenge": "yi-34b"}
    demos = build_demonstrations(items, pool, n=12, seed=0, route="per_task", task_routes=rule)
    by_query = {it["query"]: it for it in items}
    for d in demos:
        it = by_query[d["query"]]
        assert d["model"] == rule[it["source"]]
        if it["source"] == "mbpp":
            assert it["ground_truth"] == [REPLY_GOLD] and d["answer"] == "gpt-3.5"
    texts = ["<think>\n" + "".join(t for t, _ in d["segments"]) for d in demos]
    logged = [r.correct for r in pool.route_sync([(d["model"], d["query"]) for d in demos])]
    outcome = RouterR1OutcomeReward()([d["query"] for d in demos], texts,
                                      ground_truth=[by_query[d["query"]]["ground_truth"] for d in demos],
                                      call_outcomes=[[(d["model"], c)] for d, c in zip(demos, logged)])
    mbpp = [i for i, d in enumerate(demos) if by_query[d["query"]]["source"] == "mbpp"]
    assert [outcome[i] for i in mbpp] == [float(logged[i]) for i in mbpp]
    with pytest.raises(ValueError, match="no route in the pool for task 'mbpp'"):
        build_demonstrations(items, pool, n=12, route="per_task", task_routes={"arc-challenge": "yi-34b"})


def test_compact_reply_demonstrations_end_at_the_route_the_rollout_writes(shared_data):
    """``action: compact`` with ``answer: reply`` and the turn opened by ``<search>``: a demonstration is the
    prompt and ``MODEL</search>``, the tokens the rollout's policy writes, and nothing after; with a
    ``<think>`` prefill it closes the think block first."""
    from rlrouter.data.sources import gsm8k
    from rlrouter.rollout.env import prompt_ids

    class CharTok:
        chat_template = None

        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    pool = _pool()
    cands = [pool.get(n) for n in pool.names]
    items = [{"query": q.query, "ground_truth": q.ground_truth} for q in gsm8k(shared_data / "routellm" / "gsm8k")[:6]]
    demos = build_demonstrations(items, pool, n=6, seed=0)
    for prefill, written in (("<search>", "{m}</search>"), ("<think>\n", "I will ask {m}.</think>\n<search>{m}</search>")):
        env = EnvConfig(prefill=prefill, action="compact", answer="reply", max_turns=1)
        for d in demos:
            t = demo_tokens(d, CharTok(), cands, env)
            prompt = prompt_ids(CharTok(), d["query"], cands, env)
            assert t.input_ids[:len(prompt)] == prompt
            assert "".join(map(chr, t.input_ids[len(prompt):])) == written.format(m=d["model"])
            assert t.num_policy_tokens == len(written.format(m=d["model"]))
