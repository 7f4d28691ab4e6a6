"""The seed documents (tests/fixtures/seeds, listed in its README) as a user's input: every example record, YAML block and command.

The seeds are copied verbatim under ``tests/fixtures/seeds`` (from ``../shared/seeds``); the blocks
are cut out of their text here, not retyped, so a seed's example is exactly what the project gets.
Each either works or fails with an error that names the field and why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rlrouter.data.io import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "tests" / "fixtures" / "seeds"


def seed_text(prefix: str) -> str:
    (path,) = SEEDS.glob(f"{prefix}_*.txt")
    return path.read_text(encoding="utf-8")


def fenced(prefix: str, lang: str) -> list[str]:
    """The bodies of the seed's ```lang fenced blocks, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", seed_text(prefix), flags=re.DOTALL)


def seed_json(prefix: str, heading: str) -> dict:
    """The JSON block printed under ``### heading``."""
    text = seed_text(prefix)
    after = text[text.index(f"### {heading}"):]
    return json.loads(re.search(r"```json\n(.*?)```", after, flags=re.DOTALL).group(1))


def test_seed_copies_match_the_shared_folder():
    shared = ROOT.parent / "shared" / "seeds"
    if not shared.exists():
        pytest.skip("../shared/seeds is absent")
    for path in SEEDS.glob("*.txt"):
        assert path.read_bytes() == (shared / path.name).read_bytes(), path.name


# ---------------------------------------------------------------- data in: GMTRouter (seed 000)


def test_gmtrouter_seed_record_is_accepted():
    from rlrouter.data.formats import GMTRecord

    rec = GMTRecord.from_dict(seed_json("000", "GMTRouter Format"))
    assert rec.user_id == "user-123" and rec.preferred_models == ["deepseek-coder", "gpt-4"]
    assert rec.interactions[0].user_feedback == 1.0  # "positive"
    assert rec.interactions[0].timestamp == 1706300000.0
    assert rec.context == {"description": "software developer, prefers detailed explanations"}


@pytest.mark.parametrize("feedback, value", [("positive", 1.0), ("Neutral", 0.0), ("NEGATIVE", -1.0),
                                             ("4", 4.0), (" 4.5 ", 4.5), (3, 3.0), (True, 1.0)])
def test_feedback_forms_map_the_documented_way(feedback, value):
    from rlrouter.data.formats import GMTRecord

    raw = seed_json("000", "GMTRouter Format")
    raw["interactions"][0]["user_feedback"] = feedback
    assert GMTRecord.from_dict(raw).interactions[0].user_feedback == value


@pytest.mark.parametrize("feedback, message", [("great", "expected a number, one of"), ("7", "must be in"),
                                               ("nan", "must be in"), ([1], "expected int or float or bool or str")])
def test_bad_feedback_names_the_field(feedback, message):
    from rlrouter.data.formats import GMTRecord, RecordError

    raw = seed_json("000", "GMTRouter Format")
    raw["interactions"][0]["user_feedback"] = feedback
    with pytest.raises(RecordError, match=message) as e:
        GMTRecord.from_dict(raw)
    assert e.value.field == "interactions[0].user_feedback"


def test_context_forms():
    from rlrouter.data.formats import GMTRecord, RecordError

    raw = seed_json("000", "GMTRouter Format")
    raw["context"] = {"role": "dev"}
    assert GMTRecord.from_dict(raw).context == {"role": "dev"}
    raw["context"] = 3
    with pytest.raises(RecordError, match="expected an object or a string") as e:
        GMTRecord.from_dict(raw)
    assert e.value.field == "context"


# ---------------------------------------------------------------- rlrouter validate: object, list, JSONL


