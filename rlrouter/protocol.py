"""The Router-R1 tag protocol, read one way by everyone: the rollout environment, the reward, serving.

Router-R1 (arXiv 2506.09033, Sec. 3) has the policy write::

    <think> ... </think>
    <search> MODEL: sub-query </search>
    <information> the candidate's reply (inserted by the environment) </information>
    <think> ... </think>
    <answer> final answer </answer>

One rule for candidate names holds everywhere: a name matches ignoring case, the longest
name that fits wins (names may hold ':' such as ``llama3:8b``), and the route carries the pool's
spelling. So what the environment routes is exactly what the reward accepts.

Answers by reference: where a question's answer is a whole reply (a program, an essay) that a small policy
cannot copy back, its ground truth is :data:`REPLY_GOLD` and the policy answers with the name of the
candidate whose reply it returns (``<answer>gpt-3.5</answer>``). :func:`referenced_outcome` grades such an
answer by that candidate's logged outcome on this trajectory's call; a name the trajectory did not call
scores 0.

Two readers of a ``<search>`` body: :func:`parse_route` (the environment's: returns the error text
that goes back to the policy) and :func:`read_route` (tolerant: ``None`` when malformed, for cost
accounting and tool budgets on any trajectory). :func:`check_format` is the format reward's rule
set, which follows Router-R1's released reward: besides the tag grammar, a ``<think>`` that holds
only ``...`` and a route whose sub-query is the prompt's placeholder (``your-query``; also with the
example's model name before it) break the format.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

TAGS = ("think", "search", "information", "answer")
ActionKind = Literal["search", "answer", "none"]

ERROR_PREFIX = "Error:"
NO_ACTION_ERROR = (f"{ERROR_PREFIX} no action found. End each turn with <search>MODEL: sub-query</search> "
                   "or <answer>...</answer>.")
PLACEHOLDER_QUERIES = frozenset({"sub-query", "your-query", "query", "your query", "sub query"})
"""Literal placeholders of the prompts' rules (ours: ``sub-query``; Router-R1's: ``your-query``). A
policy that copies them has routed nothing."""

REPLY_GOLD = "<the reply of the candidate the answer names>"
"""The ground truth of a question graded by reference (see the module docstring): no text is gold, the
reply the answer names is graded by its logged outcome."""

_TAG_RE = re.compile(r"<(/?)(think|search|information|answer)>")
_CLOSE_ACTION = re.compile(r"</(search|answer)>")
_INFO_RE = re.compile(r"<information>.*?</information>", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_SEARCH_RE = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ONLY_DOTS = re.compile(r"^[\s.\u2026]*$")


# ---------------------------------------------------------------- routes


@dataclass(frozen=True)
class RouteCall:
    """A well-formed ``<search>``: the candidate's name as the pool spells it, and the sub-query."""

    model: str
    query: str


def is_placeholder(query: str) -> bool:
    """True for a sub-query that is a prompt's placeholder rather than a question."""
    return query.strip().strip("<>[]{}\"'").strip().lower() in PLACEHOLDER_QUERIES


def match_name(content: str, candidate_names: Iterable[str]) -> tuple[str, str] | None:
    """(pool name, text after the name) when ``content`` starts with a candidate name followed by
    ':', ignoring case; the longest such name wins. ``None`` when no name fits."""
    lowered = content.lower()
    for name in sorted(candidate_names, key=len, reverse=True):
        if not name or not lowered.startswith(name.lower()):
            continue
        rest = content[len(name):].lstrip()
        if rest.startswith(":"):  # "gpt-4o: ..." must not match the candidate "gpt-4"
            return name, rest[1:].strip()
    return None


def compact_name(content: str, candidate_names: Iterable[str]) -> str | None:
    """The pool name when ``content`` is exactly a candidate's name (ignoring case and surrounding space):
    a compact route, ``<search>MODEL</search>``, whose call asks the question itself
    (``rollout.env.action: compact``). ``None`` otherwise."""
    lowered = content.strip().lower()
    return next((n for n in candidate_names if n and n.lower() == lowered), None)


