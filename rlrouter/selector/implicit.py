"""Implicit feedback: classify a user's follow-up message into satisfied / need_clarification /
wrong_answer / want_different (VSR's implicit feedback types), with a confidence that scales the
posterior update.

The classifier is a nearest-prototype model on MiniLM sentence embeddings: each label's prototype is
the normalised mean embedding of the seed examples below; a follow-up's label is the prototype with
the highest cosine similarity, and the confidence is the softmax of the similarities at temperature
``temperature``. Meaning, not keywords, decides: "cheers, that sorted it" lands on *satisfied*
though it shares no word with the examples.

Training data (``SEED_EXAMPLES``): 16 hand-written follow-ups per label, written for this project
(no external data), covering thanks, confusion, corrections and requests for another model or style.
They are fixed in source, so the prototypes are deterministic for a given encoder; the held-out
phrases in tests/selector/test_implicit.py measure the classifier on text it has not seen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

LABELS = ("satisfied", "need_clarification", "wrong_answer", "want_different")

SEED_EXAMPLES: dict[str, tuple[str, ...]] = {
    "satisfied": (
        "Thanks, that's exactly what I needed.",
        "Perfect, it works now.",
        "Great answer, thank you!",
        "That solved my problem.",
        "Awesome, much appreciated.",
        "Yes, that's correct, thanks.",
        "Very helpful explanation.",
        "Got it, that makes sense now.",
        "Nice, the code runs fine.",
        "Brilliant, that's what I was looking for.",
        "Thank you so much, this is great.",
        "Cool, that answers my question.",
        "Excellent, I'll use that.",
        "That was clear and helpful.",
        "Works like a charm.",
        "Good job, that's right.",
    ),
    "need_clarification": (
        "Can you explain that in more detail?",
        "I don't understand the second step.",
        "What do you mean by that?",
        "Could you give me an example?",
        "Why does that work?",
        "Can you clarify the last part?",
        "I'm confused, can you elaborate?",
        "How exactly do I do that?",
        "What does this term mean?",
        "Could you break it down step by step?",
        "Can you say more about why?",
        "I'm not sure I follow, explain again please.",
        "Where does that number come from?",
        "Can you expand on the first point?",
        "What would that look like in practice?",
        "Sorry, can you rephrase that more simply?",
    ),
    "wrong_answer": (
        "That's wrong.",
        "No, that's incorrect.",
        "The answer should be 42, not 36.",
        "This code doesn't work, it throws an error.",
        "You made a mistake in the calculation.",
        "That's not true at all.",
        "Your answer contradicts the documentation.",
        "The result is off, check your math.",
        "That fact is false.",
        "No, the capital of Australia is Canberra, not Sydney.",
        "This is factually inaccurate.",
        "The function you wrote returns the wrong value.",
        "That's a hallucination, that paper doesn't exist.",
        "You got the date wrong.",
        "Incorrect, try again and fix the bug.",
        "Your solution fails on the test cases.",
    ),
    "want_different": (
        "Can I get a different answer?",
        "Try another model.",
        "Give me another approach.",
        "I'd like a shorter version.",
        "Can you answer in a different style?",
        "Show me an alternative solution.",
        "Regenerate that please.",
        "That's not what I asked for, give me something else.",
        "Use a more formal tone instead.",
        "Let me see a second opinion.",
        "Can you write it in Python instead of Java?",
        "Give me a different example this time.",
        "I want a more creative response.",
        "Switch to a stronger model for this.",
        "Rewrite it as a bullet list instead.",
        "Another option please.",
    ),
}


@dataclass(frozen=True)
class ImplicitLabel:
    label: str
    confidence: float
    similarities: dict[str, float]


class ImplicitFeedbackClassifier:
    """Nearest-prototype classifier over sentence embeddings."""

    def __init__(self, encode: Callable[[Sequence[str]], np.ndarray],
                 examples: dict[str, Sequence[str]] | None = None, temperature: float = 0.05):
        examples = dict(examples or SEED_EXAMPLES)
        if set(examples) != set(LABELS):
            raise ValueError(f"examples: expected exactly the labels {LABELS}, got {sorted(examples)}")
        if temperature <= 0:
            raise ValueError(f"temperature: must be > 0, got {temperature}")
        self.encode = encode
        self.temperature = temperature
        protos = []
        for label in LABELS:
            texts = list(examples[label])
            if not texts:
                raise ValueError(f"examples['{label}']: must not be empty")
            e = np.asarray(encode(texts), dtype=np.float64)  # (n, d)
            e = e / np.linalg.norm(e, axis=1, keepdims=True).clip(1e-12)
            c = e.mean(0)
            protos.append(c / max(np.linalg.norm(c), 1e-12))
        self.prototypes = np.stack(protos)  # (L, d)

    def classify_many(self, texts: Sequence[str]) -> list[ImplicitLabel]:
        e = np.asarray(self.encode(list(texts)), dtype=np.float64)  # (n, d)
        e = e / np.linalg.norm(e, axis=1, keepdims=True).clip(1e-12)
        sims = e @ self.prototypes.T  # (n, L)
        z = sims / self.temperature
        z = z - z.max(1, keepdims=True)
        p = np.exp(z)
        p = p / p.sum(1, keepdims=True)
        out = []
        for i in range(len(texts)):
            k = int(np.argmax(p[i]))
            out.append(ImplicitLabel(LABELS[k], float(p[i, k]),
                                     {lab: float(sims[i, j]) for j, lab in enumerate(LABELS)}))
        return out

    def classify(self, text: str) -> ImplicitLabel:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("followup_text: must be a non-empty string")
        return self.classify_many([text])[0]
