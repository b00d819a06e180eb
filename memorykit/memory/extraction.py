"""Extraction: turn a conversation into candidate long-term memories.

A model reads :data:`EXTRACTION_PROMPT` plus the transcript and answers with a JSON list
``[{"type": "episodic" | "semantic", "content": "..."}]``:

* EPISODIC: the user's own experiences, preferences, goals, plans and personal facts,
  written in the third person ("User went to Paris in 2009 for their honeymoon").
* SEMANTIC: general facts about the world, true for everyone ("Singapore requires a passport").

:func:`parse_memories` accepts what real models actually return (code fences, one object
instead of a list, trailing prose, odd key case) and turns garbage into no memories plus a
logged warning: extraction never raises into a chat turn.

Offline, :class:`~memorykit.llm.OfflineChat` runs :func:`rule_extract`, a deterministic
rule-based stand-in for a model: it reads the user's sentences only, keeps first-person
statements (experiences, preferences, goals, identity, possessions, plans) as episodic
memories in the third person, keeps generic present-tense statements about the world as
semantic ones, and drops questions, requests, greetings and small talk.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from ..llm import offline_name, offline_skill, parse_json, task_prompt
from .long_term import format_memories  # noqa: F401  (retrieved memories -> prompt context block)
from ..messages import Message, as_message
from ..offline.text import STOPWORDS, normalize, sentences, stem, third_person

log = logging.getLogger(__name__)

TYPES = ("episodic", "semantic")
MAX_CONTENT_CHARS = 500

EXTRACTION_PROMPT = """\
You are the long-term memory of a helpful assistant. Read the conversation and extract the
facts worth remembering in future conversations. Use only what the USER said; ignore the
assistant's words, questions, requests, greetings and small talk.

Two types of memory:
- EPISODIC: the user's own experiences, preferences, goals, plans and personal facts.
  Write them in the third person, starting with "User", e.g. "User went to Paris in 2009
  for their honeymoon", "User prefers window seats", "User's goal is to run a marathon".
- SEMANTIC: general facts about the world that are true for everyone, e.g.
  "Singapore requires a passport for entry", "Tokyo has excellent public transit".

Each memory is one short, self-contained statement. Do not invent anything.
Answer with ONLY a JSON list, no prose:
[{"type": "episodic", "content": "..."}, {"type": "semantic", "content": "..."}]
Answer [] when there is nothing worth remembering."""


@dataclass(frozen=True)
class CandidateMemory:
    """A memory proposed by extraction, not yet stored (``type`` is episodic or semantic)."""

    type: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


# ---------------------------------------------------------------- prompt and parsing
def transcript(messages: Sequence[Message]) -> str:
    """``user: ...`` / ``assistant: ...`` lines; a message's extra lines are indented."""
    lines = []
    for m in messages:
        if m.role in ("user", "assistant") and m.content.strip():
            body = "\n  ".join(line.strip() for line in m.content.strip().splitlines() if line.strip())
            lines.append(f"{m.role}: {body}")
    return "\n".join(lines)


def extraction_messages(messages: Sequence[Message]) -> list[Message]:
    """The prompt a model (or the offline skill) answers."""
    return [Message(role="system", content=task_prompt("extract_memories", EXTRACTION_PROMPT)),
            Message(role="user", content=f"Conversation:\n{transcript(messages)}")]


_TYPE_KEYS = ("type", "memory_type", "kind", "category")
_CONTENT_KEYS = ("content", "text", "memory", "fact", "statement", "value")


def _field(item: dict[str, Any], names: Sequence[str]) -> Any:
    lowered = {str(k).strip().lower(): v for k, v in item.items()}
    return next((lowered[n] for n in names if n in lowered), None)


def _normalize_type(value: Any, content: str) -> str | None:
    if value is None:
        return "episodic" if re.match(r"(the )?user\b", content, re.IGNORECASE) else "semantic"
    text = str(value).strip().lower()
    return next((t for t in TYPES if t in text), None)