@pytest.mark.parametrize("fmt, heading", [("gmtrouter", "GMTRouter Format"), ("router_r1", "Router-R1 Format")])
def test_validate_accepts_object_list_and_jsonl_and_says_which(tmp_path, capsys, fmt, heading):
    from rlrouter.cli import main

    rec = seed_json("000", heading)
    files = {"one.json": (json.dumps(rec, indent=2), "JSON object", 1),
             "many.json": (json.dumps([rec, rec]), "JSON list", 2),
             "lines.jsonl": (json.dumps(rec) + "\n" + json.dumps(rec) + "\n", "JSONL", 2),
             "pasted.jsonl": (json.dumps(rec, indent=2), "JSON object", 1)}
    for name, (text, layout, n) in files.items():
        (tmp_path / name).write_text(text)
        assert main(["validate", str(tmp_path / name), "--format", fmt]) == 0
        assert f"{name}: {layout}, {n} valid {fmt} records, 0 invalid" in capsys.readouterr().out


def test_validate_names_file_record_and_field(tmp_path, capsys):
    from rlrouter.cli import main

    rec = seed_json("000", "GMTRouter Format")
    rec["interactions"][0]["user_feedback"] = "meh"
    (tmp_path / "bad.json").write_text(json.dumps(rec))
    assert main(["validate", str(tmp_path / "bad.json"), "--format", "gmtrouter"]) == 1
    err = capsys.readouterr().err
    assert "bad.json:record 0: field 'interactions[0].user_feedback': expected a number" in err
    (tmp_path / "scalar.json").write_text("3")
    assert main(["validate", str(tmp_path / "scalar.json"), "--format", "gmtrouter"]) == 1
    assert "expected a JSON object, a list of objects or JSONL" in capsys.readouterr().err


# ---------------------------------------------------------------- GMTRouter: one model per query


def one_model_per_query_logs(n_users: int = 8, turns: int = 6) -> list[dict]:
    """Seed-shaped logs: each query answered by one model, string feedback. Users split by taste:
    even users like deepseek-coder on code, odd users like gpt-4; the other model gets "negative"."""
    logs = []
    for u in range(n_users):
        inter = []
        for t in range(turns):
            model = "deepseek-coder" if (t + u) % 2 else "gpt-4"
            liked = (model == "deepseek-coder") == (u % 2 == 0)
            inter.append({"query": f"Help me debug this Python code, case {t}", "model_used": model,
                          "user_feedback": "positive" if liked else "negative",
                          "timestamp": 1706300000 + 3600 * t})
        logs.append({"user_id": f"user-{u}", "interactions": inter, "preferred_models": ["deepseek-coder"],
                     "context": "software developer, prefers detailed explanations"})
    return logs


def test_pointwise_loss_by_hand():
    from rlrouter.gmt.train import pointwise_loss

    scores = torch.tensor([[0.0], [2.0], [5.0]])
    ratings = torch.tensor([[1.0], [-1.0], [0.0]])  # scaled to [0, 1]: 2/6, 0, 1/6
    valid = torch.tensor([[True], [True], [False]])
    t = torch.tensor([2 / 6, 0.0])
    s = torch.tensor([0.0, 2.0])
    expected = -(t * torch.log(torch.sigmoid(s)) + (1 - t) * torch.log(1 - torch.sigmoid(s))).mean()
    assert float(pointwise_loss(scores, ratings, valid)) == pytest.approx(float(expected), rel=1e-6)


def test_one_model_per_query_logs_need_pointwise_and_train_with_it(tmp_path):
    from rlrouter.data.formats import GMTRecord
    from rlrouter.gmt.graph import build_graph
    from rlrouter.gmt.model import GMTModelConfig
    from rlrouter.gmt.train import GMTTrainConfig, fit, temporal_split

    def embed(texts: list[str]):  # a fixed random code per text: the loss, not MiniLM, is under test
        return np.stack([np.random.default_rng(sum(map(ord, t))).normal(size=16) for t in texts]).astype("float32")

    records = [GMTRecord.from_dict(r) for r in one_model_per_query_logs()]
    graph = build_graph(records, embed=embed)
    split = temporal_split(graph, 0.2, 0.2)
    model_cfg = GMTModelConfig(hidden_dim=16, predictor_hidden=16, embed_dim=16)
    with pytest.raises(ValueError, match="gmt.train.loss=pointwise"):
        fit(graph, split, model_cfg, GMTTrainConfig(epochs=2))
    res = fit(graph, split, model_cfg, GMTTrainConfig(epochs=12, eval_every=4, loss="pointwise", lr=1e-2))
    assert res.best_val["pairs"] > 0 and 0.0 <= res.best_val["auc"] <= 1.0
    first, last = res.history[0]["learner/loss"], res.history[-1]["learner/loss"]
    assert last < first, (first, last)
    with pytest.raises(ValueError, match="loss: expected one of"):
        GMTTrainConfig(loss="listwise")


