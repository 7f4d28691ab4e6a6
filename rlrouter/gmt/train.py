"""GMTRouter training: loss, metrics, temporal splits, the epoch loop, checkpoints, few-shot users.

Loss (GMTRouter, Sec. 3.3): for two responses one user rated on the same query, the pairwise
logistic loss ``-log sigmoid(s_win - s_lose)``; for a turn with more than two rated candidates,
cross-entropy with the unique top-rated candidate as the target. Ties carry no preference and are
skipped (a pair with equal ratings; a larger group whose top rating is shared).

Logs with one model per query (the seed's own example) hold no such comparison. ``loss: pointwise``
trains them on each interaction alone: binary cross-entropy between ``sigmoid(score)`` and the
feedback scaled to [0, 1] (``normalize_feedback``), validated by the AUC of score against "feedback
above the mean".

Each epoch hides a random ``target_frac`` of the training turns from the message-passing graph and
predicts them from the rest, so a rating never flows into its own prediction. A ``cold_frac`` share of
those targets is scored as a user with no history asking a new query (``model.score_cold``), the path
an unknown user's request takes at serving time, which the predictor otherwise never sees in training.
The checkpoint kept is the one with the best validation AUC (in-graph; the cold path's is
logged beside it, and picks instead with ``select_on: cold``, for logs without users). Checkpoints are a
folder: ``model.safetensors`` (weights), ``graph.safetensors`` + ``config.json`` (the graph the scorer
serves from, model config, metrics).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from typing import Any
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlrouter.gmt.graph import GMTGraph, normalize_feedback
from rlrouter.gmt.model import GMTModelConfig, GMTRouterModel, score_cold

CHECKPOINT_FORMAT = "rlrouter.gmtrouter/v1"
LOSSES = ("pairwise", "pointwise")
SELECT_ON = ("graph", "cold")


@dataclass
class GMTTrainConfig:
    """Optimisation settings for ``fit``."""

    epochs: int = 200
    lr: float = 3e-3
    """Adam learning rate."""
    weight_decay: float = 1e-5
    target_frac: float = 0.3
    """Share of training turns hidden each epoch and used as prediction targets."""
    patience: int = 40
    """Stop after this many epochs without a better validation AUC (0 = never)."""
    eval_every: int = 2
    seed: int = 0
    val_frac: float = 0.15
    """Per user, the share of conversations (by time) kept for validation."""
    test_frac: float = 0.25
    """Per user, the share of latest conversations held out for testing."""
    threads: int = 0
    """torch intra-op threads (0 = leave torch's default)."""
    loss: str = "pairwise"
    """"pairwise": the paper's loss on turns comparing candidates; "pointwise": each interaction's
    feedback alone, for logs with one model per query."""
    cold_frac: float = 0.0
    """Share of each step's targets scored for a user with no history on the query as a new, isolated
    node (``model.score_cold``), with the same loss: trains the path RouteLLM-style logs (no user ids,
    unseen prompts) are routed on. 0 = the paper's training, which never shows the predictor that path.
    0.1 lifted the cold user's mean APGR on unseen subjects from 0.528 to 0.584 without lowering the known
    users' AUC, unevenly across 3 seeds; 0.5 lost them (docs/evaluation.md). Opt-in: the
    published GMTRouter figures (benchmarks/results/gmtrouter.json) are the paper's training."""
    select_on: str = "graph"
    """Which validation AUC picks the checkpoint: "graph" (the validation turns scored for their own users
    in the graph: the paper's) or "cold" (scored for a user with no history on the query as a new node,
    ``model.score_cold``): for logs without users, every one of whose routes takes the cold path (the pool
    evaluation's ``gmtrouter``). Both are logged whichever picks."""

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss: expected one of {LOSSES}, got {self.loss!r}")
        if self.epochs < 1:
            raise ValueError(f"epochs: expected >= 1, got {self.epochs}")
        if not self.lr > 0:
            raise ValueError(f"lr: expected > 0, got {self.lr}")
        if not 0 < self.target_frac < 1:
            raise ValueError(f"target_frac: expected in (0, 1), got {self.target_frac}")
        if not (0 <= self.val_frac < 1 and 0 <= self.test_frac < 1 and self.val_frac + self.test_frac < 1):
            raise ValueError(f"val_frac/test_frac: need both in [0, 1) with a sum < 1, got "
                             f"{self.val_frac}/{self.test_frac}")
        if self.eval_every < 1:
            raise ValueError(f"eval_every: expected >= 1, got {self.eval_every}")
        if not 0.0 <= self.cold_frac <= 1.0:
            raise ValueError(f"cold_frac: expected in [0, 1], got {self.cold_frac}")
        if self.select_on not in SELECT_ON:
            raise ValueError(f"select_on: expected one of {SELECT_ON}, got {self.select_on!r}")


# ---------------------------------------------------------------- loss and metrics


def preference_loss(scores: torch.Tensor, ratings: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean loss over comparison groups; scores, ratings, valid are (G, K).

    Groups of two use the pairwise logistic loss; larger groups use cross-entropy towards the unique
    top-rated member. For two members the two are the same number; both are written out so each
    reads as the paper states it. Groups that are ties contribute nothing.
    """
    neg_inf = torch.finfo(scores.dtype).min
    r = ratings.masked_fill(~valid, -math.inf)
    top = r.max(dim=1, keepdim=True).values  # (G, 1)
    is_top = (r == top) & valid
    n_valid = valid.sum(1)
    usable = (is_top.sum(1) == 1) & (n_valid >= 2)  # (G,)
    losses = []
    pair = usable & (n_valid == 2)
    if pair.any():
        s = scores[pair]
        v = valid[pair]
        win = is_top[pair]
        lose = v & ~win
        s_win = (s * win).sum(1)
        s_lose = (s * lose).sum(1)
        losses.append(torch.nn.functional.softplus(-(s_win - s_lose)))  # (P,)
    multi = usable & (n_valid > 2)
    if multi.any():
        s = scores[multi].masked_fill(~valid[multi], neg_inf)
        target = is_top[multi].float().argmax(1)
        losses.append(torch.nn.functional.cross_entropy(s, target, reduction="none"))
    if not losses:
        return scores.sum() * 0.0
    return torch.cat(losses).mean()


def pointwise_loss(scores: torch.Tensor, ratings: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of ``sigmoid(score)`` against the feedback scaled to [0, 1], over
    the valid members; scores, ratings, valid are (G, K) (K = 1 for ``GMTGraph.singles``)."""
    if not bool(valid.any()):
        return scores.sum() * 0.0
    target = normalize_feedback(ratings[valid])  # (V,)
    return torch.nn.functional.binary_cross_entropy_with_logits(scores[valid], target)


def pointwise_metrics(scores: np.ndarray, ratings: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """AUC of the scores against "good" = feedback above the evaluated set's mean feedback (so labels
    on the -1..1 signal scale and 1-5 ratings both split), and accuracy: ``sigmoid(score)`` above the
    scaled mean agrees with "good"."""
    v = np.asarray(valid, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)[v]
    if s.size == 0:
        return {"pairs": 0, "accuracy": float("nan"), "auc": float("nan")}
    f = normalize_feedback(torch.as_tensor(np.asarray(ratings)[v])).numpy().astype(np.float64)
    good = f > f.mean()
    predicted = 1.0 / (1.0 + np.exp(-s)) > f.mean()
    return {"pairs": int(s.size), "accuracy": float((predicted == good).mean()), "auc": auc_score(good, s)}


def objective(loss: str) -> tuple[Callable[..., torch.Tensor], Callable[..., dict[str, float]]]:
    """(loss function, metrics function) of ``GMTTrainConfig.loss``."""
    if loss == "pointwise":
        return pointwise_loss, pointwise_metrics
    return preference_loss, pairwise_metrics


def training_groups(graph: GMTGraph, mask: torch.Tensor, loss: str = "pairwise") -> torch.Tensor:
    """The groups a loss learns from: comparison groups (pairwise) or single interactions (pointwise)."""
    return graph.singles(mask) if loss == "pointwise" else graph.groups(mask)


def auc_score(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the Mann-Whitney statistic; tied scores count half. NaN without both classes."""
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def pairwise_metrics(scores: np.ndarray, ratings: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """Pairwise accuracy and AUC over every pair of differently-rated members of each group.

    Each pair is counted in both orders, so the figures do not depend on which candidate a log lists
    first: a constant scorer gets AUC 0.5 and accuracy 0.5 (ties count half), and a model that
    always picks the overall better candidate gets its win rate.
    """
    diffs, labels = [], []
    for s, r, v in zip(np.asarray(scores), np.asarray(ratings), np.asarray(valid)):
        idx = np.nonzero(v)[0]
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                i, j = idx[a], idx[b]
                if r[i] == r[j]:
                    continue
                d = float(s[i] - s[j])
                y = bool(r[i] > r[j])
                diffs += [d, -d]
                labels += [y, not y]
    if not diffs:
        return {"pairs": 0, "accuracy": float("nan"), "auc": float("nan")}
    d = np.array(diffs)
    y = np.array(labels)
    correct = np.where(d == 0, 0.5, ((d > 0) == y).astype(float))
    return {"pairs": len(d) // 2, "accuracy": float(correct.mean()), "auc": auc_score(y, d)}


# ---------------------------------------------------------------- splits


@dataclass
class Split:
    """Boolean masks over interactions."""

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    def to_dict(self) -> dict[str, list[int]]:
        return {k: torch.nonzero(getattr(self, k), as_tuple=True)[0].tolist() for k in ("train", "val", "test")}


def temporal_split(graph: GMTGraph, val_frac: float, test_frac: float,
                   users: torch.Tensor | None = None) -> Split:
    """Per user, order conversations by first timestamp; the latest ``test_frac`` are test, the
    ``val_frac`` before them validation, the rest training. Interactions of users outside ``users``
    (when given) are in no split: they are the few-shot users."""
    n = graph.num_interactions
    train = torch.zeros(n, dtype=torch.bool)
    val = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    keep_user = torch.ones(len(graph.users), dtype=torch.bool)
    if users is not None:
        keep_user = torch.zeros(len(graph.users), dtype=torch.bool)
        keep_user[users] = True
    for u in range(len(graph.users)):
        if not keep_user[u]:
            continue
        ids = torch.nonzero(graph.user == u, as_tuple=True)[0]
        units = graph.unit[ids]
        uniq = torch.unique(units)
        first = torch.stack([graph.timestamp[ids[units == x]].min() for x in uniq])
        order = uniq[torch.argsort(first, stable=True)].tolist()
        k = len(order)
        n_test = int(math.ceil(test_frac * k)) if k >= 3 else 0
        n_val = int(math.ceil(val_frac * k)) if k - n_test >= 2 and val_frac > 0 else 0
        n_train = k - n_test - n_val
        for pos, x in enumerate(order):
            m = ids[units == x]
            if pos < n_train:
                train[m] = True
            elif pos < n_train + n_val:
                val[m] = True
            else:
                test[m] = True
    return Split(train=train, val=val, test=test)


# ---------------------------------------------------------------- scoring groups


@dataclass
class GroupBatch:
    """Comparison groups as tensors: the (user, query) of each group and its members."""

    ids: torch.Tensor  # (G, K) interaction ids, -1 padded
    users: torch.Tensor  # (G,)
    queries: torch.Tensor  # (G,)
    llms: torch.Tensor  # (G, K), -1 padded
    ratings: torch.Tensor  # (G, K)
    valid: torch.Tensor  # (G, K) bool

    @classmethod
    def from_groups(cls, graph: GMTGraph, ids: torch.Tensor) -> "GroupBatch":
        valid = ids >= 0
        safe = ids.clamp(min=0)
        first = safe[:, 0] if ids.numel() else torch.empty(0, dtype=torch.long)
        return cls(ids=ids, users=graph.user[first], queries=graph.query[first],
                   llms=torch.where(valid, graph.llm[safe], -1),
                   ratings=torch.where(valid, graph.feedback[safe], 0.0), valid=valid)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def subset(self, rows: torch.Tensor) -> "GroupBatch":
        return GroupBatch(*(getattr(self, f)[rows] for f in ("ids", "users", "queries", "llms", "ratings", "valid")))


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _to(x: Any, device: torch.device) -> Any:
    """The graph's tensors (kept on the CPU, where the bookkeeping happens) moved to the model's device."""
    if isinstance(x, dict):
        return {k: v.to(device) for k, v in x.items()}
    return x.to(device)


def score_groups(model: GMTRouterModel, graph: GMTGraph, h: dict[str, torch.Tensor], batch: GroupBatch,
                 cold: torch.Tensor | None = None) -> torch.Tensor:
    """Logits (G, K) of ``batch`` from node embeddings ``h``; the groups flagged in ``cold`` (G,) bool
    are scored for a user with no history on their query as a new node (``score_cold``)."""
    dev = _device_of(model)
    s = model.score(h, *(_to(t, dev) for t in (batch.users, batch.queries, batch.llms)))  # (G, K)
    if cold is None or not bool(cold.any()):
        return s
    rows = torch.nonzero(cold, as_tuple=True)[0]
    s_cold = score_cold(model, h, _to(graph.query_x[batch.queries[rows]], dev), _to(batch.llms[rows], dev))
    return s.index_put((_to(rows, dev),), s_cold)


@torch.no_grad()
def evaluate(model: GMTRouterModel, graph: GMTGraph, visible: torch.Tensor, batch: GroupBatch,
             h: dict[str, torch.Tensor] | None = None, loss: str = "pairwise", cold: bool = False) -> dict[str, float]:
    """Accuracy / AUC of ``batch`` (pairwise, or pointwise per ``loss``) with message passing over
    ``visible`` interactions; ``cold``: every group scored for a user with no history on its query as a
    new node (``score_cold``)."""
    if len(batch) == 0:
        return {"pairs": 0, "accuracy": float("nan"), "auc": float("nan"), "loss": float("nan")}
    was = model.training
    model.eval()
    dev = _device_of(model)
    if h is None:
        h = model.encode(_to(graph.x_dict(), dev), _to(graph.edge_index_dict(visible), dev))
    s = score_groups(model, graph, h, batch, torch.full((len(batch),), cold)).cpu()
    loss_fn, metrics_fn = objective(loss)
    out = metrics_fn(s.numpy(), batch.ratings.numpy(), batch.valid.numpy())
    out["loss"] = float(loss_fn(s, batch.ratings, batch.valid))
    model.train(was)
    return out


# ---------------------------------------------------------------- training loop


@dataclass
class FitResult:
    model: GMTRouterModel
    best_epoch: int
    best_val: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


def build_model(graph: GMTGraph, model_cfg: GMTModelConfig, seed: int = 0) -> GMTRouterModel:
    torch.manual_seed(seed)
    cfg = model_cfg.resolved(graph.multi_turn)
    if cfg.embed_dim != graph.embed_dim:
        cfg = GMTModelConfig(**{**cfg.to_dict(), "embed_dim": graph.embed_dim})
    return GMTRouterModel(cfg)


def train_step(model: GMTRouterModel, graph: GMTGraph, train_mask: torch.Tensor, batch: GroupBatch,
               target_frac: float, gen: torch.Generator, loss: str = "pairwise",
               cold_frac: float = 0.0) -> tuple[torch.Tensor, int]:
    """One forward pass: hide a random share of the training groups, predict them from the rest, a
    ``cold_frac`` share of them through the cold path (``score_groups``).

    Returns (loss, number of target groups). ``batch`` holds the training groups this rank owns.
    """
    g = len(batch)
    n_target = max(1, int(round(target_frac * g)))
    rows = torch.randperm(g, generator=gen)[:n_target]
    targets = batch.subset(rows)
    visible = train_mask.clone()
    visible[targets.ids[targets.valid]] = False
    dev = _device_of(model)  # the graph stays on the CPU; what the model reads moves to its device
    h = model.encode(_to(graph.x_dict(), dev), _to(graph.edge_index_dict(visible), dev))
    # no draw at cold_frac 0, so the paper's training keeps its random stream
    cold = torch.rand(n_target, generator=gen) < cold_frac if cold_frac > 0 else None  # (T,)
    s = score_groups(model, graph, h, targets, cold)  # (T, K)
    return objective(loss)[0](s, _to(targets.ratings, dev), _to(targets.valid, dev)), n_target


def fit(graph: GMTGraph, split: Split, model_cfg: GMTModelConfig, cfg: GMTTrainConfig,
        on_epoch: Callable[[dict[str, float], GMTRouterModel, bool], None] | None = None,
        model: GMTRouterModel | None = None, rank: int = 0, world_size: int = 1,
        sync_grads: Callable[[GMTRouterModel], None] | None = None, device: str = "cpu") -> FitResult:
    """Train on ``split.train`` groups, select by validation AUC.

    With ``world_size > 1`` this rank draws its targets from its own share of the training groups and
    ``sync_grads`` averages gradients across ranks before each step; validation is computed on every
    rank (it is deterministic), so all ranks stop at the same epoch without talking.
    ``on_epoch(metrics, model, improved)`` is called after each evaluation. The model trains on
    ``device`` (the launcher's ``select_device``) and comes back on the CPU, where checkpoints and
    scoring read it.
    """
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model = (model or build_model(graph, model_cfg, cfg.seed)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    all_train = GroupBatch.from_groups(graph, training_groups(graph, split.train, cfg.loss))
    val_batch = GroupBatch.from_groups(graph, training_groups(graph, split.val, cfg.loss))
    if len(all_train) == 0 and cfg.loss == "pairwise":
        raise ValueError("training split holds no comparison groups (turns where one user rated "
                         "two candidates differently): nothing to learn preferences from. For logs with "
                         "one model per query set gmt.train.loss=pointwise")
    if len(all_train) == 0:
        raise ValueError("training split holds no interactions")
    train_batch = all_train.subset(torch.arange(rank, len(all_train), world_size)) if world_size > 1 else all_train
    gen = torch.Generator().manual_seed(cfg.seed + 7919 * rank)
    best_auc, best_epoch, best_val, best_state = -1.0, 0, {}, None
    history: list[dict[str, float]] = []
    t0 = time.perf_counter()
    since = 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        opt.zero_grad()
        loss, _ = train_step(model, graph, split.train, train_batch, cfg.target_frac, gen, cfg.loss, cfg.cold_frac)
        loss.backward()
        if sync_grads is not None:
            sync_grads(model)
        opt.step()
        row = {"epoch": epoch, "learner/loss": float(loss.detach())}
        if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
            vb = val_batch if len(val_batch) else all_train
            model.eval()
            with torch.no_grad():  # one message pass serves both validations (evaluate would run the same)
                h = model.encode(_to(graph.x_dict(), _device_of(model)),
                                 _to(graph.edge_index_dict(split.train), _device_of(model)))
            val = evaluate(model, graph, split.train, vb, h=h, loss=cfg.loss)
            row.update({"val/auc": val["auc"], "val/accuracy": val["accuracy"], "val/loss": val["loss"]})
            auc = val["auc"] if not math.isnan(val["auc"]) else -float(val["loss"])
            if cfg.cold_frac > 0 or cfg.select_on == "cold":
                # with select_on "graph", logged, not selected on: the checkpoint is chosen for the known users,
                # as without cold_frac (on seed 0 of docs/evaluation.md a mix with the cold AUC picked the same epoch)
                cold = evaluate(model, graph, split.train, vb, h=h, loss=cfg.loss, cold=True)
                row.update({"val/cold_auc": cold["auc"], "val/cold_loss": cold["loss"]})
                val = {**val, "cold_auc": cold["auc"], "cold_accuracy": cold["accuracy"], "cold_loss": cold["loss"]}
                if cfg.select_on == "cold":
                    auc = cold["auc"] if not math.isnan(cold["auc"]) else -float(cold["loss"])
            model.train()
            improved = auc > best_auc
            if improved:
                best_auc, best_epoch, best_val = auc, epoch, val
                best_state = copy.deepcopy(model.state_dict())
                since = 0
            else:
                since += cfg.eval_every
            history.append(row)
            if on_epoch is not None:
                on_epoch(row, model, improved)
            if cfg.patience and since >= cfg.patience:
                break
        else:
            history.append(row)
    if best_state is not None:
        model.load_state_dict(best_state)
    model.to("cpu").eval()
    return FitResult(model=model, best_epoch=best_epoch, best_val=best_val, history=history,
                     seconds=time.perf_counter() - t0)


# ---------------------------------------------------------------- checkpoints


def save_checkpoint(path: str | Path, model: GMTRouterModel, graph: GMTGraph, visible: torch.Tensor | None = None,
                    extra: dict | None = None) -> Path:
    """Write the checkpoint folder the scorer (and the Serve app) loads.

    Only the ``visible`` interactions are kept in the served graph (by default all): held-out turns
    must not become evidence at serving time.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    g = graph if visible is None else subgraph(graph, visible)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(path / "model.safetensors"))
    tensors, meta = g.to_tensors()
    save_file(tensors, str(path / "graph.safetensors"))
    cfg = {"format": CHECKPOINT_FORMAT, "model": model.cfg.to_dict(), "graph": meta,
           "embedding_model": "minilm-l6", **(extra or {})}
    tmp = path / "config.json.tmp"
    tmp.write_text(json.dumps(cfg, indent=1))
    tmp.replace(path / "config.json")
    return path


def load_checkpoint(path: str | Path) -> tuple[GMTRouterModel, GMTGraph, dict]:
    """(model in eval mode, graph, config dict) from a checkpoint folder."""
    path = Path(path)
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{path}: not a GMTRouter checkpoint (no config.json)")
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{cfg_path}: field 'format': expected '{CHECKPOINT_FORMAT}', got {cfg.get('format')!r}")
    model = GMTRouterModel(GMTModelConfig(**cfg["model"]))
    model.load_state_dict(load_file(str(path / "model.safetensors")))
    model.eval()
    graph = GMTGraph.from_tensors(load_file(str(path / "graph.safetensors")), cfg["graph"])
    return model, graph, cfg


def subgraph(graph: GMTGraph, keep: torch.Tensor) -> GMTGraph:
    """The graph restricted to ``keep`` interactions (all users, queries and llms stay)."""
    ids = torch.nonzero(keep, as_tuple=True)[0]
    remap = torch.full((graph.num_interactions,), -1, dtype=torch.long)
    remap[ids] = torch.arange(len(ids))
    prev = graph.prev[ids]
    prev = torch.where(prev >= 0, remap[prev.clamp(min=0)], prev)
    return GMTGraph(users=list(graph.users), llms=list(graph.llms), llm_descriptions=list(graph.llm_descriptions),
                    query_keys=list(graph.query_keys), query_x=graph.query_x, llm_x=graph.llm_x,
                    user=graph.user[ids], query=graph.query[ids], llm=graph.llm[ids],
                    feedback=graph.feedback[ids], turn=graph.turn[ids], prev=prev, unit=graph.unit[ids],
                    timestamp=graph.timestamp[ids])


# ---------------------------------------------------------------- few-shot users


def first_k_interactions(graph: GMTGraph, user: int, k: int, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """The user's earliest ``k`` interactions (by timestamp, then id), outside ``exclude``."""
    ids = torch.nonzero(graph.user == user, as_tuple=True)[0]
    if exclude is not None:
        ids = ids[~exclude[ids]]
    order = torch.argsort(graph.timestamp[ids], stable=True)
    return ids[order][:k]


@torch.no_grad()
def few_shot_curve(model: GMTRouterModel, graph: GMTGraph, base_visible: torch.Tensor,
                   new_users: list[int], ks: list[int], test_mask: torch.Tensor,
                   loss: str = "pairwise") -> list[dict[str, float]]:
    """Accuracy/AUC on new users' test turns when each has only its first k interactions in the graph.

    The trained weights are not touched: the new users' sessions are added as visible edges and the
    user nodes are embedded by message passing alone (the paper's few-shot adaptation: no retraining).
    """
    test_batch = GroupBatch.from_groups(graph, training_groups(graph, test_mask, loss))
    rows = []
    for k in ks:
        visible = base_visible.clone()
        for u in new_users:
            visible[first_k_interactions(graph, u, k, exclude=test_mask)] = True
        m = evaluate(model, graph, visible, test_batch, loss=loss)
        rows.append({"k": k, **m})
    return rows


def to_jsonable(obj):
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if hasattr(obj, "__dataclass_fields__"):
        return to_jsonable(asdict(obj))
    return obj
