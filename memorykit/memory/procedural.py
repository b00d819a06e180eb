"""Procedural memory: how to do things, learned from what worked (and from what users disliked).

Two shapes, both stored as JSON documents in RedisVL indexes:

* :class:`ProcedureStore` keeps successful tool-use patterns ("compare my activity this
  month vs last" -> get_workout_data + get_health_metrics). A run is scored with
  :func:`evaluate_workflow`; only runs scoring >= 0.7 are kept, and the same query type
  with the same tool set updates one document (counts, running averages, a few example
  queries) instead of piling up duplicates. :meth:`ProcedureStore.suggest` finds the
  pattern of the most similar past question.
* :class:`FeedbackStore` keeps query -> response examples a user labelled positive or
  negative (by a button: :meth:`FeedbackStore.mark`, or found in the conversation by
  :func:`analyze_feedback`). :meth:`FeedbackStore.examples` returns the closest ones,
  reranked (MMR + lexical overlap, or a cross-encoder you provide), as a guidance block
  for the prompt: positives to follow, negatives to avoid.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import redis
from redisvl.query import FilterQuery, VectorQuery
from redisvl.query.filter import Tag

from ..errors import ModelNotFoundError, ValidationError
from ..keys import check_id, check_namespace, key
from ..llm import offline_skill, parse_json, task_prompt
from .long_term import SYSTEM_USER, content_hash, ensure_index, owner_tag
from ..messages import Message
from ..offline.text import content_words, normalize, words

log = logging.getLogger(__name__)

MIN_SUCCESS_SCORE = 0.7
MAX_TIME_MS = 30_000
LABELS = ("positive", "negative")


# ================================================================ evaluating a run
@dataclass
class Evaluation:
    success: bool
    success_score: float
    reasons: list[str] = field(default_factory=list)


def tool_error(result: Any) -> str | None:
    """The error message inside a tool result (a JSON string or a dict), else None."""
    content = result.get("content", result) if isinstance(result, dict) and "content" in result else result
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError:
            return None
    if isinstance(content, dict) and content.get("error"):
        return str(content["error"])
    return None


def evaluate_workflow(tools_used: Sequence[str], tool_results: Sequence[Any], response: str | None,
                      execution_time_ms: float, max_time_ms: float = MAX_TIME_MS) -> Evaluation:
    """Score a tool-using run (the seed's rule): tools ran without errors, a response, under 30 s.

    Each rule weighs about a third, so failing any one of them drops the score below the
    0.7 storage gate. A slow run loses its timing credit gradually (zero at twice the limit),
    so a run a little over 30 s is not successful but its pattern can still be kept.
    """
    reasons: list[str] = []
    errors = [e for e in (tool_error(r) for r in tool_results) if e]
    if not tools_used:
        tools_credit = 0.0
        reasons.append("no tools were called")
    elif errors:
        tools_credit = 0.0
        reasons.append(f"{len(errors)} tool error(s): {errors[0]}")
    else:
        tools_credit = 1.0
        reasons.append(f"{len(tools_used)} tool call(s) without errors")
    produced = bool(response and response.strip())
    reasons.append("a response was produced" if produced else "no response was produced")
    if execution_time_ms <= max_time_ms:
        time_credit = 1.0
        reasons.append(f"finished within {max_time_ms / 1000:.0f} s")
    else:
        time_credit = max(0.0, 1.0 - (execution_time_ms - max_time_ms) / max_time_ms)
        reasons.append(f"slow: {execution_time_ms / 1000:.1f} s (limit {max_time_ms / 1000:.0f} s)")
    score = round(0.34 * tools_credit + 0.33 * float(produced) + 0.33 * time_credit, 3)
    success = bool(tools_used) and not errors and produced and execution_time_ms <= max_time_ms
    return Evaluation(success=success, success_score=score, reasons=reasons)


# ================================================================ query types
_TYPE_RULES = (
    ("comparison", r"\b(compar\w*|vs\.?|versus|than|against|differen\w*|change[sd]?|changing|"
                   r"improv\w*|better|worse|more|less|dropp?\w*|lower|higher|since)\b"),
    ("goal", r"\b(goals?|targets?|aim\w*|on track|objectives?|plan)\b"),
    ("trend", r"\b(trends?|over time|progress\w*|pattern|history|over the (last|past))\b"),
    ("summary", r"\b(summar\w*|overview|report|recap)\b"),
)


def classify_query(query: str) -> str:
    """A coarse, general query type (comparison, goal, trend, summary, lookup) from cue words."""
    text = normalize(query).lower()
    for name, pattern in _TYPE_RULES:
        if re.search(pattern, text):
            return name
    return "lookup"


# ================================================================ tool-use patterns
@dataclass
class Procedure:
    """One successful tool-use pattern, averaged over every run that used it."""

    id: str
    query: str
    query_type: str
    tools_used: list[str]
    success_score: float
    execution_time_ms: float
    uses: int = 1
    user_id: str = SYSTEM_USER
    examples: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Procedure":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class ProcedureHit:
    procedure: Procedure
    distance: float

    @property
    def similarity(self) -> float:
        return 1.0 - self.distance

    def __repr__(self) -> str:
        return (f"ProcedureHit({self.similarity:.2f}, {self.procedure.query_type}: "
                f"{' + '.join(self.procedure.tools_used)})")


def procedure_schema(namespace: str, dims: int) -> dict[str, Any]:
    return {
        "index": {"name": f"{namespace}_procedures", "prefix": f"{namespace}:procedure",
                  "storage_type": "json"},
        "fields": [
            {"name": "query", "type": "text"},
            {"name": "query_type", "type": "tag"},
            {"name": "tools", "path": "$.tools_used[*]", "type": "tag"},
            {"name": "user_id", "path": "$.user_tag", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "success_score", "type": "numeric"},
            {"name": "uses", "type": "numeric"},
            {"name": "updated_at", "type": "numeric"},
            {"name": "embeddings", "path": "$.embeddings[*]", "type": "vector",
             "attrs": {"algorithm": "hnsw", "dims": dims, "distance_metric": "cosine", "datatype": "float32"}},
        ],
    }


class ProcedureStore:
    """Successful tool-use patterns, shared by all users unless stored with a ``user_id``.

    Each document holds up to ``max_examples`` example queries, each with its own
    embedding (a multi-value vector field), so a pattern is found from any of the
    phrasings that led to it.
    """

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit",
                 distance_threshold: float | None = 0.4, min_score: float = MIN_SUCCESS_SCORE,
                 max_examples: int = 8):
        self.redis = redis_client
        self.embedder = embedder
        self.namespace = check_namespace(namespace)
        self.distance_threshold = distance_threshold
        self.min_score = min_score
        self.max_examples = max_examples
        self.index = ensure_index(redis_client, procedure_schema(namespace, embedder.dims))

    def pattern_id(self, query_type: str, tools_used: Sequence[str], user_id: str = SYSTEM_USER) -> str:
        """Same owner + query type + tool set -> same document."""
        raw = json.dumps([user_id, query_type, sorted(set(tools_used))])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def key(self, procedure_id: str) -> str:
        return key(self.namespace, "procedure", procedure_id)

    def store(self, query: str, tools_used: Sequence[str], success_score: float, execution_time_ms: float,
              query_type: str | None = None, user_id: str | None = None) -> Procedure | None:
        """Keep a pattern when ``success_score >= 0.7``; returns it, or None when it was not kept."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("a procedure needs the query that led to it")
        tools = list(dict.fromkeys(t for t in tools_used if t))
        if not tools:
            raise ValidationError("a procedure needs at least one tool name")
        if not 0.0 <= float(success_score) <= 1.0:
            raise ValidationError(f"success_score must be between 0 and 1, got {success_score!r}")
        if float(success_score) < self.min_score:
            log.info("not storing a pattern scoring %.2f (< %.2f)", success_score, self.min_score)
            return None
        owner = check_id(user_id, "user_id") if user_id is not None else SYSTEM_USER
        query = query.strip()
        qtype = query_type or classify_query(query)
        pid = self.pattern_id(qtype, tools, owner)
        vector = self.embedder.embed(query)
        now = time.time()
        stored: dict[str, Any] = {}

        def upsert(pipe) -> None:
            doc = pipe.json().get(self.key(pid))
            pipe.multi()
            if doc:
                n = int(doc["uses"])
                doc["success_score"] = round((doc["success_score"] * n + success_score) / (n + 1), 4)
                doc["execution_time_ms"] = round((doc["execution_time_ms"] * n + execution_time_ms) / (n + 1), 2)
                doc["uses"] = n + 1
                doc["updated_at"] = now
                if query not in doc["examples"] and len(doc["examples"]) < self.max_examples:
                    doc["examples"].append(query)
                    doc["embeddings"].append(vector)
            else:
                doc = asdict(Procedure(id=pid, query=query, query_type=qtype, tools_used=tools,
                                       success_score=round(float(success_score), 4),
                                       execution_time_ms=round(float(execution_time_ms), 2),
                                       user_id=owner, examples=[query], created_at=now, updated_at=now))
                doc["embeddings"] = [vector]
                doc["user_tag"] = owner_tag(owner)
            pipe.json().set(self.key(pid), "$", doc)
            stored.update(doc)

        self.redis.transaction(upsert, self.key(pid))
        return Procedure.from_dict(stored)

    def _scope(self, user_id: str | None):
        if user_id is None:
            return Tag("user_id") == owner_tag(SYSTEM_USER)
        return Tag("user_id") == [owner_tag(SYSTEM_USER), owner_tag(check_id(user_id, "user_id"))]

    def suggest(self, query: str, k: int = 3, distance_threshold: float | None = ...,
                user_id: str | None = None) -> list[ProcedureHit]:
        """Patterns of the most similar past questions (shared ones, plus the user's own if given).

        ``distance_threshold`` defaults to the store's (cosine distance; similarity = 1 - distance).
        """
        threshold = self.distance_threshold if distance_threshold is ... else distance_threshold
        q = VectorQuery(self.embedder.embed(query), "embeddings", return_fields=["id"], num_results=k,
                        filter_expression=self._scope(user_id))
        hits = []
        for row in self.index.query(q):
            distance = float(row["vector_distance"])
            if threshold is not None and distance > threshold:
                continue
            procedure = self.get(row["id"].split(":")[-1])
            if procedure:
                hits.append(ProcedureHit(procedure, distance))
        return sorted(hits, key=lambda h: (h.distance, -h.procedure.success_score))[:k]

    def get(self, procedure_id: str) -> Procedure | None:
        doc = self.redis.json().get(self.key(procedure_id))
        return Procedure.from_dict(doc) if doc else None

    def list(self, user_id: str | None = None, limit: int = 1000) -> list[Procedure]:
        """Patterns visible to ``user_id`` (shared only when None), most used first."""
        q = FilterQuery(filter_expression=self._scope(user_id), return_fields=["id"], num_results=limit)
        procs = [self.get(row["id"].split(":")[-1]) for row in self.index.query(q)]
        return sorted((p for p in procs if p), key=lambda p: (-p.uses, p.query))

    def count(self) -> int:
        return int(self.index.info()["num_docs"])

    def delete(self, procedure_id: str) -> bool:
        return bool(self.redis.delete(self.key(procedure_id)))

    def drop(self) -> None:
        self.index.delete(drop=True)


# ================================================================ feedback examples
@dataclass
class FeedbackExample:
    """A query and the response a user reacted to, labelled positive or negative."""

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
        if not (self.positives or self.negatives):
            return ""
        lines = ["Feedback examples from this user on similar questions "
                 "(one JSON object per line; follow GOOD, do not repeat BAD):"]
        lines += [f"GOOD: {json.dumps({'query': e.query, 'response': e.response}, ensure_ascii=False)}"
                  for e in self.positives]
        lines += [f"BAD: {json.dumps({'query': e.query, 'response': e.response}, ensure_ascii=False)}"
                  for e in self.negatives]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.block

    def __bool__(self) -> bool:
        return bool(self.positives or self.negatives)


def feedback_schema(namespace: str, dims: int) -> dict[str, Any]:
    return {
        "index": {"name": f"{namespace}_feedback", "prefix": f"{namespace}:feedback", "storage_type": "json"},
        "fields": [
            {"name": "text", "type": "text"},
            {"name": "user_id", "path": "$.user_tag", "type": "tag", "attrs": {"case_sensitive": True}},
            {"name": "label", "type": "tag"},
            {"name": "created_at", "type": "numeric"},
            {"name": "embedding", "type": "vector",
             "attrs": {"algorithm": "hnsw", "dims": dims, "distance_metric": "cosine", "datatype": "float32"}},
        ],
    }


Reranker = Callable[[str, Sequence[str]], Sequence[float]]


class CrossEncoderReranker:
    """Rerank with a local cross-encoder (sentence-transformers), loaded by path only.

    None ships with the course: pass the folder of a model you already have
    (e.g. a copy of ms-marco-MiniLM-L-6-v2). Nothing is downloaded.
    """

    def __init__(self, model_path: str):
        from pathlib import Path

        if not Path(model_path).is_dir():
            raise ModelNotFoundError(f"no cross-encoder model folder at {model_path!r}; "
                                     "memorykit never downloads models, give a local path")
        from sentence_transformers import CrossEncoder

        self.model = CrossEncoder(model_path, device="cpu")

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        return [float(s) for s in self.model.predict([(query, t) for t in texts])]


def lexical_overlap(a: str, b: str) -> float:
    """Jaccard overlap of content words (stemmed)."""
    wa, wb = content_words(a), content_words(b)
    return len(wa & wb) / len(wa | wb) if wa and wb else 0.0


def mmr(relevance: Sequence[float], vectors: np.ndarray, k: int, lambda_: float = 0.7,
        duplicate: float = 0.95) -> list[int]:
    """Maximal marginal relevance: relevant, and not a near-copy of what was already picked.

    Candidates whose cosine similarity to a picked one is >= ``duplicate`` are skipped.
    """
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


class FeedbackStore:
    """Per-user feedback examples with toggle semantics, retrieved by vector search + rerank."""

    def __init__(self, redis_client: redis.Redis, embedder, namespace: str = "memorykit",
                 distance_threshold: float | None = 0.5, reranker: Reranker | None = None,
                 lexical_weight: float = 0.3, mmr_lambda: float = 0.7):
        self.redis = redis_client
        self.embedder = embedder
        self.namespace = check_namespace(namespace)
        self.distance_threshold = distance_threshold
        self.reranker = reranker
        self.lexical_weight = lexical_weight
        self.mmr_lambda = mmr_lambda
        self.index = ensure_index(redis_client, feedback_schema(namespace, embedder.dims))

    def key(self, user_id: str, query: str, response: str) -> str:
        digest = content_hash(query + "\x1f" + response)[:16]
        return key(self.namespace, "feedback", check_id(user_id, "user_id"), digest)

    @staticmethod
    def _check(query: str, response: str, label: str) -> None:
        if label not in LABELS:
            raise ValidationError(f"label must be 'positive' or 'negative', got {label!r}")
        for name, value in (("query", query), ("response", response)):
            if not isinstance(value, str) or not value.strip():
                raise ValidationError(f"feedback needs a non-empty {name}")

    def _doc(self, user_id: str, example: FeedbackExample) -> dict[str, Any]:
        doc = asdict(example)
        doc.update(user_id=user_id, user_tag=owner_tag(user_id), text=example.query,
                   embedding=self.embedder.embed(example.query))
        return doc

    def mark(self, user_id: str, query: str, response: str, label: str) -> str:
        """A thumbs button: new -> "added"; same label again -> "removed"; other label -> "switched"."""
        self._check(query, response, label)
        k = self.key(user_id, query, response)
        example = FeedbackExample(query=query.strip(), response=response.strip(), label=label, user_id=user_id)
        doc = self._doc(user_id, example)
        outcome: list[str] = []

        def toggle(pipe) -> None:
            current = pipe.json().get(k, "$.label")
            pipe.multi()
            if current and current[0] == label:
                pipe.delete(k)
                outcome.append("removed")
            else:
                pipe.json().set(k, "$", doc)
                outcome.append("switched" if current else "added")

        self.redis.transaction(toggle, k)
        return outcome[-1]

    def save(self, user_id: str, example: FeedbackExample) -> FeedbackExample:
        """Set an example's label (no toggling): used for feedback found in conversations."""
        self._check(example.query, example.response, example.label)
        example.user_id = user_id
        self.redis.json().set(self.key(user_id, example.query, example.response), "$", self._doc(user_id, example))
        return example

    def learn(self, user_id: str, exchanges: Sequence[tuple[str, str]], llm=None) -> list[FeedbackExample]:
        """Analyze the last exchanges for feedback and save what was found."""
        return [self.save(user_id, e) for e in analyze_feedback(exchanges, llm=llm)]

    def get(self, user_id: str, query: str, response: str) -> FeedbackExample | None:
        doc = self.redis.json().get(self.key(user_id, query, response))
        return self._example(doc) if doc else None

    @staticmethod
    def _example(doc: dict[str, Any]) -> FeedbackExample:
        return FeedbackExample(**{k: doc[k] for k in FeedbackExample.__dataclass_fields__ if k in doc})

    def _filter(self, user_id: str, label: str | None):
        expr = Tag("user_id") == owner_tag(check_id(user_id, "user_id"))
        return expr & (Tag("label") == label) if label else expr

    def list(self, user_id: str, label: str | None = None, limit: int = 1000) -> list[FeedbackExample]:
        q = FilterQuery(filter_expression=self._filter(user_id, label), return_fields=["id"], num_results=limit)
        q.sort_by("created_at", asc=True)
        docs = [self.redis.json().get(row["id"]) for row in self.index.query(q)]
        return [self._example(d) for d in docs if d]

    def count(self, user_id: str, label: str | None = None) -> int:
        return len(self.list(user_id, label))

    def search(self, query: str, user_id: str, k: int = 3, label: str | None = None,
               candidates: int = 20, distance_threshold: float | None = ...) -> list[FeedbackHit]:
        """Bi-encoder candidates from Redis, then rerank (cross-encoder if set, else similarity +
        lexical overlap) and MMR for variety. Only this user's examples are ever considered."""
        threshold = self.distance_threshold if distance_threshold is ... else distance_threshold
        vector = np.asarray(self.embedder.embed(query), dtype=np.float32)
        q = VectorQuery(vector.tolist(), "embedding", return_fields=["id"], num_results=max(candidates, k),
                        filter_expression=self._filter(user_id, label))
        rows = [r for r in self.index.query(q) if threshold is None or float(r["vector_distance"]) <= threshold]
        docs = [self.redis.json().get(r["id"]) for r in rows]
        pairs = [(d, float(r["vector_distance"])) for d, r in zip(docs, rows) if d]
        if not pairs:
            return []
        texts = [d["query"] for d, _ in pairs]
        if self.reranker is not None:
            relevance = list(self.reranker(query, texts))
        else:
            relevance = [(1.0 - dist) + self.lexical_weight * lexical_overlap(query, t)
                         for (_, dist), t in zip(pairs, texts)]
        vectors = np.asarray([d["embedding"] for d, _ in pairs], dtype=np.float32)
        order = mmr(relevance, vectors, k, self.mmr_lambda)
        return [FeedbackHit(self._example(pairs[i][0]), pairs[i][1], float(relevance[i])) for i in order]

    def examples(self, query: str, user_id: str, k: int = 3) -> Guidance:
        """Up to ``k`` positives to follow and ``k`` negatives to avoid, as a :class:`Guidance`."""
        pos = [h.example for h in self.search(query, user_id, k=k, label="positive")]
        neg = [h.example for h in self.search(query, user_id, k=k, label="negative")]
        return Guidance(positives=pos, negatives=neg)

    def delete(self, user_id: str, query: str, response: str) -> bool:
        return bool(self.redis.delete(self.key(user_id, query, response)))

    def drop(self) -> None:
        self.index.delete(drop=True)


# ================================================================ finding feedback in a conversation
ANALYZE_PROMPT = """You read the last few exchanges between a user and an assistant and find feedback
the user gave on the assistant's answers.

- Explicit feedback: praise or thanks for the answer (positive); "wrong", "not what I asked" (negative).
- Implicit feedback: "got it, I'll try that" (positive); repeating or correcting the question,
  "are you sure?" (negative). Sarcasm ("great, another wrong number") is negative; "thanks, but
  that's wrong" is negative. A polite "thanks" that only opens a new, unrelated question is not feedback.
- Follow-ups that ask for another format ("as JSON please"), a clarification or a repeat are not
  substantive questions: feedback after them belongs to the ORIGINAL question, paired with the
  FINAL answer the user reacted to.
- No feedback -> an empty list.

Answer with JSON only: {"examples": [{"query": "<the user's original question>",
"response": "<the answer the feedback is about>", "label": "positive" | "negative",
"signal": "explicit" | "implicit", "reason": "<a few words>"}]}"""


def analyze_feedback(exchanges: Sequence[tuple[str, str | None]], llm=None, window: int = 4) -> list[FeedbackExample]:
    """Feedback examples found in the last ``window`` (user, assistant) exchanges."""
    from ..llm import OfflineChat

    pairs = [(str(u or ""), str(a or "")) for u, a in list(exchanges)[-window:]]
    if len(pairs) < 2:
        return []
    payload = {"exchanges": [{"user": u, "assistant": a} for u, a in pairs]}
    messages = [Message(role="system", content=task_prompt("analyze_feedback", ANALYZE_PROMPT)),
                Message(role="user", content=json.dumps(payload, ensure_ascii=False))]
    reply = (llm or OfflineChat()).chat(messages, response_format={"type": "json_object"})
    try:
        data = parse_json(reply.content)
    except ValueError:
        log.warning("analyze_feedback: no JSON in the model's reply: %r", reply.content[:120])
        return []
    items = data.get("examples", []) if isinstance(data, dict) else data
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("label") not in LABELS:
            continue
        query, response = str(item.get("query") or "").strip(), str(item.get("response") or "").strip()
        if query and response:
            out.append(FeedbackExample(query=query, response=response, label=item["label"],
                                       signal=str(item.get("signal") or "explicit"),
                                       reason=str(item.get("reason") or "")))
    return out


# ---------------------------------------------------------------- the offline rules
_NEG_NEGATED = re.compile(r"\b(not|n't|never)\s+(bad|wrong|terrible|awful|an issue|a problem)\b|\bno problem\b", re.I)
_NEGATIVE = re.compile(
    r"\b(wrong|incorrect|inaccurate|untrue|false|mistakes?|mistaken|errors?|useless|unhelpful|pointless|"
    r"nonsense|rubbish|garbage|terrible|awful|horrible|worse|worst|bad (answer|response|job)|"
    r"not (right|correct|true|accurate|helpful|useful|it|what i (asked|wanted|meant|need(ed)?))|"
    r"(isn't|wasn't|is not|was not|that's not|thats not) (right|correct|true|accurate|helpful|useful|"
    r"what i (asked|wanted|meant|need(ed)?)|it)|"
    r"(doesn't|does not|didn't|did not|don't|do not) (help|work|answer|make sense|add up|match|look right|"
    r"seem right)|makes no sense|no sense|misunderstood|misread|made (that|it|this) up|hallucinat\w*|"
    r"way off|not even close|off by|you (missed|forgot|ignored)|ignored my|disappoint\w*|frustrat\w*|"
    r"annoy\w*|confus\w*|can't be right|cannot be right|can't be true|are you sure|that's impossible|"
    r"impossible|try again|(still|again) wrong|wrong again|i (asked|said) (for|about)|thanks for nothing|"
    r"yeah,? right|nice try|nope)\b", re.I)
_NEG_START = re.compile(r"^\s*(no|nah|nope|hmm+|ugh|uh)\b[,.!\s]", re.I)
_POSITIVE = re.compile(
    r"\b(perfect|great|excellent|awesome|amazing|fantastic|wonderful|brilliant|superb|exactly|spot on|"
    r"correct|accurate|helpful|useful|informative|clear|nice|good (job|answer|stuff)|well done|love (it|this|that)|"
    r"(that's|thats|that is|you're|you are) right|that works|works (great|perfectly|for me)|it worked|"
    r"just what i (needed|wanted)|appreciate\w*|thanks?|thank you|thx|ty|cheers|makes sense|got it|"
    r"good to know|i'll (try|do) (that|it|this)|will do|that helps|that helped|good|cool|sweet|neat|"
    r"👍|🙏|❤️)\b|👍|🙏", re.I)
_BARE_POLITE = {"thanks", "thank", "you", "thx", "ty", "cheers", "ok", "okay", "great", "cool", "nice",
                "alright", "good", "sure", "so", "much", "a", "lot", "many", "perfect", "awesome", "and", "now",
                "also", "next", "then", "oh", "right", "yes", "yeah"}
_SARCASM = re.compile(
    r"\b(oh|wow|gee|yeah|sure)\b[, ]+(great|perfect|wonderful|fantastic|brilliant|thanks|helpful|nice|"
    r"genius|amazing)\b.*\b(another|again|not|never|useless|nothing|wrong|because|as if|really)\b|"
    r"\b(so|real|very|super) (helpful|useful)\b.*(\.\.\.|…|not|🙄)|\bjust what i needed\b.*\b(another|more|not)\b|"
    r"\b(great|perfect|wonderful|fantastic|brilliant|thanks)\b[^.?!]*\b(another|yet again)\b|/s\b|🙄|\(not\)|"
    r"^\W*(sure|right|yeah|oh yes),? (because|like)\b", re.I)
_BARE_NO = {"no", "nope", "nah", "lol", "haha", "ugh", "meh", "hmm", "wrong", "nooo", "noo", "uh", "um"}
_IMPLICIT_POS = re.compile(r"\b(makes sense|got it|good to know|i'll (try|do) (that|it|this)|will do|that helps|"
                           r"that helped|noted)\b", re.I)
_FORMAT = re.compile(
    r"\b(json|yaml|csv|table|tabular|markdown|bullet(ed)?s?( points?| list)?|numbered list|(a|as a|in a) list|"
    r"one (sentence|line|paragraph)|shorter|longer|more concise|concise|briefer|brief|less detail|more detail|"
    r"in detail|simpler|simple terms|plain (text|english)|summari[sz]e|tl;?dr|format(ted)?|reformat|chart|"
    r"graph|in (metric|imperial|kg|lbs|hours|minutes)|round(ed)?)\b", re.I)
_CLARIFY = re.compile(
    r"^\s*(no,?\s*)?(i\s+(meant|mean|was asking|asked)|what i meant|i was talking about|not\s+\w+[,;]\s*(i|the)\b)|"
    r"\bwhat do you mean\b|\bwhat does (that|this|it) mean\b|\bwhat is that\b|\bcan you clarify\b|"
    r"\bi (meant|mean) \b", re.I)
_META = re.compile(
    r"\b(repeat (that|it)|say (that|it) again|come again|one more time|what can you do|who are you|"
    r"are you (a bot|an ai|human)|how did you (get|calculate|compute|know|come up with)|where (does|did) "
    r"(that|this|it) (number|data|come)|why did you|explain (that|it|this)( again| more| simply| differently)?|"
    r"which tools?|what tools?)\b", re.I)
_QUESTION = re.compile(r"\?\s*$|^\s*(what|where|when|who|which|how|why|do|does|did|is|are|am|can|could|would|"
                       r"will|should|show|tell|give|list|compare|find|what's|how's)\b", re.I)
_REF = re.compile(r"\b(it|that|this|them|those|these|the (answer|data|numbers|result|same))\b", re.I)


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<=[.!?;:])\s+|\s+[-–—]\s+|,\s+(?=(?:but|now|and|also|so)\b)|\n",
                                        normalize(text)) if c.strip()]


