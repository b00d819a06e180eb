"""Feedback examples: query -> response pairs a user liked or rejected, retrieved as guidance.

Set by a thumbs button (:meth:`FeedbackStore.mark`) or found by the ``analyze_feedback`` task;
retrieved by vector search, scored by similarity (or any RedisVL reranker) and
diversified with MMR: positives to follow, negatives to avoid.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import logging
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Sequence

import numpy as np
import redis
from pydantic import BaseModel, Field
from redisvl.query import CountQuery, FilterQuery
from redisvl.query.filter import Tag
from redisvl.utils.rerank import BaseReranker

from ..errors import ValidationError
from ..keys import check_id, check_namespace, user_key
from ..llm.task import Task, TaskFailed, run_task
from .index import (content_hash, decoded, ensure_index, forgotten_since, json_docs, nearest, owner_field, owner_filter,
                    owner_tag, vector_field)

log = logging.getLogger(__name__)

LABELS = ("positive", "negative")
CANDIDATES = 20       # vector-search candidates that the rerank and MMR choose from
MMR_LAMBDA = 0.7      # relevance against variety
WINDOW = 4            # exchanges analyze_feedback reads
MATCH_FLOOR = 0.55    # a found example's text is an exchange's if this similar (difflib ratio): a paraphrased
#                       question scores 0.6-0.85 against its own ("What's my resting HR"), another one 0.4-0.5


_MEANING = set("%#&*/@\\")  # punctuation that changes what an answer says ("50% off", "C#", "AT&T", "and/or")


def _plain(text: str) -> str:
    """An exchange's text as its key reads it: unicode forms, case, spacing and sentence punctuation ignored;
    symbols, the punctuation above and punctuation before a digit ("-5", "1.5") kept ("$120" is not "€120")."""
    norm = unicodedata.normalize("NFKC", text).casefold()
    return " ".join("".join(" " if unicodedata.category(c).startswith("P") and c not in _MEANING
                            and not norm[i + 1:i + 2].isdigit() else c for i, c in enumerate(norm)).split())


@dataclass
class FeedbackExample:
    """A query and the response a user reacted to; ``signal``: explicit, implicit or correction."""

    query: str
    response: str
    label: str
    signal: str = "explicit"
    reason: str = ""
    user_id: str | None = None
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValidationError(f"label must be one of {LABELS}, got {self.label!r}")
        for name in ("query", "response"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValidationError(f"feedback needs a non-empty {name}")
            setattr(self, name, value.strip())


@dataclass
class FeedbackHit:
    example: FeedbackExample
    distance: float
    score: float


@dataclass
class Guidance:
    """What :meth:`FeedbackStore.examples` returns: examples to follow and to avoid, and the prompt block."""

    positives: list[FeedbackExample]
    negatives: list[FeedbackExample]

    @property
    def block(self) -> str:
        if not self:
            return ""
        lines = ["Feedback examples from this user on similar questions "
                 "(one JSON object per line; follow GOOD, do not repeat BAD):"]
        for tag, examples in (("GOOD", self.positives), ("BAD", self.negatives)):
            lines += [f"{tag}: {json.dumps({'query': e.query, 'response': e.response}, ensure_ascii=False)}"
                      for e in examples]
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return bool(self.positives or self.negatives)


def feedback_schema(namespace: str, dims: int) -> dict[str, Any]:
    return {
        "index": {"name": f"{namespace}_feedback", "prefix": f"{namespace}:feedback", "storage_type": "json"},
        "fields": [{"name": "text", "type": "text"}, owner_field("user_id"), {"name": "label", "type": "tag"},
                   {"name": "created_at", "type": "numeric"}, vector_field(dims)],
    }


def mmr(relevance: Sequence[float], vectors: np.ndarray, k: int, lambda_: float = MMR_LAMBDA,
        duplicate: float = 0.95) -> list[int]:
    """Maximal marginal relevance: relevant, and not a near-copy (similarity >= ``duplicate``) of a pick."""
    chosen: list[int] = []
    left = list(range(len(relevance)))
    sims = vectors @ vectors.T if len(vectors) else np.zeros((0, 0))
    while left and len(chosen) < k:
        def redundancy(i: int) -> float:
            return max((float(sims[i, j]) for j in chosen), default=0.0)
        left = [i for i in left if redundancy(i) < duplicate]
        if not left:
            break
        best = max(left, key=lambda i: (lambda_ * relevance[i] - (1 - lambda_) * redundancy(i), -i))
        chosen.append(best)
        left.remove(best)
    return chosen


def rerank_scores(reranker: BaseReranker, query: str, texts: Sequence[str]) -> list[float]:
    """A RedisVL reranker's score for each text (-inf for one it left out)."""
    docs, scores = reranker.rank(query=query, docs=[{"content": t, "i": i} for i, t in enumerate(texts)],
                                 limit=len(texts), return_score=True)
    out = [float("-inf")] * len(texts)
    for doc, score in zip(docs, scores):
        out[doc["i"]] = float(score)
    return out


