"""Routers over a pool of N candidates: each predicts a quality (and a cost) per prompt and candidate.

Every router here yields ``q_hat`` (N, M), its predicted score of each candidate on each prompt, and
``c_hat`` (N, M), its predicted cost, and routes by willingness to pay (``rlrouter.routers.wtp``). A router
that reads replies (the cascade) makes its own settings instead. The rules:

* ``per_task``: each task's mean score and cost per candidate on train (the rule "the best model for this
  task at this price"). It reads the task label (``eval_name``), which a live query may not carry.
* ``knn`` (RouterBench's kNN router, Hu et al. 2024, Sec. 5.1; ``routers/knn_router.py``): the unweighted
  mean score of each candidate on the k most similar training questions (cosine on MiniLM embeddings). Its
  cost is the mean cost of those neighbours (``cost: neighbours``) or, as RouterBench prices it, each
  candidate's mean cost on train whatever the prompt (``cost: mean``).
* ``mlp`` (RouterBench's MLP router, ``routers/mlp_router.py``): one multi-layer perceptron regressor a
  candidate (scikit-learn's ``MLPRegressor``, ReLU, Adam, 200 iterations) from the question's embedding to
  its logged score; costs from the k nearest training questions, as kNN's.
* ``mf`` (RouteLLM's matrix factorisation, Ong et al. 2024, Sec. 4.1.2, over N candidates): one learned
  embedding per candidate, ``logit(m, q) = w^T (v_m * W e_q) + b_m``, fit pointwise on each candidate's
  logged correctness; costs as kNN's.
* ``gmtrouter`` (GMTRouter, ``rlrouter.gmt``, trained in-process on the training tables): its heterogeneous
  graph with one llm node per candidate (node features: MiniLM of the candidate's description). The logs have
  no users, so docs/evaluation.md's convention for logs without users holds: every test prompt is routed for
  a user with no history (the cold-start user), the prompt a new, isolated query node (MiniLM features). In
  training, every prompt is an anonymous user of one turn in which every candidate answered and was rated by
  its logged score (response node: the score, bound to the candidate). The loss is the pointwise one with
  every target scored on the cold path (``cold_frac`` 1), the checkpoint picked by the cold path's AUC on
  held-out training prompts, so ``q_hat`` is sigmoid(GMTRouter's score) of each llm node, read off the graph
  of every training outcome, against the query's embedding. Costs as kNN's.
* ``cascade_judge`` (RouterBench's cascading router, ``routers/run_cascading_router.py``): cheapest first,
  a *simulated* judge accepts a reply when it is right, wrong with probability ``error_rate``; it stops at
  the first accepted reply or when the next call would pass the budget, and answers with the last reply it
  bought. The judge reads the test outcomes, so it is a reference for what a judge of that error rate is
  worth, not a router. Its settings are the budgets.
* ``cascade`` (FrugalGPT's LLM cascade, Chen et al. 2023, Sec. 3; RouterBench's cascading router): call
  the candidates of a chain from the cheapest up and stop at the first reply a scorer trusts. The scorer,
  a logistic regression fit on the training tables' logged replies, reads which candidate answered, how
  many of the replies already bought agree with this one (the same option letter, or the same normalised
  text), the reply's length and optionally the question's embedding. Its settings are the trust
  thresholds; a setting pays for every call it made and answers with the reply it trusted most.
* ``escalate``: buy the replies of the cheapest few candidates first (the *probes*), then route by
  willingness to pay with what they show: answer with a probe's reply (no further cost) or pay for one more
  candidate. Per candidate, a logistic regression fit on train predicts its P(correct) from how the probes'
  replies agree (the majority's share, how many distinct answers), for a probe also whether its own reply
  sides with the others, and optionally the question's embedding. Each probe set (none, the cheapest, the
  two cheapest, ...) is swept over willingness to pay; every setting pays for its probes.
* ``selector``: the online bandit selector (``rlrouter.selector``: linear Thompson sampling on the question's
  embedding, one arm a candidate, with its cost bonus), warmed up on train as a bandit and then learning from
  each test prompt's logged outcome, in a seeded stream order, before the next. Its settings are the cost
  weights (how much cheaper candidates are favoured), one fresh selector each.
* ``oracle``: the test outcomes themselves (an upper bound, not a router): at each willingness to pay the
  best achievable route per prompt.
"""

from __future__ import annotations

import abc
import re
from typing import Any, Callable, Sequence

import numpy as np

from rlrouter.routers.adapters import SelectorRouter
from rlrouter.routers.baselines import train_bce
from rlrouter.routers.learned import fit_logistic
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Registry
from rlrouter.routers.wtp import Sweep, nondecreasing_convex_hull, route_by_wtp
from rlrouter.rewards.router_r1 import normalize_answer