# ---------------------------------------------------------------- data in: Router-R1 records (seed 000)

FIXTURES = ROOT / "tests" / "fixtures"
SEED_POOL = "pool.candidates=[{name: gpt-4, price_in: 30.0, price_out: 60.0}, " \
            "{name: Mistral-7B, price_in: 0.25, price_out: 0.25}]"


def compose_cfg(config: str, tmp_path: Path, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config, overrides=[f"paths.root_dir={tmp_path}", *overrides,
                                         f"hydra.runtime.output_dir={tmp_path}"], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def test_router_r1_seed_record_trains_through_data_records(tmp_path):
    """The seed's record file, as the user wrote it, becomes the training job's data; its own
    candidates restrict and price the question's routes (renamed to the pool's spelling)."""
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.data.job import ensure_data

    rec = seed_json("000", "Router-R1 Format")
    (tmp_path / "train.json").write_text(json.dumps(rec, indent=2))
    (tmp_path / "val.jsonl").write_text(json.dumps({**rec, "query": "Capital of Italy?", "ground_truth": "Rome"}))
    cfg = compose_cfg("train_router_r1", tmp_path, [
        "data=records", f"data.train_files={tmp_path / 'train.json'}", f"data.val_files=[{tmp_path / 'val.jsonl'}]",
        SEED_POOL])
    train_path, test_path = ensure_data(cfg)
    (row,) = load_router_r1_split(train_path)
    assert row["query"] == "What is the capital of France?" and row["ground_truth"] == ["Paris"]
    assert [(c["name"], c["cost"]) for c in row["candidate_models"]] == [("gpt-4", 30.0), ("Mistral-7B", 0.5)]
    assert row["optimal_model"] == "Mistral-7B"
    assert [r["query"] for r in load_router_r1_split(test_path)] == ["Capital of Italy?"]


def test_records_candidate_outside_the_pool_names_file_record_and_field(tmp_path):
    from rlrouter.data.io import DataFileError
    from rlrouter.data.job import prepare

    (tmp_path / "train.json").write_text(json.dumps([seed_json("000", "Router-R1 Format")] * 3))
    cfg = compose_cfg("prepare_data", tmp_path, ["data=records", f"data.train_files={tmp_path / 'train.json'}"])
    with pytest.raises(DataFileError, match=r"train.json:record 0: field 'candidate_models\[0\].name': 'gpt-4' "
                                            r"is not a candidate of the pool"):
        prepare(cfg)


def test_records_without_val_files_hold_questions_out(tmp_path):
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.data.job import prepare

    rows = [row for _, row in read_jsonl(FIXTURES / "flashrag" / "nq" / "train.jsonl")]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train_router.parquet")  # QA rows, ToolRL-style parquet
    cfg = compose_cfg("prepare_data", tmp_path, ["data=records", f"data.train_files={tmp_path / 'train_router.parquet'}",
                                                 "data.test_size=3", SEED_POOL])
    stats = prepare(cfg)
    assert stats["train"]["rows"] == 9 and stats["test"]["rows"] == 3
    train, test = load_router_r1_split(stats["train"]["path"]), load_router_r1_split(stats["test"]["path"])
    assert not {r["query"] for r in train} & {r["query"] for r in test}
    assert {c["name"] for c in train[0]["candidate_models"]} == {"gpt-4", "Mistral-7B"}  # QA rows: every candidate


def test_epochs_as_a_unit(tmp_path):
    """verl's trainer.total_epochs / the seed's --num_epochs: steps from the built training split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlrouter.data.job import apply_epochs
    from rlrouter.trainer.job import RouterR1JobConfig

    rows = [row for _, row in read_jsonl(FIXTURES / "flashrag" / "nq" / "train.jsonl")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    base = ["data=records", f"data.train_files={tmp_path / 'train.parquet'}", "data.test_size=3", SEED_POOL,
            "train.prompts_per_step=4"]
    cfg = apply_epochs(compose_cfg("train_router_r1", tmp_path, [*base, "+train.total_epochs=2"]))
    assert cfg.train.total_steps == 5 and "total_epochs" not in cfg.train  # ceil(2 * 9 rows / 4)
    assert RouterR1JobConfig.from_cfg(cfg).train.total_steps == 5  # the run's config takes it
    configured = compose_cfg("train_router_r1", tmp_path, base).train.total_steps
    assert apply_epochs(compose_cfg("train_router_r1", tmp_path, base)).train.total_steps == configured  # unset
    with pytest.raises(ValueError, match="train.total_epochs: must be a number > 0"):
        apply_epochs(compose_cfg("train_router_r1", tmp_path, [*base, "+train.total_epochs=0"]))


def test_nq_hotpotqa_mix_from_the_recorded_fixture(tmp_path):
    from rlrouter.data.job import prepare

    cfg = compose_cfg("prepare_data", tmp_path, [
        "data=nq_hotpotqa", f"data.sources.0.path={FIXTURES / 'flashrag' / 'nq'}",
        f"data.sources.1.path={FIXTURES / 'flashrag' / 'hotpotqa'}", "data.train_size=16", "data.test_size=4",
        SEED_POOL])
    stats = prepare(cfg)
    assert stats["sources"]["nq"] == {"available": 12, "usable": 12, "train": 8, "test": 2}
    assert stats["sources"]["hotpotqa"]["train"] == 8


def test_qa_source_offline_says_how_to_point_at_a_copy(monkeypatch):
    import datasets

    from rlrouter.data.qa import load_qa

    def refuse(*a, **k):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "get_dataset_split_names", refuse)
    with pytest.raises(RuntimeError, match=r"data.sources\[nq\]: cannot fetch RUC-NLPIR/FlashRAG_datasets/nq .*"
                                           r"Set data.sources\[nq\].path"):
        load_qa("nq")
    with pytest.raises(ValueError, match="unknown QA dataset"):
        load_qa("squad")


# ---------------------------------------------------------------- rewards say what they do (seed 001)

CANDS = ["Qwen2.5-7B-Instruct", "LLaMA-3.1-70B-Instruct"]


@pytest.mark.parametrize("route", ["qwen2.5-7b-instruct: capital of France?", "QWEN2.5-7B-INSTRUCT : capital?"])
def test_env_and_reward_share_one_case_rule(route):
    """What the environment routes is what the reward accepts: the same parser, the pool's spelling."""
    from rlrouter.rewards.router_r1 import RouterR1FormatReward, extract_routes
    from rlrouter.rollout.parsing import parse_turn

    turn = parse_turn(f"<think>ask</think><search>{route}</search>", CANDS)
    assert turn.ok and turn.call.model == "Qwen2.5-7B-Instruct"
    text = f"<think>ask</think><search>{route}</search><information>Paris</information><think>ok</think>" \
           "<answer>Paris</answer>"
    assert RouterR1FormatReward(CANDS)(["q"], [text]) == [0.0]
    assert extract_routes(text, CANDS)[0].model == "Qwen2.5-7B-Instruct"


@pytest.mark.parametrize("text, why", [
    ("<think>...</think><answer>Paris</answer>", "only '...'"),
    ("<think> \u2026 </think><answer>Paris</answer>", "only '...'"),
    ("<think>a</think><search>Qwen2.5-7B-Instruct:your-query</search><information>x</information>"
     "<think>b</think><answer>Paris</answer>", "placeholder route query"),
    ("<think>a</think><search>Qwen2.5-7B-Instruct: <your-query></search><information>x</information>"
     "<think>b</think><answer>Paris</answer>", "placeholder route query"),
])
def test_format_matches_router_r1_released_reward(text, why):
    from rlrouter.rewards.router_r1 import RouterR1FormatReward
    from rlrouter.rollout.parsing import parse_turn

    fmt = RouterR1FormatReward(CANDS)
    assert fmt(["q"], [text]) == [-1.0] and why in fmt.last_failures[0]
    if "search" in text:  # the environment refuses the same route, with the reason for the policy
        assert not parse_turn(text.split("</search>")[0] + "</search>", CANDS).ok


def test_both_formulas_by_config():
    from rlrouter.rewards.router_r1 import RouterR1Reward, combine

    wrong_cheap = dict(format_r=0.0, outcome=0.0, cost=1.0, alpha=0.3)
    assert combine(**wrong_cheap) == 0.0  # Router-R1's code: no cost credit for a wrong answer
    assert combine(**wrong_cheap, formula="additive") == pytest.approx(0.3)  # seed 001: R_f + .7 R_o + .3 R_c
    assert combine(-1.0, 1.0, 0.5, 0.3, "additive") == pytest.approx(-1.0 + 0.7 + 0.15)
    assert combine(-1.0, 1.0, 0.5, 0.3) == pytest.approx(0.15)  # (1 + f)(1 - a) + a c
    good = "<think>a</think><answer>Paris</answer>"
    r = RouterR1Reward(0.3, CANDS, formula="additive", format_penalty=-0.5)
    s = r.score(["q"], ["<answer>Paris</answer>"], ground_truth=[["Paris"]], route_costs=[0.0])[0]  # no <think>
    assert s.format == -0.5 and s.total == pytest.approx(-0.5 + 0.7 + 0.3 * s.cost)
    assert RouterR1Reward(0.0, CANDS)([None], [good], ground_truth=[["Paris"]]) == [1.0]
    from rlrouter.rewards.base import RewardConfigError

    with pytest.raises(RewardConfigError, match="formula"):
        RouterR1Reward(0.3, formula="multiplicative")
    with pytest.raises(RewardConfigError, match="format_penalty"):
        RouterR1Reward(0.3, format_penalty=1.0)


# ---------------------------------------------------------------- configs in: VSR's rl_driven (seeds 000, 001)


def vsr_block() -> str:
    """Seed 001's ``Configuration`` block. The page was saved as text and lost its indentation, so the
    three levels are put back (algorithm > type, rl_driven > keys); no key or value is touched."""
    text = seed_text("001")
    body = text[text.index("Configuration\n\nalgorithm:") + len("Configuration\n\n"):text.index("\n\nParameters")]
    out = []
    for line in body.splitlines():
        if not line.strip():
            out.append("")
        elif line.startswith("algorithm:"):
            out.append(line)
        elif line.startswith(("type:", "rl_driven:")):
            out.append("  " + line)
        else:
            out.append("    " + line)
    return "\n".join(out)


def seed_001_keys() -> dict[str, str]:
    """Key -> printed default of seed 001's parameter table."""
    text = seed_text("001")
    table = text[text.index("ParameterTypeDefaultDescription"):]
    return dict(re.findall(r"^([a-z_0-9]+?)(?:float|bool|string)(\S*?)[A-Z]", table, flags=re.MULTILINE))


def test_vsr_rl_driven_block_loads_as_printed():
    from rlrouter.selector.config import SelectorConfig

    raw = yaml.safe_load(vsr_block())
    assert raw["algorithm"]["type"] == "rl_driven" and len(raw["algorithm"]["rl_driven"]) == 19
    cfg = SelectorConfig.from_dict(raw)
    block = raw["algorithm"]["rl_driven"]
    for key, value in block.items():
        got = getattr(cfg, key)
        if key == "auto_save_interval":
            assert got == 30.0
        elif key == "router_r1_server_url":
            assert value == "" and got is None  # "" means unset
        else:
            assert got == value, key
    assert cfg.use_router_r1_rewards is False and SelectorConfig().use_router_r1_rewards is False
    # the parameter table's defaults are ours too
    defaults = SelectorConfig()
    for key, printed in seed_001_keys().items():
        if printed in ("true", "false"):
            assert getattr(defaults, key) is (printed == "true"), key
        elif printed and printed[0].isdigit() and key != "auto_save_interval":
            assert getattr(defaults, key) == float(printed), key


def test_vsr_decision_with_router_model_path_loads():
    from rlrouter.selector.config import SelectorConfig

    (block,) = [b for b in fenced("000", "yaml") if "decisions:" in b]
    cfg = SelectorConfig.from_dict(yaml.safe_load(block))
    assert cfg.router_model_path == "/path/to/router_r1/best_model.pt"
    assert cfg.use_thompson_sampling and cfg.enable_personalization


@pytest.mark.parametrize("raw, field", [
    ({"algorithm": {"type": "static", "rl_driven": {}}}, "algorithm.type"),
    ({"algorithm": {"rl_driven": {}}}, "algorithm.type"),
    ({"algorithm": {"type": "rl_driven", "rl_driven": {"exploration_rate": 2}}}, "algorithm.rl_driven.exploration_rate"),
    ({"algorithm": {"type": "rl_driven", "rl_driven": {"min_sample": 3}}}, "algorithm.rl_driven.min_sample"),
    ({"decisions": [{"name": "a", "algorithm": {"type": "rl_driven", "rl_driven": {"min_samples": -1}}}]},
     "decisions[0].algorithm.rl_driven.min_samples"),
    ({"decisions": [{"name": "a", "algorithm": {"type": "static"}}]}, "decisions"),
    ({"algorithm": {"type": "rl_driven", "rl_driven": {"router_r1_server_url": "ftp://x"}}},
     "algorithm.rl_driven.router_r1_server_url"),
])
def test_vsr_block_errors_name_the_field(raw, field):
    from rlrouter.selector.config import SelectorConfig, SelectorConfigError

    with pytest.raises(SelectorConfigError) as e:
        SelectorConfig.from_dict(raw)
    assert e.value.field == field


def test_min_samples_tries_every_candidate_before_exploiting():
    from rlrouter.selector import Selector, SelectorConfig
    from rlrouter.selector.selector import SelectionRequest

    sel = Selector(SelectorConfig(min_samples=2, seed=0, cost_awareness=False), ["a", "b", "c"])
    picked = []
    for _ in range(6):
        d = sel.select(SelectionRequest(candidates=["a", "b", "c"]))
        picked.append((d.model, d.mode))
        sel.feedback(d.request_id, outcome="win" if d.model == "a" else "loss")
    assert sorted(m for m, _ in picked) == ["a", "a", "b", "b", "c", "c"] and {m for _, m in picked} == {"min_samples"}
    assert sel.select(SelectionRequest(candidates=["a", "b", "c"])).mode == "thompson"


# ---------------------------------------------------------------- configs in: the intent classifier (seed 004)


def seed_custom_reward():
    """The seed's ``custom_reward``, executed from the seed's own text."""
    (code,) = [b for b in fenced("004", "python") if "def custom_reward" in b]
    namespace: dict = {}
    exec(code.split("# Pass to trainer")[0], namespace)  # the definition; the trainer call is the seed's API
    return namespace["custom_reward"]


def test_seed_custom_reward_signature_works():
    from rlrouter.intent.reward import resolve_reward

    fn = resolve_reward(seed_custom_reward())
    # the PPO loop's call: predicted labels as completions, gold labels and confidences as columns
    out = fn(["q1", "q2", "q3"], ["math", "law", "math"], labels=["math", "math", None], confidences=[0.9, 0.8, 0.5])
    assert out[0] == pytest.approx(1.0) and out[1] == pytest.approx(-0.4)  # 0 - 0.5 * 1 * 0.8
    assert out[2] is None  # no gold label: not applicable


def test_seed_rl_training_block_loads_and_disabled_rl_falls_back(tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlrouter.intent.job import IntentJobConfig

    (block,) = [b for b in fenced("004", "yaml") if "rl_training:" in b]
    seed_rl = OmegaConf.create(block).classifier.rl_training  # Hydra reads 1e-05 as a float
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train_intent", overrides=[f"output_dir={tmp_path}"])
    cfg.rl_training = OmegaConf.merge(cfg.rl_training, seed_rl)
    with pytest.warns(UserWarning, match="rl_training.enabled is false: mode 'supervised_then_rl' falls back"):
        job = IntentJobConfig.from_cfg(cfg)
    assert job.phases == ("supervised",) and not job.rl_enabled
    assert (job.rl.learning_rate, job.rl.gamma, job.rl.batch_size, job.rl.update_epochs, job.rl.reward_metric) == \
        (1e-05, 0.99, 16, 4, "accuracy")
    cfg.rl_training.enabled = True
    assert IntentJobConfig.from_cfg(cfg).phases == ("supervised", "rl")
    cfg.rl_training.reward_metric = "custom"
    from rlrouter.intent.reward import resolve_reward

    with pytest.raises(ValueError, match="rl_training.reward_metric: 'custom' needs the function"):
        resolve_reward(IntentJobConfig.from_cfg(cfg).rl.reward_metric)


# ---------------------------------------------------------------- commands: docs/migrating.md's mapping table


def mapping_table() -> list[tuple[str, str, str]]:
    """(seed, their command or flag, ours) for every row of docs/migrating.md's mapping table."""
    section = (ROOT / "docs" / "migrating.md").read_text()
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| 00") and len(cells) == 3:
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def seed_flags() -> dict[str, set[str]]:
    """Every command-line flag and verl override the seeds print, by seed."""
    out: dict[str, set[str]] = {}
    for prefix in ("000", "002", "003", "004"):
        flags: set[str] = set()
        for block in fenced(prefix, "bash"):
            flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z_-]+)", block))
            flags |= set(re.findall(r"^\s*([a-z_]+(?:\.[A-Za-z_]+)+)=", block, flags=re.MULTILINE))
            flags |= {m for m in re.findall(r"(?:python|bash)\s+(\S+\.(?:py|sh))", block)}
        out[prefix] = flags - {"--yes", "--index-url", "--no-build-isolation", "--package"}
    return out


