"""Train a Router-R1 policy on Ray. `make run`, or: python jobs/train_router_r1.py experiment=router_r1_ppo

Embedded (no RAY_ADDRESS): starts a local Ray cluster. Submitted, to a head started from the project's
activated .venv (docs/operations.md):
    ray job submit --working-dir . -- python jobs/train_router_r1.py debug=cpu
"""

import sys

try:
    import hydra
except ModuleNotFoundError as e:  # a submitted job's `python` is the one on the head's PATH
    sys.exit(f"{e} in {sys.executable}: this Python lacks the project's packages. Start the Ray head from the "
             f"project's activated .venv (docs/operations.md), so that a job's `python` is the venv's.")
from omegaconf import DictConfig

from rlrouter.data.job import apply_epochs
from rlrouter.trainer.job import run
from rlrouter.paths import export_root
from rlrouter.storage import register_resolvers


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_router_r1")
def main(cfg: DictConfig) -> None:
    run(apply_epochs(cfg))


if __name__ == "__main__":  # vLLM spawns processes: the entry point needs the guard
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    register_resolvers()  # hydra.run.dir: the run's own folder
    main()