def _items(data: Any) -> list[Any]:
    """The list of memory items in whatever shape the model chose."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        inner = _field(data, ("memories", "items", "results", "facts", "data"))
        if isinstance(inner, list):
            return inner
        if _field(data, _CONTENT_KEYS) is not None:
            return [data]
        by_type = [{"type": k, "content": c} for k, v in data.items() if _normalize_type(k, "")
                   for c in (v if isinstance(v, list) else [v])]
        if by_type:
            return by_type
    return []


def parse_memories(text: str | None) -> list[CandidateMemory]:
    """Candidate memories from a model's reply; never raises (garbage -> [] and a warning)."""
    if text is None or not str(text).strip():
        return []
    try:
        data = parse_json(str(text))
    except ValueError:
        log.warning("memory extraction: no JSON in the model's reply, no memories stored: %.120r", text)
        return []
    items = _items(data)
    if not items and data not in ([], {}):
        log.warning("memory extraction: unexpected JSON shape %.120r; no memories stored", data)
    out: list[CandidateMemory] = []
    seen: set[str] = set()
    for item in items:
        if isinstance(item, str):
            item = {"content": item}
        if not isinstance(item, dict):
            log.warning("memory extraction: skipped item %.80r (not an object)", item)
            continue
        content = _field(item, _CONTENT_KEYS)
        if not isinstance(content, str) or not content.strip():
            log.warning("memory extraction: skipped item without content: %.80r", item)
            continue
        content = normalize(content)[:MAX_CONTENT_CHARS]
        mtype = _normalize_type(_field(item, _TYPE_KEYS), content)
        if mtype is None:
            log.warning("memory extraction: skipped item of unknown type %.80r", item)
            continue
        if content.casefold() not in seen:
            seen.add(content.casefold())
            out.append(CandidateMemory(mtype, content))
    return out


def _as_messages(messages: str | Message | dict | Iterable[Message | dict]) -> list[Message]:
    if isinstance(messages, str):
        return [Message(role="user", content=messages)]
    if isinstance(messages, (Message, dict)):
        return [as_message(messages)]
    return [as_message(m) for m in messages]


def extract_memories(messages: str | Message | Sequence[Message | dict], llm=None) -> list[CandidateMemory]:
    """Candidate memories from a conversation (a str is one user message).

    Never raises on a bad model reply or a failed model call: it logs a warning and
    returns what it could parse (possibly nothing), so a chat turn goes on.
    """
    msgs = _as_messages(messages)
    if not any(m.role == "user" and m.content.strip() for m in msgs):
        return []
    if llm is None:
        from ..llm import get_llm

        llm = get_llm()
    try:
        reply = llm.chat(extraction_messages(msgs))
    except Exception as exc:
        log.warning("memory extraction: the model call failed (%s); no memories stored", exc)
        return []
    return parse_memories(reply.content)


# ---------------------------------------------------------------- the offline extractor
_FIRST_PERSON = re.compile(r"\b(I'm|I've|I'd|I'll|I|my|mine|myself|we're|we've|we'd|we'll|we|our|ours|me)\b",
                           re.IGNORECASE)