Embed = Callable[[list[str]], np.ndarray]


class PoolRouter(abc.ABC):
    """A router over every candidate of the eval set. ``fit`` on train; ``sweep`` the test prompts."""

    name: str = "router"
    reads_outcomes: bool = False  # the oracle: an upper bound, kept out of "best router" comparisons
    reads_replies: bool = False  # the cascades: they read the logged replies (<model>|model_response)

    def cannot_apply(self, train: EvalSet, test: EvalSet) -> str | None:
        """Why this router cannot run on these tables (None when it can): checked before any router runs."""
        if self.reads_replies:
            missing = [n for es, n in ((train, "train"), (test, "test")) if not es.responses]
            if missing:
                return (f"it reads logged replies and the {' and '.join(missing)} tables log none "
                        "(<model>|model_response)")
        return None

    def fit(self, train: EvalSet) -> None:  # noqa: B027 - the oracle and loaded checkpoints learn nothing
        """Learn from the training tables' logged outcomes."""

    @abc.abstractmethod
    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        """(q_hat (N, M), c_hat (N, M)): predicted score and cost of each candidate on each test prompt."""

    def sweep(self, test: EvalSet, ws: np.ndarray) -> Sweep:
        """One setting per willingness to pay ``w``: route by ``argmax(w * q_hat - c_hat)``."""
        q_hat, c_hat = self.predict(test)
        decisions = np.stack([route_by_wtp(q_hat, c_hat, float(w)) for w in ws])  # (S, N)
        return Sweep.from_decisions(decisions, test.scores, test.costs, [f"w={w:.3g}" for w in ws])


class OracleRouter(PoolRouter):
    """The logged outcomes as predictions: the best route per prompt at each willingness to pay."""

    name = "oracle"
    reads_outcomes = True

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        return test.scores, test.costs


class PerTaskRouter(PoolRouter):
    """Each task's mean score and cost per candidate on train; a task train never saw gets the overall means."""

    name = "per_task"

    def __init__(self) -> None:
        self.q: dict[str, np.ndarray] = {}
        self.c: dict[str, np.ndarray] = {}

    def fit(self, train: EvalSet) -> None:
        tasks = np.asarray(train.tasks)
        for t in sorted(set(train.tasks)):
            rows = tasks == t
            self.q[t], self.c[t] = train.scores[rows].mean(axis=0), train.costs[rows].mean(axis=0)
        self.q["*"], self.c["*"] = train.scores.mean(axis=0), train.costs.mean(axis=0)

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        if not self.q:
            raise RuntimeError(f"{self.name}: fit() before predict()")
        q = np.stack([self.q.get(t, self.q["*"]) for t in test.tasks])
        c = np.stack([self.c.get(t, self.c["*"]) for t in test.tasks])
        return q, c


