"""The GMTRouter training job: ``run(cfg)``, which ``jobs/train_gmtrouter.py`` wraps.

1. Records: a file of GMTRouter records (``data.source=records``; errors name file, line and field)
   or the simulated personalization set (``data.source=simulated``, see ``simulate.py``).
2. The graph is built once in the driver (MiniLM embeddings, cached on disk by text hash).
3. Training runs on Ray Train through the shared launcher (``rlrouter.distributed.launcher``) with
   ``resources.learner.num_workers`` ranks: each rank predicts its own share of the hidden target
   turns, and the gradients are averaged in one flattened all-reduce per step. With
   ``resources=in_process`` the same loop runs in this process.
4. Rank 0 reports the best-validation-AUC model as a checkpoint folder the Serve app loads
   (``GMTRouterScorer.load``), with every interaction of the log set in its graph.
5. The driver measures test pairwise accuracy / AUC (``test``; ``test_cold``: the same turns scored for a
   user with no history on the query as a new node) and, when some users were held out entirely, the
   few-shot curve, and writes ``metrics.json`` beside the checkpoint.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlrouter.config import to_plain_dict, typed_config
from rlrouter.distributed.resources import ResourceSpec, RoleSpec
from rlrouter.gmt.graph import GMTGraph, build_graph
from rlrouter.gmt.model import GMTModelConfig
from rlrouter.gmt.simulate import SimConfig
from rlrouter.gmt.train import (GroupBatch, Split, GMTTrainConfig, build_model, evaluate, few_shot_curve, fit,
                                load_checkpoint, save_checkpoint, temporal_split, to_jsonable, training_groups)
from rlrouter.jobkit import finish_run, open_run, run_on_ray


@dataclass
class GMTDataConfig:
    """Where the interaction logs come from."""

    source: str = "simulated"
    """'simulated' (personalization set over RouteLLM outcomes) or 'records' (a GMTRouter file)."""
    path: str | None = None
    """A GMTRouter records file (JSONL / JSON / parquet) when source is 'records'."""
    logged: str | None = None
    """RouteLLM outcomes for the simulator (dir / CSV / URL); None = ../shared/data/routellm."""
    llms: list[str] | None = None
    """Candidate list; None = the models the records use."""
    llm_descriptions: dict[str, str] = field(default_factory=dict)
    """Text embedded for each candidate's llm node (defaults exist for the RouteLLM models)."""
    new_user_frac: float = 0.25
    """Users held out of training entirely, to measure few-shot adaptation."""
    few_shot_ks: list[int] = field(default_factory=lambda: [0, 2, 4, 8, 16, 32, 64])
    sim: SimConfig = field(default_factory=SimConfig)

    def __post_init__(self) -> None:
        if self.source not in ("simulated", "records"):
            raise ValueError(f"data.source: expected 'simulated' or 'records', got '{self.source}'")
        if self.source == "records" and not self.path:
            raise ValueError("data.path: required when data.source is 'records'")
        if not 0 <= self.new_user_frac < 1:
            raise ValueError(f"data.new_user_frac: expected in [0, 1), got {self.new_user_frac}")
        if any(k < 0 for k in self.few_shot_ks):
            raise ValueError(f"data.few_shot_ks: expected ints >= 0, got {self.few_shot_ks}")


@dataclass
class GMTJobConfig:
    seed: int = 0
    output_dir: str = "outputs/train_gmtrouter"
    data: GMTDataConfig = field(default_factory=GMTDataConfig)
    model: GMTModelConfig = field(default_factory=GMTModelConfig)
    train: GMTTrainConfig = field(default_factory=GMTTrainConfig)
    resources: ResourceSpec = field(default_factory=lambda: ResourceSpec(learner=RoleSpec(num_workers=2)))
    """``resources.learner``: the Ray Train ranks (``ray_train: false``: one rank in this process)."""
    learner_failures: int = 0
    """Ray Train FailureConfig.max_failures (a restarted group trains again from the start)."""
    ray: dict[str, Any] = field(default_factory=dict)
    """The cluster (``conf/ray/``): ``rlrouter.distributed.cluster.connect``'s arguments."""

    @classmethod
    def from_cfg(cls, cfg: Any) -> "GMTJobConfig":
        """From a Hydra config shaped like ``conf/train_gmtrouter.yaml`` (or a plain dict)."""
        d = to_plain_dict(cfg)
        d.pop("storage", None)  # the run's storage, read by ``run``
        gmt = d.pop("gmt", None) or {}
        extra = sorted(set(gmt) - {"data", "model", "train"})
        if extra:
            raise ValueError(f"gmt.{extra[0]}: unknown key (expected data, model, train)")
        # the GMTRouter sections sit under gmt.*: built with that prefix, so errors name the full key
        sections = {"data": GMTDataConfig, "model": GMTModelConfig, "train": GMTTrainConfig}
        built = {k: typed_config(c, gmt.get(k), f"gmt.{k}") for k, c in sections.items()}
        return typed_config(cls, {**d, **built})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- data


