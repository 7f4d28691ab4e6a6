"""Hydra entry point: train one router from an evaluate_router config entry and save it for serving
(rlrouter.eval.train_router.run; conf/train_router.yaml)."""

import hydra
from omegaconf import DictConfig

from rlrouter.paths import export_root


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_router")
def main(cfg: DictConfig) -> None:
    from rlrouter.eval.train_router import run

    run(cfg)


if __name__ == "__main__":
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    main()
