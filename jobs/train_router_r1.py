"""Train a Router-R1 policy on Ray. `make run`, or: python jobs/train_router_r1.py experiment=router_r1_ppo

Embedded (no RAY_ADDRESS): starts a local Ray cluster. Submitted:
    ray job submit --working-dir . -- python jobs/train_router_r1.py debug=cpu
"""

import hydra
from omegaconf import DictConfig

from rlrouter.data.job import apply_epochs
from rlrouter.learner.job import run


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_router_r1")
def main(cfg: DictConfig) -> None:
    run(apply_epochs(cfg))


if __name__ == "__main__":  # vLLM spawns processes: the entry point needs the guard
    main()
