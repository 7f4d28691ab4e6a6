"""Which training questions RL draws its prompts from, in what mix, and which of them start after a
written first call: the run's curriculum (the ``curriculum:`` section of ``conf/train_router_r1.yaml``).

The trainer core does not know these choices. ``RouterR1Trainer`` asks its ``Curriculum`` for a step's
prompts (``draw``, a pure function of step and seed, so a resumed run draws what an uninterrupted one
would) and for the per-stratum metrics of what it rolled out; the job builds the curriculum once from
the config and the training questions (``build_curriculum``).

The default, ``balance: none`` with nothing else set, is the natural mix: every training question, the
data cursor's seeded permutations, exactly the prompts the trainer drew before curricula existed.

- ``balance: task``: each step's prompts split evenly over the training questions' tasks (``task_of``:
  the data source, RouterBench's ``eval_name``), each task with its own cursor. With tasks of unequal
  size (RouterBench's train tables: MBPP is 12% of the questions) the natural mix hardly trains the
  small task's route; balanced, every task reaches each step's gradient alike, as RouterBench's AIQ
  weighs the tasks alike.
- ``sources``: RL prompts only from these data sources (demonstrations and held-out evaluations keep
  all).
- ``no_answer_share`` (two-model escalation study, docs/experiments/2026-11-router-r1-two-models.md):
  this share of each step's prompts from the questions whose cheapest candidate's logged reply states no
  final answer; ``no_answer_first_call`` starts those rollouts after the call to the cheap candidate
  (written, not sampled), and ``first_call_share`` does so for that share of the other questions too.
- ``demo_second_call``: that share of the cold start's demonstrations, drawn at random, asks a second
  candidate after the first reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from rlrouter.data.question import task_of
from rlrouter.rollout.demos import with_first_turn

BALANCES = ("none", "task")


def _share(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"curriculum.{name}: a share in [0, 1] (0 = off), got {value!r}")
    return float(value)


@dataclass
class CurriculumConfig:
    """The ``curriculum:`` section (see the module's doc)."""

    balance: str = "none"
    sources: list[str] = field(default_factory=list)
    no_answer_share: float = 0.0
    no_answer_first_call: bool = False
    first_call_share: float = 0.0
    demo_second_call: float = 0.0

    def __post_init__(self) -> None:
        if self.balance not in BALANCES:
            raise ValueError(f"curriculum.balance: one of {BALANCES}, got {self.balance!r}")
        if isinstance(self.sources, (str, bytes)) or not hasattr(self.sources, "__iter__") \
                or not all(isinstance(x, str) and x for x in self.sources):
            raise ValueError(f"curriculum.sources: a list of data source names (e.g. [gsm8k]; [] = all), "
                             f"got {self.sources!r}")
        self.sources = list(self.sources)
        self.no_answer_share = _share("no_answer_share", self.no_answer_share)
        self.first_call_share = _share("first_call_share", self.first_call_share)
        self.demo_second_call = _share("demo_second_call", self.demo_second_call)
        if not isinstance(self.no_answer_first_call, bool):
            raise ValueError(f"curriculum.no_answer_first_call: true or false, got {self.no_answer_first_call!r}")
        if self.no_answer_first_call and not self.no_answer_share:
            raise ValueError("curriculum.no_answer_first_call=true needs curriculum.no_answer_share > 0 (the "
                             "questions whose rollouts start after the cheap call)")
        if self.balance == "task" and self.no_answer_share:
            raise ValueError("curriculum.balance=task and curriculum.no_answer_share > 0 each split a step's "
                             "prompts; set one of them")


def draw_from(n: int, start: int, k: int, seed: int) -> list[int]:
    """Positions ``start .. start + k`` of the endless walk over ``range(n)`` in per-epoch seeded
    permutations (the data cursor). ``n`` 0 or ``k`` 0: nothing."""
    out: list[int] = []
    pos = start
    while n and len(out) < k:
        epoch, offset = divmod(pos, n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        take = min(k - len(out), n - offset)
        out.extend(int(i) for i in perm[offset:offset + take])
        pos += take
    return out


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """The data cursor: items of ``step``, from per-epoch seeded permutations. A pure function of step,
    so a resumed run draws exactly the batches an uninterrupted one would."""
    return draw_from(n, step * batch_size, batch_size, seed)


def split_counts(size: int, strata: int, step: int) -> list[int]:
    """``size`` prompts over ``strata`` equal strata at ``step``: each gets ``size // strata``, and the
    remainder goes to the strata next in turn (the one after the last step's), so over steps every
    stratum gets the same number."""
    base, extra = divmod(size, strata)
    first = (step * extra) % strata
    return [base + (1 if (s - first) % strata < extra else 0) for s in range(strata)]


class Curriculum:
    """A run's prompt draw over the RL questions (indices into the training questions).

    ``strata``: named lists of indices that partition the RL questions; ``counts(step, size)`` says how
    many of a step's prompts each stratum gives; one stratum (the natural mix) draws exactly
    ``batch_indices``."""

    def __init__(self, strata: dict[str, list[int]], mode: str = "natural", share: float = 0.0,
                 first_call: Sequence[int] = ()):
        if not strata or not any(strata.values()):
            raise ValueError("a curriculum needs training questions to draw from")
        self.strata = {k: list(v) for k, v in strata.items()}
        self.mode, self.share = mode, share
        self.first_call = sorted(first_call)
        self._stratum_of = {i: name for name, idx in self.strata.items() for i in idx}

    @classmethod
    def natural(cls, n: int) -> "Curriculum":
        return cls({"all": list(range(n))})

    def rl_items(self) -> list[int]:
        return sorted(self._stratum_of)

    def stratum_of(self, index: int) -> str | None:
        return self._stratum_of.get(index)

    def counts(self, step: int, size: int) -> list[int]:
        names = list(self.strata)
        if self.mode == "share":  # the first stratum's share, the rest from the second
            focus, rest = (len(self.strata[n]) for n in names)
            k = min(size, round(self.share * size)) if focus else 0
            return [k, size - k] if rest else [size, 0]
        if self.mode == "balance":
            return split_counts(size, len(names), step)
        return [size]

    def draw(self, step: int, size: int, seed: int) -> list[int]:
        """The step's ``size`` prompts: each stratum its count, from its own cursor (its position is what it
        gave in the steps before), stratum by stratum."""
        counts = self.counts(step, size)
        if self.mode == "share" and counts[0] == 0:  # a share that rounds to no prompt: the natural mix
            rl = self.rl_items()
            return [rl[j] for j in batch_indices(len(rl), size, step, seed)]
        out: list[int] = []
        for s, (name, idx) in enumerate(self.strata.items()):
            k = counts[s]
            start = step * k if self.mode != "balance" else sum(self.counts(t, size)[s] for t in range(step))
            out.extend(idx[j] for j in draw_from(len(idx), start, k, seed))
        return out

    def describe(self) -> str:
        sizes = {k: len(v) for k, v in self.strata.items()}
        if self.mode == "balance":
            return f"RL prompts split evenly over the tasks {sizes} (curriculum.balance=task)"
        if self.mode == "share":
            return (f"RL prompts: {self.share:.2f} of each step's from the {sizes['no_answer']} questions whose cheap "
                    f"reply states no final answer (curriculum.no_answer_share)")
        return f"RL prompts: the natural mix of {sizes['all']} training questions"

    def metrics(self, idx: Sequence[int], scores: Sequence[Any], calls: Sequence[int],
                group_size: int) -> dict[str, float]:
        """Per stratum of a stratified curriculum, over the step's trajectories (item-major, ``group_size`` a
        prompt; ``idx``: the step's questions): share that made two or more calls (``escalated``), mean
        reward, and over the stratum's groups holding both moves, mean reward escalating minus not (the
        sign GRPO gives escalating there). None for the natural mix."""
        if len(self.strata) < 2:
            return {}
        names = [self.stratum_of(idx[k // group_size]) for k in range(len(scores))]
        m: dict[str, float] = {}
        for name in self.strata:
            sel = [k for k, n in enumerate(names) if n == name]
            if not sel:
                continue
            m[f"rollout/{name}/escalated"] = float(np.mean([calls[k] >= 2 for k in sel]))
            m[f"rollout/{name}/reward"] = float(np.mean([scores[k].total for k in sel]))
            gaps = []
            for g in range(0, len(names), group_size):
                ks = [k for k in range(g, min(g + group_size, len(names))) if names[k] == name]
                esc = [scores[k].total for k in ks if calls[k] >= 2]
                rest = [scores[k].total for k in ks if calls[k] < 2]
                if esc and rest:
                    gaps.append(np.mean(esc) - np.mean(rest))
            if gaps:
                m[f"rollout/{name}/escalate_minus_answer"] = float(np.mean(gaps))
        return m


def build_curriculum(cfg: CurriculumConfig, items: Sequence[dict[str, Any]], no_answer: Sequence[int] = (),
                     has_replies: bool = True, seed: int = 0) -> Curriculum:
    """The run's curriculum over ``items`` (the training questions). ``no_answer``: indices of those whose
    cheapest candidate's logged reply states no final answer (none without a replay pool:
    ``has_replies`` False). Bad choices fail here, naming the field."""
    rl = list(range(len(items)))
    if cfg.sources:
        have = sorted({str(it.get("source", "")) for it in items})
        missing = [s for s in cfg.sources if s not in have]
        if missing:
            raise ValueError(f"curriculum.sources: no training question has source {missing} "
                             f"(the training split's sources: {have})")
        rl = [i for i, it in enumerate(items) if it.get("source") in cfg.sources]
    if (cfg.first_call_share > 0 or cfg.no_answer_share > 0) and not has_replies:
        raise ValueError("curriculum.no_answer_share / first_call_share: the pool has no logged replies to read "
                         "or write the first call from (live candidates); set them to 0")
    if cfg.no_answer_share > 0 and not no_answer:
        raise ValueError(f"curriculum.no_answer_share={cfg.no_answer_share}: none of the {len(items)} training "
                         "questions has a cheapest-candidate reply without a final answer; set it to 0")
    first_call = first_call_items(cfg, len(items), no_answer, seed)
    if cfg.balance == "task":
        tasks: dict[str, list[int]] = {}
        for i in rl:
            tasks.setdefault(task_of(items[i]), []).append(i)
        return Curriculum(tasks, "balance", first_call=first_call)
    if cfg.no_answer_share > 0:
        stratum = set(no_answer)
        focus = [i for i in rl if i in stratum]
        if not focus:
            raise ValueError(f"curriculum.no_answer_share={cfg.no_answer_share}: none of the questions of "
                             f"curriculum.sources={list(cfg.sources)} has a cheap reply without a final answer")
        return Curriculum({"no_answer": focus, "states_answer": [i for i in rl if i not in stratum]}, "share",
                          cfg.no_answer_share, first_call)
    return Curriculum({"all": rl}, first_call=first_call)


def first_call_items(cfg: CurriculumConfig, n_items: int, no_answer: Sequence[int], seed: int = 0) -> list[int]:
    """Indices of the training questions whose rollouts start after the cheap call: the stratum under
    ``no_answer_first_call``, and ``first_call_share`` of the others, drawn once with the seed."""
    chosen = set(no_answer) if cfg.no_answer_first_call else set()
    stratum = set(no_answer)
    others = [i for i in range(n_items) if i not in stratum]
    k = int(round(cfg.first_call_share * len(others)))
    if k:
        rng = np.random.default_rng(seed + 104729)
        chosen.update(int(others[j]) for j in rng.choice(len(others), size=k, replace=False))
    return sorted(chosen)


Items = list[dict[str, Any]]


def write_first_calls(curriculum: Curriculum, held_out: bool, train: Items, dev: Items, test: Items,
                      cheap: str | None, query_words: int = 24) -> tuple[Items, Items, Items]:
    """The one question hook of a run (the two-model escalation study, ``experiment=two_model_escalation``): the
    questions whose episodes start after a written call to the cheapest candidate, with its logged reply, so the
    policy's own decision is the one after that reply. ``curriculum.first_call`` picks the training questions;
    ``held_out`` (``eval.first_call_written``) writes it for every dev and held-out question (the policy scored as
    a cascade's second stage). ``cheap``: the pool's cheapest candidate, None without logged replies. Returns
    (train, dev, test), new lists; a run with neither gets its lists back unchanged."""
    if not (curriculum.first_call or held_out):
        return train, dev, test
    if cheap is None:
        raise ValueError("eval.first_call_written / curriculum.first_call_share: the first call is written from logged "
                         "replies, and this pool has none (a replay pool has them); set them off")
    chosen = set(curriculum.first_call)
    train = [with_first_turn(it, cheap, query_words) if i in chosen else it for i, it in enumerate(train)]
    if chosen:
        print(f"first call written: {len(chosen)} of {len(train)} training questions start after the call to {cheap}")
    if held_out:
        dev, test = ([with_first_turn(it, cheap, query_words) for it in items] for items in (dev, test))
        print(f"held-out: every question starts after the call to {cheap} (eval.first_call_written)")
    return train, dev, test
