"""A small local LLM's confidence on a question, as routing features for prompts on unseen subjects.

One forward pass of a causal LM (SmolLM2-135M-Instruct by default, bundled) over the prompt as the
router sees it (RouteLLM's MMLU prompts end in ``Answer:``) gives, per prompt:

* how surprising the question is to the model: the mean and standard deviation of its per-token
  negative log-likelihood (nats), over the prompt's tokens after the first;
* how sure it is of the answer: at the last position, the probability mass on the option letters
  (``A``..``D``, with and without a leading space), the normalised entropy of the distribution over those
  letters (0: one letter, 1: uniform) and its largest share, and the entropy of the whole next-token
  distribution (nats; the only one of these that means something for prompts with no options).

None of these names a subject: they transfer to subjects the router never saw as well as the model's
own knowledge does. Prompts longer than ``max_length`` tokens keep their end (the options and the
``Answer:`` cue). Rows are cached on disk per (model, max_length, prompt), through the one per-text
cache of ``rlrouter.embeddings``; the first pass over RouteLLM's 13,074 prompts is the cost (about
0.1 s a prompt on 2 CPU cores at 65 tokens).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

LM_FEATURES = ("lm_nll_mean", "lm_nll_std", "lm_letter_mass", "lm_letter_entropy", "lm_letter_max",
               "lm_next_entropy")
LETTERS = ("A", "B", "C", "D")
DEFAULT_MODEL = "smollm2-135m-instruct"

_LOCK = threading.Lock()
_SCORERS: dict[tuple[str, int], "ConfidenceScorer"] = {}


class ConfidenceScorer:
    """A frozen causal LM that maps prompts to ``LM_FEATURES`` rows (float32, (N, 6)). Loads on first use."""

    def __init__(self, model: str = DEFAULT_MODEL, max_length: int = 256, batch_size: int = 16,
                 device: str = "cpu"):
        if max_length < 2:
            raise ValueError(f"confidence.max_length: must be >= 2 tokens, got {max_length}")
        self.model_name, self.max_length, self.batch_size, self.device = model, max_length, batch_size, device
        self._lock = threading.Lock()
        self._model: Any = None
        self._tok: Any = None
        self._letter_ids: list[list[int]] = []

    def _load(self) -> None:
        from rlrouter.models import load_causal_lm, load_tokenizer

        self._tok = load_tokenizer(self.model_name)
        self._tok.padding_side = "left"  # the last position is every row's next-token prediction
        self._tok.truncation_side = "left"  # a long passage keeps its options and the "Answer:" cue
        self._model = load_causal_lm(self.model_name, device=self.device).eval()
        ids = []
        for letter in LETTERS:
            variants = {tuple(self._tok.encode(v, add_special_tokens=False)) for v in (letter, " " + letter)}
            ids.append(sorted({v[0] for v in variants if len(v) == 1}))
        if not all(ids):
            raise ValueError(f"confidence.model '{self.model_name}': its tokenizer has no single token for "
                             f"every option letter {LETTERS}")
        self._letter_ids = ids

    def features(self, prompts: list[str]) -> np.ndarray:
        import torch

        with self._lock:
            if self._model is None:
                self._load()
            out = np.zeros((len(prompts), len(LM_FEATURES)), dtype=np.float32)
            order = np.argsort([len(p) for p in prompts], kind="stable")
            with torch.inference_mode():
                for start in range(0, len(prompts), self.batch_size):
                    idx = order[start:start + self.batch_size]
                    batch = [prompts[i] if prompts[i].strip() else " " for i in idx]
                    enc = self._tok(batch, return_tensors="pt", padding=True, truncation=True,
                                    max_length=self.max_length).to(self.device)
                    logits = self._model(**enc).logits.float()  # (B, T, V)
                    out[idx] = self._row_features(logits, enc["input_ids"], enc["attention_mask"])
        return out

    def _row_features(self, logits, input_ids, mask) -> np.ndarray:
        import torch

        # token t's NLL is read from position t - 1; a left-padded row's first real token has none
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 1:],
                                                reduction="none")  # (B, T - 1)
        both = (mask[:, 1:] * mask[:, :-1]).float()  # (B, T - 1): a real token after a real token
        n = both.sum(1).clamp(min=1.0)
        mean = (nll * both).sum(1) / n
        std = (((nll - mean[:, None]) ** 2 * both).sum(1) / n).sqrt()
        last = torch.log_softmax(logits[:, -1], dim=-1)  # (B, V): the next token after the prompt
        probs = last.exp()
        per_letter = torch.stack([probs[:, ids].sum(-1) for ids in self._letter_ids], dim=-1)  # (B, 4)
        mass = per_letter.sum(-1)
        share = per_letter / mass.clamp(min=1e-12)[:, None]
        letter_entropy = -(share * share.clamp(min=1e-12).log()).sum(-1) / np.log(len(LETTERS))
        next_entropy = -(probs * last).sum(-1)
        cols = [mean, std, mass, letter_entropy, share.max(-1).values, next_entropy]
        return torch.stack(cols, dim=-1).cpu().numpy()


def get_scorer(model: str = DEFAULT_MODEL, max_length: int = 256) -> ConfidenceScorer:
    """A process-wide scorer per (model, max_length)."""
    with _LOCK:
        key = (model, max_length)
        if key not in _SCORERS:
            _SCORERS[key] = ConfidenceScorer(model, max_length)
        return _SCORERS[key]


def confidence_features(prompts: list[str], model: str = DEFAULT_MODEL, max_length: int = 256,
                        cache: bool = True) -> np.ndarray:
    """(N, len(LM_FEATURES)) float32 confidence features of ``prompts`` (see the module docstring),
    cached on disk per (model, max_length, prompt) when ``cache``."""
    prompts = list(prompts)
    scorer = get_scorer(model, max_length)
    if not prompts:
        return np.zeros((0, len(LM_FEATURES)), dtype=np.float32)
    if not cache:
        return scorer.features(prompts)
    from rlrouter.embeddings import cached_rows
    from rlrouter.models import cache_dir

    root = cache_dir() / "lm_confidence" / f"{model.replace('/', '--')}-{max_length}"
    return cached_rows(prompts, root, scorer.features, chunk=256, desc="llm confidence")