_LEAD = re.compile(r"^\s*((now|and|also|so|then|ok|okay|next|oh|well|but)\b[,\s]*)+", re.I)
_FORMAT_FILLER = {"give", "show", "make", "put", "send", "turn", "convert", "format", "instead", "version",
                  "answer", "response", "data", "same", "one", "again", "just", "need", "want", "prefer", "rather"}


def _is_question(clause: str) -> bool:
    return bool(_QUESTION.search(_LEAD.sub("", clause))) or bool(
        re.search(r"\b(can|could|would|will) you\b|\bplease\b", clause, re.I))


def followup_kind(text: str) -> str | None:
    """"format" | "clarification" | "meta" when a user turn is not a substantive question, else None."""
    t = normalize(text)
    n = len(words(t))
    if _CLARIFY.search(t) and n <= 25:
        return "clarification"
    if _META.search(t) and n <= 20:
        return "meta"
    if _FORMAT.search(t) and n <= 16:
        asked = content_words(" ".join(m.group(0) for m in _FORMAT.finditer(t)))
        residual = content_words(t) - asked - _FORMAT_FILLER
        if len(residual) <= (2 if _REF.search(t) else 0):
            return "format"
    return None


def query_text(text: str) -> str:
    """A user turn without a polite opener ("Thanks! How about my steps?" -> "How about my steps?")."""
    parts = _clauses(text)
    while len(parts) > 1 and not _is_question(parts[0]) and set(words(parts[0])) <= _BARE_POLITE:
        parts = parts[1:]
    return " ".join(parts)


