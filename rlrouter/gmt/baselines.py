"""Baselines GMTRouter is measured against, on the same comparison groups.

- ``GlobalThompson``: one Beta posterior per candidate over all users' feedback (the selector's
  global scope); it ranks by posterior mean, and ``sample`` draws the Thompson decision.
- ``PerUserBeta``: one Beta posterior per (user, candidate), shrunk towards the global one (a
  prior worth ``prior_strength`` pseudo-observations), so a user with no history falls back to it.
- ``QueryMLP``: an MLP from the query's MiniLM embedding to one logit per candidate, trained with
  the same preference loss; it knows the query but not the user.
- ``BestSingle``: always the candidate that won most training pairs.

Feedback enters the Beta posteriors as a fractional success, the feedback scaled to [0, 1].
Every baseline returns scores of shape (G, K) for a ``GroupBatch``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from rlrouter.gmt.graph import GMTGraph, normalize_feedback
from rlrouter.gmt.train import GroupBatch, pairwise_metrics, preference_loss


def _gather(table: torch.Tensor, batch: GroupBatch) -> torch.Tensor:
    """table (U, L) or (L,) -> (G, K) per group member; padding scores 0."""
    llms = batch.llms.clamp(min=0)
    if table.dim() == 1:
        s = table[llms]
    else:
        s = table[batch.users.unsqueeze(1).expand_as(llms), llms]
    return s.masked_fill(~batch.valid, 0.0)


class GlobalThompson:
    """Beta(1 + sum f, 1 + sum (1 - f)) per candidate, over every visible interaction."""

    def __init__(self, graph: GMTGraph, mask: torch.Tensor):
        f = normalize_feedback(graph.feedback[mask]).double()
        llm = graph.llm[mask]
        n_llm = len(graph.llms)
        self.alpha = 1.0 + torch.zeros(n_llm, dtype=torch.float64).index_add_(0, llm, f)
        self.beta = 1.0 + torch.zeros(n_llm, dtype=torch.float64).index_add_(0, llm, 1.0 - f)

    def mean(self) -> torch.Tensor:
        return self.alpha / (self.alpha + self.beta)

    def scores(self, batch: GroupBatch) -> torch.Tensor:
        return _gather(self.mean().float(), batch)

    def sample(self, batch: GroupBatch) -> torch.Tensor:
        """One Thompson draw per group member (the decision a TS selector would make); uses
        torch's global RNG, which the caller seeds."""
        a = self.alpha[batch.llms.clamp(min=0)]
        b = self.beta[batch.llms.clamp(min=0)]
        draw = torch.distributions.Beta(a, b).sample()
        return draw.float().masked_fill(~batch.valid, 0.0)


class PerUserBeta:
    """Per-user Beta posteriors with a prior centred on the global posterior mean."""

    def __init__(self, graph: GMTGraph, mask: torch.Tensor, prior_strength: float = 2.0):
        glob = GlobalThompson(graph, mask).mean()  # (L,)
        n_u, n_l = len(graph.users), len(graph.llms)
        f = normalize_feedback(graph.feedback[mask]).double()
        flat = graph.user[mask] * n_l + graph.llm[mask]
        succ = torch.zeros(n_u * n_l, dtype=torch.float64).index_add_(0, flat, f).view(n_u, n_l)
        fail = torch.zeros(n_u * n_l, dtype=torch.float64).index_add_(0, flat, 1.0 - f).view(n_u, n_l)
        self.alpha = prior_strength * glob + succ
        self.beta = prior_strength * (1 - glob) + fail

    def scores(self, batch: GroupBatch) -> torch.Tensor:
        return _gather((self.alpha / (self.alpha + self.beta)).float(), batch)


class BestSingle:
    """The candidate with the most pairwise wins in training, for everyone and every query."""

    def __init__(self, graph: GMTGraph, train: GroupBatch):
        wins = torch.zeros(len(graph.llms))
        for llms, r, v in zip(train.llms, train.ratings, train.valid):
            top = r[v].max()
            for m, rr, vv in zip(llms.tolist(), r.tolist(), v.tolist()):
                if vv and rr == top:
                    wins[m] += 1
        self.best = int(wins.argmax())
        self.name = graph.llms[self.best]

    def scores(self, batch: GroupBatch) -> torch.Tensor:
        table = torch.zeros(int(batch.llms.max()) + 1 if len(batch) else 1)
        table[self.best] = 1.0
        return _gather(table, batch)


class QueryMLP(nn.Module):
    """MiniLM(query) -> hidden -> one logit per candidate. No user input."""

    def __init__(self, embed_dim: int, num_llms: int, hidden: int = 128, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(embed_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, num_llms))

    def scores_for(self, query_x: torch.Tensor, batch: GroupBatch) -> torch.Tensor:
        logits = self.net(query_x[batch.queries])  # (G, L)
        s = logits.gather(1, batch.llms.clamp(min=0))
        return s.masked_fill(~batch.valid, 0.0)

    @classmethod
    def fit(cls, graph: GMTGraph, train: GroupBatch, val: GroupBatch, epochs: int = 300, lr: float = 1e-3,
            weight_decay: float = 1e-4, seed: int = 0, eval_every: int = 5, patience: int = 50) -> "QueryMLP":
        torch.manual_seed(seed)
        model = cls(graph.embed_dim, len(graph.llms))
        opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        best, best_state, since = -math.inf, None, 0
        for epoch in range(1, epochs + 1):
            model.train()
            opt.zero_grad()
            loss = preference_loss(model.scores_for(graph.query_x, train), train.ratings, train.valid)
            loss.backward()
            opt.step()
            if epoch % eval_every == 0:
                model.eval()
                with torch.no_grad():
                    m = pairwise_metrics(model.scores_for(graph.query_x, val).numpy(), val.ratings.numpy(),
                                         val.valid.numpy())
                auc = m["auc"] if not np.isnan(m["auc"]) else -math.inf
                if auc > best:
                    best, best_state, since = auc, copy.deepcopy(model.state_dict()), 0
                else:
                    since += eval_every
                    if since >= patience:
                        break
        if best_state is not None:
            model.load_state_dict(best_state)
        model.eval()
        return model

    @torch.no_grad()
    def scores(self, graph: GMTGraph, batch: GroupBatch) -> torch.Tensor:
        return self.scores_for(graph.query_x, batch)
