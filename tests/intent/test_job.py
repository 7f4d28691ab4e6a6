"""End to end on the real MiniLM encoder and real MMLU questions: a short supervised+RL run (in
process), reloading the saved adapters, the config, and a 2-worker Ray Train smoke run."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlrouter.intent.job import IntentJobConfig, run

ROOT = Path(__file__).resolve().parents[2]

# 14 labels x 4 training queries; a few steps of each phase: the point is that the real pipeline
# runs and learns something measurable, not the final quality (benchmarks/bench_intent.py).
SMALL = [
    "data.train_per_label=4", "data.val_per_label=2", "data.test_per_label=2",
    "model.max_length=24", "supervised.batch_size=14", "supervised.max_steps=4", "supervised.epochs=1",
    "supervised.learning_rate=3e-3",
    "rl_training.batch_size=16", "rl_training.minibatch_size=8", "rl_training.update_epochs=2",
    "rl_training.iterations=2", "rl_training.learning_rate=1e-3",
    "eval.latency_queries=2", "eval.timing_rounds=1",
]


def compose(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_intent", overrides=overrides)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("intent_run")
    cfg = compose([*SMALL, "resources=in_process", f"output_dir={out}"])
    return out, run(cfg)


def test_supervised_then_rl_changes_weights_and_writes_metrics(small_run):
    out, result = small_run
    sup, rl = out / "adapters" / "supervised", out / "adapters" / "rl"
    for d in (sup, rl):  # peft format + head, safetensors, side by side
        assert (d / "adapter_config.json").exists() and (d / "adapter_model.safetensors").exists()
        assert (d / "head.safetensors").exists() and (d / "intent_meta.json").exists()
    a_sup, a_rl = load_file(str(sup / "adapter_model.safetensors")), load_file(str(rl / "adapter_model.safetensors"))
    assert a_sup.keys() == a_rl.keys() and any("lora_B" in k for k in a_sup)
    # LoRA B starts at zero: supervised training moved it, and PPO moved it again
    assert any(v.abs().sum() > 0 for k, v in a_sup.items() if "lora_B" in k)
    assert any(not torch.equal(a_sup[k], a_rl[k]) for k in a_sup)
    h_sup, h_rl = load_file(str(sup / "head.safetensors")), load_file(str(rl / "head.safetensors"))
    assert not torch.equal(h_sup["head.weight"], h_rl["head.weight"])
    assert not torch.equal(h_sup["value_head.weight"], h_rl["value_head.weight"])  # the value head trained

    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["table"]) == {"supervised", "rl"}
    for row in metrics["table"].values():
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["macro_f1"] <= 1.0 and 0.0 <= row["ece"] <= 1.0
        assert row["ms_per_query"] > 0 and row["n_test"] == 28
    assert len(metrics["history"]["rl"]) == 2 and "learner/approx_kl" in metrics["history"]["rl"][0]
    assert metrics["history"]["supervised"][-1]["step"] == 4
    assert "| supervised |" in (out / "comparison.md").read_text()
    assert result["table"] == metrics["table"]


def test_loading_the_saved_adapter_reproduces_predictions(tmp_path):
    from rlrouter.intent.data import load_mmlu, stratified_splits
    from rlrouter.intent.model import EncoderConfig, IntentClassifier, IntentModel
    from rlrouter.intent.supervised import SupervisedConfig, train_supervised

    s = stratified_splits(load_mmlu(), train_per_label=2, val_per_label=1, test_per_label=1, seed=3)
    torch.manual_seed(0)
    model = IntentModel(s.labels, EncoderConfig(max_length=32))
    train_supervised(model, s.train, s.val, SupervisedConfig(batch_size=14, max_steps=2, learning_rate=3e-3))
    texts = [e.text for e in s.test]
    model.eval()
    with torch.inference_mode():
        expected = torch.softmax(model(**model.tokenize(texts)).logits, -1)
    model.save(tmp_path / "clf", "supervised")
    clf = IntentClassifier.load(tmp_path / "clf")
    assert torch.allclose(clf.predict_proba(texts), expected, atol=1e-5)
    got = clf.classify(texts)
    assert [lab for lab, _ in got] == [s.labels[i] for i in expected.argmax(-1).tolist()]
    assert all(0.0 < c <= 1.0 for _, c in got)
    # a run folder loads its RL adapter when there is one, else the supervised one
    (tmp_path / "run" / "adapters").mkdir(parents=True)
    (tmp_path / "clf").rename(tmp_path / "run" / "adapters" / "supervised")
    assert IntentClassifier.load(tmp_path / "run").classify(texts) == got


def test_rl_only_starts_from_the_supervised_adapter(small_run, tmp_path):
    out, _ = small_run
    cfg = compose([*SMALL, "resources=in_process", f"output_dir={tmp_path}", "mode=rl_only", f"init_from={out}",
                   "rl_training.iterations=1"])
    result = run(cfg)
    assert set(result["table"]) == {"supervised", "rl"}
    # the supervised row is the starting adapter, evaluated on the same held-out split
    src = json.loads((out / "metrics.json").read_text())["table"]["supervised"]
    assert result["table"]["supervised"]["accuracy"] == pytest.approx(src["accuracy"])


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="init_from"):
        IntentJobConfig.from_cfg(compose(["mode=rl_only", f"output_dir={tmp_path}"]))
    with pytest.warns(UserWarning, match="rl_training.enabled is false: mode 'supervised_then_rl' falls back"):
        assert IntentJobConfig.from_cfg(compose(["rl_training.enabled=false", f"output_dir={tmp_path}"])).phases \
            == ("supervised",)
    with pytest.raises(ValueError, match="rl_training.algorithm"):
        IntentJobConfig.from_cfg(compose(["rl_training.algorithm=grpo", f"output_dir={tmp_path}"]))
    with pytest.raises(ValueError, match="rl_training.minibatch_size"):
        IntentJobConfig.from_cfg(compose(["rl_training.minibatch_size=7", f"output_dir={tmp_path}"]))
    with pytest.raises(ValueError, match="mode"):
        IntentJobConfig.from_cfg(compose(["mode=bandit", f"output_dir={tmp_path}"]))
    job = IntentJobConfig.from_cfg(compose([f"output_dir={tmp_path}"]))
    assert job.rl.learning_rate == 1e-5 and job.rl.gamma == 0.99 and job.resources.learner.num_workers == 2


@pytest.mark.ray
@pytest.mark.slow
def test_ray_train_two_workers(ray_cluster, tmp_path):
    cfg = compose([*SMALL, f"output_dir={tmp_path}", "rl_training.iterations=1",
                   "supervised.max_steps=2"])
    result = run(cfg)
    assert set(result["table"]) == {"supervised", "rl"}
    assert (tmp_path / "adapters" / "rl" / "adapter_model.safetensors").exists()
    assert result["summary"]["world_size"] == 2  # trained as a 2-rank gloo group
    assert result["summary"]["supervised"]["steps"] == 2
