"""A candidate's failure as the client sees it: no terminal codes, Ray actor ids or tracebacks, and a 400
(OpenAI's ``context_length_exceeded``) for a prompt over the candidate's context."""

import traceback

import pytest
from ray.exceptions import RayTaskError

from rlrouter.serving.errors import candidate_error, public_text

ACTOR_ID = "5f0c2e7a9b1d3e4f6a8b0c2d01000000"
VLLM_SAYS = ("The decoder prompt (length 3012) is longer than the maximum model length of 2048. "
             "Make sure that `max_model_len` is no smaller than the number of text tokens.")


class VLLMValidationError(ValueError):
    """Stands for vllm.exceptions.VLLMValidationError: only its name reaches the text."""


def ray_task_error(cause: Exception) -> RayTaskError:
    """The error a vLLM actor's ``generate`` raises in its caller, as Ray builds it."""
    try:
        raise cause
    except Exception:
        tb = traceback.format_exc()
    return RayTaskError("generate", tb, cause, proctitle="ray::VLLMCandidateEngine.generate", pid=4242,
                        ip="10.0.0.5", actor_repr="<VLLMCandidateEngine object>",
                        actor_id=ACTOR_ID).as_instanceof_cause()


def internals(text: str) -> list[str]:
    return [bad for bad in ("\x1b", ACTOR_ID, "actor_id", "pid=", "RayTaskError", "Traceback", "ray::", "File \"")
            if bad in text]


def vllm_pool_text(e: Exception, whole: bool) -> str:
    """The pool's error text for a failed vLLM call: today it keeps the first line of ``str(e)``
    (rlrouter/pool/vllm_backend.py); ``whole``: all of it."""
    said = str(e) if whole else str(e).splitlines()[0]
    return f"vllm 'smollm2-135m': {type(e).__name__}: {said}"


@pytest.mark.parametrize("whole", [False, True])
def test_a_ray_task_error_is_stripped_of_its_internals(whole):
    e = ray_task_error(VLLMValidationError(VLLM_SAYS))
    raw = vllm_pool_text(e, whole)
    assert internals(raw)  # what the client used to get
    err = candidate_error("smollm2-135m", raw)
    assert not internals(err.message), err.message
    assert err.status == 400 and err.field == "messages"  # the candidate refused the input: not a 5xx
    assert "vllm" not in err.message.lower() and "VLLMValidationError" not in err.message  # no backend named
    if whole:  # the cause's own words reached the pool's text: OpenAI's code and words for it
        assert err.code == "context_length_exceeded"
        assert err.message == ("field 'messages': model 'smollm2-135m' has a maximum context length of 2048 tokens. "
                               "However, your messages resulted in 3012 tokens. Please reduce the length of the "
                               "messages.")


def test_context_length_from_an_openai_compatible_upstream():
    raw = ("openai 'gpt-4o-mini' at https://api.openai.com/v1: HTTP 400: This model's maximum context length is "
           "128000 tokens. However, your messages resulted in 130020 tokens. Please reduce the length of the messages.")
    err = candidate_error("gpt-4o-mini", raw)
    assert (err.status, err.code, err.field) == (400, "context_length_exceeded", "messages")
    assert "maximum context length of 128000 tokens" in err.message and "130020 tokens" in err.message
    assert "openai" not in err.message and "HTTP" not in err.message


def test_other_failures_stay_502_without_internals():
    e = ray_task_error(RuntimeError("CUDA out of memory"))
    err = candidate_error("smollm2-135m", f"vllm 'smollm2-135m': {type(e).__name__}: {e}")
    assert err.status == 502 and err.code is None and not internals(err.message)
    assert "CUDA out of memory" in err.message  # the last line of a traceback: the cause's words
    err = candidate_error("live", "openai 'live' at http://127.0.0.1:9/v1: connection error: ConnectError: refused")
    assert err.status == 502 and err.message == ("candidate 'live' failed: openai 'live' at http://127.0.0.1:9/v1: "
                                                 "connection error: ConnectError: refused")


def test_public_text():
    assert public_text("\x1b[36mray::A.f()\x1b[39m (pid=1, ip=1.2.3.4, actor_id=ab, repr=<A>)") == ""
    assert public_text("plain words") == "plain words"


def test_our_engines_statement_reads_back_through_ray():
    """The vLLM candidate's serving check raises RequestTooLong in its actor; the pool passes on the first
    line of the Ray error; the client gets OpenAI's error, with the numbers and without the backend."""
    from rlrouter.pool.base import RequestTooLong

    from rlrouter.pool.vllm_backend import _engine_error

    prompt = candidate_error("smollm2-135m", _engine_error("smollm2-135m", ray_task_error(RequestTooLong(2048, 3012))))
    assert (prompt.status, prompt.code, prompt.field) == (400, "context_length_exceeded", "messages")
    assert "maximum context length of 2048 tokens" in prompt.message and "3012 tokens" in prompt.message
    room = candidate_error("smollm2-135m", _engine_error("smollm2-135m", ray_task_error(RequestTooLong(2048, 30, 100000))))
    assert (room.status, room.code, room.field) == (400, "invalid_value", "max_tokens")
    assert room.message == ("field 'max_tokens' is too large: 100000. Model 'smollm2-135m' has a maximum context "
                            "length of 2048 tokens and your messages use 30 of them, so max_tokens may be at most "
                            "2018.")
    for err in (prompt, room):
        assert not internals(err.message) and "vllm" not in err.message and "RequestTooLong" not in err.message
    assert RequestTooLong(10, 10).prompt_too_long and not RequestTooLong(10, 9, 5).prompt_too_long
    import pickle  # Ray pickles the actor's exception to the caller: it must come back whole

    back = pickle.loads(pickle.dumps(RequestTooLong(2048, 30, 100000)))
    assert (back.context, back.prompt_tokens, back.max_tokens, str(back)) == (2048, 30, 100000,
                                                                             str(RequestTooLong(2048, 30, 100000)))


def test_a_refusal_names_no_backend():
    err = candidate_error("live", "openai 'live' at http://127.0.0.1:9/v1: HTTP 400: temperature must be <= 2")
    assert err.status == 400 and err.message == ("field 'messages': model 'live' refused the request as invalid: "
                                                 "temperature must be <= 2")
    err = candidate_error("smollm2-135m", "vllm 'smollm2-135m': VLLMValidationError: top_k must be -1 or >= 1")
    assert err.message.endswith("invalid: top_k must be -1 or >= 1") and "vllm" not in err.message.lower()