def _top_k(query: np.ndarray, keys: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """(N, k) indices of the k most similar keys (cosine: both sides unit vectors)."""
    k = min(k, len(keys))
    out = np.empty((len(query), k), dtype=np.int64)
    for start in range(0, len(query), chunk):
        sims = query[start:start + chunk] @ keys.T  # (B, N_tr)
        out[start:start + len(sims)] = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    return out


class NeighbourCost:
    """A candidate's predicted cost on a prompt: its mean logged cost on the k most similar training
    questions (a question's price is set by its prompt and its reply lengths, which similar questions
    share). Shared by the routers that predict only quality."""

    def __init__(self, embed: Embed, k: int = 20):
        if k < 1:
            raise ValueError(f"cost_k: must be >= 1, got {k}")
        self.embed, self.k = embed, k
        self.keys: np.ndarray | None = None
        self.costs: np.ndarray | None = None

    def fit(self, train: EvalSet) -> None:
        self.keys = np.asarray(self.embed(train.prompts), dtype=np.float32)  # (N_tr, D)
        self.costs = train.costs

    def __call__(self, prompts: list[str], emb: np.ndarray | None = None) -> np.ndarray:
        if self.keys is None or self.costs is None:
            raise RuntimeError("NeighbourCost: fit() before use")
        q = np.asarray(self.embed(prompts) if emb is None else emb, dtype=np.float32)
        return self.costs[_top_k(q, self.keys, self.k)].mean(axis=1)  # (N, M)


class KNNPoolRouter(PoolRouter):
    """Mean score and mean cost of each candidate on the k nearest training questions."""

    name = "knn"

    def __init__(self, embed: Embed, k: int = 40, cost: str = "neighbours"):
        if k < 1:
            raise ValueError(f"knn.k: must be >= 1, got {k}")
        if cost not in ("neighbours", "mean"):
            raise ValueError(f"knn.cost: 'neighbours' or 'mean', got '{cost}'")
        self.embed, self.k, self.cost = embed, k, cost
        self.keys: np.ndarray | None = None
        self.train: EvalSet | None = None

    def fit(self, train: EvalSet) -> None:
        self.keys = np.asarray(self.embed(train.prompts), dtype=np.float32)
        self.train = train

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        if self.keys is None or self.train is None:
            raise RuntimeError(f"{self.name}: fit() before predict()")
        top = _top_k(np.asarray(self.embed(test.prompts), dtype=np.float32), self.keys, self.k)  # (N, k)
        if self.cost == "mean":
            return self.train.scores[top].mean(axis=1), np.tile(self.train.costs.mean(axis=0), (len(test), 1))
        return self.train.scores[top].mean(axis=1), self.train.costs[top].mean(axis=1)


class MLPPoolRouter(PoolRouter):
    """One ``MLPRegressor`` a candidate, question embedding -> logged score (RouterBench's rule)."""

    name = "mlp"

    def __init__(self, embed: Embed, hidden: Sequence[int] | int = (100,), max_iter: int = 200, alpha: float = 1e-4,
                 cost_k: int = 20, seed: int = 1234):
        hidden = (hidden,) if isinstance(hidden, int) else tuple(int(h) for h in hidden)
        if not hidden or min(hidden) < 1:
            raise ValueError(f"mlp.hidden: layer sizes >= 1, got {hidden}")
        if max_iter < 1:
            raise ValueError(f"mlp.max_iter: must be >= 1, got {max_iter}")
        self.embed, self.hidden, self.max_iter, self.alpha, self.seed = embed, hidden, max_iter, alpha, seed
        self.cost = NeighbourCost(embed, cost_k)
        self.models: list = []

    def fit(self, train: EvalSet) -> None:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPRegressor

        self.cost.fit(train)
        x = np.asarray(self.embed(train.prompts), dtype=np.float32)
        self.models = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # RouterBench's 200 iterations, as published
            for m in range(len(train.names)):
                reg = MLPRegressor(hidden_layer_sizes=self.hidden, max_iter=self.max_iter, alpha=self.alpha,
                                   random_state=self.seed)
                self.models.append(reg.fit(x, train.scores[:, m]))

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        if not self.models:
            raise RuntimeError(f"{self.name}: fit() before predict()")
        emb = np.asarray(self.embed(test.prompts), dtype=np.float32)
        q = np.stack([reg.predict(emb) for reg in self.models], axis=1).astype(np.float64)  # (N, M)
        return q, self.cost(test.prompts, emb)


class MFPoolRouter(PoolRouter):
    """RouteLLM's MF scorer over N candidates, fit pointwise: logit(m, q) = w^T (v_m * W e_q) + b_m."""

    name = "mf"

    def __init__(self, embed: Embed, dim: int = 64, epochs: int = 60, lr: float = 3e-3, weight_decay: float = 1e-4,
                 batch_size: int = 64, cost_k: int = 20, seed: int = 0):
        for f, v in (("dim", dim), ("epochs", epochs), ("batch_size", batch_size)):
            if v < 1:
                raise ValueError(f"mf.{f}: must be >= 1, got {v}")
        self.embed, self.dim, self.seed = embed, dim, seed
        self.epochs, self.lr, self.wd, self.batch_size = epochs, lr, weight_decay, batch_size
        self.cost = NeighbourCost(embed, cost_k)
        self.model = None
        self.train_loss: list[float] = []

    def build(self, text_dim: int, num_candidates: int):
        import torch
        from torch import nn

        dim = self.dim

        class MF(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.P = nn.Parameter(torch.randn(num_candidates, dim) / dim ** 0.5)  # (M, dim) candidates
                self.text_proj = nn.Linear(text_dim, dim, bias=False)
                self.classifier = nn.Linear(dim, 1, bias=False)
                self.bias = nn.Parameter(torch.zeros(num_candidates))  # (M,) each candidate's base rate

            def forward(self, e: torch.Tensor) -> torch.Tensor:
                v = nn.functional.normalize(self.P, dim=-1)  # (M, dim)
                h = self.text_proj(e)  # (B, dim)
                return self.classifier(h[:, None, :] * v[None, :, :]).squeeze(-1) + self.bias  # (B, M)

        return MF()

    def fit(self, train: EvalSet) -> None:
        import torch

        self.cost.fit(train)
        x = torch.from_numpy(np.asarray(self.embed(train.prompts), dtype=np.float32))  # (N_tr, D)
        y = torch.from_numpy(train.scores.astype(np.float32))  # (N_tr, M) soft targets in [0, 1]
        torch.manual_seed(self.seed)
        gen = torch.Generator().manual_seed(self.seed)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny model: intra-op threads only oversubscribe shared cores
        try:
            self.model = self.build(x.shape[1], y.shape[1])
            self.train_loss = train_bce(self.model, lambda i: self.model(x[i]), y, self.epochs, self.batch_size,
                                        self.lr, self.wd, gen, decoupled=True)
        finally:
            torch.set_num_threads(threads)

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        import torch

        if self.model is None:
            raise RuntimeError(f"{self.name}: fit() before predict()")
        emb = np.asarray(self.embed(test.prompts), dtype=np.float32)
        with torch.no_grad():
            q = torch.sigmoid(self.model(torch.from_numpy(emb))).numpy().astype(np.float64)
        return q, self.cost(test.prompts, emb)


class GMTPoolRouter(PoolRouter):
    """GMTRouter over N candidates, trained on the training tables' logged outcomes (module docstring).

    The graph (``rlrouter.gmt.graph.build_graph``): one user and one turn per training prompt, one session and
    response per candidate that answered it (all of them), one llm node per candidate. ``rlrouter.gmt.train.fit``
    trains it with the pointwise loss on the cold path (``cold_frac`` 1, ``select_on: cold``; ``val_frac`` of
    each task's prompts held out for the checkpoint choice); ``GMTRouterScorer.score_batch(user_id=None,
    graph_queries=False)`` scores the test prompts from the whole training graph.

    On RouterBench's 2,205 training prompts x 11 candidates (~53k nodes) an epoch is one message pass, about
    0.8 s on one CPU thread of a 2-core machine shared with another job: the default 100 epochs at most (early
    stopping after ``patience`` epochs without a better cold AUC) fit in 75-80 s.
    """

    name = "gmtrouter"

    def __init__(self, embed: Embed, hidden_dim: int = 32, predictor_hidden: int = 32, epochs: int = 100,
                 lr: float = 3e-3, weight_decay: float = 1e-5, dropout: float = 0.1, target_frac: float = 0.3,
                 val_frac: float = 0.1, eval_every: int = 5, patience: int = 25, threads: int = 1, cost_k: int = 20,
                 seed: int = 0):
        from rlrouter.gmt.model import GMTModelConfig
        from rlrouter.gmt.train import GMTTrainConfig

        if not 0.0 <= val_frac < 1.0:
            raise ValueError(f"{self.name}.val_frac: must be in [0, 1), got {val_frac}")
        if threads < 0:
            raise ValueError(f"{self.name}.threads: must be >= 0 (0: leave torch's), got {threads}")
        try:
            self.model_cfg = GMTModelConfig(hidden_dim=hidden_dim, predictor_hidden=predictor_hidden, num_layers=2,
                                            dropout=dropout)
            self.train_cfg = GMTTrainConfig(epochs=epochs, lr=lr, weight_decay=weight_decay, target_frac=target_frac,
                                            patience=patience, eval_every=eval_every, seed=seed, loss="pointwise",
                                            cold_frac=1.0, select_on="cold")
        except ValueError as e:  # GMTRouter's own checks name the field
            raise ValueError(f"{self.name}.{e}") from None
        self.embed, self.val_frac, self.threads, self.seed = embed, val_frac, threads, seed
        self.cost = NeighbourCost(embed, cost_k)
        self.scorer = None
        self.fit_result = None  # rlrouter.gmt.train.FitResult: best epoch, validation figures, seconds

    def records(self, train: EvalSet) -> list:
        """One GMTRouter record a training prompt (an anonymous user of one turn): every candidate's logged
        score as the rating, mapped onto ``FEEDBACK_RANGE`` (0 -> its low end, 1 -> its high end)."""
        from rlrouter.data.formats import FEEDBACK_RANGE, GMTRecord, Interaction

        lo, hi = FEEDBACK_RANGE
        fb = lo + (hi - lo) * np.clip(train.scores, 0.0, 1.0)  # (N, M)
        return [GMTRecord(user_id=f"prompt-{i}", interactions=[
                    Interaction(query=p, model_used=m, user_feedback=float(fb[i, j]), timestamp=0.0)
                    for j, m in enumerate(train.names)])
                for i, p in enumerate(train.prompts)]

    def held_out(self, train: EvalSet) -> np.ndarray:
        """(N,) bool: the prompts kept out of training to pick the checkpoint, ``val_frac`` of each task."""
        rng = np.random.default_rng(self.seed)
        out = np.zeros(len(train), dtype=bool)
        tasks = np.asarray(train.tasks)
        for t in sorted(set(train.tasks)):
            rows = np.nonzero(tasks == t)[0]
            k = int(round(self.val_frac * len(rows)))
            if 0 < k < len(rows):
                out[rng.choice(rows, size=k, replace=False)] = True
        return out

    def fit(self, train: EvalSet) -> None:
        import torch

        from rlrouter.gmt.graph import build_graph
        from rlrouter.gmt.scorer import GMTRouterScorer
        from rlrouter.gmt.train import Split, fit

        self.cost.fit(train)
        threads = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)  # a small graph: more intra-op threads only oversubscribe
        try:
            graph = build_graph(self.records(train), llms=train.names, embed=self.embed)
            val = torch.from_numpy(self.held_out(train))[graph.user]  # user i is prompt i
            split = Split(train=~val, val=val, test=torch.zeros_like(val))
            self.fit_result = fit(graph, split, self.model_cfg, self.train_cfg)
            self.scorer = GMTRouterScorer(self.fit_result.model, graph, embed=self.embed)  # every training outcome
        finally:
            torch.set_num_threads(threads)

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        import torch

        if self.scorer is None:
            raise RuntimeError(f"{self.name}: fit() before predict()")
        if list(test.names) != self.scorer.llms:
            raise ValueError(f"{self.name}: test candidates {list(test.names)} are not the llm nodes "
                             f"{self.scorer.llms}")
        emb = np.asarray(self.embed(test.prompts), dtype=np.float32)
        threads = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            logits = self.scorer.score_batch(test.prompts, user_id=None, query_x=emb, graph_queries=False)  # (N, M)
        finally:
            torch.set_num_threads(threads)
        q = 1.0 / (1.0 + np.exp(-np.clip(np.asarray(logits, dtype=np.float64), -30, 30)))
        return q, self.cost(test.prompts, emb)


class SelectorPoolRouter(PoolRouter):
    """The online bandit selector over every candidate, one per cost weight (module docstring)."""

    name = "selector"

    def __init__(self, embed: Embed, cost_weights: Sequence[float] = (0.0, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0),
                 config: dict[str, Any] | None = None, seed: int = 0):
        if not cost_weights or min(cost_weights) < 0:
            raise ValueError(f"selector.cost_weights: a non-empty list of numbers >= 0, got {cost_weights}")
        self.embed, self.cost_weights, self.config, self.seed = embed, list(cost_weights), dict(config or {}), seed
        self.train: EvalSet | None = None

    def fit(self, train: EvalSet) -> None:
        self.train = train  # each cost weight's selector warms up on it in sweep(): one fresh bandit a setting

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("the selector learns online: it makes its own settings (sweep)")

    def sweep(self, test: EvalSet, ws: np.ndarray) -> Sweep:
        if self.train is None:
            raise RuntimeError(f"{self.name}: fit() before sweep()")
        costs = dict(zip(self.train.names, self.train.costs.mean(axis=0).tolist()))
        decisions = []
        for weight in self.cost_weights:
            cfg = {"use_contextual": True, **self.config, "cost_awareness": weight > 0, "cost_weight": float(weight),
                   "costs": costs}
            bandit = SelectorRouter(self.name, self.train.names, cfg, self.embed, warmup=True, seed=self.seed,
                                    online=True)
            bandit.fit(self.train)
            decisions.append(bandit.replay(test))
        return Sweep.from_decisions(np.stack(decisions), test.scores, test.costs,
                                    [f"cost_weight={w:g}" for w in self.cost_weights])


# ---------------------------------------------------------------- the cascade: reads replies

_CHOICE = re.compile(r"^\W*([A-J])\b")


def reply_key(reply: str | None) -> str:
    """What two replies must share to agree: the option letter a multiple-choice reply starts with, else the
    SQuAD-normalised text (so two code replies agree only when they are the same text)."""
    if not reply:
        return ""
    m = _CHOICE.match(reply)
    return m.group(1) if m else normalize_answer(reply)


def hull_chain(train: EvalSet) -> list[int]:
    """The candidates worth calling in turn: those on some task's non-decreasing cost-quality hull on train
    (a candidate dearer and worse than another on every task never helps), sorted by mean train cost."""
    keep: set[int] = set()
    tasks = np.asarray(train.tasks)
    for t in sorted(set(train.tasks)):
        rows = tasks == t
        c, q = train.costs[rows].mean(axis=0), train.scores[rows].mean(axis=0)
        hc, hq = nondecreasing_convex_hull(c, q)
        keep.update(j for j in range(len(c)) if any(np.isclose(c[j], hc) & np.isclose(q[j], hq)))
    mean_cost = train.costs.mean(axis=0)
    return sorted(keep, key=lambda j: mean_cost[j])


class JudgeCascadeRouter(PoolRouter):
    """RouterBench's cascading router with its simulated judge (module docstring): reads the test outcomes."""

    name = "cascade_judge"
    reads_outcomes = True

    def __init__(self, error_rate: float = 0.2, budgets: int = 40, seed: int = 0):
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"cascade_judge.error_rate: must be in [0, 1], got {error_rate}")
        if budgets < 2:
            raise ValueError(f"cascade_judge.budgets: must be >= 2, got {budgets}")
        self.error_rate, self.budgets, self.seed = error_rate, budgets, seed
        self.order: list[int] = []

    def fit(self, train: EvalSet) -> None:
        self.order = sorted(range(len(train.names)), key=lambda j: train.costs[:, j].mean())

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("a cascade makes its own settings (sweep)")

    def sweep(self, test: EvalSet, ws: np.ndarray) -> Sweep:
        """One setting per budget (USD a prompt, geometric from the cheapest call to every call bought)."""
        if not self.order:
            raise RuntimeError(f"{self.name}: fit() before sweep()")
        order = np.asarray(self.order)
        costs, right = test.costs[:, order], test.scores[:, order] >= 1.0  # (N, M) in chain order
        flip = np.random.default_rng(self.seed).random(right.shape) < self.error_rate
        accept = right ^ flip  # (N, M) what the judge says of each reply
        n, m = costs.shape
        spent = np.cumsum(costs, axis=1)  # (N, M) paid once the j-th call is bought
        budgets = np.geomspace(costs[:, 0].mean(), spent[:, -1].max(), self.budgets)
        decisions, paid, labels = [], [], []
        for b in budgets:
            # the first call is always bought; a later one only if what is spent so far is under the budget
            affordable = np.concatenate([np.ones((n, 1), bool), spent[:, :-1] < b], axis=1)
            stop_accept = np.where(accept.any(axis=1), accept.argmax(axis=1), m - 1)
            stop_budget = np.where((~affordable).any(axis=1), (~affordable).argmax(axis=1) - 1, m - 1)
            last = np.minimum(stop_accept, stop_budget)  # (N,) the last call bought
            decisions.append(order[last])
            paid.append(spent[np.arange(n), last])
            labels.append(f"budget={b:.3g}")
        return Sweep.from_decisions(np.stack(decisions), test.scores, test.costs, labels, paid=np.stack(paid))