class FeedbackStore:
    """Per-user feedback examples with toggle semantics, retrieved by vector search + rerank."""

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit",
                 distance_threshold: float | None = 0.5, reranker: BaseReranker | None = None):
        self.redis, self.embedder, self.namespace = redis_client, embedder, check_namespace(namespace)
        self.distance_threshold, self.reranker = distance_threshold, reranker
        self.index = ensure_index(redis_client, feedback_schema(namespace, embedder.dims))

    def key(self, user_id: str, query: str, response: str) -> str:
        """The exchange's key (see ``_plain``: "62 bpm." is "62 bpm", "-5°C" is not "5°C"). Each text is
        encoded on its own, so no split of one pair makes another."""
        digest = hashlib.sha256(json.dumps([_plain(query), _plain(response)], ensure_ascii=False).encode())
        return user_key(self.namespace, "feedback", check_id(user_id, "user_id"), digest.hexdigest()[:16])

    def _legacy_key(self, user_id: str, query: str, response: str) -> str:
        """The key before 2026-11-27: punctuation and symbols ignored, so "-5°C" and "5°C" shared one."""
        digest = content_hash(content_hash(query) + " " + content_hash(response))[:16]
        return user_key(self.namespace, "feedback", check_id(user_id, "user_id"), digest)

    def _locate(self, user_id: str, query: str, response: str) -> str:
        """The key holding this exact exchange: its own, or one written under the legacy key (one round trip)."""
        k, old = self.key(user_id, query, response), self._legacy_key(user_id, query, response)
        pipe = self.redis.pipeline(transaction=False)  # both keys carry the user's hash tag: one slot
        pipe.exists(k)
        pipe.json().get(old, "$.query", "$.response")
        exists, legacy = pipe.execute()
        legacy = decoded(legacy) or {}
        same = [_plain(v[0]) for v in (legacy.get("$.query"), legacy.get("$.response")) if v] == \
            [_plain(query), _plain(response)]
        return old if not exists and same else k

    def _doc(self, user_id: str, example: FeedbackExample, vector: Sequence[float]) -> dict[str, Any]:
        return {**asdict(example), "user_id": user_id, "user_tag": owner_tag(user_id), "text": example.query,
                "embedding": list(vector)}

    def mark(self, user_id: str, query: str, response: str, label: str) -> str:
        """A thumbs button: new -> "added"; same label again -> "removed"; other label -> "switched"."""
        example = FeedbackExample(query=query, response=response, label=label, user_id=user_id)
        k, doc = self._locate(user_id, query, response), self._doc(user_id, example, self.embedder.embed(query))

        def toggle(pipe) -> str:
            current = decoded(pipe.json().get(k, "$.label"))
            pipe.multi()
            if current and current[0] == label:
                pipe.delete(k)
                return "removed"
            pipe.json().set(k, "$", doc)
            return "switched" if current else "added"

        return self.redis.transaction(toggle, k, value_from_callable=True)

    def learn(self, user_id: str, exchanges: Sequence[tuple[str, str]], llm=None) -> list[FeedbackExample]:
        """Analyze the last exchanges for feedback and save what was found (set, not toggled); nothing is
        saved if the user was forgotten while the model read them."""
        check_id(user_id, "user_id")
        forgotten = forgotten_since(self.redis, self.namespace, user_id)
        found = analyze_feedback(exchanges, llm=llm)
        for example in found:
            example.user_id = user_id
        if found and forgotten():
            log.info("feedback of a user forgotten during the analysis: not saved")
            return []
        if found:  # one embedding batch, one pipelined write
            vectors = self.embedder.embed_many([e.query for e in found])
            self.index.load([self._doc(user_id, e, v) for e, v in zip(found, vectors)],
                            keys=[self._locate(user_id, e.query, e.response) for e in found])
        return found

    def get(self, user_id: str, query: str, response: str) -> FeedbackExample | None:
        doc = self.redis.json().get(self._locate(user_id, query, response))
        return self._example(doc) if doc else None

    @staticmethod
    def _example(doc: dict[str, Any]) -> FeedbackExample:
        return FeedbackExample(**{k: doc[k] for k in FeedbackExample.__dataclass_fields__ if k in doc})

    def _filter(self, user_id: str, label: str | None):
        expr = owner_filter(user_id)
        return expr & (Tag("label") == label) if label else expr

    def list(self, user_id: str, label: str | None = None, limit: int = 1000) -> list[FeedbackExample]:
        q = FilterQuery(filter_expression=self._filter(user_id, label), return_fields=["id"], num_results=limit)
        q.sort_by("created_at", asc=True)
        return [self._example(d) for d in json_docs(self.redis, [row["id"] for row in self.index.query(q)]) if d]

    def count(self, user_id: str, label: str | None = None) -> int:
        return self.index.query(CountQuery(self._filter(user_id, label)))

    def search(self, query: str, user_id: str, k: int = 3, label: str | None = None,
               vector: Sequence[float] | None = None) -> list[FeedbackHit]:
        """Candidates by vector search, reranked (the reranker if set, else by similarity) and
        chosen with MMR for variety. Only this user's examples are ever considered."""
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        rows = nearest(self.index, vector, self._filter(user_id, label), max(CANDIDATES, k), self.distance_threshold)
        docs = json_docs(self.redis, [r["id"] for r in rows])
        pairs = [(d, float(r["vector_distance"])) for d, r in zip(docs, rows) if d]
        if not pairs:
            return []
        texts = [d["query"] for d, _ in pairs]
        if self.reranker is not None:
            relevance = rerank_scores(self.reranker, query, texts)
        else:
            relevance = [1.0 - dist for _, dist in pairs]
        order = mmr(relevance, np.asarray([d["embedding"] for d, _ in pairs], dtype=np.float32), k)
        return [FeedbackHit(self._example(pairs[i][0]), pairs[i][1], float(relevance[i])) for i in order]

    def examples(self, query: str, user_id: str, k: int = 3, vector: Sequence[float] | None = None) -> Guidance:
        """Up to ``k`` positives to follow and ``k`` negatives to avoid, as a :class:`Guidance`."""
        vector = list(vector) if vector is not None else self.embedder.embed(query)
        pos = [h.example for h in self.search(query, user_id, k=k, label="positive", vector=vector)]
        neg = [h.example for h in self.search(query, user_id, k=k, label="negative", vector=vector)]
        return Guidance(positives=pos, negatives=neg)

    def delete(self, user_id: str, query: str, response: str) -> bool:
        return bool(self.redis.delete(self._locate(user_id, query, response)))