def parse_route(content: str, candidate_names: Sequence[str]) -> RouteCall | str:
    """Parse the inside of ``<search>``: ``MODEL: sub-query``, or a compact ``MODEL`` alone (a ``RouteCall``
    with an empty query: the call asks the question itself). Returns a ``RouteCall`` or the error text
    for the policy. No fuzzy matching beyond case: the policy must learn the names."""
    if not candidate_names:
        raise ValueError("candidate_names: at least one candidate is required")
    choices = ", ".join(candidate_names)
    content = content.strip()
    if not content:
        return f"{ERROR_PREFIX} empty <search>. Write <search>MODEL: sub-query</search>, MODEL one of: {choices}."
    compact = compact_name(content, candidate_names)
    if compact is not None:
        return RouteCall(model=compact, query="")
    found = match_name(content, candidate_names)
    if found is not None:
        name, query = found
        if not query or is_placeholder(query):
            return f"{ERROR_PREFIX} no sub-query after '{name}:'. Write the question for the candidate."
        return RouteCall(model=name, query=query)
    if ":" not in content:
        return f"{ERROR_PREFIX} malformed <search>, expected 'MODEL: sub-query' with MODEL one of: {choices}."
    model = content.split(":", 1)[0].strip()
    if not model:
        return f"{ERROR_PREFIX} missing MODEL before ':'. Choose one of: {choices}."
    return f"{ERROR_PREFIX} unknown model '{model}'. Choose one of: {choices}."


def read_route(content: str, candidates: Iterable[str] | None = None) -> RouteCall | None:
    """Tolerant ``model: query``: with ``candidates`` a known name (the :func:`match_name` rule), else
    whatever precedes the first ':'. ``None`` if malformed or the query is empty."""
    s = content.strip()
    if candidates is not None:
        compact = compact_name(s, candidates)
        if compact is not None:
            return RouteCall(compact, "")
        found = match_name(s, candidates)
        return RouteCall(*found) if found is not None and found[1] else None
    model, sep, query = s.partition(":")
    model, query = model.strip(), query.strip()
    return RouteCall(model, query) if sep and model and query else None