class CascadeRouter(PoolRouter):
    """Cheapest first; stop at the first reply the scorer trusts (see the module docstring)."""

    name = "cascade"
    reads_replies = True

    def __init__(self, embed: Embed, chain: Sequence[str] | str = "hull", features: Sequence[str] = ("agreement",),
                 l2: float = 1.0, thresholds: int = 41):
        unknown = sorted(set(features) - {"agreement", "embedding", "reply_embedding"})
        if unknown:
            raise ValueError(f"{self.name}.features: unknown {unknown} (agreement, embedding, reply_embedding)")
        if thresholds < 2:
            raise ValueError(f"cascade.thresholds: must be >= 2, got {thresholds}")
        if isinstance(chain, str) and chain not in ("hull", "cost"):
            raise ValueError(f"{self.name}.chain: 'hull', 'cost' or a list of candidate names, got '{chain}'")
        self.embed, self.chain_cfg, self.features = embed, chain, tuple(features)
        self.l2, self.thresholds = l2, thresholds
        self.chain: list[int] = []
        self.w: np.ndarray | None = None

    def _chain(self, train: EvalSet) -> list[int]:
        if self.chain_cfg == "hull":
            return hull_chain(train)
        if self.chain_cfg == "cost":
            return sorted(range(len(train.names)), key=lambda j: train.costs[:, j].mean())
        missing = [c for c in self.chain_cfg if c not in train.names]
        if missing or len(self.chain_cfg) < 1:
            raise ValueError(f"cascade.chain: {missing or self.chain_cfg} not among the candidates {train.names}")
        return [train.index(c) for c in self.chain_cfg]

    def _features(self, es: EvalSet) -> list[np.ndarray]:
        """Per chain step j: (N, F) features of candidate chain[j]'s reply given the replies before it."""
        if not es.responses:
            raise ValueError(f"{self.name}: the cascade reads replies; these tables log none (<model>|model_response)")
        missing = [es.names[j] for j in self.chain if es.names[j] not in es.responses]
        if missing:
            raise ValueError(f"{self.name}: no logged replies for {missing} (<model>|model_response)")
        replies = [es.responses[es.names[j]] for j in self.chain]  # L lists of N
        keys = np.array([[reply_key(r) for r in col] for col in replies])  # (L, N)
        emb = np.asarray(self.embed(es.prompts), dtype=np.float64) if "embedding" in self.features else None
        n, steps = len(es), len(self.chain)
        out = []
        for j in range(steps):
            pos = np.zeros((n, steps))
            pos[:, j] = 1.0
            agree = (keys[:j] == keys[j]).mean(axis=0) if j else np.zeros(n)  # (N,) share of earlier replies agreeing
            cols = [pos, pos * agree[:, None],
                    np.log1p([len(r or "") for r in replies[j]])[:, None],
                    np.array([bool(_CHOICE.match(r or "")) for r in replies[j]], dtype=np.float64)[:, None]]
            if emb is not None:
                cols.append(emb)
            out.append(np.concatenate(cols, axis=1))
        return out

    def fit(self, train: EvalSet) -> None:
        self.chain = self._chain(train)
        feats = self._features(train)
        x = np.concatenate(feats)  # (L * N, F)
        y = np.concatenate([train.scores[:, j] for j in self.chain])
        self.w = fit_logistic(x, y, self.l2)

    def trust(self, es: EvalSet) -> np.ndarray:
        """(L, N) the scorer's P(correct) of each chain candidate's reply on each prompt."""
        if self.w is None:
            raise RuntimeError(f"{self.name}: fit() before trust()")
        return np.stack([1.0 / (1.0 + np.exp(-np.clip(f @ self.w[:-1] + self.w[-1], -30, 30)))
                         for f in self._features(es)])

    def predict(self, test: EvalSet) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("a cascade makes its own settings (sweep), it does not predict every candidate")

    def sweep(self, test: EvalSet, ws: np.ndarray) -> Sweep:
        """One setting per trust threshold (``thresholds`` evenly from 0 to 1, plus one above 1 that calls the
        whole chain); ``ws`` is not used: the threshold is the cascade's price knob."""
        p = self.trust(test)  # (L, N)
        chain = np.asarray(self.chain)
        costs = test.costs[:, chain].T  # (L, N)
        n, steps = len(test), len(chain)
        rows = np.arange(n)
        taus = np.append(np.linspace(0.0, 1.0, self.thresholds), np.inf)
        decisions, paid, labels = [], [], []
        for tau in taus:
            trusted = p >= tau  # (L, N)
            stop = np.where(trusted.any(axis=0), trusted.argmax(axis=0), steps - 1)  # (N,) last step called
            called = np.arange(steps)[:, None] <= stop[None, :]  # (L, N)
            best = np.where(called, p, -np.inf).argmax(axis=0)  # the reply it trusts most among those bought
            decisions.append(chain[best])
            paid.append((costs * called).sum(axis=0))
            labels.append(f"tau={tau:.3g}")
        return Sweep.from_decisions(np.stack(decisions), test.scores, test.costs, labels, paid=np.stack(paid))


