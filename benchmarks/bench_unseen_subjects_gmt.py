"""GMTRouter's user with no history on MMLU subjects it never saw.

Per seed of the leave-subjects-out protocol (``bench_unseen_subjects.py``):

1. the evaluation's training split as RouteLLM CSVs (``rlrouter.eval.export_split``), so GMTRouter never
   sees a held-out subject;
2. GMTRouter trained on the personalization set simulated over those CSVs (``gmt.data.logged``), once as
   the paper trains it (``cold_frac`` 0, "before") and once with the cold path trained (``--cold-frac``,
   "after"). Training runs through the GMTRouter job's in-process path (``resources.ray_train: false``,
   ``rlrouter.gmt.job.run``): the same loop as the Ray Train job with one rank, without a cluster;
3. the diagnosis: how each checkpoint scores the same inputs through the in-graph path and the cold path
   (a known user with its query in the graph vs the query as a new node; the user with no history), as
   pairwise AUC on the simulated users' held-out turns and as "gain AUC" on the logged outcomes: how well
   the cold user's logit(strong) - logit(weak) separates prompts only the strong candidate got right from
   prompts only the weak one got right, on GMTRouter's own training prompts and on the held-out subjects;
4. the evaluate_router job on the held-out subjects with both checkpoints as cold-user threshold routers
   beside the baselines (random, kNN, MF), with paired bootstrap intervals against random.

Writes ``unseen_subjects_gmt.{json,md}`` beside its study (``STUDY_RESULTS``) and the per-seed outputs under
``outputs/unseen_subjects_gmt/seed<k>/``.

    HF_HUB_OFFLINE=1 python benchmarks/bench_unseen_subjects_gmt.py [--seeds 0 1 2] [--cold-frac 0.1]
        [--patience 40] [--name unseen_subjects_gmt] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
STUDY = "2026-11-offline-routers-unseen-subjects"
"""The dated study this script belongs to (docs/experiments/): its results go there; make bench leaves it out."""
STUDY_RESULTS = ROOT / "docs" / "experiments" / STUDY / "results"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_unseen_subjects import run_seed, summarize, write_summary  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_unseen_subjects_gmt.py", "rlrouter/gmt", "rlrouter/eval")

VARIANTS = {"before": 0.0}  # "after" gets --cold-frac


def eval_cfg(seed: int, holdout: int) -> dict:
    """conf/evaluate_router.yaml with the overrides ``run_seed`` uses for this seed."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="evaluate_router", overrides=[
            f"seed={seed}", f"eval.split.seed={seed}", f"eval.split.holdout_subjects={holdout}", "output_dir=unused"])
    return OmegaConf.to_container(cfg, resolve=True)


def gmt_job(seed: int, logged: Path, out: Path, cold_frac: float, epochs: int, threads: int, patience: int = 40):
    """The GMTRouter job's default config, simulated users over ``logged``, one rank in this process."""
    from rlrouter.distributed.resources import ResourceSpec, RoleSpec
    from rlrouter.gmt.job import GMTDataConfig, GMTJobConfig
    from rlrouter.gmt.simulate import SimConfig
    from rlrouter.gmt.train import GMTTrainConfig

    data = GMTDataConfig(logged=str(logged), sim=SimConfig(seed=seed))
    return GMTJobConfig(seed=seed, output_dir=str(out), data=data,
                        train=GMTTrainConfig(seed=seed, epochs=epochs, cold_frac=cold_frac, threads=threads,
                                             patience=patience),
                        resources=ResourceSpec(learner=RoleSpec(num_workers=1, num_cpus=1, num_gpus=0), ray_train=False))


def gain_auc(strong_minus_weak: np.ndarray, scores: np.ndarray, weak: int, strong: int) -> dict:
    """AUC of the score separating prompts only strong got right (1) from those only weak got right (0)."""
    from rlrouter.gmt.train import auc_score

    gain = scores[:, strong] - scores[:, weak]
    keep = gain != 0
    return {"auc": auc_score(gain[keep] > 0, strong_minus_weak[keep]), "prompts": int(keep.sum()),
            "strong_only": int((gain > 0).sum())}