def test_migrating_doc_maps_every_seed_command_and_flag():
    table = mapping_table()
    theirs = " ".join(cell for _, cell, _ in table)
    missing = {p: sorted(f for f in flags if f not in theirs and f.split("/")[-1] not in theirs)
               for p, flags in seed_flags().items()}
    missing = {p: m for p, m in missing.items() if m}
    assert not missing, missing
    assert len(table) >= 30


def test_migrating_doc_commands_compose():
    """Every ``python jobs/X.py ...`` of the table composes with its overrides (typos fail here)."""
    import shlex

    from hydra import compose, initialize_config_dir

    commands = [m for _, _, ours in mapping_table() for m in re.findall(r"`python (jobs/\w+\.py)([^`]*)`", ours)]
    assert len(commands) >= 20
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for script, args in commands:
            name = Path(script).stem
            overrides = shlex.split(args)
            try:
                cfg = compose(name, overrides=overrides)
            except Exception as e:  # noqa: BLE001 - re-raised with the command
                raise AssertionError(f"`python {script}{args}` does not compose: {e}") from None
            assert cfg is not None


# ---------------------------------------------------------------- serving: router_model_path drives /route


class ScriptedPolicy:
    """A loaded Router-R1 policy's interface (``serve.router_r1.RouterR1Deployment`` through its handle)."""

    name = "router-r1:step_9"

    def __init__(self, answers):
        self.answers = list(answers)
        self.queries = []

    async def route(self, query):
        from rlrouter.serving.router_r1_client import RouterR1Answer

        self.queries.append(query)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return RouterR1Answer(a, "<think>cheap is fine</think>", "")


