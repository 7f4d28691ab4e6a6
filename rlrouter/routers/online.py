"""A router trained offline that keeps learning where it is deployed, from the feedback on its own calls.

Offline routers carry little signal to subjects they never saw (docs/evaluation.md, the lockbox tables),
but a deployed router is told, call by call, whether the candidate it chose answered well. ``FeedbackRouter``
turns that stream into routing:

* **prior** (offline): a frozen threshold router (``base``: mf, knn, a probe, ...) scores each prompt;
  per candidate, a logistic fit on the training split maps that score to P(candidate answers well).
  That is the router before any feedback.
* **online**: per candidate ``a`` and context group ``g`` (the request's context key: a subject, a tenant,
  an app; or a cluster of the prompt's embedding), one offset ``b[a, g]`` shifts the prior's logit,
  with a Gaussian prior N(0, prior_sd^2). Each feedback event (the score of the candidate that was called,
  in [0, 1]) refits that one offset by Newton's method (a 1-D Laplace posterior).
* **routing**: Thompson sampling: the strong-minus-weak gain is computed from offsets drawn from their
  posteriors, and a prompt goes to the strong candidate when its gain is in the top ``share`` of the
  recent gains (a running quantile, so the strong-call share holds while the scores move).

Only the called candidate's outcome is seen (bandit feedback): the selection depends on the prompt's
score and the group's posterior alone, so the offsets stay unbiased given those. ``replay`` runs the test
split as such a stream (a seeded shuffle, the order a deployment would see mixed traffic) and keeps the
score each prompt got on arrival (posterior means, before its own feedback) for the threshold sweep.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rlrouter.routers.baselines import _no_leftovers
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, ThresholdRouter, build_router, register_router
from rlrouter.routers.saved import read_state, write_state

CONTEXTS = ("source", "cluster", "none")


def _sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30.0, 30.0)))


def fit_logistic_1d(z: np.ndarray, y: np.ndarray, l2: float = 1e-3, steps: int = 25) -> tuple[float, float]:
    """(c0, c1) maximising sum y log s + (1 - y) log(1 - s), s = sigmoid(c0 + c1 z), with a small ridge on
    both: Newton's method (IRLS). ``y`` may be fractional (a judge's grade / 10)."""
    x = np.stack([np.ones_like(z), z], axis=1)  # (N, 2)
    w = np.zeros(2)
    for _ in range(steps):
        p = _sigmoid(x @ w)
        grad = x.T @ (y - p) - l2 * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w += step
        if np.abs(step).max() < 1e-8:
            break
    return float(w[0]), float(w[1])


@dataclass
class OffsetPosterior:
    """Laplace posterior of one logit offset ``b`` from (prior logit, outcome) pairs; prior N(0, sd^2)."""

    prior_sd: float
    offsets: list[float] = field(default_factory=list)
    outcomes: list[float] = field(default_factory=list)
    mean: float = 0.0
    var: float = 0.0

    def __post_init__(self) -> None:
        if self.prior_sd <= 0:
            raise ValueError(f"feedback.prior_sd: must be > 0, got {self.prior_sd}")
        self.var = self.prior_sd ** 2

    def update(self, offset: float, outcome: float, steps: int = 8) -> None:
        self.offsets.append(float(offset))
        self.outcomes.append(float(outcome))
        o, y = np.asarray(self.offsets), np.asarray(self.outcomes)
        b, prec0 = self.mean, 1.0 / self.prior_sd ** 2
        for _ in range(steps):
            p = _sigmoid(o + b)
            grad = float((y - p).sum()) - prec0 * b
            hess = float((p * (1 - p)).sum()) + prec0
            b += grad / hess
            if abs(grad / hess) < 1e-9:
                break
        p = _sigmoid(o + b)
        self.mean, self.var = b, 1.0 / (float((p * (1 - p)).sum()) + prec0)

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.normal(self.mean, np.sqrt(self.var)))


class FeedbackRouter(ThresholdRouter):
    """An offline prior plus per-context offsets learned from bandit feedback (module docstring)."""

    online = True

    def __init__(self, name: str, weak: int, strong: int, base: ThresholdRouter | None, context: str = "source",
                 prior_sd: float = 1.0, share: float = 0.5, window: int = 200, explore: bool = True,
                 clusters: int = 16, embed: Callable[[list[str]], np.ndarray] | None = None, seed: int = 0):
        if context not in CONTEXTS:
            raise ValueError(f"feedback.context: expected one of {CONTEXTS}, got '{context}'")
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"feedback.share: must be in [0, 1], got {share}")
        if window < 1 or clusters < 1:
            raise ValueError(f"feedback.window / feedback.clusters: must be >= 1, got {window} / {clusters}")
        if context == "cluster" and embed is None:
            raise ValueError("feedback.context: 'cluster' needs an embedder")
        super().__init__(name, weak, strong, threshold=0.0)
        self.base, self.context, self.prior_sd, self.share = base, context, float(prior_sd), float(share)
        self.window, self.explore, self.n_clusters, self.embed, self.seed = window, explore, clusters, embed, seed
        self.coef: dict[int, tuple[float, float]] = {}  # candidate -> (c0, c1) of its prior
        self.z_mean, self.z_sd = 0.0, 1.0
        self.centroids: np.ndarray | None = None
        self.posteriors: dict[tuple[int, str], OffsetPosterior] = {}
        self.prior_gains: np.ndarray = np.zeros(0)
        self.arrival_scores: np.ndarray | None = None
        self.stream_order: np.ndarray | None = None

    # ---------------------------------------------------------------- offline prior

    def _z(self, prompts: list[str]) -> np.ndarray:
        if self.base is None:
            return np.zeros(len(prompts))
        return (np.asarray(self.base.strong_score(prompts), dtype=np.float64) - self.z_mean) / self.z_sd

    def fit(self, train: EvalSet) -> None:
        if self.base is not None:
            self.base.fit(train)
            raw = np.asarray(self.base.strong_score(train.prompts), dtype=np.float64)
            self.z_mean, self.z_sd = float(raw.mean()), float(raw.std()) or 1.0
        z = self._z(train.prompts)
        for arm in (self.weak, self.strong):
            y = train.scores[:, arm]
            self.coef[arm] = fit_logistic_1d(z, y) if self.base is not None else (float(np.log(
                np.clip(y.mean(), 1e-3, 1 - 1e-3) / np.clip(1 - y.mean(), 1e-3, 1))), 0.0)
        if self.context == "cluster":
            self.centroids = _kmeans(self._unit(train.prompts), self.n_clusters, self.seed)
        self.posteriors = {}
        logits = self._prior_logits(z)
        self.prior_gains = _sigmoid(logits[:, 1]) - _sigmoid(logits[:, 0])
        self.threshold = float(np.quantile(self.prior_gains, 1.0 - self.share)) if self.share > 0 else np.inf

    def _prior_logits(self, z: np.ndarray) -> np.ndarray:
        """(N, 2) prior logits of [weak, strong] answering well."""
        return np.stack([self.coef[a][0] + self.coef[a][1] * z for a in (self.weak, self.strong)], axis=1)

    # ---------------------------------------------------------------- context groups

    def _unit(self, prompts: list[str]) -> np.ndarray:
        e = np.asarray(self.embed(prompts), dtype=np.float64)  # type: ignore[misc]
        return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

    def groups(self, prompts: list[str], sources: Sequence[str] | None = None) -> list[str]:
        """The context key of each prompt: its source (subject, tenant, app), its embedding's nearest
        training cluster, or one group for all."""
        if self.context == "none":
            return ["all"] * len(prompts)
        if self.context == "cluster":
            if self.centroids is None:
                raise RuntimeError(f"{self.name}: fit() before routing")
            return [f"cluster{int(c)}" for c in np.argmax(self._unit(prompts) @ self.centroids.T, axis=1)]
        if sources is None:
            raise ValueError(f"{self.name}: context 'source' needs each prompt's source (the request's context key)")
        return [str(s) for s in sources]

    # ---------------------------------------------------------------- scoring and learning

    def _offset(self, arm: int, group: str, rng: np.random.Generator | None) -> float:
        post = self.posteriors.get((arm, group))
        if post is None:
            return float(rng.normal(0.0, self.prior_sd)) if rng is not None else 0.0
        return post.sample(rng) if rng is not None else post.mean

    def gain(self, logits: np.ndarray, group: str, rng: np.random.Generator | None = None) -> float:
        """P(strong answers well) - P(weak answers well) for one prompt (posterior means, or a Thompson
        draw when ``rng`` is given)."""
        lw = logits[0] + self._offset(self.weak, group, rng)
        ls = logits[1] + self._offset(self.strong, group, rng)
        return float(_sigmoid(ls) - _sigmoid(lw))

    def strong_score(self, prompts: list[str], sources: Sequence[str] | None = None) -> np.ndarray:
        if not self.coef:
            raise RuntimeError(f"{self.name}: fit() before strong_score()")
        logits = self._prior_logits(self._z(prompts))
        if self.context == "source" and sources is None:
            return _sigmoid(logits[:, 1]) - _sigmoid(logits[:, 0])  # no context key: the prior alone
        return np.array([self.gain(lg, g) for lg, g in zip(logits, self.groups(prompts, sources))])

    def feedback(self, logits: np.ndarray, group: str, arm: int, outcome: float) -> None:
        """Learn from one call: candidate ``arm`` answered ``outcome`` (in [0, 1]) on a prompt of ``group``."""
        if arm not in (self.weak, self.strong):
            return
        post = self.posteriors.setdefault((arm, group), OffsetPosterior(self.prior_sd))
        post.update(logits[0 if arm == self.weak else 1], float(outcome))

    def replay(self, test: EvalSet) -> np.ndarray:
        """Route the test split as a stream (seeded shuffle), learning from each call's outcome before the
        next prompt arrives. Keeps each prompt's arrival score (posterior means) in ``arrival_scores``."""
        rng = np.random.default_rng(self.seed)
        n = len(test)
        order = rng.permutation(n)
        logits = self._prior_logits(self._z(test.prompts))  # (N, 2): the frozen prior
        groups = self.groups(test.prompts, test.sources)
        recent = deque(self.prior_gains[-self.window:].tolist(), maxlen=self.window)
        decisions = np.empty(n, dtype=np.int64)
        arrival = np.empty(n)
        for i in order:
            arrival[i] = self.gain(logits[i], groups[i])
            g = self.gain(logits[i], groups[i], rng) if self.explore else arrival[i]
            cut = float(np.quantile(np.asarray(recent), 1.0 - self.share)) if self.share > 0 else np.inf
            arm = self.strong if g >= cut else self.weak
            recent.append(g)
            decisions[i] = arm
            self.feedback(logits[i], groups[i], arm, float(test.scores[i, arm]))
        self.arrival_scores, self.stream_order = arrival, order
        return decisions

    # ---------------------------------------------------------------- serving: one request at a time

    def route_one(self, prompt: str, group: str, threshold: float,
                  rng: np.random.Generator | None = None) -> tuple[int, float, np.ndarray]:
        """(candidate, gain, prior logits) for one request of context ``group``: strong when the gain (a
        Thompson draw when ``rng`` is given and ``explore`` is on, else the posterior mean) reaches
        ``threshold``. The caller keeps the logits for the feedback."""
        logits = self._prior_logits(self._z([prompt]))[0]
        if self.context == "cluster":
            group = self.groups([prompt])[0]
        elif self.context == "none":
            group = "all"
        g = self.gain(logits, group, rng if self.explore else None)
        return (self.strong if g >= threshold else self.weak), g, logits

    def posteriors_to_dict(self) -> dict[str, Any]:
        return {f"{arm}|{group}": {"offsets": p.offsets, "outcomes": p.outcomes, "mean": p.mean, "var": p.var}
                for (arm, group), p in self.posteriors.items()}

    def posteriors_from_dict(self, d: dict[str, Any]) -> None:
        self.posteriors = {}
        for key, v in d.items():
            arm, _, group = key.partition("|")
            p = OffsetPosterior(self.prior_sd, offsets=list(v["offsets"]), outcomes=list(v["outcomes"]))
            p.mean, p.var = float(v["mean"]), float(v["var"])
            self.posteriors[(int(arm), group)] = p

    def save_state(self, folder: Path) -> dict[str, Any]:
        """The fitted prior (per-candidate logistic coefficients, score scaling, clusters), what was learned
        online so far, and the base router's own state under ``base/``."""
        if not self.coef:
            raise ValueError(f"{self.name}: fit() before saving")
        np.savez(folder / "feedback.npz", prior_gains=self.prior_gains,
                 centroids=self.centroids if self.centroids is not None else np.zeros((0, 0)))
        return {"coef": {str(a): list(c) for a, c in self.coef.items()}, "z_mean": self.z_mean, "z_sd": self.z_sd,
                "posteriors": self.posteriors_to_dict(),
                "base": write_state(self.base, folder / "base") if self.base is not None else None}

    def load_state(self, folder: Path, state: dict[str, Any]) -> None:
        self.coef = {int(a): (float(c[0]), float(c[1])) for a, c in state["coef"].items()}
        self.z_mean, self.z_sd = float(state["z_mean"]), float(state["z_sd"])
        with np.load(folder / "feedback.npz") as z:
            self.prior_gains = z["prior_gains"]
            self.centroids = z["centroids"] if z["centroids"].size else None
        self.posteriors_from_dict(state.get("posteriors") or {})
        if self.base is not None:
            read_state(self.base, folder / "base", state["base"])

    def objective(self, scores: np.ndarray) -> np.ndarray:
        """The quantity the online regret is measured in: the candidates' logged quality."""
        return scores

    def report(self) -> dict[str, Any]:
        n_events = {f"{'strong' if a == self.strong else 'weak'}": sum(len(p.outcomes) for (b, _), p in
                                                                       self.posteriors.items() if b == a)
                    for a in (self.weak, self.strong)}
        return {"context": self.context, "groups": len({g for _, g in self.posteriors}), "feedback_events": n_events,
                "prior_sd": self.prior_sd, "share": self.share}


