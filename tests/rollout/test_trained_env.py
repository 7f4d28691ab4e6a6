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