def extract_routes(text: str, candidates: Iterable[str] | None = None) -> list[RouteCall | None]:
    """Every ``<search>`` the policy wrote (not those inside ``<information>``), in order, parsed;
    ``None`` where malformed. A known name is matched first (so names holding ':' parse), then
    anything before the first ':'."""
    known = None if candidates is None else list(candidates)
    routes = []
    for m in _SEARCH_RE.finditer(_INFO_RE.sub("", text)):
        route = read_route(m.group(1), known) if known is not None else None
        routes.append(route or read_route(m.group(1)))
    return routes


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` written by the policy (not inside an
    ``<information>`` block), stripped; ``None`` when there is none."""
    matches = _ANSWER_RE.findall(_INFO_RE.sub("", text))
    return matches[-1].strip() if matches else None


# ---------------------------------------------------------------- one policy turn (environment)


@dataclass(frozen=True)
class Turn:
    """One parsed policy turn.

    ``kind`` names the closing tag that ended the chunk (``none``: neither). ``text`` is the chunk cut
    just after that tag, ``rest`` what followed it. ``error`` is set when the turn breaks the protocol:
    it is the text to put in ``<information>`` and it counts against format. A ``search`` without error
    carries its ``call``.
    """

    kind: ActionKind
    text: str
    content: str = ""
    call: RouteCall | None = None
    error: str | None = None
    rest: str = ""
    """What the chunk held after the closing tag: empty when the engine stopped at the tag."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def truncated(self) -> bool:
        """True when text after the action was cut off (the engine did not stop at the tag)."""
        return bool(self.rest.strip())


def by_reference(golds: Iterable[str]) -> bool:
    """True for a question graded by reference (its ground truth is :data:`REPLY_GOLD`)."""
    return list(golds) == [REPLY_GOLD]


def referenced_outcome(answer: str, calls: Sequence[tuple[str, bool | None]]) -> float:
    """An answer by reference against the trajectory's calls, ``(candidate, logged outcome)`` in order: the
    logged outcome (1.0 / 0.0) of the last call to the candidate the answer names (the whole answer is the
    name, ignoring case and a final period). 0.0 when it names no candidate the trajectory called, or the
    call has no logged outcome."""
    name = answer.strip().rstrip(".").strip()
    for model, correct in reversed(list(calls)):
        if name.lower() == model.lower():
            return float(bool(correct))
    return 0.0


def parse_turn(chunk: str, candidate_names: Sequence[str]) -> Turn:
    """Find the action that ends a generated chunk and check it.

    The first ``</search>`` or ``</answer>`` ends the turn (as the engine's stop strings would); its
    opening tag is the last one before it. An answer must not be empty; a search must name a candidate.
    """
    close = _CLOSE_ACTION.search(chunk)
    if close is None:
        return Turn(kind="none", text=chunk, error=NO_ACTION_ERROR)
    kind: ActionKind = close.group(1)  # type: ignore[assignment]
    text, rest = chunk[:close.end()], chunk[close.end():]
    open_at = text.rfind(f"<{kind}>", 0, close.start())
    if open_at < 0:
        return Turn(kind=kind, text=text, error=f"{ERROR_PREFIX} </{kind}> without <{kind}>.", rest=rest)
    content = text[open_at + len(kind) + 2:close.start()].strip()
    if kind == "answer":
        error = None if content else f"{ERROR_PREFIX} empty <answer>. Put the final answer inside the tags."
        return Turn(kind="answer", text=text, content=content, error=error, rest=rest)
    route = parse_route(content, candidate_names)
    if isinstance(route, str):
        return Turn(kind="search", text=text, content=content, error=route, rest=rest)
    return Turn(kind="search", text=text, content=content, call=route, rest=rest)


def failed_call_error(model: str, reason: str) -> str:
    """The ``<information>`` text for a route call the pool could not answer."""
    return f"{ERROR_PREFIX} the call to {model} failed ({reason.strip() or 'no reason given'})."


def format_information(text_or_error: str, max_chars: int | None = None, note: str = "") -> str:
    """Wrap a candidate's reply (or an error text) as Router-R1's ``<information>`` block.

    The candidate's own protocol tags are defused (``<answer>`` -> ``[answer]``): a reply must not end
    the information block early, nor be read as the policy's answer by ``extract_answer``. ``max_chars``
    cuts long replies so a small policy's context is not spent on one block. The cut keeps the reply's
    first quarter and its end, joined by " ... ": a reply states its final answer last (on GSM8K, 39% of
    GPT-4's logged replies lost their final number when only their first 400 characters were kept, so a
    policy that copied the reply copied a wrong number). ``note`` (the environment's remark on the reply,
    ``rollout.env.mark_no_answer``) goes on a line of its own at the block's end, after any cut.
    """
    body = _TAG_RE.sub(lambda m: f"[{m.group(1)}{m.group(2)}]", text_or_error.strip())
    if max_chars is not None and len(body) > max_chars:
        head = max_chars // 4
        tail = max_chars - head
        body = body[:head].rstrip() + " ... " + body[len(body) - tail:].lstrip()
    if note:
        body += "\n" + note
    return f"\n\n<information>{body}</information>\n\n"


# ---------------------------------------------------------------- a whole trajectory (format reward)


@dataclass(frozen=True)
class Block:
    """One tagged span of a trajectory: the tag and its inner text."""

    tag: str
    content: str


class FormatError(ValueError):
    """Why a trajectory breaks the protocol (the reason is logged, the reward is just -1)."""


def parse_blocks(text: str) -> list[Block]:
    """Split a trajectory into tagged blocks, checking that tags are balanced and not nested.

    ``<information>`` is opaque: it holds a candidate's raw answer, written by the environment, which
    may itself contain ``<think>`` or ``<answer>`` strings; the policy is not to blame for those, so
    the scan jumps to the matching ``</information>``. Raises :class:`FormatError`.
    """
    blocks: list[Block] = []
    pos = 0
    while True:
        m = _TAG_RE.search(text, pos)
        if m is None:
            return blocks
        closing, tag = m.group(1), m.group(2)
        if closing:
            raise FormatError(f"unbalanced: </{tag}> without an open <{tag}>")
        end_tag = f"</{tag}>"
        if tag == "information":
            end = text.find(end_tag, m.end())
            if end < 0:
                raise FormatError("unbalanced: <information> is never closed")
        else:
            inner = _TAG_RE.search(text, m.end())
            if inner is None:
                raise FormatError(f"unbalanced: <{tag}> is never closed")
            if inner.group(1) == "":
                raise FormatError(f"nested: <{inner.group(2)}> inside <{tag}>")
            if inner.group(2) != tag:
                raise FormatError(f"unbalanced: </{inner.group(2)}> closes <{tag}>")
            end = inner.start()
        blocks.append(Block(tag, text[m.end():end]))
        pos = end + len(end_tag)


def check_format(text: str, candidates: Iterable[str] | None, calls: int | None = None,
                 require_think: bool = True) -> None:
    """Raise :class:`FormatError` naming the first rule the trajectory breaks.

    Rules (after Router-R1's prompt and released reward): starts with ``<think>`` and ends
    with ``</answer>`` (surrounding whitespace ignored); tags balanced and not nested; no ``<think>``
    that is empty or only ``...``; exactly one ``<answer>``, not empty; every ``<search>`` is followed
    by exactly one ``<information>`` and every ``<information>`` answers a ``<search>``; every route
    reads ``model: query`` with a known candidate (:func:`match_name`) and a query that is not a
    placeholder. Text between blocks is not judged: Router-R1's rules do not forbid it. ``calls`` (the
    number of calls the environment ran, when known): no more ``<search>`` blocks than that, so a turn
    that writes its own ``<search>`` and ``<information>`` (in the answer-only turn, where nothing is
    called) does not pass as a call and its reply. ``require_think=False`` (a trajectory answered by a
    candidate's reply, ``rollout.env.answer: reply``): it need not start with ``<think>``.
    """
    s = text.strip()
    if not s:
        raise FormatError("empty output")
    if require_think and not s.startswith("<think>"):
        # a compact route to no candidate ran no call, so nothing answered it: name the route, not the <think>
        m = _LEADING_ROUTE.match(s)
        if m and candidates is not None and ":" not in m.group(1) and compact_name(m.group(1), list(candidates)) is None:
            raise FormatError(f"unknown candidate '{m.group(1).strip()[:40]}'")
        raise FormatError("does not start with <think>")
    if not s.endswith("</answer>"):
        raise FormatError("does not end with </answer>")
    blocks = parse_blocks(s)
    known = None if candidates is None else list(candidates)
    answers = 0
    for i, b in enumerate(blocks):
        if b.tag == "think" and not b.content.strip():
            raise FormatError("empty <think>")
        if b.tag == "think" and _ONLY_DOTS.match(b.content):
            raise FormatError("placeholder <think>: only '...'")
        if b.tag == "answer":
            answers += 1
            if not b.content.strip():
                raise FormatError("empty <answer>")
        if b.tag == "search":
            if i + 1 >= len(blocks) or blocks[i + 1].tag != "information":
                raise FormatError("<search> is not followed by one <information>")
            _check_route(b.content, known)
        if b.tag == "information" and (i == 0 or blocks[i - 1].tag != "search"):
            raise FormatError("<information> without a <search> before it")
    if answers != 1:
        raise FormatError(f"{answers} <answer> blocks, expected exactly one")
    searches = sum(b.tag == "search" for b in blocks)
    if calls is not None and searches > calls:
        raise FormatError(f"{searches} <search> blocks, {calls} of them called: a <search> the environment did not run")


_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_LEADING_ROUTE = re.compile(r"<search>(.*?)</search>", re.DOTALL)


def last_thinking(text: str) -> str:
    """The last ``<think>...</think>`` block's text (the reasoning of a policy's last turn); "" without one."""
    blocks = _THINK_RE.findall(text)
    return blocks[-1].strip() if blocks else ""

FORMAT_CHECKS = ("starts with <think>", "a closed, non-empty <think>", "tags balanced, not nested",
                 "a non-empty <answer>", "exactly one <answer>", "ends with </answer>",
                 "an action (<search> or <answer>); every <search> a known 'model: query' followed by "
                 "<information>", "every <information> right after a <search>")


def format_progress(text: str, candidates: Iterable[str] | None, calls: int | None = None,
                    require_think: bool = True) -> float:
    """How far a trajectory is from the protocol, in [0, 1]: 1 exactly when :func:`check_format`
    passes, else the share of :data:`FORMAT_CHECKS` it passes over ``len(FORMAT_CHECKS) + 1`` (so an
    invalid trajectory never reaches 1).

    The checks are the format rules, read leniently one by one (complete blocks found by regex, even
    when other tags are unbalanced), so that a policy with no valid trajectory yet, such as a base model
    before any cold start, still gets a graded signal (``RouterR1FormatReward(graded=True)``).
    """
    try:
        check_format(text, candidates, calls, require_think)
        return 1.0
    except FormatError:
        pass
    s = text.strip()
    known = None if candidates is None else list(candidates)
    try:
        balanced = bool(parse_blocks(s))  # tagless text is not credited as balanced
    except FormatError:
        balanced = False
    answers = _ANSWER_RE.findall(s)
    # not vacuous: text with no action at all (a ramble the env cut off) must score below a well-formed
    # route call, or an untrained policy's groups have no spread to learn from
    routes_ok = bool(answers) or _SEARCH_RE.search(s) is not None
    for m in _SEARCH_RE.finditer(s):
        try:
            _check_route(m.group(1), known)
        except FormatError:
            routes_ok = False
        if not s[m.end():].lstrip().startswith("<information>"):
            routes_ok = False
    # the env writes <information> only after a call (or a failed turn): one the policy wrote itself,
    # copying the prompt's example instead of calling, must not pass (RL with no cold start learned to do that)
    infos_ok = all(s[:m.start()].rstrip().endswith("</search>") for m in _INFO_RE.finditer(s))
    passed = [s.startswith("<think>") or not require_think,
              any(t.strip() and not _ONLY_DOTS.match(t) for t in _THINK_RE.findall(s)) or not require_think,
              balanced,
              any(a.strip() for a in answers),
              len(answers) == 1,
              s.endswith("</answer>"),
              routes_ok,
              infos_ok]
    return sum(passed) / (len(FORMAT_CHECKS) + 1)


def _check_route(content: str, known: list[str] | None) -> None:
    if known is not None and compact_name(content, known) is not None:
        return  # a compact route: the call asked the question itself
    found = match_name(content.strip(), known) if known is not None else None
    if found is None:
        model, sep, query = content.strip().partition(":")
        if known is not None and sep and model.strip():
            raise FormatError(f"unknown candidate '{model.strip()}'")
        if not (sep and model.strip() and query.strip()):
            raise FormatError(f"route is not 'model: query': {content.strip()[:60]!r}")
        found = (model.strip(), query.strip())
    if not found[1]:
        raise FormatError(f"route is not 'model: query': {content.strip()[:60]!r}")
    if is_placeholder(found[1]):
        raise FormatError(f"placeholder route query {found[1]!r}")