def feedback_signal(text: str, previous_query: str = "") -> tuple[str | None, str, str]:
    """(label or None, "explicit" | "implicit", reason) for one user turn reacting to an answer."""
    t = normalize(text)
    cleaned = _NEG_NEGATED.sub(" fine ", t)
    if _SARCASM.search(t):
        return "negative", "explicit", "sarcasm"
    if _NEGATIVE.search(cleaned):
        return "negative", "explicit", "says the answer is wrong or unhelpful"
    if words(t) and set(words(t)) <= _BARE_NO and set(words(t)) & {"no", "nope", "nah", "wrong", "nooo", "noo"}:
        return "negative", "implicit", "says no"
    if _CLARIFY.search(t) and _NEG_START.search(t):
        return "negative", "implicit", "corrects what was asked"
    if previous_query and _is_question(t) and followup_kind(t) is None:
        # asking the same thing again means the answer did not land
        a, b = content_words(t), content_words(previous_query)
        numbers = re.compile(r"\d+")
        same_numbers = set(numbers.findall(t)) == set(numbers.findall(previous_query))
        if a and b and same_numbers and len(a & b) / len(a | b) >= 0.6:
            return "negative", "implicit", "repeats the question"
    if not _POSITIVE.search(cleaned):
        return None, "", ""
    parts = _clauses(t)
    feedback_part = [c for c in parts if not _is_question(c) and not followup_kind(c)]
    asks = [c for c in parts if _is_question(c) or followup_kind(c)]
    if asks:
        # "Thanks! Now what about ...": a polite opener to a new question is not feedback
        said = {w for c in feedback_part for w in words(c)}
        if not feedback_part or said <= _BARE_POLITE:
            return None, "", ""
    if _IMPLICIT_POS.search(cleaned) and not re.search(r"\b(thank|thanks|perfect|great|exactly|helpful)\b", t, re.I):
        return "positive", "implicit", "accepts the answer"
    return "positive", "explicit", "thanks or praise"