@torch.no_grad()
def diagnose(job, ckpt: Path, test_set, weak_name: str, strong_name: str) -> dict:
    """The in-graph and cold paths of one checkpoint on the same inputs (see the module docstring)."""
    from rlrouter.gmt.job import prepare
    from rlrouter.gmt.model import cold_user_embedding, isolated_query_embedding
    from rlrouter.gmt.simulate import load_outcomes
    from rlrouter.gmt.train import GroupBatch, evaluate, load_checkpoint, pairwise_metrics, training_groups

    model, _, _ = load_checkpoint(ckpt)
    prep = prepare(job, Path(job.output_dir))  # deterministic: the graph and split the job trained on
    g, sp = prep.graph, prep.split
    seen = sp.train | sp.val
    h = model.encode(g.x_dict(), g.edge_index_dict(seen))
    batch = GroupBatch.from_groups(g, training_groups(g, sp.test, job.train.loss))
    iso_all = isolated_query_embedding(model, g.query_x)  # (Q, H) every query as a new node
    llm_h = h["llm"][batch.llms.clamp(min=0)]
    cold_u = cold_user_embedding(model)

    def auc(s):
        return pairwise_metrics(s.masked_fill(~batch.valid, 0).numpy(), batch.ratings.numpy(), batch.valid.numpy())["auc"]

    n = len(batch)
    turns = {
        "user_in_graph_query": evaluate(model, g, seen, batch, h=h)["auc"],
        "user_new_query": auc(model.predictor(h["user"][batch.users], iso_all[batch.queries], llm_h)),
        "cold_user_in_graph_query": auc(model.predictor(cold_u.expand(n, -1), h["query"][batch.queries], llm_h)),
        "cold_user_new_query": evaluate(model, g, seen, batch, h=h, cold=True)["auc"],
    }
    # logged outcomes: GMTRouter's own training prompts, then the held-out subjects
    lw, ls = g.llms.index(weak_name), g.llms.index(strong_name)
    outcomes = load_outcomes(job.data.logged)
    rows = [(q, outcomes.index(t)) for q, t in enumerate(_query_texts(prep)) if outcomes.index(t) is not None]
    qs = torch.tensor([q for q, _ in rows])
    logged = outcomes.scores[[r for _, r in rows]]
    ow, os_ = outcomes.models.index(weak_name), outcomes.models.index(strong_name)

    def cold_diff(q_h):
        llms = h["llm"][[lw, ls]].unsqueeze(0).expand(len(q_h), -1, -1)
        s = model.predictor(cold_u.expand(len(q_h), -1), q_h, llms)
        return (s[:, 1] - s[:, 0]).numpy()

    from rlrouter.embeddings import embed_texts

    test_x = torch.from_numpy(embed_texts(test_set.prompts))
    tw, ts = test_set.names.index(weak_name), test_set.names.index(strong_name)
    gain = {
        "train_prompts_in_graph": gain_auc(cold_diff(h["query"][qs]), logged, ow, os_),
        "train_prompts_new": gain_auc(cold_diff(iso_all[qs]), logged, ow, os_),
        "heldout_subjects": gain_auc(cold_diff(isolated_query_embedding(model, test_x)), test_set.scores, tw, ts),
    }
    return {"test_turns_auc": turns, "test_turns": n, "gain_auc": gain, "graph": g.counts()}


def _query_texts(prep) -> list[str]:
    """Query node -> its text (the personalization records hold the texts; the graph only their keys)."""
    from rlrouter.data.io import read_records
    from rlrouter.gmt.graph import text_key

    texts = {}
    for rec in read_records(prep.records_path, "gmtrouter", strict=True).records:
        for it in rec.interactions:
            texts[text_key(it.query)] = it.query
    return [texts[k] for k in prep.graph.query_keys]