class EscalateRouter(CascadeRouter):
    """Probe with the cheapest candidates, then answer with a probe's reply or escalate (module docstring)."""

    name = "escalate"

    def __init__(self, embed: Embed, chain: Sequence[str] | str = "hull", max_probes: int = 3,
                 features: Sequence[str] = ("agreement", "embedding"), l2: float = 1.0):
        if max_probes < 0:
            raise ValueError(f"escalate.max_probes: must be >= 0, got {max_probes}")
        super().__init__(embed, chain=chain, features=features, l2=l2)
        self.max_probes = max_probes
        self.weights: dict[tuple[int, int], np.ndarray] = {}  # (probes, candidate) -> logistic weights
        self.cost = NeighbourCost(embed)

    def _design(self, es: EvalSet, keys: np.ndarray, n_probes: int, m: int, emb: np.ndarray | None) -> np.ndarray:
        """(N, F) features of candidate m's correctness after the first ``n_probes`` chain replies."""
        n = len(es)
        cols = [np.ones((n, 0))]
        if n_probes and "agreement" in self.features:
            k = keys[:n_probes]  # (P, N)
            same = (k[:, None, :] == k[None, :, :])  # (P, P, N)
            support = same.mean(axis=1)  # (P, N) share of probes agreeing with each one
            distinct = np.array([len(set(col)) for col in k.T]) / n_probes  # (N,)
            cols += [support.max(axis=0)[:, None], distinct[:, None]]
            if m in self.chain[:n_probes]:
                j = self.chain.index(m)
                reply = es.responses[es.names[m]]
                cols += [support[j][:, None], (support[j] == support.max(axis=0)).astype(np.float64)[:, None],
                         np.log1p([len(r or "") for r in reply])[:, None]]
        if "reply_embedding" in self.features and m in self.chain[:n_probes]:
            cols.append(self._reply_embedding(es, m))
        if emb is not None:
            cols.append(emb)
        return np.concatenate(cols, axis=1)

    def _reply_embedding(self, es: EvalSet, m: int) -> np.ndarray:
        """(N, D) the embedding of candidate m's logged reply: what the reply says, not only whether it agrees
        (a code reply in another language than the one asked for, a refusal)."""
        return np.asarray(self.embed([r or "" for r in es.responses[es.names[m]]]), dtype=np.float64)

    def _keys(self, es: EvalSet) -> np.ndarray:
        if self.max_probes == 0:
            return np.zeros((0, len(es)), dtype=object)
        if not es.responses:
            raise ValueError(f"{self.name}: probing reads replies; these tables log none (<model>|model_response)")
        return np.array([[reply_key(r) for r in es.responses[es.names[j]]] for j in self.chain[:self.max_probes]])

    def fit(self, train: EvalSet) -> None:
        self.chain = self._chain(train)
        self.max_probes = min(self.max_probes, len(self.chain))
        self.cost.fit(train)
        keys = self._keys(train)
        emb = np.asarray(self.embed(train.prompts), dtype=np.float64) if "embedding" in self.features else None
        for p in range(self.max_probes + 1):
            for m in range(len(train.names)):
                x = self._design(train, keys, p, m, emb)
                self.weights[(p, m)] = fit_logistic(x, train.scores[:, m], self.l2)

    def predict_after(self, test: EvalSet, n_probes: int, keys: np.ndarray, emb: np.ndarray | None) -> np.ndarray:
        """(N, M) P(correct) of each candidate once the first ``n_probes`` chain replies are known."""
        out = np.empty((len(test), len(test.names)))
        for m in range(len(test.names)):
            w = self.weights[(n_probes, m)]
            z = self._design(test, keys, n_probes, m, emb) @ w[:-1] + w[-1]
            out[:, m] = 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))
        return out

    def sweep(self, test: EvalSet, ws: np.ndarray) -> Sweep:
        if not self.weights:
            raise RuntimeError(f"{self.name}: fit() before sweep()")
        keys = self._keys(test)
        emb = np.asarray(self.embed(test.prompts), dtype=np.float64) if "embedding" in self.features else None
        c_hat = self.cost(test.prompts)  # (N, M)
        rows = np.arange(len(test))
        decisions, paid, labels = [], [], []
        for p in range(self.max_probes + 1):
            probes = self.chain[:p]
            q_hat = self.predict_after(test, p, keys, emb)
            extra = c_hat.copy()
            extra[:, probes] = 0.0  # a probe's reply is bought already
            probe_cost = test.costs[:, probes].sum(axis=1)  # (N,)
            for w in ws:
                d = route_by_wtp(q_hat, extra, float(w))
                decisions.append(d)
                paid.append(probe_cost + np.where(np.isin(d, probes), 0.0, test.costs[rows, d]))
                labels.append(f"probes={p},w={w:.3g}")
        return Sweep.from_decisions(np.stack(decisions), test.scores, test.costs, labels, paid=np.stack(paid))