@dataclass
class Prepared:
    graph: GMTGraph
    split: Split
    train_users: list[int]
    new_users: list[int]
    records_path: Path | None = None
    sim_stats: dict | None = None
    profiles: dict[str, str] | None = None
    """Simulated users' hidden profile kinds (user_id -> kind), for per-profile analysis."""


def prepare(job: GMTJobConfig, out_dir: Path, embed=None) -> Prepared:
    """Records -> graph -> (train users, few-shot users, temporal split)."""
    from rlrouter.data.io import read_records, write_records

    sim_stats = None
    profiles = None
    if job.data.source == "records":
        records = read_records(job.data.path, "gmtrouter", strict=True).records
        records_path = Path(job.data.path)
    else:
        from rlrouter.gmt.simulate import load_outcomes, simulate_personalization

        sim = simulate_personalization(load_outcomes(job.data.logged), job.data.sim)
        records = sim.records
        sim_stats = sim.stats
        profiles = {p.user_id: p.kind for p in sim.profiles}
        # The generated set is kept beside the checkpoint: users and tests can replay exactly it.
        records_path = write_records(out_dir / "personalization.jsonl", records)
        (out_dir / "profiles.json").write_text(json.dumps([asdict(p) for p in sim.profiles], indent=1))
    graph = build_graph(records, llms=job.data.llms, llm_descriptions=job.data.llm_descriptions or None,
                        embed=embed)
    g = torch.Generator().manual_seed(job.seed)
    perm = torch.randperm(len(graph.users), generator=g).tolist()
    n_new = int(round(job.data.new_user_frac * len(graph.users)))
    new_users = sorted(perm[:n_new])
    train_users = sorted(perm[n_new:])
    split = temporal_split(graph, job.train.val_frac, job.train.test_frac, users=torch.tensor(train_users))
    return Prepared(graph=graph, split=split, train_users=train_users, new_users=new_users,
                    records_path=records_path, sim_stats=sim_stats, profiles=profiles)


# ---------------------------------------------------------------- the per-rank loop


def _allreduce_grads(model: torch.nn.Module) -> None:
    """Average gradients over ranks in one flattened buffer (one collective per step, not per tensor)."""
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    off = 0
    for p in params:
        n = p.numel()
        p.grad = flat[off:off + n].view_as(p).clone()
        off += n


def train_worker(job: GMTJobConfig, graph: GMTGraph, split: Split, ckpt_dir: Path, rank: int = 0,
                 world_size: int = 1, report=None, device: str = "cpu") -> dict[str, Any]:
    """Train on ``device`` (the rank's, from the launcher), keep the best-validation model, save it
    (rank 0) as a scorer checkpoint in ``ckpt_dir``."""
    sync = None
    if world_size > 1:
        import torch.distributed as dist

        def sync(model):
            _allreduce_grads(model)
        # on the rank's device first: NCCL broadcasts CUDA tensors only
        model = build_model(graph, job.model, job.train.seed).to(device)
        # Same seed gives the same weights; the broadcast makes it a guarantee, not a coincidence.
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
    else:
        model = build_model(graph, job.model, job.train.seed)

    def on_epoch(row, _model, improved):
        if report is not None:
            report({k: v for k, v in row.items() if isinstance(v, (int, float))})

    res = fit(graph, split, job.model, job.train, on_epoch=on_epoch, model=model, rank=rank,
              world_size=world_size, sync_grads=sync, device=device)
    summary = {"best_epoch": res.best_epoch, "val": res.best_val, "train_seconds": res.seconds,
               "epochs_run": res.history[-1]["epoch"] if res.history else 0}
    if rank == 0:
        save_checkpoint(ckpt_dir, res.model, graph, extra={"train": summary, "job": job.to_dict()})
    return summary


