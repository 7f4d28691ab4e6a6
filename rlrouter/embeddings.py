"""Sentence embeddings (MiniLM by default) shared by the selector, GMTRouter, kNN baselines and intent.

Mean pooling over the last hidden state, L2-normalised, as sentence-transformers does for
all-MiniLM-L6-v2. An optional on-disk cache keyed by text hash spares benchmarks and tests from
re-encoding the same prompts.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from rlrouter.models import _file_lock, cache_dir, resolve_model

_LOCK = threading.Lock()
_ENCODERS: dict[str, "TextEncoder"] = {}


class TextEncoder:
    """A frozen encoder that maps texts to unit vectors (float32, shape (N, dim)).

    The one MiniLM embedder of rlrouter (selector contexts, GMTRouter query features, kNN / MF
    baselines, the implicit-feedback classifier). Thread-safe; loads the model on first use, so a
    Serve replica pays for it only when a request needs it.
    """

    def __init__(self, model: str = "minilm-l6", max_length: int = 256, device: str = "cpu",
                 batch_size: int = 64, num_threads: int | None = None):
        self.name = model
        self.max_length = max_length
        self.device = device
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._lock = threading.Lock()
        self._model = None
        self._tokenizer = None
        self.dim = 384  # MiniLM-L6's width until the model is loaded

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        path = resolve_model(self.name)
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path).to(self.device).eval()
        self.dim = int(self._model.config.hidden_size)

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        import torch

        batch_size = batch_size or self.batch_size
        with self._lock:
            if self._model is None:
                self._load()
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
            with torch.inference_mode():
                for start in range(0, len(texts), batch_size):
                    # an empty string has no tokens to pool: encode a space instead
                    batch = [t if t.strip() else " " for t in texts[start:start + batch_size]]
                    enc = self._tokenizer(batch, padding=True, truncation=True, max_length=self.max_length,
                                          return_tensors="pt").to(self.device)
                    hidden = self._model(**enc).last_hidden_state  # (B, T, H)
                    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
                    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, H)
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                    out[start:start + len(batch)] = pooled.float().cpu().numpy()
        return out

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


def get_encoder(model: str = "minilm-l6") -> TextEncoder:
    """A process-wide encoder per model name (loading MiniLM takes ~1 s; do it once)."""
    with _LOCK:
        if model not in _ENCODERS:
            _ENCODERS[model] = TextEncoder(model)
        return _ENCODERS[model]


def embed_texts(texts: list[str], model: str = "minilm-l6", cache: bool = True,
                batch_size: int = 64, chunk: int | None = None) -> np.ndarray:
    """Embed ``texts`` -> (N, dim) float32, in length order (homogeneous batches); cached on disk per
    (model, text) when ``cache``, stored every ``chunk`` new texts when given (``cached_rows``)."""
    if not cache:
        texts = list(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = get_encoder(model).encode([texts[i] for i in order], batch_size)
        return out[np.argsort(order)]
    return cached_rows(texts, cache_dir() / "embeddings" / model,
                       lambda todo: get_encoder(model).encode(todo, batch_size), chunk=chunk, desc="embed")


def cached_rows(texts: list[str], root: Path, compute: Callable[[list[str]], np.ndarray],
                chunk: int | None = None, desc: str | None = None) -> np.ndarray:
    """One float32 row per text, from the store under ``root`` (keyed by the text's hash), computing only
    the texts it lacks with ``compute`` (list -> (n, D)) and storing them.

    The one on-disk cache of per-text vectors (MiniLM embeddings, the small LLM's confidence features).
    Several processes may share ``root``: a write merges with what others stored meanwhile. With
    ``chunk``, the missing texts are computed and stored ``chunk`` at a time (an interrupted run keeps
    what it computed) under a progress bar named ``desc``.
    """
    root.mkdir(parents=True, exist_ok=True)
    keys = [hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts]
    store = root / "store.npz"
    known: dict[str, np.ndarray] = {}
    with _LOCK:
        if store.exists():
            try:
                with np.load(store) as z:
                    known = dict(zip(z["keys"].tolist(), z["vecs"]))
            except Exception:
                known = {}  # a cache is disposable: a torn file is rebuilt, never trusted
    by_key = dict(zip(keys, texts))
    # length order: one long prompt then pads only batches of long prompts, not every batch
    missing = sorted({k for k in keys if k not in known}, key=lambda k: len(by_key[k]))
    step = chunk or max(1, len(missing))
    parts = [missing[i:i + step] for i in range(0, len(missing), step)]
    if len(parts) > 1:
        from tqdm.auto import tqdm

        parts = tqdm(parts, desc=desc or root.name, unit="chunk")
    for part in parts:
        vecs = np.asarray(compute([by_key[k] for k in part]), dtype=np.float32)
        known.update(zip(part, vecs))
        with _LOCK, _file_lock(root / ".store.lock"):
            # merge with what other processes stored meanwhile instead of overwriting their entries
            if store.exists():
                try:
                    with np.load(store) as z:
                        known = {**dict(zip(z["keys"].tolist(), z["vecs"])), **known}
                except Exception:
                    pass
            tmp = root / f"store.{os.getpid()}.{threading.get_ident()}.tmp.npz"
            np.savez(tmp, keys=np.array(list(known.keys())), vecs=np.stack(list(known.values())))
            tmp.replace(store)
    if not keys:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([known[k] for k in keys]).astype(np.float32)


def default_cache_path() -> Path:
    return cache_dir() / "embeddings"