# ---------------------------------------------------------------- building from config

PoolFactory = Callable[[dict[str, Any], Embed, int], PoolRouter]
_POOL_REGISTRY: Registry[PoolFactory] = Registry("pool router type")
register_pool_router = _POOL_REGISTRY.register  # decorator: buildable under eval.routers of a pool evaluation
pool_router_types = _POOL_REGISTRY.types


def build_pool_router(name: str, cfg: dict[str, Any], embed: Embed, seed: int = 0) -> PoolRouter:
    """A router from its config ``{type: ..., <its fields>}``; an unknown type or field names the router."""
    cfg = dict(cfg)
    type_name = cfg.pop("type", None)
    if type_name not in _POOL_REGISTRY:
        raise ValueError(f"eval.routers.{name}.type: '{type_name}' is not one of {pool_router_types()}")
    try:
        router = _POOL_REGISTRY[type_name](cfg, embed, seed)
    except TypeError as e:  # an unknown or misspelt field
        raise ValueError(f"eval.routers.{name}: {e}") from None
    router.name = name
    return router


@register_pool_router("oracle")
def _oracle(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return OracleRouter(**cfg)


@register_pool_router("per_task")
def _per_task(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return PerTaskRouter(**cfg)


@register_pool_router("knn")
def _knn(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return KNNPoolRouter(embed, **cfg)


@register_pool_router("mlp")
def _mlp(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return MLPPoolRouter(embed, **cfg)


@register_pool_router("mf")
def _mf(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return MFPoolRouter(embed, seed=seed, **cfg)


@register_pool_router("gmtrouter")
def _gmtrouter(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return GMTPoolRouter(embed, **{"seed": seed, **cfg})


@register_pool_router("cascade")
def _cascade(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return CascadeRouter(embed, **cfg)


@register_pool_router("escalate")
def _escalate(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return EscalateRouter(embed, **cfg)


@register_pool_router("cascade_judge")
def _cascade_judge(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return JudgeCascadeRouter(**{"seed": seed, **cfg})


@register_pool_router("selector")
def _selector(cfg: dict[str, Any], embed: Embed, seed: int) -> PoolRouter:
    return SelectorPoolRouter(embed, **{"seed": seed, **cfg})
