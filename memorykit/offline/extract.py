"""Offline ``extract_memories``: deterministic clause rules over the user's own messages.

A readable stand-in for a model. It reads the user's sentences only, splits them into
clauses, keeps first-person statements (experiences, preferences, goals, identity,
possessions, plans) as episodic memories rewritten in the third person, keeps generic
present-tense statements about the world as semantic ones, and drops questions,
requests, greetings and small talk. Measured on ``data/memories/extraction_heldout.jsonl``
by ``benchmarks/long_term.py --extraction``.
"""
from __future__ import annotations

import re
from dataclasses import asdict

from ..memory.extraction import MAX_CONTENT_CHARS, CandidateMemory, ExtractedMemories, ExtractInput
from .text import STOPWORDS, content_words, normalize, sentences, stem, third_person


def run(inp: ExtractInput, tools=None) -> ExtractedMemories:
    """The task: rule_extract over every user message, in order, without repeats."""
    found: dict[str, CandidateMemory] = {}
    for message in inp.messages:
        if message.role == "user":
            for c in rule_extract(message.content):
                found.setdefault(c.content.casefold(), c)
    return ExtractedMemories(memories=[asdict(c) for c in found.values()])


_NAME_INTRO = re.compile(
    r"\b(?:my name is|my name's|i am called|i'm called|call me|name's)\s+([A-Z][\w'-]+)"
    r"|\b(?:i am|i'm)\s+([A-Z][a-z][\w'-]+)\b", re.IGNORECASE)
_NOT_A_NAME = {"not", "so", "very", "just", "going", "planning", "looking", "trying", "a", "the", "from",
               "in", "at", "allergic", "vegan", "vegetarian", "married", "happy", "sorry", "fine", "good",
               "here", "back", "new", "interested", "afraid", "sure", "also", "still", "really", "learning"}


def user_name(text: str) -> str | None:
    """A name the user gives for themselves ("my name's Raphael", "call me Sam"), else None."""
    for m in _NAME_INTRO.finditer(text):
        name = m.group(1) or m.group(2)
        if name and name.lower() not in _NOT_A_NAME and name[0].isupper():
            return name
    return None


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


_LOWER_I = re.compile(r"(?<![\w'.])i(?=(?:'m|'ve|'d|'ll)?(?:[\s,;:!?]|$))")


def rule_extract(text: str) -> list[CandidateMemory]:
    """The offline extractor: deterministic rules over one user message (see the module doc)."""
    out: list[CandidateMemory] = []
    text = _LOWER_I.sub("I", normalize(text))  # chat is often typed in lower case: "i'm", "i work"
    for sentence in sentences(text):
        if sentence.endswith("?"):
            continue
        for clause in _clauses(sentence):
            if not clause or _is_question(clause):
                continue
            name = user_name(clause)
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
