"""Write the training split of the evaluation's logged outcomes as RouteLLM CSVs.

Routers trained by other jobs (GMTRouter's simulated personalization set draws its questions from
RouteLLM's logs) must not see the evaluation's test questions. This writes a copy of every source CSV
holding only the rows whose question falls in the training split (same sources, split and seed as the
evaluation config; a source with no training row, a held-out subject, gets no file), so such a job can
read it instead::

    python -m rlrouter.eval.export_split --out outputs/routellm_train_seed0
    python jobs/train_gmtrouter.py gmt.data.logged=outputs/routellm_train_seed0

Extra arguments are overrides of ``conf/evaluate_router.yaml`` (e.g. ``eval.split.seed=1``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlrouter.config import to_plain_dict
from rlrouter.eval.job import _normalize, load_eval_set, subsample
from rlrouter.eval.job import split as split_rows

CONF = Path(__file__).resolve().parents[2] / "conf"


def _csv_files(sources: Sequence[str]) -> list[tuple[Path, Path]]:
    """(file, path relative to its source root) for every CSV the sources name, in sorted order."""
    out = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            out.extend((f, Path(p.name) / f.relative_to(p)) for f in sorted(p.rglob("*.csv")))
        elif p.is_file():
            out.append((p, Path(p.parent.name) / p.name))
        else:
            raise FileNotFoundError(f"eval.data: {src} is not a local file or folder (URLs cannot be exported)")
    return out


def write_train_split(cfg: Mapping[str, Any], out_dir: str | Path) -> dict[str, int]:
    """Write the training-split rows of each source CSV under ``out_dir``; returns rows kept / dropped."""
    cfg = to_plain_dict(cfg)
    ev = cfg["eval"]
    seed = int(cfg.get("seed", 0))
    full = subsample(load_eval_set(ev), int(ev.get("max_prompts", 0) or 0), seed)
    split = ev.get("split") or {}
    _, test_rows = split_rows(full, split, seed)
    test_keys = {_normalize(full.prompts[i]) for i in test_rows}
    out_dir = Path(out_dir)
    kept = dropped = 0
    for path, rel in _csv_files([str(s) for s in ev["data"]]):
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader)
            p_col = [h.strip() for h in header].index("prompt")
            rows = list(reader)
        train = [row for row in rows if _normalize(row[p_col]) not in test_keys]
        kept, dropped = kept + len(train), dropped + len(rows) - len(train)
        if not train:
            # a held-out subject (split by subject): no file, since a CSV without rows is malformed
            continue
        dest = out_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("w", newline="", encoding="utf-8") as g:
            writer = csv.writer(g)
            writer.writerow(header)
            writer.writerows(train)
    return {"kept": kept, "dropped": dropped}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the training-split CSVs")
    ap.add_argument("overrides", nargs="*", help="overrides of conf/evaluate_router.yaml")
    args = ap.parse_args(argv)
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="evaluate_router", overrides=["output_dir=unused", *args.overrides])
    counts = write_train_split(cfg, args.out)
    print(f"export_split: {counts['kept']} training rows kept, {counts['dropped']} test rows dropped -> {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
