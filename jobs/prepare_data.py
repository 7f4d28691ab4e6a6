"""Build Router-R1 training and test sets (parquet). Usage: python jobs/prepare_data.py data=multihop"""

import hydra
from omegaconf import DictConfig

from rlrouter.data.job import prepare
from rlrouter.paths import export_root


@hydra.main(version_base="1.3", config_path="../conf", config_name="prepare_data")
def main(cfg: DictConfig) -> None:
    prepare(cfg)


if __name__ == "__main__":
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    main()
