"""A served or evaluated Router-R1 checkpoint runs its episodes with the settings its run trained with."""

import yaml

from rlrouter.rollout.env import EnvConfig
from rlrouter.rollout.policy import trained_env


def test_the_checkpoint_s_run_config_gives_the_turn_budget(tmp_path):
    run = tmp_path / "run"
    ck = run / "checkpoints" / "step_000010"
    ck.mkdir(parents=True)
    assert trained_env(ck) == {}  # no config.yaml: EnvConfig's defaults apply
    env = {"max_turns": 2, "max_new_tokens": 256, "max_total_tokens": 1024, "prefill": "<think>\n"}
    (run / "config.yaml").write_text(yaml.safe_dump({"rollout": {"env": {**env, "not_a_field": 1}}}))
    got = trained_env(ck)
    assert got == env and EnvConfig(**got).max_new_tokens == 256 != EnvConfig().max_new_tokens


def test_a_cascade_policy_needs_a_pool():
    import pytest

    from rlrouter.rollout.policy import RouterR1Policy

    with pytest.raises(ValueError, match="first_call_written needs a pool"):
        RouterR1Policy(None, "smollm2-135m-instruct", [], first_call_written=True)


def test_first_call_resolves_from_the_run_or_the_caller(tmp_path):
    import pytest

    from rlrouter.rollout.policy import resolve_first_call

    ck = tmp_path / "run" / "checkpoints" / "step_000060"
    ck.mkdir(parents=True)
    assert resolve_first_call(ck) == (False, 24)  # no run config: the policy's own first turn
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(
        {"eval": {"first_call_written": True}, "train": {"warmup_query_words": 16}}))
    assert resolve_first_call(ck) == (True, 16)  # auto: as its run evaluated it
    assert resolve_first_call(ck, "policy") == (False, 16)
    assert resolve_first_call(None) == (False, 24) and resolve_first_call(None, "written") == (True, 24)
    with pytest.raises(ValueError, match="router_r1.args.first_call must be 'auto', 'written' or 'policy', got 'x'"):
        resolve_first_call(ck, "x", "router_r1.args.first_call")


def test_until_is_checked_by_name_where_a_cascade_is_built():
    import pytest

    from rlrouter.rollout.policy import RouterR1Policy, check_until
    from serve.router_r1 import RouterR1Deployment

    assert check_until("route", "x") == "route" and check_until("answer", "x") == "answer"
    with pytest.raises(ValueError, match=r"router_r1.args.until: expected one of \('answer', 'route'\), got 'end'"):
        RouterR1Deployment.func_or_class("outputs/none", until="end")  # refused before any engine is built
    with pytest.raises(ValueError, match="RouterR1Policy: until: expected one of"):
        RouterR1Policy(None, "smollm2-135m-instruct", [], until="all")


def test_last_thinking_is_the_last_turn_s_reasoning():
    from rlrouter.protocol import last_thinking

    assert last_thinking("<think>\nask mixtral</think>\n<search>mixtral: q</search>") == "ask mixtral"
    text = ("<think>\nfirst</think><search>a: q</search>\n<information>B</information>\n"
            "<think>\nB looks wrong, ask gpt-4</think><search>gpt-4: q</search>")
    assert last_thinking(text) == "B looks wrong, ask gpt-4"
    assert last_thinking("<answer>B</answer>") == ""


def test_the_decision_point_is_the_first_word_in_the_turn_s_think_block():
    from rlrouter.rollout.policy import ANSWER_WORD, ESCALATE_WORD, decision_index

    assert (ESCALATE_WORD, ANSWER_WORD) == ("I", "The")  # "I will ask ..." / "The reply says ..." of the demos
    assert decision_index(["<", "think", ">", "The", " reply"]) == 3
    assert decision_index(["<think>", "\n", " ", "I", " will"]) == 3  # whitespace after <think> is not a choice
    assert decision_index(["<", "answer", ">", "B"]) is None  # no think block
    assert decision_index(["<think>", "\n"]) is None  # nothing written in it
