"""Hydra entry point: the Serve app's traffic log -> logged outcomes for training and judging routers
(rlrouter.serving.traffic_export.write_export; conf/export_traffic.yaml)."""

import json

import hydra
from omegaconf import DictConfig

from rlrouter.paths import export_root


@hydra.main(version_base="1.3", config_path="../conf", config_name="export_traffic")
def main(cfg: DictConfig) -> None:
    from rlrouter.config import to_plain
    from rlrouter.serving.traffic import read_traffic
    from rlrouter.serving.traffic_export import write_export

    read = read_traffic(cfg.traffic)
    report = write_export(read, cfg.out, float(cfg.test_share), to_plain(cfg.candidates))
    print(json.dumps(report, indent=1))
    print(f"export: {cfg.out}/train.parquet, test.parquet, report.json")


if __name__ == "__main__":
    export_root()  # a submitted job runs in its package folder: paths resolve against the project instead
    main()
