"""Hydra entry point: evaluate a router and the baselines on logged outcomes (rlrouter.eval.job.run)."""

import hydra
from omegaconf import DictConfig

from rlrouter.paths import export_root


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate_router")
def main(cfg: DictConfig) -> None:
    from rlrouter.eval.job import run

    run(cfg)


if __name__ == "__main__":
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    main()
