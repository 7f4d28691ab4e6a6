"""Supervised phase: cross-entropy on labelled queries, early stopping on validation loss.

Runs on one process or as one rank of a torch.distributed group (Ray Train workers): each rank trains
on its shard, DDP averages gradients, and validation sums are all-reduced so every rank takes the same
early-stopping decision.
"""

from __future__ import annotations

import gc
import math
import random
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from rlrouter.intent.data import IntentExample
from rlrouter.distributed.launcher import all_reduce_sum, rank_and_world, rank_shard, unwrap, wrap_ddp
from rlrouter.intent.model import IntentModel


@dataclass
class SupervisedConfig:
    """The supervised phase."""

    epochs: int = 5
    """Upper bound on passes over the training set; early stopping usually ends sooner."""
    batch_size: int = 32
    """Queries per gradient step on each worker."""
    learning_rate: float = 1e-3
    """AdamW step for LoRA and the fresh head (LoRA tolerates far larger steps than full fine-tuning)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    patience: int = 2
    """Validations without a lower validation loss before stopping."""
    eval_every: int = 0
    """Validate every N steps; 0 = once per epoch."""
    max_steps: int = 0
    """Stop after N steps in all (a time cap for tests and benchmarks); 0 = no cap."""
    label_smoothing: float = 0.0
    """Cross-entropy label smoothing."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "patience"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "max_steps"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate: must be > 0, got {self.learning_rate}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay: must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing}")


@dataclass
class SupervisedResult:
    history: list[dict[str, float]]
    best_step: int
    best_val_loss: float
    stopped_early: bool
    steps: int


def label_ids(model: IntentModel, examples: Sequence[IntentExample]) -> torch.Tensor:
    index = {label: i for i, label in enumerate(model.labels)}
    try:
        return torch.tensor([index[e.label] for e in examples], dtype=torch.long, device=model.device)
    except KeyError as e:
        raise ValueError(f"label {e.args[0]!r} is not one of the model's labels {model.labels}") from None


@torch.no_grad()
def evaluate(model: IntentModel, examples: Sequence[IntentExample], batch_size: int = 64) -> dict[str, float]:
    """Validation loss and accuracy over this rank's ``examples``, summed over ranks."""
    was_training = model.training
    model.eval()
    loss_sum = correct = 0.0
    for i in range(0, len(examples), batch_size):
        batch = examples[i:i + batch_size]
        logits = model(**model.tokenize([e.text for e in batch])).logits
        y = label_ids(model, batch)
        loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
        correct += float((logits.argmax(-1) == y).sum())
    model.train(was_training)
    loss_sum, correct, n = all_reduce_sum([loss_sum, correct, float(len(examples))])
    return {"val/loss": loss_sum / max(n, 1.0), "val/accuracy": correct / max(n, 1.0)}


def train_supervised(model: IntentModel, train: Sequence[IntentExample], val: Sequence[IntentExample],
                     cfg: SupervisedConfig, seed: int = 0,
                     log: Callable[[dict[str, float]], None] | None = None) -> SupervisedResult:
    """Train ``model`` in place and restore the weights of the best validation loss."""
    rank, world = rank_and_world()
    val_shard = rank_shard(val, rank, world) if len(val) >= world else list(val)
    model.set_value_head_trainable(False)
    model.train()
    net = wrap_ddp(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(1, (len(train) // world) // cfg.batch_size)
    eval_every = cfg.eval_every or steps_per_epoch

    best_loss, best_step, best_state = math.inf, 0, model.trainable_state()
    bad_evals, step, stopped_early = 0, 0, False
    history: list[dict[str, float]] = []
    run_loss = run_n = 0.0
    t0 = time.perf_counter()
    for epoch in range(cfg.epochs):
        # the same permutation on every rank (seeded by epoch), then each rank takes its slice
        order = list(train)
        random.Random(seed * 7919 + epoch).shuffle(order)
        mine = rank_shard(order, rank, world)
        for b in range(steps_per_epoch):
            batch = mine[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            if not batch:
                break
            out = net(**model.tokenize([e.text for e in batch]))
            loss = F.cross_entropy(out.logits, label_ids(model, batch), label_smoothing=cfg.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            run_loss += float(loss.detach()) * len(batch)
            run_n += len(batch)
            if step % eval_every == 0 or (cfg.max_steps and step >= cfg.max_steps):
                train_loss, n = all_reduce_sum([run_loss, run_n])
                row = {"step": float(step), "epoch": float(epoch), "train/loss": train_loss / max(n, 1.0),
                       "time/elapsed_s": time.perf_counter() - t0, **evaluate(model, val_shard)}
                run_loss = run_n = 0.0
                history.append(row)
                if log is not None:
                    log(row)
                if row["val/loss"] < best_loss - 1e-4:
                    best_loss, best_step, best_state, bad_evals = row["val/loss"], step, model.trainable_state(), 0
                else:
                    bad_evals += 1
                    if bad_evals >= cfg.patience:
                        stopped_early = True
            if stopped_early or (cfg.max_steps and step >= cfg.max_steps):
                break
        if stopped_early or (cfg.max_steps and step >= cfg.max_steps):
            break
    unwrap(net).load_state_dict(best_state, strict=False)
    model.eval()
    # drop this phase's DDP reducer now: its gradient hooks must not outlive it into the PPO phase
    del net
    gc.collect()
    return SupervisedResult(history=history, best_step=best_step, best_val_loss=best_loss,
                            stopped_early=stopped_early, steps=step)