_I_SUBJECT = re.compile(r"\bI\b|\bI'(?:m|ve|d|ll)\b|\b(?:we|we're|we've|we'd|we'll)\b|^(?:my|our|me and)\b"
                        r"|\b(?:is|are|was|were)\s+(?:my|our)\b", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(you|your|yours|you're|you've|you'll|you'd|yourself)\b", re.IGNORECASE)
_QUESTION_START = re.compile(
    r"^(what|what's|where|where's|when|who|who's|whom|whose|which|how|how's|why|do|does|did|is|isn't|are|"
    r"aren't|was|were|can|could|would|will|should|shall|may|might|have|has|had|any|anything|"
    r"is there|are there)\b", re.IGNORECASE)
# leading words that carry no fact: greetings, fillers, "remember that", "as I said"
_LEAD = re.compile(
    r"^(?:(?:hi|hello|hey|hiya|yo|greetings|good (?:morning|afternoon|evening)|well|so|oh|ah|ok|okay|"
    r"alright|also|and|but|anyway|actually|honestly|btw|by the way|fyi|for the record|just so you know|"
    r"just fyi|please|yes|yeah|yep|no|nope|sure|great|thanks|thank you|cool|nice|oh and|plus|"
    r"(?:please )?(?:remember|note|keep in mind|don't forget|for future reference)(?: that)?|"
    r"as i (?:said|mentioned|told you)(?: before| earlier)?|like i said|i told you(?: that)?|"
    r"i (?:should|must|have to|want to) (?:mention|say|tell you)(?: that)?)\b[\s,!.:;-]*)+",
    re.IGNORECASE)
_SPLIT = re.compile(r"\s*(?:,|;|—|–| - )?\s+(?:and|but|so|because|though|although|while|plus)\s+"
                    r"(?=(?:i|i'm|i've|i'd|i'll|my|we|we're|we've|we'll|our)\b)"
                    r"|\s*[;—–]\s*|,\s+(?=(?:i|i'm|i've|i'd|i'll|my|we|we're|we've|our)\b)", re.IGNORECASE)
_REQUEST = re.compile(
    r"^(?:i|we)(?:'d| would| am|'m| was| were)?\s+(?:just\s+)?(?:wonder|wondering|want(?:ed)? to know|"
    r"like to know|need(?:ed)? (?:help|some help|advice|some advice|you to|a recommendation)|"
    r"want(?:ed)? you to|like you to|have a question|had a question|curious (?:about|if|whether)|"
    r"hope you|need to ask|want to ask|would like to ask|am asking|'m asking)\b"
    r"|^(?:i|we) (?:think|guess|suppose|believe|feel) (?:so|not|that's|it's|this is|that is)\b",
    re.IGNORECASE)
_IMPERATIVE = frozenset(
    """book find tell show give help recommend suggest let let's please remind check plan make add send
    search look list compare explain describe write draft summarize summarise translate calculate
    schedule cancel reserve order get bring take call email text keep stop start try use go
    imagine consider pick choose set update delete remove forget""".split())
_SMALL_TALK = frozenset(
    """thanks thank sounds sound great good nice cool ok okay awesome perfect wow lol haha sure yes
    no yeah yep nope fine hello hi hey bye goodbye cheers excellent wonderful amazing interesting
    right true indeed exactly absolutely welcome sorry oops hmm""".split())
# predicates that say nothing worth remembering on their own ("I see", "I'm fine", "I'd love that")
_EMPTY = frozenset(stem(w) for w in """see agree understand think guess hope mean fine good great sure
    sorry glad wonder wondering suppose bet right true correct interest interested cool nice awesome perfect
    amazing excite excited curious happy done ready busy tired confused lost okay ok love like prefer hate
    want need enjoy thank thanks appreciate help helpful cheer feel said say ask asked asking try trying
    bit little lot kind sort anyway""".split())
_TRANSIENT = re.compile(r"\b(lately|today|tonight|yesterday|right now|at the moment|these days|this week|"
                        r"recently|so far)\b", re.IGNORECASE)  # small talk about now, not a fact
_DETERMINERS = frozenset("the a an most all many some every each no any several few both".split())
_ANAPHORA_SUBJECT = frozenset("""it it's this that that's these those they they're he she he's she's there's
    here here's which what everything something nothing someone everyone anyone one""".split())
_PRESENT = re.compile(r"\b(is|are|isn't|aren't|has|have|hasn't|haven't|can|cannot|can't|must|does|do|"
                      r"doesn't|don't|won't|will|tends? to|remains?|contains?|lies|sits|[a-z]{2,}[^s\W]s)\b")
_PAST_FORMS = frozenset("""am is are was were be been have has had do does did will would shall should can
    could may might must ought need dare used went saw took got made ate drank ran swam flew drove bought met
    left lost found grew became began broke brought built caught chose came fell felt forgot gave knew said
    sold sent spent stood taught thought told understood won wrote rode sang slept spoke woke wore paid kept
    held heard hid hit hurt let lay led lit meant put quit read rang rose set shook shut sat sold sank stole
    stuck struck swore threw tore wept wound also really always never usually often sometimes just still
    mostly absolutely totally definitely actually generally rarely seriously already even only and or not
    to too am""".split())
_ADVERB = r"(?:(?:also|really|always|never|usually|often|sometimes|just|still|mostly|absolutely|totally|" \
          r"definitely|actually|generally|rarely|seriously|truly|honestly|kind of|sort of|now|currently|" \
          r"already|even|only|\w{4,}ly)\s+)*"


def _third_singular(verb: str) -> str:
    low = verb.lower()
    if low in ("have",):
        return "has"
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return verb + "es"
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    return verb + "s"


def _agree(match: re.Match) -> str:
    subject, adverbs, verb = match.group(1), match.group(2), match.group(3)
    low = verb.lower()
    if low in ("don't", "dont"):
        return f"{subject} {adverbs}doesn't"
    past = low.endswith("ed") and not low.endswith("eed")
    if low in _PAST_FORMS or past or not low.isalpha():
        return match.group(0)
    return f"{subject} {adverbs}{_third_singular(verb)}"


def to_third_person(clause: str) -> str:
    """'I love hiking with my dog' -> 'User loves hiking with their dog.' (we/our count as the user)."""
    text = normalize(clause).strip(" ,;:-").rstrip(" .!…")
    companion = None
    found = re.search(r"\b(?:([Mm]y|[Oo]ur)\s+([\w'-]+(?:\s+[\w'-]+)?)|([A-Z][a-z]+))\s+and\s+I\b"
                      r"|\b[Mm]e and (my|our)\s+([\w'-]+)", text)
    if found:
        who = found.group(2) or found.group(5)
        companion = f"their {who}" if who else found.group(3)
        text = text[:found.start()] + "WEPAIR" + text[found.end():]
    for pattern, repl in ((r"\bwe're\b", "I'm"), (r"\bwe are\b", "I am"), (r"\bwe've\b", "I've"),
                          (r"\bwe have\b", "I have"), (r"\bwe were\b", "I was"), (r"\bwe'll\b", "I'll"),
                          (r"\bwe'd\b", "I'd"), (r"\bwe\b", "I"), (r"\bour\b", "my"), (r"\bours\b", "mine"),
                          (r"\bourselves\b", "myself")):
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    text = re.sub(r"\bus\b", "me", text)  # lower case only: "the US" is a country
    text = re.sub(r"^(?:my|My)\b", "USERPOSS", text)
    text = re.sub(r"\b(is|are|was|were) my\b", r"\1 USERPOSS", text)
    text = re.sub(rf"\b(I)\s+({_ADVERB})([\w']+)", _agree, text)
    text = re.sub(r"\bI do not\b", "I does not", text)
    out = third_person(text)
    out = out.replace("USERPOSS", "User's")
    if companion:
        out = out.replace("WEPAIR", f"User and {companion}")
    return out[:1].upper() + out[1:]


_PAIR = re.compile(r"\b((?:[Mm]y|[Oo]ur)\s+[\w'-]+(?:\s+[\w'-]+)?|[A-Z][a-z]+)\s+and\s+I\b")


def _clauses(sentence: str) -> list[str]:
    sentence = _PAIR.sub(lambda m: m.group(1) + " and\x00I", sentence)  # "my wife and I" is one subject
    sentence = re.sub(r"\b([Mm]e)\s+and\s+(my|our)\b", "\\1 and\x00\\2", sentence)
    parts = [p.replace("\x00", " ").strip(" ,;:-") for p in _SPLIT.split(sentence)]
    return [_LEAD.sub("", p).strip(" ,;:-") for p in parts if p and p.strip(" ,;:-")]


def _content(text: str) -> set[str]:
    from ..offline.text import content_words

    return content_words(text)


def _first_word(text: str) -> str:
    m = re.match(r"[\w']+", text)
    return m.group(0).lower() if m else ""


def _is_question(clause: str) -> bool:
    return clause.rstrip().endswith("?") or bool(_QUESTION_START.match(clause))


def _episodic(clause: str) -> str | None:
    if _SECOND_PERSON.search(clause) or _REQUEST.match(clause) or re.match(r"^if\b", clause, re.IGNORECASE):
        return None
    if _first_word(clause) in _IMPERATIVE:
        return None
    body = _FIRST_PERSON.sub(" ", clause)
    if not (_content(body) - _EMPTY):
        return None
    return to_third_person(clause)


def _semantic(clause: str) -> str | None:
    if _FIRST_PERSON.search(clause) or _SECOND_PERSON.search(clause):
        return None
    tokens = re.findall(r"[\w'-]+", clause)
    if len(tokens) < 3:
        return None
    first = tokens[0].lower()
    if first in _IMPERATIVE or first in _SMALL_TALK or first in _ANAPHORA_SUBJECT:
        return None
    if first in STOPWORDS and first not in _DETERMINERS:
        return None
    if not _PRESENT.search(clause.lower()) or len(_content(clause) - _EMPTY) < 2 or _TRANSIENT.search(clause):
        return None
    if re.search(r"\b(was|were|had|did)\b", clause, re.IGNORECASE) and not re.search(
            r"\b(is|are|has|have)\b", clause, re.IGNORECASE):
        return None
    text = clause.strip().rstrip(".!") + "."
    return text[:1].upper() + text[1:]


def rule_extract(text: str) -> list[CandidateMemory]:
    """The offline extractor: deterministic rules over one user message (see the module doc)."""
    out: list[CandidateMemory] = []
    for sentence in sentences(text):
        if sentence.endswith("?"):
            continue
        for clause in _clauses(sentence):
            if not clause or _is_question(clause):
                continue
            name = offline_name(clause)
            if name:
                out.append(CandidateMemory("episodic", f"User's name is {name}."))
                rest = re.sub(r"^.*?\b" + re.escape(name) + r"\b[\s,.!]*", "", clause)
                if len(_content(rest) - _EMPTY) < 2:
                    continue
                clause = "I am " + rest if not _I_SUBJECT.search(rest) else rest
            if _I_SUBJECT.search(clause):
                content = _episodic(clause)
                kind = "episodic"
            else:
                content = _semantic(clause)
                kind = "semantic"
            if content and len(content) <= MAX_CONTENT_CHARS:
                out.append(CandidateMemory(kind, content))
    unique: dict[str, CandidateMemory] = {}
    for c in out:
        unique.setdefault(c.content.casefold(), c)
    return list(unique.values())


_TRANSCRIPT_LINE = re.compile(r"^(user|assistant|system|tool):\s?(.*)$")


def _user_texts(prompt: str) -> list[str]:
    """The user's messages out of the transcript in the extraction prompt."""
    texts, role = [], None
    for line in prompt.splitlines():
        m = _TRANSCRIPT_LINE.match(line)
        if m:
            role = m.group(1)
            if role == "user":
                texts.append(m.group(2))
        elif line.startswith("  ") and role == "user" and texts:
            texts[-1] += "\n" + line.strip()
    return texts


@offline_skill("extract_memories")
def offline_extract(messages: Sequence[Message], tools=None, response_format=None) -> str:
    """Offline stand-in for a model: rule_extract over the user's lines, answered as JSON."""
    prompt = "\n".join(m.content for m in messages if m.role == "user")
    found = [c.to_dict() for text in _user_texts(prompt) for c in rule_extract(text)]
    return json.dumps(found, ensure_ascii=False)
