"""Routers that learn P(strong wins) from logged outcomes and are meant to transfer to unseen subjects.

On MMLU subjects absent from training, RouteLLM-style MF and kNN recover little more of the
gap than random. What moves across subjects is less *what* a question is about (its embedding, which
the MF and kNN routers key on) than *how hard* it looks: its form (length, option lengths, digits and
formula symbols, negations, multi-statement "I and II" items). This module holds:

* ``prompt_form_features``: those form features, generic by construction: none of them names or detects
  a subject (a feature written after looking at the held-out subjects would leak the test set).
* ``option_match_features``: how the options of a multiple-choice prompt sit against its question in the
  embedder's space (how close the nearest option is, its margin over the next, how alike the options are
  to each other). Like the form, they describe how hard a question looks, not what it is about (the idea:
  options that are near-paraphrases of each other, or none of which echoes the question, make a harder
  item; what they buy on unseen subjects is measured in docs/evaluation.md, ``probe_form_options``).
* ``probe``: a linear head on any of [MiniLM embedding, form features, option-match features, a small
  local LLM's confidence on the question (``rlrouter.routers.confidence``)]. ``head: gain`` fits a
  ridge regression of the strong-minus-weak score; ``head: two_heads`` fits one logistic regression per
  candidate (P(weak correct), P(strong correct)) and scores p_strong - p_weak, sharing the difficulty
  signal both candidates feel (RouteLLM's "causal LLM" router also predicts per-model outcomes).
* ``ensemble``: a weighted mean of member routers' scores, each standardised by its own mean and
  standard deviation on the training prompts (a fixed transform, so a prompt's score does not depend on
  the batch it arrives in). A member may be a router the evaluation job fitted earlier in the same run
  (``{ref: name}``), so a router that trains for minutes (``encoder``) is trained once for its own row and
  the ensemble's.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

from rlrouter.routers import baselines as _baselines  # noqa: F401 - ensemble members are often kNN / MF
from rlrouter.routers.confidence import DEFAULT_MODEL as DEFAULT_LLM
from rlrouter.routers.confidence import confidence_features
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, ThresholdRouter, build_router, register_router

_OPTION = re.compile(r"^[A-J][.)] ")
_NEGATION = re.compile(r"\b(NOT|EXCEPT|LEAST|FALSE)\b")
_ROMAN = re.compile(r"\b(I|II|III|IV)\b")
_FORMULA = set("=+*/^<>$\\_{}|")

PROBE_FEATURES = ("embedding", "form", "options", "llm")
FORM_FEATURES = ("log_chars", "log_question_chars", "has_options", "log_option_chars_mean", "log_option_chars_max",
                 "option_chars_cv", "digit_share", "formula_share", "negation", "question_marks", "upper_share",
                 "lines", "roman_numerals", "all_or_none_of_the_above", "word_chars_mean")


OPTION_FEATURES = ("no_options", "sim_top1", "sim_top2", "sim_mean", "sim_min", "sim_margin", "sim_top1_over_mean",
                   "sim_std", "sim_entropy", "option_pair_mean", "option_pair_max", "option_pair_min")
_QUESTION_CHARS = 1000  # the end of a long stem (a passage, then the question) is what the options answer
_SIM_TEMPERATURE = 0.05  # sim_entropy: softmax of the cosines at this temperature, entropy / log(#options)


def split_options(prompt: str) -> tuple[str, list[str]]:
    """(question, options) of a prompt whose options are lines "A. ..." / "B) ..."; the question is every
    other line but a closing "Answer:". A prompt without such lines has no options."""
    lines = prompt.split("\n")
    opts = [ln[3:] for ln in lines if _OPTION.match(ln)]
    question = "\n".join(ln for ln in lines if not _OPTION.match(ln) and ln.strip() != "Answer:")
    return question, opts


def prompt_form_features(prompts: list[str]) -> np.ndarray:
    """(N, len(FORM_FEATURES)) features of a prompt's form, not its topic (see the module docstring)."""
    out = np.zeros((len(prompts), len(FORM_FEATURES)))
    for i, p in enumerate(prompts):
        lines = p.split("\n")
        question, opts = split_options(p)
        n = max(1, len(p))
        lens = np.array([len(o) for o in opts], dtype=np.float64)
        words = p.split()
        out[i] = [np.log1p(len(p)), np.log1p(len(question)), float(bool(opts)),
                  np.log1p(lens.mean()) if opts else 0.0, np.log1p(lens.max()) if opts else 0.0,
                  lens.std() / (1.0 + lens.mean()) if opts else 0.0,
                  sum(c.isdigit() for c in p) / n, sum(c in _FORMULA for c in p) / n,
                  float(bool(_NEGATION.search(p))), float(p.count("?")), sum(c.isupper() for c in p) / n,
                  float(len(lines)), float(bool(_ROMAN.search(p))),
                  float(bool(re.search(r"(all|none|both) of the above", p, re.I))),
                  float(np.mean([len(w) for w in words])) if words else 0.0]
    return out


