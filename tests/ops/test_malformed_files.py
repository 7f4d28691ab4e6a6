"""Malformed and hostile files give clear errors, and nothing unpickles an untrusted file."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT


class _Exploit:
    """Unpickling this runs ``touch <marker>``: it must never happen."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (subprocess.call, (["touch", self.marker],))


def test_no_unsafe_deserialisation_in_the_package():
    """Only safetensors, JSON, parquet, safe YAML; the one torch.load passes weights_only=True, and the
    one pickle reader (RouterBench tables) is behind an explicit allow_pickle flag."""
    hits = []
    for path in sorted((ROOT / "rlrouter").rglob("*.py")) + sorted((ROOT / "serve").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"\btorch\.load\(", code) and "weights_only=True" not in code:
                hits.append(f"{path}:{i}: torch.load without weights_only=True")
            if re.search(r"\b(pickle|cloudpickle|dill|joblib)\.loads?\(|yaml\.(unsafe_)?load\(|np\.load\(.*allow_pickle=True", code):
                hits.append(f"{path}:{i}: {code.strip()}")
            if re.search(r"\bpd\.read_pickle\(", code):
                hits.append(f"{path}:{i}: read_pickle")
    # the RouterBench reader may read a pickle only when the caller passes allow_pickle=True
    allowed = [h for h in hits if "rlrouter/data/routerbench.py" in h and "read_pickle" in h]
    assert sorted(set(hits) - set(allowed)) == [], hits
    reader = (ROOT / "rlrouter" / "data" / "routerbench.py").read_text()
    assert reader.index("if not allow_pickle") < reader.index("pd.read_pickle(")


@pytest.fixture(scope="module")
def learner():
    from rlrouter.learner.learner import Learner, LearnerConfig

    return Learner(LearnerConfig())


@pytest.fixture
def ckpt(tmp_path, learner):
    from rlrouter.learner.checkpoint import save_checkpoint

    return Path(save_checkpoint(tmp_path / "step_000001", learner, 1, extra={"reward": {}}))


def test_checkpoint_errors_are_clear(ckpt, learner):
    from rlrouter.learner.checkpoint import load_checkpoint

    assert load_checkpoint(ckpt, learner)["step"] == 1  # the untouched one loads
    with pytest.raises(FileNotFoundError, match="not an rlrouter checkpoint"):
        load_checkpoint(ckpt.parent / "nowhere", learner)
    (ckpt / "state.json").write_text('{"step": 1,')
    with pytest.raises(ValueError, match=r"state\.json: corrupt checkpoint state"):
        load_checkpoint(ckpt, learner)


def test_a_pickle_in_place_of_weights_or_optimizer_is_never_run(ckpt, learner, tmp_path):
    from rlrouter.learner.checkpoint import load_checkpoint

    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Exploit(marker))
    good = (ckpt / "trainable.safetensors").read_bytes()
    (ckpt / "trainable.safetensors").write_bytes(payload)  # a pickle posing as safetensors
    with pytest.raises(Exception) as e:
        load_checkpoint(ckpt, learner)
    assert "header" in str(e.value).lower() or "safetensor" in type(e.value).__name__.lower()
    assert not marker.exists()
    (ckpt / "trainable.safetensors").write_bytes(good)
    (ckpt / "optimizer.pt").write_bytes(payload)  # torch.load(weights_only=True) must refuse it
    with pytest.raises(pickle.UnpicklingError, match="(?i)weights_only"):
        load_checkpoint(ckpt, learner)
    assert not marker.exists()


def test_bad_data_file_names_file_line_and_field(tmp_path):
    from rlrouter.data.io import DataFileError, read_records

    p = tmp_path / "bad.jsonl"
    p.write_text('{"query": "ok?", "query_type": "qa", "candidate_models": [], "ground_truth": ["a"]}\n'
                 '{"query": 3}\nnot json\n')
    with pytest.raises(DataFileError) as e:
        read_records(p, "router_r1")
    assert str(e.value).startswith(f"{p}:{e.value.location}: field '{e.value.field}'")
    assert e.value.field and e.value.location


def test_bad_configs_name_the_field():
    from rlrouter.learner.config import RouterR1TrainConfig
    from rlrouter.selector import SelectorConfig
    from rlrouter.serving.config import ServingConfig

    with pytest.raises(ValueError, match=r"train\.total_steps"):
        RouterR1TrainConfig(total_steps=-1)  # 0 is allowed: the cold start only
    with pytest.raises(ValueError, match="max_body_bytes"):
        ServingConfig(max_body_bytes=0)
    with pytest.raises(ValueError, match="nonsense"):
        ServingConfig.from_dict({"nonsense": 1})
    with pytest.raises(ValueError, match="exploration_rate"):
        SelectorConfig.from_dict({"exploration_rate": 7})


def test_corrupt_selector_state_is_a_clear_error_and_kept_aside(tmp_path):
    from rlrouter.selector import Selector, SelectorConfig, StateFileError

    state = tmp_path / "state.json"
    state.write_text(json.dumps({"format": "something-else"}))
    sel = Selector(SelectorConfig(storage_path=str(state)), ["a", "b"])
    with pytest.raises(StateFileError):
        sel.load()
    kept = list(tmp_path.glob("state.json.corrupt-*"))
    assert kept and json.loads(kept[0].read_text()) == {"format": "something-else"}