def _ray_train_loop(config: dict[str, Any]) -> None:
    import ray

    from rlrouter.distributed.launcher import RayTrainSession, setup_worker_threads

    job = typed_config(GMTJobConfig, config["job"])
    setup_worker_threads(job.resources.learner.num_cpus)
    session = RayTrainSession(use_gpu=job.resources.use_gpu)
    tensors, meta, masks = ray.get(config["graph_ref"])
    graph = GMTGraph.from_tensors(tensors, meta)
    split = Split(**masks)
    with tempfile.TemporaryDirectory(prefix="gmt_ckpt_") as tmp:
        summary = train_worker(job, graph, split, Path(tmp), rank=session.rank, world_size=session.world_size,
                               device=session.device)
        metrics = {"best_epoch": float(summary["best_epoch"]), "val/auc": float(summary["val"].get("auc", 0.0)),
                   "val/accuracy": float(summary["val"].get("accuracy", 0.0)),
                   "train_seconds": float(summary["train_seconds"])}
        # Ray Train V2 returns metrics only with a checkpoint; only rank 0 wrote one.
        session.report(metrics, tmp if session.rank == 0 else None)


def _train_on_ray(job: GMTJobConfig, prep: Prepared, dest: Path) -> dict[str, Any]:
    import ray

    from rlrouter.distributed.cluster import connect

    connect(**job.ray)  # before ray.put; run_on_ray's own connect then finds the cluster up
    tensors, meta = prep.graph.to_tensors()
    masks = {"train": prep.split.train, "val": prep.split.val, "test": prep.split.test}
    graph_ref = ray.put((tensors, meta, masks))
    return run_on_ray(_ray_train_loop, {"job": job.to_dict(), "graph_ref": graph_ref}, job, "train_gmtrouter", dest)


# ---------------------------------------------------------------- entry point


def run(cfg: Any) -> dict[str, Any]:
    """Train GMTRouter as configured; returns (and writes) the metrics. See the module docstring."""
    job = cfg if isinstance(cfg, GMTJobConfig) else GMTJobConfig.from_cfg(cfg)
    job, store = open_run("train_gmtrouter", job, None if isinstance(cfg, GMTJobConfig) else cfg.get("storage"))
    out_dir = Path(job.output_dir)
    t0 = time.perf_counter()
    prep = prepare(job, out_dir)
    t_prep = time.perf_counter() - t0
    ckpt_dir = out_dir / "checkpoint"
    if job.resources.ray_train:
        ray_metrics = _train_on_ray(job, prep, ckpt_dir)
    else:
        if ckpt_dir.exists():
            shutil.rmtree(ckpt_dir)
        ray_metrics = train_worker(job, prep.graph, prep.split, ckpt_dir)
    t_train = time.perf_counter() - t0 - t_prep

    model, _, ckpt_cfg = load_checkpoint(ckpt_dir)
    g, sp = prep.graph, prep.split
    test_batch = GroupBatch.from_groups(g, training_groups(g, sp.test, job.train.loss))
    metrics: dict[str, Any] = {
        "graph": g.counts(), "multi_turn": g.multi_turn, "num_layers": model.cfg.num_layers,
        "split": {k: int(getattr(sp, k).sum()) for k in ("train", "val", "test")},
        "train": ckpt_cfg.get("train", {}), "ray": ray_metrics if job.resources.ray_train else None,
        "test": evaluate(model, g, sp.train | sp.val, test_batch, loss=job.train.loss),
        # the same turns for a user with no history on the query as a new node (the path serving takes)
        "test_cold": evaluate(model, g, sp.train | sp.val, test_batch, loss=job.train.loss, cold=True),
        "seconds": {"prepare": t_prep, "train": t_train},
    }
    if prep.new_users:
        new = torch.zeros(len(g.users), dtype=torch.bool)
        new[prep.new_users] = True
        new_split = temporal_split(g, 0.0, job.train.test_frac, users=torch.tensor(prep.new_users))
        metrics["few_shot"] = few_shot_curve(model, g, sp.train | sp.val, prep.new_users,
                                             job.data.few_shot_ks, new_split.test, loss=job.train.loss)
    if prep.sim_stats is not None:
        metrics["simulation"] = prep.sim_stats
    cfg_path = ckpt_dir / "config.json"
    saved = json.loads(cfg_path.read_text())
    saved["metrics"] = to_jsonable(metrics)
    cfg_path.write_text(json.dumps(saved, indent=1))
    (out_dir / "metrics.json").write_text(json.dumps(to_jsonable(metrics), indent=1))
    finish_run(store)
    return to_jsonable(metrics)