def test_router_model_path_decides_route_in_process():
    """With router_model_path and no server URL, /route asks the app's own policy: no HTTP loop."""
    import asyncio

    from rlrouter.selector import Selector, SelectorConfig
    from rlrouter.serving.config import ServingConfig
    from rlrouter.serving.service import LocalSelectorClient, RouterService

    (block,) = [b for b in fenced("000", "yaml") if "decisions:" in b]
    raw = yaml.safe_load(block)
    raw["decisions"][0]["algorithm"]["rl_driven"].update(enable_llm_routing=True, router_r1_server_url="")
    cfg = SelectorConfig.from_dict({**raw, "decisions": raw["decisions"]})
    cfg.seed = 0
    policy = ScriptedPolicy(["mistral-7b", None, RuntimeError("replica died")])
    svc = RouterService(LocalSelectorClient(Selector(cfg, ["gpt-4", "mistral-7b"])), cfg, ServingConfig(),
                        ["gpt-4", "mistral-7b"], router_r1_policy=policy)

    async def decide():
        return await svc.routing.decide("What is the capital of France?", "user-123", None, None, None)

    first = asyncio.run(decide())
    assert (first["model"], first["mode"]) == ("mistral-7b", "llm_routing")
    assert policy.queries == ["What is the capital of France?"]
    for why in ("answered without routing", "RuntimeError: replica died"):
        fell_back = asyncio.run(decide())  # the configured fallback: thompson, saying why
        assert fell_back["mode"] == "thompson" and why in fell_back["fallback_reason"]
    from rlrouter.selector.config import SelectorConfigError

    with pytest.raises(SelectorConfigError, match="router_r1_server_url.*or router_model_path"):
        SelectorConfig(enable_llm_routing=True)


