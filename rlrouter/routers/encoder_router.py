"""RouteLLM's BERT router on rlrouter's intent stack: MiniLM + LoRA classifying a prompt as needing the
strong candidate or not, trained supervised on logged outcomes, then fine-tuned with PPO on a
cost-aware reward.

* **Labels** (RouteLLM, Ong et al. 2024, Sec. 4.1.3, binarised): "strong" where the strong candidate
  scored higher than the weak one on the prompt, "weak" otherwise (ties included: the weak candidate
  does as well there). The classifier's P("strong") is the router's score.
* **Supervised phase**: ``rlrouter.intent.supervised.train_supervised`` (cross-entropy, early stopping on
  a validation split of training subjects).
* **PPO phase**: ``rlrouter.intent.ppo.train_ppo``, the action being the candidate. The reward is the
  logged quality of the chosen candidate minus lam times its cost relative to the strong candidate's
  mean cost: ``score(choice) - lam * cost(choice) / mean cost(strong)`` (:class:`RoutingReward`, a TRL
  reward callable reading the outcomes by prompt text). lam prices a strong call in quality points.

``train_encoder_router`` takes plain arguments (an ``EvalSet``, indices, configs) and runs in one
process; the ``encoder`` router type calls it in ``fit`` so the evaluation job trains it on each split,
or loads a saved ``checkpoint``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, ThresholdRouter, register_router

LABELS = ("weak", "strong")


class RoutingReward:
    """reward(prompts, predictions) -> score of the chosen candidate - lam * its relative cost."""

    __name__ = "routing_reward"

    def __init__(self, outcomes: EvalSet, weak: int, strong: int, lam: float):
        if lam < 0:
            raise ValueError(f"encoder.lam: must be >= 0, got {lam}")
        unit = float(outcomes.costs[:, strong].mean()) or 1.0
        acc: dict[str, list[np.ndarray]] = {}
        for i, p in enumerate(outcomes.prompts):
            q = outcomes.scores[i, [weak, strong]] - lam * outcomes.costs[i, [weak, strong]] / unit  # (2,)
            acc.setdefault(p, []).append(q)
        # a question logged more than once (several subjects) gets the mean of its rows
        self.value = {p: np.mean(v, axis=0) for p, v in acc.items()}

    def __call__(self, prompts: list[str], completions: list[str], **kwargs: Any) -> list[float | None]:
        out: list[float | None] = []
        for p, c in zip(prompts, completions):
            v = self.value.get(p)
            out.append(None if v is None or c not in LABELS else float(v[LABELS.index(c)]))
        return out


@dataclass
class EncoderRouterConfig:
    """How the encoder router trains (plain fields: a Hydra mapping builds it)."""

    max_length: int = 128
    """Tokens per prompt (MMLU questions with their options; long passages are cut)."""
    lora_r: int = 8
    """LoRA rank."""
    supervised: dict[str, Any] = field(default_factory=lambda: {"epochs": 1, "batch_size": 32, "max_steps": 200,
                                                                "learning_rate": 1e-3})
    """rlrouter.intent.supervised.SupervisedConfig fields."""
    ppo: dict[str, Any] = field(default_factory=lambda: {"iterations": 8, "batch_size": 64, "minibatch_size": 16,
                                                         "update_epochs": 2, "learning_rate": 1e-5})
    """rlrouter.intent.ppo.IntentPPOConfig fields (reward_metric is set to the routing reward); iterations 0 skips PPO."""
    lam: float = 0.1
    """Quality points one strong call must buy, relative to the strong candidate's mean cost (PPO reward)."""
    val_fraction: float = 0.1
    """Share of training prompts held out for early stopping and PPO validation."""
    balance: bool = True
    """Resample the supervised set to equal label counts (the "strong" label is the rarer one)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 0.5:
            raise ValueError(f"encoder.val_fraction: must be in (0, 0.5), got {self.val_fraction}")
        if self.lam < 0:
            raise ValueError(f"encoder.lam: must be >= 0, got {self.lam}")


def label_of(scores: np.ndarray, weak: int, strong: int) -> list[str]:
    """'strong' where the strong candidate scored higher, else 'weak' (RouteLLM's binarised label)."""
    return ["strong" if s > w else "weak" for w, s in zip(scores[:, weak], scores[:, strong])]


def train_encoder_router(train: EvalSet, weak: int, strong: int, cfg: EncoderRouterConfig, seed: int = 0,
                         out_dir: str | Path | None = None) -> tuple[Any, dict[str, Any]]:
    """Train MiniLM + LoRA supervised, then PPO; returns (IntentModel, summary). Saved under ``out_dir``."""
    import torch

    from rlrouter.intent.data import IntentExample
    from rlrouter.intent.model import EncoderConfig, IntentModel
    from rlrouter.intent.ppo import IntentPPOConfig, train_ppo
    from rlrouter.intent.supervised import SupervisedConfig, train_supervised

    rng = np.random.default_rng(seed)
    labels = label_of(train.scores, weak, strong)
    examples = [IntentExample(text=p, label=y, source=s) for p, y, s in zip(train.prompts, labels, train.sources)]
    order = rng.permutation(len(examples))
    n_val = max(1, int(round(cfg.val_fraction * len(examples))))
    val = [examples[i] for i in order[:n_val]]
    tr = [examples[i] for i in order[n_val:]]
    sup_set = tr
    if cfg.balance:
        by = {y: [e for e in tr if e.label == y] for y in LABELS}
        k = max(len(v) for v in by.values())
        sup_set = [e for v in by.values() if v for e in (v + [v[i] for i in rng.integers(0, len(v), k - len(v))])]
        sup_set = [sup_set[i] for i in rng.permutation(len(sup_set))]
    torch.manual_seed(seed)
    model = IntentModel(list(LABELS), EncoderConfig(max_length=cfg.max_length, lora_r=cfg.lora_r))
    sup = train_supervised(model, sup_set, val, SupervisedConfig(**cfg.supervised), seed=seed)
    summary: dict[str, Any] = {"config": asdict(cfg), "train": len(tr), "val": len(val),
                               "strong_label_share": float(np.mean([e.label == "strong" for e in tr])),
                               "supervised": {"best_step": sup.best_step, "best_val_loss": sup.best_val_loss,
                                              "steps": sup.steps}}
    if int(cfg.ppo.get("iterations", 0)) > 0:
        reward = RoutingReward(train, weak, strong, cfg.lam)
        ppo = train_ppo(model, tr, val, reward, IntentPPOConfig(**{**cfg.ppo, "reward_metric": "routing_reward"}), seed=seed)
        summary["ppo"] = {"val_start": ppo.val_start, "val_end": ppo.val_end, "best_iteration": ppo.best_iteration}
    model.eval()
    if out_dir is not None:
        model.save(out_dir, "rl" if "ppo" in summary else "supervised", summary)
    return model, summary


class EncoderRouter(ThresholdRouter):
    """P("strong") of a MiniLM + LoRA classifier: trained in ``fit`` on the split, or loaded."""

    def __init__(self, name: str, weak: int, strong: int, cfg: EncoderRouterConfig | None, checkpoint: str | None,
                 seed: int = 0, work_dir: Path | None = None, batch_size: int = 64):
        super().__init__(name, weak, strong, threshold=0.5)
        self.cfg, self.checkpoint, self.seed, self.work_dir = cfg, checkpoint, seed, work_dir
        self.batch_size = batch_size
        self.model = None
        self.summary: dict[str, Any] = {}

    def fit(self, train: EvalSet) -> None:
        if self.checkpoint:
            from rlrouter.intent.model import IntentModel

            self.model = IntentModel.from_dir(self.checkpoint, trainable=False).eval()
            if list(self.model.labels) != list(LABELS):
                raise ValueError(f"encoder.checkpoint: labels {self.model.labels}, expected {list(LABELS)}")
            return
        out = None if self.work_dir is None else Path(self.work_dir) / f"{self.name}_checkpoint"
        self.model, self.summary = train_encoder_router(train, self.weak, self.strong, self.cfg or EncoderRouterConfig(),
                                                        seed=self.seed, out_dir=out)

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        import torch

        if self.model is None:
            raise RuntimeError(f"{self.name}: fit() before strong_score()")
        out = []
        with torch.inference_mode():
            for i in range(0, len(prompts), self.batch_size):
                logits = self.model(**self.model.tokenize(prompts[i:i + self.batch_size])).logits.float()
                out.append(torch.softmax(logits, dim=-1)[:, LABELS.index("strong")].numpy())
        return np.concatenate(out) if out else np.zeros(0)


@register_router("encoder")
def _build_encoder(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    """``checkpoint``: a saved encoder router; else trained on the split with ``train`` (EncoderRouterConfig)."""
    checkpoint = cfg.pop("checkpoint", None)
    train_cfg = EncoderRouterConfig(**dict(cfg.pop("train", None) or {}))
    if cfg:
        raise ValueError(f"router type 'encoder': unknown fields {sorted(cfg)}")
    return EncoderRouter("encoder", ctx.weak, ctx.strong, train_cfg, checkpoint, seed=ctx.seed, work_dir=ctx.work_dir)
