"""API keys: one place (the cluster's environment, plus the config's list), never overridden by
serve/config.yaml, placeholders refused at startup unless dev."""

from pathlib import Path

import pytest
import yaml

from rlrouter.serving.auth import ApiKeyAuth
from rlrouter.serving.config import ServingConfig, ServingConfigError

ROOT = Path(__file__).resolve().parents[2]
STRONG = "3f9a1c0e7b2d4a6f8e1c2b3a"


def test_startup_keys_refuse_none_and_placeholders_unless_dev():
    with pytest.raises(ServingConfigError, match="no API key: set RLROUTER_API_KEYS"):
        ServingConfig().startup_keys({})
    for weak in ("change-me", "k-alice", "short-key"):
        with pytest.raises(ServingConfigError, match=r"placeholder key\(s\) for user\(s\) \['demo-user'\].*dev=true"):
            ServingConfig().startup_keys({"RLROUTER_API_KEYS": f"{weak}=demo-user"})
    assert [k.user_id for k in ServingConfig(dev=True).startup_keys({"RLROUTER_API_KEYS": "change-me=demo"})] == ["demo"]
    keys = ServingConfig(api_keys=[{"key": STRONG + "x", "user_id": "ops", "admin": True}]).startup_keys(
        {"RLROUTER_API_KEYS": f"{STRONG}=alice"})
    assert sorted(k.user_id for k in keys) == ["alice", "ops"]  # the config's list and the env, both
    with pytest.raises(ServingConfigError, match="router_r1_keyless_networks"):
        ServingConfig.from_dict({"protect_router_r1": False})
    with pytest.raises(ServingConfigError, match=r"router_r1_keyless_networks\[0\]"):
        ServingConfig(router_r1_keyless_networks=["10.0.0.0/33"])


def test_replicas_get_digests_that_authenticate_the_same_keys():
    auth = ApiKeyAuth(ServingConfig().startup_keys({"RLROUTER_API_KEYS": f"{STRONG}=alice"}))
    digests = auth.digests()
    assert STRONG not in repr(digests)
    assert ApiKeyAuth.from_digests(digests).authenticate(f"Bearer {STRONG}", None).user_id == "alice"


def test_serve_config_sets_no_key_and_build_app_refuses_placeholders(monkeypatch):
    cfg = yaml.safe_load((ROOT / "serve" / "config.yaml").read_text())
    app = cfg["applications"][0]
    assert "RLROUTER_API_KEYS" not in app["runtime_env"]["env_vars"]  # it would win over the environment
    assert app["args"]["pool"] == "conf/pool/replay_plus_smollm2.yaml"  # a live candidate by default
    from serve.app import build_app

    monkeypatch.setenv("RLROUTER_API_KEYS", "change-me=demo-user")
    with pytest.raises(ServingConfigError, match="placeholder"):
        build_app({"selector": {"storage_path": None}})


def test_openai_upstreams_are_added_by_config_with_their_key_from_the_environment(monkeypatch):
    from rlrouter.pool.pool import CandidatePool, PoolConfigError
    from rlrouter.serving.app_config import AppConfig

    up = {"name": "upstream", "price_in": 0.15, "price_out": 0.6, "backend": "openai",
          "options": {"base_url": "http://10.0.0.9:8000/v1", "api_key_env": "UPSTREAM_KEY", "model": "m"}}
    cfg = AppConfig.load({"add_candidates": [up]})
    names = cfg.candidates
    assert names == ["gpt-4-1106-preview", "mixtral-8x7b-instruct", "smollm2-135m", "upstream"]
    monkeypatch.delenv("UPSTREAM_KEY", raising=False)
    with pytest.raises(PoolConfigError, match="UPSTREAM_KEY"):
        CandidatePool.from_config(cfg.pool)
    monkeypatch.setenv("UPSTREAM_KEY", "sk-from-env")
    assert CandidatePool.from_config(cfg.pool).backend("upstream").api_key_env == "UPSTREAM_KEY"


def test_a_key_file_is_read_and_its_errors_name_the_file_and_line(tmp_path):
    import pytest

    from rlrouter.serving.config import ServingConfig, ServingConfigError

    f = tmp_path / "keys"
    f.write_text("# ops keys\n9f8e7d6c5b4a39281706f5e4=alice\n\n1a2b3c4d5e6f708192a3b4c5=ops:admin  # admin\n")
    keys = ServingConfig(api_keys_file=str(f)).keys({})
    assert [(k.user_id, k.admin) for k in keys] == [("alice", False), ("ops", True)]
    f.write_text("9f8e7d6c5b4a39281706f5e4=alice\nno-user-here\n")
    with pytest.raises(ServingConfigError, match=r"api_keys_file .*keys line 2"):
        ServingConfig(api_keys_file=str(f)).keys({})
    with pytest.raises(ServingConfigError, match="api_keys_file.*cannot read"):
        ServingConfig(api_keys_file=str(tmp_path / "absent")).keys({})
    # the deployments see no key, only where the file is
    assert ServingConfig.without_secrets({"api_keys": [{"key": "k", "user_id": "u"}], "dev": True}) == {
        "api_keys": [], "dev": True}