def _kmeans(x: np.ndarray, k: int, seed: int, iters: int = 25) -> np.ndarray:
    """(k, D) unit centroids of spherical k-means (cosine) on unit rows ``x``."""
    rng = np.random.default_rng(seed)
    k = min(k, len(x))
    c = x[rng.choice(len(x), size=k, replace=False)]
    for _ in range(iters):
        assign = np.argmax(x @ c.T, axis=1)
        new = np.stack([x[assign == j].sum(axis=0) if (assign == j).any() else c[j] for j in range(k)])
        new /= np.maximum(np.linalg.norm(new, axis=1, keepdims=True), 1e-12)
        if np.allclose(new, c):
            break
        c = new
    return c


@register_router("feedback")
def _build_feedback(cfg: dict[str, Any], ctx: RouterContext) -> FeedbackRouter:
    """``base``: the offline router config (any threshold router type; null for none), ``context``:
    source | cluster | none, ``prior_sd``, ``share`` (target strong-call share), ``window``, ``explore``,
    ``clusters``."""
    base_cfg = cfg.pop("base", {"type": "mf"})
    base = None
    if base_cfg:
        base = build_router(dict(base_cfg), ctx)
        if not isinstance(base, ThresholdRouter):
            raise ValueError(f"feedback.base: '{base_cfg.get('type')}' is not a threshold router")
    kw = dict(context=str(cfg.pop("context", "source")), prior_sd=float(cfg.pop("prior_sd", 1.0)),
              share=float(cfg.pop("share", 0.5)), window=int(cfg.pop("window", 200)),
              explore=bool(cfg.pop("explore", True)), clusters=int(cfg.pop("clusters", 16)))
    _no_leftovers(cfg, "feedback")
    return FeedbackRouter("feedback", ctx.weak, ctx.strong, base, embed=ctx.embed, seed=ctx.seed, **kw)
