"""Baselines every router is compared with, on the same split: fixed, random, oracle, kNN and MF.

* ``always`` (always-strong / always-weak): one candidate for every prompt.
* ``random``: strong with probability p. As a threshold router its score is a uniform number hashed
  from the prompt, so its sweep traces the random line; "random at matched cost" in the report is the
  expectation of that line at a router's own cost (``metrics.random_quality_at_cost``).
* subject oracle (``subject_gain_scores``): each subject's true mean gain; an upper bound for routers
  that only know a prompt's subject.
* oracle (``oracle_decisions``): per prompt, the cheapest candidate with the best logged score. It
  reads the outcomes, so it is an upper bound, not a router.
* ``knn``: MiniLM embeddings; a prompt's score is the mean gain (score_strong - score_weak) of its k
  most similar training prompts (cosine). RouterBench's kNN router, thresholded.
* ``mf``: RouteLLM's matrix-factorisation router (Ong et al. 2024, Sec. 4.1.2): a candidate embedding
  v_m and a projected prompt embedding give s(m, q) = w^T (v_m * W e_q); P(strong beats weak) =
  sigmoid(s(strong, q) - s(weak, q)), trained with binary cross-entropy on pairwise outcomes of the
  training split. RouteLLM embeds with OpenAI's text-embedding-3-small; here MiniLM (offline).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np

from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, ThresholdRouter, register_router


def oracle_decisions(scores: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """(N,) the cheapest candidate among those with the best logged score on each prompt."""
    scores = np.asarray(scores, dtype=np.float64)
    best = scores.max(axis=1, keepdims=True)
    masked = np.where(scores >= best, costs, np.inf)  # (N, M)
    return masked.argmin(axis=1)


def oracle_curve(scores: np.ndarray, costs: np.ndarray, weak: int, strong: int,
                 shares: np.ndarray) -> np.ndarray:
    """Best achievable quality at each strong-call share (RouteLLM's ``get_optimal_accuracy``)."""
    gain = scores[:, strong] - scores[:, weak]  # (N,)
    order = np.argsort(-gain, kind="stable")
    base = scores[:, weak].sum()
    cum = np.concatenate([[0.0], np.cumsum(np.maximum(gain[order], 0.0))])
    k = np.floor(np.asarray(shares) * len(gain)).astype(int)
    return (base + cum[k]) / len(gain)


def subject_gain_scores(sources: list[str], scores: np.ndarray, weak: int, strong: int) -> np.ndarray:
    """(N,) each prompt's score = its subject's (source's) mean strong-minus-weak gain on these outcomes.

    As a threshold router this is the subject oracle: the best a router can do that knows only which
    subject a prompt is from (read from the outcomes it is scored on, like the oracle), routing at random
    within a subject. It tells how much of a target needs signal below the subject level.
    """
    gain = np.asarray(scores, dtype=np.float64)[:, strong] - np.asarray(scores, dtype=np.float64)[:, weak]
    src = np.asarray(sources)
    out = np.zeros(len(gain))
    for s in np.unique(src):
        rows = src == s
        out[rows] = gain[rows].mean()
    return out


class FixedRouter(Router):
    def __init__(self, name: str, index: int):
        self.name = name
        self.index = index

    def decide(self, prompts: list[str]) -> np.ndarray:
        return np.full(len(prompts), self.index, dtype=np.int64)


def _hash_uniform(prompt: str, seed: int) -> float:
    h = hashlib.sha1(f"{seed}:{prompt}".encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


class RandomRouter(ThresholdRouter):
    """Strong with probability ``p_strong``: the score is uniform on [0, 1), hashed from the prompt, so
    the same prompt always gets the same decision whatever the batch order."""

    def __init__(self, name: str, weak: int, strong: int, p_strong: float = 0.5, seed: int = 0):
        if not 0.0 <= p_strong <= 1.0:
            raise ValueError(f"random.p_strong: must be in [0, 1], got {p_strong}")
        super().__init__(name, weak, strong, threshold=1.0 - p_strong)
        self.seed = seed

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        return np.array([_hash_uniform(p, self.seed) for p in prompts])


class KNNRouter(ThresholdRouter):
    """Mean strong-minus-weak gain of the k nearest training prompts (cosine on unit embeddings)."""

    def __init__(self, name: str, weak: int, strong: int, embed, k: int = 20, chunk: int = 1024):
        if k < 1:
            raise ValueError(f"knn.k: must be >= 1, got {k}")
        super().__init__(name, weak, strong, threshold=0.0)
        self.embed = embed
        self.k = k
        self.chunk = chunk
        self._keys: np.ndarray | None = None
        self._gain: np.ndarray | None = None

    def fit(self, train: EvalSet) -> None:
        self._keys = np.asarray(self.embed(train.prompts), dtype=np.float32)  # (N_tr, D)
        self._gain = train.scores[:, self.strong] - train.scores[:, self.weak]  # (N_tr,)

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        if self._keys is None or self._gain is None:
            raise RuntimeError(f"{self.name}: fit() before strong_score()")
        q = np.asarray(self.embed(prompts), dtype=np.float32)  # (N, D)
        k = min(self.k, len(self._keys))
        out = np.empty(len(q))
        for start in range(0, len(q), self.chunk):
            sims = q[start:start + self.chunk] @ self._keys.T  # (B, N_tr)
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k]  # (B, k)
            out[start:start + len(sims)] = self._gain[top].mean(axis=1)
        return out


def train_bce(model, logits_of: Callable[[Any], Any], targets, epochs: int, batch_size: int, lr: float,
              weight_decay: float, gen, decoupled: bool = False) -> list[float]:
    """Minibatch Adam (AdamW's decoupled weight decay when ``decoupled``) on binary cross-entropy:
    ``logits_of(idx)`` gives the model's logits for the rows ``idx`` of ``targets`` (soft targets in [0, 1]
    allowed). Returns the mean loss of each epoch; the model is left in eval mode. The MF routers' one
    training loop (two candidates here, N in ``pool_routers``)."""
    import torch

    opt = (torch.optim.AdamW if decoupled else torch.optim.Adam)(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    losses = []
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(targets), generator=gen)
        total = 0.0
        for start in range(0, len(perm), batch_size):
            i = perm[start:start + batch_size]
            loss = loss_fn(logits_of(i), targets[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(i)
        losses.append(total / len(perm))
    model.eval()
    return losses


class MFRouter(ThresholdRouter):
    """RouteLLM's matrix-factorisation router on MiniLM prompt embeddings (see module docstring)."""

    def __init__(self, name: str, weak: int, strong: int, embed, num_candidates: int, dim: int = 128,
                 epochs: int = 30, lr: float = 1e-3, weight_decay: float = 1e-5, batch_size: int = 256,
                 ties: str = "half", seed: int = 0):
        if ties not in ("half", "drop"):
            raise ValueError(f"mf.ties: expected 'half' or 'drop', got '{ties}'")
        for f, v in (("dim", dim), ("epochs", epochs), ("batch_size", batch_size)):
            if v < 1:
                raise ValueError(f"mf.{f}: must be >= 1, got {v}")
        super().__init__(name, weak, strong, threshold=0.5)
        self.embed = embed
        self.num_candidates = num_candidates
        self.dim, self.epochs, self.lr, self.wd, self.batch_size = dim, epochs, lr, weight_decay, batch_size
        self.ties = ties
        self.seed = seed
        self.model = None
        self.train_loss: list[float] = []

    def _build(self, text_dim: int):
        import torch
        from torch import nn

        class MFModel(nn.Module):
            def __init__(self, m: int, text_dim: int, dim: int):
                super().__init__()
                self.P = nn.Embedding(m, dim)
                self.text_proj = nn.Linear(text_dim, dim, bias=False)
                self.classifier = nn.Linear(dim, 1, bias=False)

            def score(self, e: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
                v = nn.functional.normalize(self.P(m), dim=-1)  # (B, dim)
                return self.classifier(v * self.text_proj(e)).squeeze(-1)  # (B,)

            def forward(self, e: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
                return self.score(e, a) - self.score(e, b)  # (B,) logit of P(a beats b)

        return MFModel(self.num_candidates, text_dim, self.dim)

    def pairs(self, train: EvalSet) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(row, a, b, target) for every prompt and candidate pair a < b; target = P(a beats b)."""
        rows, a_s, b_s, ys = [], [], [], []
        m = train.scores.shape[1]
        for a in range(m):
            for b in range(a + 1, m):
                diff = train.scores[:, a] - train.scores[:, b]
                y = np.where(diff > 0, 1.0, np.where(diff < 0, 0.0, 0.5))
                keep = np.ones(len(y), bool) if self.ties == "half" else (diff != 0)
                idx = np.nonzero(keep)[0]
                rows.append(idx)
                a_s.append(np.full(len(idx), a))
                b_s.append(np.full(len(idx), b))
                ys.append(y[idx])
        return (np.concatenate(rows), np.concatenate(a_s), np.concatenate(b_s), np.concatenate(ys))

    def fit(self, train: EvalSet) -> None:
        import torch

        emb = torch.from_numpy(np.asarray(self.embed(train.prompts), dtype=np.float32))  # (N_tr, D)
        rows, a, b, y = self.pairs(train)
        if len(rows) == 0:
            raise ValueError(f"{self.name}: no training pairs (every outcome tied and ties='drop')")
        gen = torch.Generator().manual_seed(self.seed)
        torch.manual_seed(self.seed)
        # the model is tiny: one thread beats intra-op parallelism, which only oversubscribes shared cores
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self._train(emb, rows, a, b, y, gen)
        finally:
            torch.set_num_threads(threads)

    def _train(self, emb, rows, a, b, y, gen) -> None:
        import torch

        self.model = self._build(emb.shape[1])
        rows_t, a_t, b_t = (torch.from_numpy(x).long() for x in (rows, a, b))
        self.train_loss = train_bce(self.model, lambda i: self.model(emb[rows_t[i]], a_t[i], b_t[i]),
                                    torch.from_numpy(y).float(), self.epochs, self.batch_size, self.lr, self.wd, gen)

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        import torch

        if self.model is None:
            raise RuntimeError(f"{self.name}: fit() before strong_score()")
        e = torch.from_numpy(np.asarray(self.embed(prompts), dtype=np.float32))
        n = len(prompts)
        with torch.no_grad():
            logit = self.model(e, torch.full((n,), self.strong), torch.full((n,), self.weak))
        return torch.sigmoid(logit).numpy().astype(np.float64)


# ---------------------------------------------------------------- registry entries


def _candidate(cfg: dict[str, Any], ctx: RouterContext, key: str = "candidate") -> int:
    return ctx.index(cfg.pop(key), key)


def _no_leftovers(cfg: dict[str, Any], type_name: str) -> None:
    if cfg:
        raise ValueError(f"router type '{type_name}': unknown fields {sorted(cfg)}")


@register_router("always")
def _build_always(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    index = _candidate(cfg, ctx)
    _no_leftovers(cfg, "always")
    return FixedRouter("always", index)


@register_router("random")
def _build_random(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    p = float(cfg.pop("p_strong", 0.5))
    seed = int(cfg.pop("seed", ctx.seed))
    _no_leftovers(cfg, "random")
    return RandomRouter("random", ctx.weak, ctx.strong, p_strong=p, seed=seed)


@register_router("knn")
def _build_knn(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    k = int(cfg.pop("k", 20))
    _no_leftovers(cfg, "knn")
    return KNNRouter("knn", ctx.weak, ctx.strong, ctx.embed, k=k)


@register_router("mf")
def _build_mf(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    kw = {k: cfg.pop(k) for k in ("dim", "epochs", "lr", "weight_decay", "batch_size", "ties") if k in cfg}
    _no_leftovers(cfg, "mf")
    return MFRouter("mf", ctx.weak, ctx.strong, ctx.embed, num_candidates=len(ctx.candidates), seed=ctx.seed, **kw)