ANALYZE_PROMPT = """You read the last few exchanges between a user and an assistant and find feedback
the user gave on the assistant's answers.

- positive: praise, thanks for the answer, or acceptance ("makes sense, I'll try that").
- negative: the answer is wrong, useless or doubtful ("are you sure?"), sarcasm ("great, another
  wrong number"), "thanks, but that's wrong", or the same question asked again.
- correction: the user corrects the answer or says what they meant ("no, I meant my resting heart rate").
- A polite "thanks" that only opens a new, unrelated question is not feedback.
- Follow-ups that ask for another format ("as JSON please"), an explanation or a repeat are not new
  questions: feedback after them belongs to the ORIGINAL question, paired with the FINAL answer.
- No feedback -> an empty list."""


class Exchange(BaseModel):
    """One user turn and the assistant's answer to it (empty when the user spoke last)."""

    user: str
    assistant: str = ""


class FeedbackInput(BaseModel):
    exchanges: list[Exchange] = Field(description="oldest first; the last user turn may have no answer yet")


class FoundFeedback(BaseModel):
    query: str = Field(description="the user's original question, word for word as they wrote it")
    response: str = Field(description="the answer the feedback is about")
    label: Literal["positive", "negative", "correction"]
    signal: Literal["explicit", "implicit"] = "explicit"
    reason: str = Field("", description="a few words")


class FeedbackFound(BaseModel):
    examples: list[FoundFeedback] = Field(default_factory=list)


ANALYZE = Task("analyze_feedback", prompt=ANALYZE_PROMPT, input=FeedbackInput, output=FeedbackFound,
               max_tokens=400)


def analyze_feedback(exchanges: Sequence[tuple[str, str | None]], llm) -> list[FeedbackExample]:
    """Feedback examples ``llm`` finds in the last four (user, assistant) exchanges; [] if the task fails."""
    pairs = [Exchange(user=str(u or ""), assistant=str(a or "")) for u, a in list(exchanges)[-WINDOW:]]
    if len(pairs) < 2:
        return []
    try:
        found = run_task(llm, ANALYZE, FeedbackInput(exchanges=pairs))
    except TaskFailed as exc:
        log.warning("analyze_feedback skipped: %s", exc)
        return []
    out = []
    for f in found.examples:
        pair = _exchange_of(pairs, f.query, f.response)
        if pair is None:
            log.info("analyze_feedback: an example matching none of the exchanges read was dropped")
            continue
        out.append(FeedbackExample(query=pair[0], response=pair[1], reason=f.reason,
                                   label="negative" if f.label == "correction" else f.label,
                                   signal="correction" if f.label == "correction" else f.signal))
    return out


def _similar(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, " ".join(a.lower().split()), " ".join(b.lower().split())).ratio()


def _exchange_of(pairs: Sequence[Exchange], query: str, response: str) -> tuple[str, str] | None:
    """The (question, answer) a found example is about, in the exchanges' own words: the user turn nearest its
    query (a model may paraphrase), and the answer nearest its response from that exchange on (feedback after a
    follow-up pairs the original question with the final answer), else that exchange's own. None when no user
    turn is near (an example the model made up) or the question has no answer."""
    if not query.strip():
        return None
    i = max(range(len(pairs)), key=lambda k: (_similar(query, pairs[k].user), -k))  # a repeated question: the first
    if _similar(query, pairs[i].user) < MATCH_FLOOR:
        return None
    later = [(_similar(response, p.assistant), j) for j, p in enumerate(pairs) if j >= i and p.assistant.strip()]
    near, j = max(later, default=(0.0, i))
    answer = pairs[j].assistant if near >= MATCH_FLOOR else pairs[i].assistant
    return (pairs[i].user, answer) if answer.strip() else None