def fit_ridge(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Ridge regression with an unpenalised intercept: (D + 1,) weights, the intercept last."""
    xm, ym = x.mean(axis=0), y.mean()
    xc = x - xm
    w = np.linalg.solve(xc.T @ xc + l2 * np.eye(x.shape[1]), xc.T @ (y - ym))
    return np.append(w, ym - xm @ w)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float, iters: int = 50, tol: float = 1e-8) -> np.ndarray:
    """L2-penalised logistic regression by Newton's method (IRLS): (D + 1,) weights, the intercept last.

    ``y`` may be graded in [0, 1] (MT-Bench scores): the loss is the cross-entropy against it, which is
    the expected loss of a Bernoulli(y) outcome. The intercept is not penalised.
    """
    xb = np.concatenate([x, np.ones((len(x), 1))], axis=1)  # (N, D + 1)
    pen = np.full(xb.shape[1], l2)
    pen[-1] = 0.0
    w = np.zeros(xb.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -30, 30)))  # (N,)
        grad = xb.T @ (p - y) + pen * w
        hess = (xb * (p * (1 - p))[:, None]).T @ xb + np.diag(pen) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < tol:
            break
    return w


def option_match_features(prompts: list[str], embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """(N, len(OPTION_FEATURES)) features of how a prompt's options sit against its question and each other
    in ``embed``'s space (cosine similarities). Prompts with fewer than two options get zeros and
    ``no_options`` 1. Each question and option is one text for ``embed`` (the job's disk-cached embedder)."""
    out = np.zeros((len(prompts), len(OPTION_FEATURES)))
    out[:, 0] = 1.0  # no_options, cleared below for each prompt with two or more options
    split = [split_options(p) for p in prompts]
    rows = [i for i, (_, opts) in enumerate(split) if len(opts) >= 2]
    if not rows:
        return out
    questions = [split[i][0][-_QUESTION_CHARS:] for i in rows]
    options = [o for i in rows for o in split[i][1]]
    eq = _unit(np.asarray(embed(questions), dtype=np.float64))
    eo = _unit(np.asarray(embed(options), dtype=np.float64))
    start = 0
    for r, i in enumerate(rows):
        k = len(split[i][1])
        o = eo[start:start + k]
        start += k
        sim = np.sort(o @ eq[r])[::-1]
        z = np.exp((sim - sim[0]) / _SIM_TEMPERATURE)
        pz = z / z.sum()
        pair = (o @ o.T)[np.triu_indices(k, 1)]
        out[i] = [0.0, sim[0], sim[1], sim.mean(), sim[-1], sim[0] - sim[1], sim[0] - sim.mean(), sim.std(),
                  float(-(pz * np.log(pz + 1e-12)).sum() / np.log(k)), pair.mean(), pair.max(), pair.min()]
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)


def _linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x @ w[:-1] + w[-1]


class ProbeRouter(ThresholdRouter):
    """A linear head on frozen features of the prompt (see the module docstring)."""

    def __init__(self, name: str, weak: int, strong: int, embed: Callable[[list[str]], np.ndarray] | None,
                 features: tuple[str, ...] = ("embedding", "form"), head: str = "two_heads", l2: float = 1.0,
                 llm: Callable[[list[str]], np.ndarray] | None = None):
        if head not in ("gain", "two_heads"):
            raise ValueError(f"probe.head: expected 'gain' or 'two_heads', got '{head}'")
        unknown = sorted(set(features) - set(PROBE_FEATURES))
        if unknown or not features:
            raise ValueError(f"probe.features: expected a non-empty subset of {list(PROBE_FEATURES)}, "
                             f"got {list(features)}")
        if not l2 > 0:
            raise ValueError(f"probe.l2: must be > 0, got {l2}")
        for kind in ("embedding", "options"):
            if kind in features and embed is None:
                raise ValueError(f"probe.features: '{kind}' needs the job's embedder")
        if "llm" in features and llm is None:
            raise ValueError("probe.features: 'llm' needs a confidence scorer (rlrouter.routers.confidence)")
        super().__init__(name, weak, strong, threshold=0.0)
        self.embed, self.features, self.head, self.l2, self.llm = embed, tuple(features), head, l2, llm
        self._mu: np.ndarray | None = None
        self._sd: np.ndarray | None = None
        self._models: list[Any] = []

    def _x(self, prompts: list[str]) -> np.ndarray:
        parts = []
        scaled = []  # form, option and LLM features: standardised by the training prompts' mean and spread
        if "form" in self.features:
            scaled.append(prompt_form_features(prompts))
        if "options" in self.features:
            scaled.append(option_match_features(prompts, self.embed))
        if "llm" in self.features:
            scaled.append(np.asarray(self.llm(prompts), dtype=np.float64))
        if scaled:
            f = np.concatenate(scaled, axis=1)
            if self._mu is None:
                self._mu, self._sd = f.mean(axis=0), f.std(axis=0) + 1e-9
            parts.append((f - self._mu) / self._sd)
        if "embedding" in self.features:
            parts.append(np.asarray(self.embed(prompts), dtype=np.float64))  # unit vectors: already on one scale
        return np.concatenate(parts, axis=1)

    def fit(self, train: EvalSet) -> None:
        self._mu = self._sd = None
        x = self._x(train.prompts)
        if self.head == "gain":
            self._models = [fit_ridge(x, train.scores[:, self.strong] - train.scores[:, self.weak], self.l2)]
        else:
            self._models = [fit_logistic(x, train.scores[:, col], self.l2) for col in (self.weak, self.strong)]

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        if not self._models:
            raise RuntimeError(f"{self.name}: fit() before strong_score()")
        x = self._x(prompts)
        if self.head == "gain":
            return _linear(x, self._models[0])
        p_weak, p_strong = (1.0 / (1.0 + np.exp(-_linear(x, w))) for w in self._models)
        return p_strong - p_weak


class EnsembleRouter(ThresholdRouter):
    """Weighted mean of member threshold routers' standardised scores (see the module docstring)."""

    def __init__(self, name: str, weak: int, strong: int, members: dict[str, ThresholdRouter],
                 weights: dict[str, float], fitted: frozenset[str] = frozenset()):
        if not members:
            raise ValueError("ensemble.members: at least one member router")
        super().__init__(name, weak, strong, threshold=0.0)
        self.members = members
        self.weights = weights
        self.fitted = fitted  # members already fitted by the job (``ref``): not fitted again
        self._stats: dict[str, tuple[float, float]] = {}

    def fit(self, train: EvalSet) -> None:
        for key, router in self.members.items():
            if key not in self.fitted:
                router.fit(train)
            s = router.strong_score(train.prompts)
            self._stats[key] = (float(s.mean()), float(s.std()) or 1.0)

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        total = np.zeros(len(prompts))
        for key, router in self.members.items():
            mu, sd = self._stats[key]
            total += self.weights[key] * (router.strong_score(prompts) - mu) / sd
        return total / sum(self.weights.values())


def _pop_features(cfg: dict[str, Any]) -> tuple[str, ...]:
    f = cfg.pop("features", ["embedding", "form"])
    return (f,) if isinstance(f, str) else tuple(f)


@register_router("probe")
def _build_probe(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    """``features``: any of embedding / form / options / llm; ``llm_model`` and ``llm_max_length`` pick the LLM
    whose confidence the ``llm`` features read (default SmolLM2-135M-Instruct, 256 tokens)."""
    features = _pop_features(cfg)
    llm_model = str(cfg.pop("llm_model", DEFAULT_LLM))
    llm_max_length = int(cfg.pop("llm_max_length", 256))
    if llm_max_length < 2:
        raise ValueError(f"probe.llm_max_length: must be >= 2 tokens, got {llm_max_length}")
    llm = None
    if "llm" in features:

        def llm(prompts: list[str]) -> np.ndarray:
            return confidence_features(prompts, model=llm_model, max_length=llm_max_length)

    router = ProbeRouter("probe", ctx.weak, ctx.strong, ctx.embed, features=features,
                         head=str(cfg.pop("head", "two_heads")), l2=float(cfg.pop("l2", 1.0)), llm=llm)
    if cfg:
        raise ValueError(f"router type 'probe': unknown fields {sorted(cfg)}")
    return router


@register_router("ensemble")
def _build_ensemble(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    """``members``: {key: router spec} of threshold routers, or {key: {ref: name}} for a router the job fitted
    earlier in the same run (``ctx.extra["fitted"]``; reused as fitted); ``weights``: {key: weight} (default 1 each)."""
    specs = dict(cfg.pop("members", None) or {})
    weights = {k: float(v) for k, v in dict(cfg.pop("weights", None) or {}).items()}
    if cfg:
        raise ValueError(f"router type 'ensemble': unknown fields {sorted(cfg)}")
    members: dict[str, ThresholdRouter] = {}
    fitted: set[str] = set()
    for key, spec in specs.items():
        spec = dict(spec)
        if "ref" in spec:
            ref = spec.pop("ref")
            if spec:
                raise ValueError(f"ensemble.members.{key}: a 'ref' member takes no other fields, got {sorted(spec)}")
            done = ctx.extra.get("fitted") or {}
            if ref not in done:
                raise ValueError(f"ensemble.members.{key}.ref: no router '{ref}' was fitted earlier in this run "
                                 f"(fitted so far: {sorted(done)}); list it before the ensemble")
            r, what = done[ref], f"ref '{ref}'"
            fitted.add(key)
        else:
            r, what = build_router(spec, ctx), f"'{spec.get('type')}'"
        if not isinstance(r, ThresholdRouter):
            raise ValueError(f"ensemble.members.{key}: {what} is not a threshold router")
        members[key] = r
    unknown = sorted(set(weights) - set(members))
    if unknown:
        raise ValueError(f"ensemble.weights: {unknown} are not members ({sorted(members)})")
    return EnsembleRouter("ensemble", ctx.weak, ctx.strong, members, {k: weights.get(k, 1.0) for k in members},
                          frozenset(fitted))
