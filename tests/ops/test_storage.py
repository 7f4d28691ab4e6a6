"""rlrouter.storage: where a job writes, resolved without Ray; a URI round trip with pyarrow."""

import json
from pathlib import Path

from rlrouter.learner.checkpoint import latest_checkpoint
from rlrouter.storage import RunStorage, clear_local, join, submission_id, upload

SUBMITTED = {"RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps({"metadata": {"job_submission_id": "raysubmit_X"}})}


def test_the_location_rules(tmp_path):
    default = "/proj/outputs/r1"
    assert submission_id(SUBMITTED) == "raysubmit_X" and submission_id({}) is None
    local = RunStorage.resolve("r1", default, default, environ={})
    assert str(local.local) == default and local.remote is None and "local run" in local.why
    sub = RunStorage.resolve("r1", default, default, environ={**SUBMITTED, "HOME": str(tmp_path)})
    assert sub.local.parts[-2:] == ("rlrouter_results", "r1") and "raysubmit_X" in sub.why
    shared = RunStorage.resolve("r1", default, default, storage="/mnt/shared/runs", environ=SUBMITTED)
    assert str(shared.local) == "/mnt/shared/runs/r1"
    env = RunStorage.resolve("r1", default, default, environ={"RLROUTER_STORAGE": "/data/runs"})
    assert str(env.local) == "/data/runs/r1"
    explicit = RunStorage.resolve("r1", "/elsewhere", default, storage="/mnt/shared/runs", environ=SUBMITTED)
    assert str(explicit.local) == "/elsewhere"  # an explicit out_dir wins
    uri = RunStorage.resolve("r1", default, default, storage="s3://bucket/runs/", environ={})
    assert uri.remote == "s3://bucket/runs/r1" and "s3://bucket/runs/r1" in uri.banner()


def test_uri_storage_pushes_and_resume_pulls_on_a_new_machine(tmp_path):
    default = str(tmp_path / "proj" / "outputs" / "r1")
    env = {"RLROUTER_CACHE": str(tmp_path / "cache_a")}
    store = RunStorage.resolve("r1", default, default, storage=f"file://{tmp_path}/bucket", environ=env)
    out = store.prepare(resume=True)  # nothing stored yet: a fresh start
    # the learner ranks store checkpoints at the URI themselves (rlrouter.learner.checkpoint), from their node
    assert store.checkpoints() == f"file://{tmp_path}/bucket/r1/checkpoints"
    ckpt = tmp_path / "node_b_staging" / "step_000002"
    ckpt.mkdir(parents=True)
    (ckpt / "trainable.safetensors").write_bytes(b"w")
    (ckpt / "state.json").write_text("{}")
    upload(ckpt, join(store.checkpoints(), "step_000002"))
    (out / "report.json").write_text("{}")
    (out / "metrics.jsonl").write_text('{"step": 2}\n')
    assert store.push() == f"file://{tmp_path}/bucket/r1"
    assert (tmp_path / "bucket" / "r1" / "checkpoints" / "step_000002" / "trainable.safetensors").exists()
    clear_local(store)
    # a new cluster: another local cache, the same storage URI
    again = RunStorage.resolve("r1", default, default, storage=f"file://{tmp_path}/bucket",
                               environ={"RLROUTER_CACHE": str(tmp_path / "cache_b")})
    out = again.prepare(resume=True)
    assert (out / "metrics.jsonl").read_text() == '{"step": 2}\n'  # the driver's files come down ...
    assert not (out / "checkpoints").exists()  # ... the checkpoints stay at the URI, where the ranks read them
    assert latest_checkpoint(again.checkpoints()) == f"file://{tmp_path}/bucket/r1/checkpoints/step_000002"


def test_gmt_and_intent_jobs_follow_the_same_storage_rules(tmp_path):
    """The GMTRouter and intent jobs' default output_dir is not the working dir of a submitted job."""
    from rlrouter.storage import SUBMITTED_DEFAULT, RunStorage

    out = str(tmp_path / "outputs" / "2026-11-23_19-00-00")
    # a local run keeps its output_dir
    assert RunStorage.for_output_dir("train_intent", out, environ={}, default=out).local == Path(out)
    # a storage location takes the run, named after the job and the run folder
    s = RunStorage.for_output_dir("train_gmtrouter", out, str(tmp_path / "shared"), environ={}, default=out)
    assert s.local == tmp_path / "shared" / "train_gmtrouter_2026-11-23_19-00-00"
    # a submitted job without storage goes to the documented default, not Ray's package dir
    sub = RunStorage.for_output_dir("train_intent", out, environ=SUBMITTED, default=out)
    # an output_dir other than the default is the user's choice: kept, even in a submitted job
    assert RunStorage.for_output_dir("train_intent", out, environ=SUBMITTED, default="elsewhere").local == Path(out)
    assert sub.local == Path(SUBMITTED_DEFAULT).expanduser() / "train_intent_2026-11-23_19-00-00"


def test_hydra_run_dir_is_the_runs_own_folder(monkeypatch):
    """conf/train_router_r1.yaml's hydra.run.dir resolves by RunStorage's rule: a submitted job's Hydra folder
    goes to ~/rlrouter_results/<run>/hydra with the rest of the run, not into the project's outputs/."""
    import yaml

    from rlrouter.storage import run_folder
    from tests.helpers import ROOT

    conf = yaml.safe_load((ROOT / "conf" / "train_router_r1.yaml").read_text())
    assert conf["hydra"]["run"]["dir"].startswith("${rlrouter.run_folder:${run_name},${out_dir},${paths.root_dir},")
    for k in ("RAY_JOB_CONFIG_JSON_ENV_VAR", "RLROUTER_STORAGE"):
        monkeypatch.delenv(k, raising=False)
    assert run_folder("r1", "/p/outputs/r1", "/p") == "/p/outputs/r1"  # a local run: the project's outputs/
    assert run_folder("r1", "/elsewhere", "/p") == "/elsewhere"  # out_dir given
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", '{"metadata": {"job_submission_id": "raysubmit_1"}}')
    assert run_folder("r1", "/p/outputs/r1", "/p") == str(Path("~/rlrouter_results/r1").expanduser())
    assert run_folder("r1", "/p/outputs/r1", "/p", "/mnt/shared") == "/mnt/shared/r1"