def rule_feedback(pairs: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The offline analyzer: which earlier answers each user turn reacts to, and how."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for j in range(1, len(pairs)):
        origin = j - 1
        while origin > 0 and followup_kind(pairs[origin][0]):
            origin -= 1
        query = query_text(pairs[origin][0])
        if followup_kind(query) or not content_words(query):
            continue
        label, signal, reason = feedback_signal(pairs[j][0], previous_query=pairs[j - 1][0])
        if label is None:
            continue
        response = pairs[j - 1][1]
        if not response.strip():
            continue
        found[(query, response)] = {"query": query, "response": response, "label": label,
                                    "signal": signal, "reason": reason}
    return list(found.values())


@offline_skill("analyze_feedback")
def offline_analyze_feedback(messages: Sequence[Message], tools=None, response_format=None) -> str:
    user = next((m for m in reversed(messages) if m.role == "user"), None)
    try:
        data = json.loads(user.content) if user else {}
        pairs = [(str(x.get("user") or ""), str(x.get("assistant") or "")) for x in data.get("exchanges", [])]
    except (ValueError, AttributeError):
        pairs = []
    return json.dumps({"examples": rule_feedback(pairs)}, ensure_ascii=False)


def response_format(text: str) -> str:
    """"json" | "bullets" | "prose": the shape of an answer (used to follow or avoid examples)."""
    body = text.strip()
    if re.search(r"```(json)?\s*[\[{]", body) or re.match(r"^(\(offline\)[^\n]*\n)?\s*[\[{]", body):
        return "json"
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if sum(1 for ln in lines if re.match(r"^\s*([-*•]|\d+[.)])\s+", ln)) >= 2:
        return "bullets"
    return "prose"


def forget_examples(store: FeedbackStore, user_id: str) -> int:
    """Delete every feedback example of one user (memorykit.forget_user does this for all structures)."""
    keys = list(store.redis.scan_iter(match=key(store.namespace, "feedback", check_id(user_id, "user_id")) + ":*"))
    return store.redis.delete(*keys) if keys else 0


__all__ = ["Evaluation", "evaluate_workflow", "classify_query", "Procedure", "ProcedureHit", "ProcedureStore",
           "FeedbackExample", "FeedbackHit", "Guidance", "FeedbackStore", "CrossEncoderReranker",
           "analyze_feedback", "feedback_signal", "followup_kind", "rule_feedback", "response_format",
           "lexical_overlap", "mmr", "tool_error", "MIN_SUCCESS_SCORE"]
