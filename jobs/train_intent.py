"""Train the intent classifier: ``python jobs/train_intent.py [overrides]``.

Thin Hydra wrapper; the job is ``rlrouter.intent.job.run`` (conf/train_intent.yaml).
"""

import os

import hydra
from omegaconf import DictConfig

from rlrouter.paths import export_root

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@hydra.main(config_path="../conf", config_name="train_intent", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from rlrouter.intent.job import run

    run(cfg)


if __name__ == "__main__":
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    main()
