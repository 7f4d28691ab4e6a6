"""Hydra entry point: evaluate routers on logged outcomes (rlrouter.eval.pool_job.run_evaluation: the pairwise
report when eval.weak / eval.strong name a pair, the pool report over every candidate otherwise)."""

import hydra
from omegaconf import DictConfig

from rlrouter.paths import export_root


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate_router")
def main(cfg: DictConfig) -> None:
    from rlrouter.eval.pool_job import run_evaluation

    run_evaluation(cfg)


if __name__ == "__main__":
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    main()
