"""The Serve app's config, typed once on the driver (``rlrouter.serving.app_config``): composed from the YAML
files and the app's args, checked there naming the field, and handed to replicas with key digests only."""

from __future__ import annotations

import pickle

import pytest

from rlrouter.serving.app_config import ROOT, AppConfig, AppParts
from rlrouter.serving.config import ServingConfigError

KEY = "9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c"


def test_the_default_app_config_fills_costs_paths_and_names():
    cfg = AppConfig.load({"selector": {"storage_path": "outputs/selector/x.json"}})
    assert cfg.candidates == ["gpt-4-1106-preview", "mixtral-8x7b-instruct", "smollm2-135m"]
    assert set(cfg.selector["costs"]) == set(cfg.candidates) and cfg.selector["costs"]["gpt-4-1106-preview"] > 1
    assert cfg.selector["storage_path"] == str(ROOT / "outputs/selector/x.json")
    assert cfg.name_map["gpt-4-1106-preview"] == "gpt-4-1106-preview" and cfg.routers == {} and cfg.budgets is None
    assert pickle.loads(pickle.dumps(cfg)) == cfg  # Serve pickles it to every replica


def test_a_bad_field_fails_on_the_driver_naming_it():
    with pytest.raises(ValueError, match=r"unknown app args \['colour'\]"):
        AppConfig.load({"colour": "blue"})
    with pytest.raises(Exception, match="selector_in_ingress"):
        AppConfig.load({"serving": {"selector_in_ingress": "yes"}})
    with pytest.raises(ValueError, match="routers.nope"):
        AppConfig.load({"routers": {"nope": "outputs/no/such/router"}})


def test_replicas_get_key_digests_never_keys(monkeypatch):
    monkeypatch.setenv("RLROUTER_API_KEYS", f"{KEY}=alice")
    cfg, keys = AppConfig.load({"serving": {"api_keys": [{"key": KEY[::-1], "user_id": "bob"}]}}).with_keys()
    assert sorted(k.user_id for k in keys) == ["alice", "bob"] and len(cfg.api_key_digests) == 2
    assert KEY not in (s := pickle.dumps(cfg).decode("latin-1")) and KEY[::-1] not in s and cfg.serving["api_keys"] == []
    monkeypatch.setenv("RLROUTER_API_KEYS", "change-me=demo")
    with pytest.raises(ServingConfigError, match="placeholder"):
        AppConfig.load().with_keys()


def test_budgets_and_dev_reach_the_config(tmp_path):
    cfg = AppConfig.load({"dev": "true", "serving": {"budgets": {"limits": [{"name": "daily", "user_id": "*",
                                                                              "limit_usd": 1.0, "period": "day"}],
                                                                  "path": str(tmp_path / "spend.log")}}})
    assert cfg.serving_config.dev is True and cfg.budgets["path"] == str(tmp_path / "spend.log")
    assert AppParts().routers is None and AppParts().router_r1_name == "router-r1"
