"""A Hugging Face ``generate`` rollout backend: ToolRL's ``actor_rollout_ref.rollout.name=hf`` (ToolRL's verl command line).

It implements the engine side the environment needs, ``generate_ids(prompts, specs)`` (token ids in,
generated ids out, stop strings kept in the output), with plain ``transformers`` on any device: no vLLM,
so it runs where vLLM does not (a container without it, a Mac, Windows/WSL). It is much slower than
vLLM, as the seed says of verl's hf rollout. Each request is generated on its own, so its stop strings,
temperature and seed are its own (``torch.Generator``-free: the global RNG is seeded per request).
``update_weights`` takes the same named tensors the learner pushes to vLLM workers.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from rlrouter.rollout.env import SampledTokens, SamplingSpec


def frequency_penalty(penalty: float, start: int) -> Any:
    """A ``LogitsProcessorList`` that subtracts ``penalty`` from each token's logit once per time it occurs
    in the generated part (columns from ``start``) of the sequence: vLLM's and OpenAI's frequency penalty."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class FrequencyPenalty(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            import torch

            new = input_ids[:, start:]
            counts = torch.zeros_like(scores).scatter_add_(1, new, torch.ones_like(new, dtype=scores.dtype))
            return scores - penalty * counts

    return LogitsProcessorList([FrequencyPenalty()])