# ---------------------------------------------------------------- serving: the concurrent arena (seed 001)


@pytest.mark.parametrize("aggregation", ["vote", "confidence"])
def test_concurrent_arena_on_route_and_chat(tmp_path, shared_data, aggregation):
    """``type: concurrent``: /route names every candidate; model "auto" calls them all at once and
    aggregates by the configured method."""
    from fastapi.testclient import TestClient

    from rlrouter.pool.pool import CandidatePool
    from rlrouter.selector import Selector, SelectorConfig
    from rlrouter.serving.api import create_app, install
    from rlrouter.serving.auth import ApiKeyAuth
    from rlrouter.serving.config import ServingConfig
    from rlrouter.serving.service import LocalSelectorClient, RouterService

    pool = CandidatePool.from_config(yaml.safe_load((ROOT / "conf" / "pool" / "routellm_replay.yaml").read_text()))
    cfg = SelectorConfig.from_dict({"algorithm": {"type": "concurrent", "concurrent": {"seed": 0}}})
    assert cfg.concurrent
    serving = ServingConfig(api_keys=[{"key": "k", "user_id": "alice"}], aggregation=aggregation)
    svc = RouterService(LocalSelectorClient(Selector(cfg, pool.names)), cfg, serving, pool.names, pool=pool)
    install(svc, ApiKeyAuth(serving.keys({})))
    client, auth = TestClient(create_app()), {"Authorization": "Bearer k"}
    r = client.post("/route", json={"query": "What is 6 * 7?"}, headers=auth).json()
    assert r["mode"] == "arena" and sorted(r["models"]) == sorted(pool.names)
    table = pool.backend(pool.names[0]).table
    prompt = table.prompts[table.source.index("gsm8k")]
    r = client.post("/v1/chat/completions", json={"model": "auto", "messages": [{"role": "user", "content": prompt}]},
                    headers=auth)
    assert r.status_code == 200, r.text
    meta = r.json()["x_rlrouter"]
    assert meta["aggregation"] == aggregation and set(meta["answers"]) == set(pool.names)
    with pytest.raises(Exception, match="algorithm.concurrent.exploration_rate"):
        SelectorConfig.from_dict({"algorithm": {"type": "concurrent", "concurrent": {"exploration_rate": 3}}})


def test_serve_config_file_in_vsr_shape(tmp_path):
    """A serve config variant written as VSR prints it merges over conf/selector/rl_driven.yaml."""
    from rlrouter.selector.config import SelectorConfig
    from rlrouter.serving.app_config import AppConfig

    variant = tmp_path / "vsr.yaml"
    variant.write_text("selector:\n" + "\n".join("  " + line for line in vsr_block().splitlines()) + "\n")
    cfg = AppConfig.load({"config": str(variant)})
    sel = SelectorConfig.from_dict(cfg.selector)
    assert sel.storage_path == "/var/lib/vsr/rl_state.json" and sel.use_router_r1_rewards is False
    assert sel.category_blend == 0.3  # not in VSR's block: the base file's value stays
    cfg = AppConfig.load({"selector": {"algorithm": {"type": "concurrent", "concurrent": {"min_samples": 2}}}})
    sel = SelectorConfig.from_dict(cfg.selector)
    assert sel.concurrent and sel.min_samples == 2 and sel.storage_path.endswith("outputs/selector/state.json")