def run_one(seed: int, args, root: Path) -> tuple[dict, dict]:
    from rlrouter.eval.export_split import write_train_split
    from rlrouter.eval.job import load_split

    seed_dir = root / f"seed{seed}"
    cfg = eval_cfg(seed, args.holdout)
    logged = seed_dir / "routellm_train"
    counts = write_train_split(cfg, logged)
    _, test_set, _ = load_split(cfg["eval"], seed)
    ev = cfg["eval"]
    info = {"export_split": counts, "variants": {}}
    routers = {}
    for variant, cold_frac in {**VARIANTS, "after": args.cold_frac}.items():
        out = seed_dir / f"gmt_{variant}"
        job = gmt_job(seed, logged, out, cold_frac, args.epochs, args.threads, args.patience)
        t = time.perf_counter()
        if args.reuse and (out / "metrics.json").is_file():
            metrics = json.loads((out / "metrics.json").read_text())
        else:
            from rlrouter.gmt.job import run

            metrics = run(job)
        train_s = metrics.get("seconds", {}).get("train", time.perf_counter() - t)
        diag_path = out / "diagnosis.json"
        if args.reuse and diag_path.is_file():
            diag = json.loads(diag_path.read_text())
        else:
            diag = diagnose(job, out / "checkpoint", test_set, ev["weak"], ev["strong"])
            diag_path.write_text(json.dumps(diag, indent=1, default=float))
        info["variants"][variant] = {
            "cold_frac": cold_frac, "train_seconds": round(train_s, 1), "best_epoch": metrics["train"].get("best_epoch"),
            "job_test": metrics["test"], "job_test_cold": metrics["test_cold"], "diagnosis": diag}
        routers[f"gmtrouter_{variant}"] = {"type": "gmtrouter", "checkpoint": str(out / "checkpoint")}
        print(f"seed {seed} {variant}: {json.dumps(info['variants'][variant], default=float)}", flush=True)
    report_path = seed_dir / "evaluate" / "report.json"
    if args.train_only:
        return {}, info
    if args.reuse and report_path.is_file():
        return json.loads(report_path.read_text()), info
    return run_seed(seed, args.holdout, None, seed_dir / "evaluate", routers=routers), info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--holdout", type=int, default=10)
    ap.add_argument("--cold-frac", type=float, default=0.1, help="the 'after' checkpoints' gmt.train.cold_frac")
    ap.add_argument("--epochs", type=int, default=200, help="gmt.train.epochs (patience stops earlier)")
    ap.add_argument("--patience", type=int, default=40, help="gmt.train.patience (0: every epoch runs)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for training (0: torch's default)")
    ap.add_argument("--name", default="unseen_subjects_gmt")
    ap.add_argument("--reuse", action="store_true", help="keep what a seed's folder already holds (a variant's "
                                                          "checkpoint and diagnosis, the evaluation report) instead "
                                                          "of computing it again")
    ap.add_argument("--train-only", action="store_true", help="train and diagnose, then stop (no evaluation)")
    args = ap.parse_args()
    root = ROOT / "outputs" / args.name
    t0 = time.perf_counter()
    reports, infos = {}, {}
    for s in args.seeds:
        reports[s], infos[s] = run_one(s, args, root)
    if args.train_only:
        print(json.dumps(infos, indent=1, default=float))
        return
    summary = summarize(reports)
    summary["gmtrouter"] = infos
    summary["command"] = (f"python benchmarks/bench_unseen_subjects_gmt.py --seeds {' '.join(map(str, args.seeds))} "
                          f"--holdout {args.holdout} --cold-frac {args.cold_frac} --epochs {args.epochs} "
                          f"--patience {args.patience}" + (f" --name {args.name}" if args.name != "unseen_subjects_gmt" else ""))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    write_summary(summary, args.name, MEASURES)
    print(f"{summary['seconds']} s; per-seed outputs under {root}")


if __name__ == "__main__":
    main()
