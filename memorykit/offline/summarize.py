"""Offline ``summarize``: an extractive summary chosen by embedding centrality and novelty.

Every sentence of the new messages and every fact of the previous summary is a candidate,
embedded with the local model. A small logistic regression on those embeddings, trained on
``data/conversations/smalltalk.jsonl`` (train split), gives the chance that a sentence
carries content rather than small talk; below one half it is not a candidate. Each
candidate gets a value: that chance, who said it (the user's own statements count most,
questions less), how specific it is (numbers and names), its length, its novelty (how far
it is from every other exchange: an off-topic personal fact is worth keeping, the tenth
sentence on the same topic is not) and its centrality. A maximal-marginal-relevance pass then
picks facts by value minus similarity to what is already picked (a repeat that brings new
numbers or names counts half as a repeat), within the fact and token budget. Facts are kept
verbatim with their speaker (``user: ...``), so every fact traces to a message.
Measured on ``data/conversations/planted.jsonl`` by ``benchmarks/short_term.py``.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import data_path
from ..memory.summarize import Summary, SummarizeInput, anchors
from ..messages import count_tokens
from . import PREFIX
from .fit_cache import cached, fingerprint
from .text import sentences, vectors

ROLE_WEIGHT = {"user": 1.0, "assistant": 0.5, "tool": 0.5}
QUESTION_WEIGHT = 0.3
NOVELTY_WEIGHT = 1.0
CENTRALITY_WEIGHT = 0.3
SPECIFIC_WEIGHT = 1.0
LENGTH_WEIGHT = 0.5
REDUNDANCY = 1.0
NEW_ANCHORS_REPEAT = 0.5
RECENCY = 0.02
MIN_CONTENT = 0.5
MIN_GAIN = 0.6
MAX_TOKENS = 320
MIN_WORDS = 2

_WORD = re.compile(r"[^\W_]+(?:[.,:'’][^\W_]+)*", re.UNICODE)
_SPEAKER = re.compile(r"^(user|assistant|tool): ")


@dataclass
class Candidate:
    text: str
    role: str
    order: int
    exchange: int

    @property
    def fact(self) -> str:
        return f"{self.role}: {self.text}"


def specificity(text: str) -> int:
    """Numbers and capitalised words past the first: what makes a sentence concrete."""
    tokens = _WORD.findall(text)
    return sum(any(c.isdigit() for c in t) for t in tokens) + sum(t[0].isupper() for t in tokens[1:] if t != "I")


def candidates(inp: SummarizeInput) -> list[Candidate]:
    """The previous facts (in order) then every sentence of the new messages."""
    out: list[Candidate] = []
    for fact in inp.previous:
        m = _SPEAKER.match(fact)
        out.append(Candidate(fact[m.end():] if m else fact, m.group(1) if m else "user", len(out), -len(out) - 1))
    exchange = 0
    for message in inp.messages:
        if message.role == "system":
            continue
        exchange += message.role == "user"
        text = message.content.removeprefix(PREFIX)
        for s in sentences(text):
            if len(_WORD.findall(s)) >= MIN_WORDS:
                out.append(Candidate(s, message.role, len(out), exchange))
    return out


def _fit_content_model():
    from sklearn.linear_model import LogisticRegression

    rows = [json.loads(line) for line in data_path("conversations", "smalltalk.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    labels = np.array([r["label"] == "content" for r in train])
    return LogisticRegression(C=1.0, max_iter=1000).fit(vectors([r["text"] for r in train]), labels)


@functools.lru_cache(maxsize=1)
def content_model():
    """Logistic regression: sentence embedding -> P(content, not small talk), on the train split; fitted
    once per checkout, then loaded from disk (no process re-embeds the training sentences)."""
    files = [data_path("conversations", "smalltalk.jsonl"), Path(__file__)]
    return cached("smalltalk", fingerprint("smalltalk 1", files), _fit_content_model)


def content_chance(texts: list[str]) -> np.ndarray:
    """P(content) for each text: the small-talk filter."""
    return content_model().predict_proba(vectors(texts))[:, 1] if texts else np.zeros(0)


def value(cands: list[Candidate], sims: np.ndarray, content: np.ndarray) -> np.ndarray:
    """Each candidate's worth on its own: content chance, speaker, sentence type, specificity,
    length, novelty and centrality.

    Novelty is 1 - the similarity to the closest candidate of another exchange (a user message and
    the replies to it), centrality the mean similarity to all candidates.
    """
    n = len(cands)
    exchange = np.array([c.exchange for c in cands])
    others = np.where(exchange[:, None] == exchange[None, :], -1.0, sims)  # a reply echoing its question is no repeat
    novelty = 1.0 - others.max(axis=1).clip(0.0, 1.0) if n > 1 else np.ones(n)
    centrality = (sims.sum(axis=1) - 1.0) / max(n - 1, 1)
    out = np.zeros(n)
    for i, c in enumerate(cands):
        weight = ROLE_WEIGHT.get(c.role, 0.5) * (QUESTION_WEIGHT if c.text.rstrip().endswith("?") else 1.0)
        out[i] = content[i] * weight * (1.0 + NOVELTY_WEIGHT * novelty[i] + CENTRALITY_WEIGHT * centrality[i]
                                        + SPECIFIC_WEIGHT * min(specificity(c.text), 4) / 4
                                        + LENGTH_WEIGHT * min(len(_WORD.findall(c.text)), 12) / 12)
        out[i] += RECENCY * c.order / max(n, 1)
    return out


def select(cands: list[Candidate], max_facts: int, max_tokens: int = MAX_TOKENS) -> list[Candidate]:
    """Maximal marginal relevance under a fact and token budget; the result in conversation order."""
    if not cands:
        return []
    vecs = vectors([c.text for c in cands])
    content = content_chance([c.text for c in cands])
    keep = [i for i in range(len(cands)) if content[i] >= MIN_CONTENT or cands[i].exchange < 0]
    if not keep:
        return []
    cands, vecs, content = [cands[i] for i in keep], vecs[keep], content[keep]
    sims = vecs @ vecs.T
    marks = [anchors(c.text) for c in cands]
    repeat = np.array([[1.0 if marks[i] <= marks[j] else NEW_ANCHORS_REPEAT for j in range(len(cands))]
                       for i in range(len(cands))])
    worth = value(cands, sims, content)
    chosen: list[int] = []
    tokens = 0
    left = set(range(len(cands)))
    while left and len(chosen) < max_facts:
        penalty = (sims * repeat)[:, chosen].max(axis=1).clip(0.0, 1.0) if chosen else np.zeros(len(cands))
        gain = {i: worth[i] * (1.0 - REDUNDANCY * penalty[i]) for i in left}
        best = max(gain, key=lambda i: (gain[i], i))
        left.discard(best)
        if gain[best] < MIN_GAIN:
            break
        cost = count_tokens(cands[best].fact) + 2
        if tokens + cost > max_tokens:
            continue
        chosen.append(best)
        tokens += cost
    return [cands[i] for i in sorted(chosen)]


def run(inp: SummarizeInput, tools=None) -> Summary:
    """The task: the previous facts and the new sentences, the most valuable and least redundant kept."""
    return Summary(facts=[c.fact for c in select(candidates(inp), inp.max_facts)])