class HFGenerator:
    """``generate_ids`` on a ``transformers`` causal LM (the same call ``RouterEnv`` makes of vLLM)."""

    def __init__(self, model: str | Any, tokenizer: Any = None, dtype: str = "float32", device: str = "cpu",
                 batched: bool = False):
        from rlrouter.models import load_causal_lm, load_tokenizer

        if isinstance(model, str):
            self.model = load_causal_lm(model, dtype=dtype, device=device)
            self.tokenizer = tokenizer or load_tokenizer(model)
        else:
            if tokenizer is None:
                raise ValueError("tokenizer: required when model is a loaded module")
            self.model, self.tokenizer = model, tokenizer
        self.model.eval()
        self.device = device
        self.batched = batched
        """One left-padded ``generate`` per call (requests must share temperature, top-p and stop strings;
        seeded once per call with the first request's seed) instead of one per request: several times
        faster, at the price of per-request seeds."""
        self.stats = {"generated_tokens": 0, "generate_s": 0.0}
        self._stops: dict[tuple[str, ...], Any] = {}

    def _stop_criteria(self, stop: tuple[str, ...]) -> Any:
        """One ``StopStringCriteria`` per stop set: building it scans the whole vocabulary (seconds)."""
        if stop not in self._stops:
            from transformers import StopStringCriteria, StoppingCriteriaList

            self._stops[stop] = StoppingCriteriaList([StopStringCriteria(self.tokenizer, list(stop))])
        return self._stops[stop]

    def generate_ids(self, prompts: list[list[int]], specs: list[SamplingSpec]) -> list[SampledTokens]:
        """Token ids in, generated token ids out, each with its log-prob under the sampling distribution
        (after temperature and top-p, as vLLM's processed log-probs); generation ends at a stop string
        (kept) or ``max_tokens``."""
        import torch

        if len(prompts) != len(specs):
            raise ValueError(f"specs: {len(specs)} sampling specs for {len(prompts)} prompts")
        if any(s.choices for s in specs):
            raise ValueError("rollout.env.constrain_route: the HF generate backend cannot constrain a route; use a "
                             "vLLM rollout or set rollout.env.constrain_route=false")
        if self.batched and prompts:
            return self._generate_batch(prompts, specs)
        t0 = time.perf_counter()
        out = []
        eos = self.tokenizer.eos_token_id
        for ids, spec in zip(prompts, specs):
            torch.manual_seed(spec.seed)
            sample = spec.temperature > 0
            kwargs: dict[str, Any] = {"max_new_tokens": spec.max_tokens, "do_sample": sample,
                                      "pad_token_id": self.tokenizer.pad_token_id or eos}
            if sample:
                kwargs.update(temperature=spec.temperature, top_p=spec.top_p, top_k=0)
            if spec.stop:
                kwargs["stopping_criteria"] = self._stop_criteria(tuple(spec.stop))
            if spec.frequency_penalty:
                kwargs["logits_processor"] = frequency_penalty(spec.frequency_penalty, len(ids))
            x = torch.tensor([ids], dtype=torch.long, device=self.device)
            with torch.no_grad():
                res = self.model.generate(x, attention_mask=torch.ones_like(x), return_dict_in_generate=True,
                                          output_scores=True, **kwargs)
            new = res.sequences[0, len(ids):]  # (T,)
            scores = torch.stack(res.scores)[:, 0, :].float()  # (T, V): the processed logits of each step
            lps = torch.log_softmax(scores, dim=-1).gather(1, new.unsqueeze(1)).squeeze(1)
            out.append(SampledTokens([int(t) for t in new.tolist()], [min(0.0, float(v)) for v in lps.tolist()]))
        self.stats["generate_s"] += time.perf_counter() - t0
        self.stats["generated_tokens"] += sum(len(o) for o in out)
        return out

    def _generate_batch(self, prompts: list[list[int]], specs: list[SamplingSpec]) -> list[SampledTokens]:
        """``generate_ids`` as one left-padded batch; each row is cut after its first stop string or EOS
        and at its own ``max_tokens``."""
        import torch

        first = specs[0]
        for i, s in enumerate(specs):
            if (s.temperature, s.top_p, tuple(s.stop), s.frequency_penalty) != \
                    (first.temperature, first.top_p, tuple(first.stop), first.frequency_penalty):
                raise ValueError(f"specs[{i}]: a batched HFGenerator needs one temperature, top_p, stop set and "
                                 f"frequency penalty per call, got {s} after {first}")
        t0 = time.perf_counter()
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        width = max(len(p) for p in prompts)
        x = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(x)
        for i, ids in enumerate(prompts):
            x[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[i, width - len(ids):] = 1
        x, mask = x.to(self.device), mask.to(self.device)
        torch.manual_seed(first.seed)
        sample = first.temperature > 0
        kwargs: dict[str, Any] = {"max_new_tokens": max(s.max_tokens for s in specs), "do_sample": sample,
                                  "pad_token_id": pad, "use_cache": True}
        if sample:
            kwargs.update(temperature=first.temperature, top_p=first.top_p, top_k=0)
        if first.stop:
            kwargs["stopping_criteria"] = self._stop_criteria(tuple(first.stop))
        if first.frequency_penalty:
            kwargs["logits_processor"] = frequency_penalty(first.frequency_penalty, width)
        with torch.no_grad():
            res = self.model.generate(x, attention_mask=mask, return_dict_in_generate=True, output_scores=True,
                                      **kwargs)
        new = res.sequences[:, width:]  # (B, T)
        scores = torch.stack(res.scores, dim=1).float()  # (B, T, V): the processed logits of each step
        lps = torch.log_softmax(scores, dim=-1).gather(2, new.unsqueeze(2)).squeeze(2)  # (B, T)
        out = []
        for i, spec in enumerate(specs):
            row = [int(t) for t in new[i, :spec.max_tokens].tolist()]
            end = len(row)
            for j, tok in enumerate(row):  # the row ends at EOS (kept) or once a stop string is complete
                if tok == eos or (spec.stop and any(st in self.tokenizer.decode(row[:j + 1]) for st in spec.stop)):
                    end = j + 1
                    break
            out.append(SampledTokens(row[:end], [min(0.0, float(v)) for v in lps[i, :end].tolist()]))
        self.stats["generate_s"] += time.perf_counter() - t0
        self.stats["generated_tokens"] += sum(len(o) for o in out)
        return out

    def update_weights(self, named_tensors: Sequence[tuple[str, Any]], version: int = 0, last: bool = True) -> float:
        """Load pushed weights (full names, as the learner sends them to vLLM); returns seconds taken."""
        t0 = time.perf_counter()
        state = self.model.state_dict()
        unknown = [name for name, _ in named_tensors if name not in state]
        if unknown:
            raise KeyError(f"update_weights: {len(unknown)} tensor(s) not in the model, e.g. {unknown[:3]}")
        with __import__("torch").no_grad():
            for name, tensor in named_tensors:
                state[name].copy_(tensor)
        return time.perf_counter() - t0
