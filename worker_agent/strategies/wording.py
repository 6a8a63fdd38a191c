"""What a question's wording says, without the KG: the kind of answer it asks for (a count, a
boolean, a list), the numbers and quoted strings it contains, superlatives and comparisons and
which way they point, whether it asks for names, and which of its words stand where a training
question named something (word-by-word alignment).
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rapidfuzz import fuzz

from worker_agent.retrieval import normalize_text
from worker_agent.tools import STOPWORDS, fold_accents

__all__ = [
    "HINTS",
    "Mention",
    "QuestionKind",
    "align_words",
    "asks_for_names",
    "asks_several",
    "asks_who",
    "comparison_direction",
    "find_numbers",
    "find_quoted",
    "is_number",
    "mentions_names",
    "norm",
    "overlapping",
    "question_kind",
    "same_number",
    "singulars",
    "snap",
    "split_camel",
    "superlative_polarity",
    "word_sim",
]

_NAME_RE = re.compile(r"\b(names?|called|titles?|labels?)\b", re.IGNORECASE)


# What joins a second request to the first ("... and when did they start", "films with their year").
_SEVERAL_RE = re.compile(r"\b(?:and|with (?:their|its|his|her|the)|as well as|along with|together with|plus)\b|,",
                         re.IGNORECASE)
_WHO_RE = re.compile(r"^\W*(?:who|whom|whose)\b", re.IGNORECASE)


def asks_several(text: str) -> str | None:
    """The part of the question after the first word that asks for more values per answer
    ("Which players ..., and *when did they start*?"), or None when it asks for one. Mask the
    entity names first: a name may hold an "and" or a comma."""
    m = _SEVERAL_RE.search(text)
    return text[m.end():] if m else None


def asks_who(text: str) -> bool:
    """The question asks for a person ("Who ...", "Whom ...")."""
    return bool(_WHO_RE.search(text))


def mentions_names(text: str) -> bool:
    """The question speaks of names (or titles, labels): labels may be what it wants."""
    return bool(_NAME_RE.search(text))


_FILTER_BEFORE = frozenset({"in", "with", "by", "whose", "containing", "contains", "has", "have", "having"})
_FILTER_AFTER = frozenset({"contain", "contains", "containing", "start", "starts", "starting", "end", "ends",
                           "ending", "include", "includes", "including", "is", "has", "like", "matching"})


def asks_for_names(text: str) -> bool:
    """The question asks for names (or titles, labels) as its answer ("What is the *name* of
    ...", "I need their *names*"), not about them ("shops with Corner in their name")."""
    words = normalize_text(text).split()
    for i, word in enumerate(words):
        if word not in ("name", "names", "title", "titles", "label", "labels"):
            continue
        before = set(words[max(0, i - 2):i])
        after = words[i + 1] if i + 1 < len(words) else ""
        if not (before & _FILTER_BEFORE) and after not in _FILTER_AFTER:
            return True
    return False


_YES_NO_START = frozenset(["is", "are", "was", "were", "does", "do", "did", "has", "have", "had", "can", "could", "will", "would", "should", "shall", "may", "might", "am"])
_COUNT_RE = re.compile(r"^(?:\W*\w+\W+){0,2}?(how many|how much|count|(?:what is |what's )?the number of)\b",
                       re.IGNORECASE)

QuestionKind = Literal["count", "boolean", "list"]


def question_kind(text: str) -> QuestionKind:
    """What shape of answer the question asks for."""
    words = normalize_text(text).split()
    if words and words[0] in _YES_NO_START:
        return "boolean"
    if _COUNT_RE.search(text):
        return "count"
    return "list"


_UNITS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * i for i, w in enumerate(["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]) if w != "_"}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMBER_WORDS = frozenset(_UNITS) | frozenset(_TENS) | frozenset(_SCALES)
_DIGITS_RE = re.compile(
    r"(?<![A-Za-z0-9\-.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:st|nd|rd|th|%)?(?![A-Za-z0-9\-])"  # 800, 6th
    r"|(?<![A-Za-z0-9\-.])(\d+(?:\.\d+)?)(?=x\d)"  # the first 15 of 15x15
    r"|(?<=\dx)(\d+(?:\.\d+)?)(?![A-Za-z0-9\-])"  # the second one
)
_QUOTED_RE = re.compile(r"""(?:^|(?<=[\s(]))(?:'([^']+)'|"([^"]+)"|‘([^’]+)’|“([^”]+)”)""")


@dataclass(frozen=True)
class Mention:
    """A number or string found in a question."""

    start: int
    end: int
    value: str


def find_numbers(text: str) -> list[Mention]:
    """Numbers written in digits (``800``, ``1,000,000``, ``6th``, ``15x15``) or words
    (``one million``, ``twenty``)."""
    found: list[Mention] = []
    for m in _DIGITS_RE.finditer(text):
        group = next(g for g in (1, 2, 3) if m.group(g))
        found.append(Mention(m.start(group), m.end(group), m.group(group).replace(",", "")))
    words = [(m.start(), m.end(), m.group().lower()) for m in re.finditer(r"[A-Za-z]+", text)]
    i = 0
    while i < len(words):
        j, total, current = i, 0, 0
        while j < len(words) and words[j][2] in _NUMBER_WORDS:
            w = words[j][2]
            if w in _UNITS:
                current += _UNITS[w]
            elif w in _TENS:
                current += _TENS[w]
            elif w in _SCALES:
                current = max(current, 1) * _SCALES[w]
                if _SCALES[w] >= 1000:
                    total, current = total + current, 0
            j += 1
        # "one" alone is usually a pronoun ("the one that ..."), not a number.
        if j > i and not (j - i == 1 and words[i][2] == "one"):
            found.append(Mention(words[i][0], words[j - 1][1], str(total + current)))
            i = j
        else:
            i += 1
    return sorted(found, key=lambda m: m.start)


def find_quoted(text: str) -> list[Mention]:
    """Strings in quotes (straight or typographic)."""
    out = []
    for m in _QUOTED_RE.finditer(text):
        g = next(i for i in range(1, 5) if m.group(i) is not None)
        out.append(Mention(m.start(g), m.end(g), m.group(g)))
    return out


_HIGH = ("most", "largest", "biggest", "highest", "greatest", "maximum", "longest", "latest", "newest",
         "recent", "recently", "youngest", "heaviest", "top", "best", "tallest", "richest", "priciest",
         "costliest", "busiest", "widest", "deepest")
_LOW = ("least", "fewest", "smallest", "lowest", "minimum", "shortest", "earliest", "oldest", "lightest",
        "cheapest", "worst", "poorest", "narrowest", "shallowest")
_GT = ("more than", "greater than", "larger than", "bigger than", "higher than", "longer than",
       "heavier than", "later than", "newer than", "over", "above", "after", "exceeding", "exceeds",
       "exceed", "at least", "since", "beyond")
_LT = ("less than", "fewer than", "smaller than", "lower than", "shorter than", "lighter than",
       "earlier than", "older than", "cheaper than", "under", "below", "before", "at most",
       "not exceed", "does not exceed", "up to", "until")


def _fuzzy_word_in(word: str, lexicon: Iterable[str]) -> bool:
    if word in lexicon:
        return True
    return len(word) >= 6 and any(len(w) >= 6 and fuzz.ratio(word, w) >= 88 for w in lexicon)


def superlative_polarity(text: str) -> int:
    """+1 for "most/largest/latest...", -1 for "least/smallest/oldest...", 0 for neither."""
    for word in normalize_text(text).split():
        if _fuzzy_word_in(word, _HIGH):
            return 1
        if _fuzzy_word_in(word, _LOW):
            return -1
    return 0


def comparison_direction(text: str, before: int | None = None) -> int:
    """+1 for "more than/after/over...", -1 for "less than/before/under...", 0 for neither;
    the phrase closest before character ``before`` wins."""
    scope = normalize_text(text[:before] if before is not None else text)
    best, where = 0, -1
    for phrases, sign in ((_LT, -1), (_GT, 1)):
        for phrase in phrases:
            for m in re.finditer(rf"\b{re.escape(phrase)}\b", scope):
                # Longer phrases ("does not exceed") beat the shorter ones they contain.
                if m.end() > where or (m.end() == where and sign == -1):
                    best, where = sign, m.end()
    return best




# Adjectives of superlatives and comparisons -> words of the properties they are about.
HINTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("old", "oldest", "older", "young", "youngest", "younger", "new", "newest", "newer",
                     "recent", "recently", "latest", "earliest", "founded", "established"),
                    ("year", "date", "founding", "birth")),
    **dict.fromkeys(("large", "largest", "larger", "big", "biggest", "small", "smallest", "populous",
                     "inhabitants", "people"), ("population", "size", "area")),
    **dict.fromkeys(("long", "longest", "short", "shortest", "pages", "thick", "thickest"), ("page", "length")),
    **dict.fromkeys(("heavy", "heaviest", "light", "lightest"), ("weight",)),
    **dict.fromkeys(("expensive", "cheap", "cheapest", "costly", "pricey"), ("price", "cost", "amount")),
    **dict.fromkeys(("rated", "rating", "popular"), ("rating", "score")),
    **dict.fromkeys(("born", "birthday"), ("birth",)),
    "birthplace": ("born", "birth", "place"),
    **dict.fromkeys(("died", "dead"), ("death",)),
    "when": ("date", "year", "time"),
    "where": ("place", "location", "city", "country", "address"),
}



def word_sim(a: str, b: str) -> float:
    """0-100 similarity of two words; a long shared stem counts ("reliable" ~ "reliability"),
    and so does a word inside a compound ("phone" ~ "telephone", "place" ~ "birthplace")."""
    stem = len(os.path.commonprefix([a, b]))
    if stem >= 4 and stem >= 0.7 * min(len(a), len(b)):
        return max(90.0, fuzz.ratio(a, b))
    if stem >= 5 and stem >= 0.55 * min(len(a), len(b)):  # "published" ~ "publication"
        return max(80.0, fuzz.ratio(a, b))
    short, long_ = sorted((a, b), key=len)
    if len(short) >= 4 and long_ != short and (long_.endswith(short) or long_.startswith(short)):
        return max(85.0, fuzz.ratio(a, b))
    return fuzz.ratio(a, b)


def singulars(word: str) -> list[str]:
    """``word`` and the singulars it may be the plural of."""
    out = [word]
    if word.endswith("ies"):
        out.append(word[:-3] + "y")
    if word.endswith(("ses", "xes", "ches", "shes")):
        out.append(word[:-2])
    if word.endswith("s"):
        out.append(word[:-1])
    return out


def split_camel(text: str) -> str:
    """"hasProductManager" -> "has Product Manager"."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text)


def norm(text: str, fold: bool) -> str:
    """Casefolded, accents folded when ``fold``."""
    text = text.casefold()
    return fold_accents(text) if fold else text


def snap(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a character range to whole words."""
    while start > 0 and text[start - 1].isalnum():
        start -= 1
    while end < len(text) and text[end].isalnum():
        end += 1
    return (start, end)


def overlapping(spans: Sequence[tuple[int, int]]) -> bool:
    """Two of the character ranges overlap."""
    ordered = sorted(spans)
    return any(b[0] < a[1] for a, b in itertools.pairwise(ordered))


def same_number(a: str, b: str) -> bool:
    """``a`` and ``b`` are the same number ("800" and "800.0")."""
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def is_number(text: str) -> bool:
    """``text`` (quotes stripped) is a number."""
    try:
        float(text.strip('"'))
        return True
    except ValueError:
        return False


def align_words(example_text: str, mention: tuple[int, int], question: str) -> Mention | None:
    """The words of ``question`` standing where ``example_text[mention[0]:mention[1]]`` stands
    in the training question: the two are aligned word by word. A capitalized mention must be
    replaced by capitalized words ("the word Winter" -> "Public"), at most three of them."""
    ex_words = [(m.start(), m.end(), normalize_text(m.group())) for m in re.finditer(r"[^\W_]+", example_text)]
    q_words = [(m.start(), m.end(), normalize_text(m.group())) for m in re.finditer(r"[^\W_]+", question)]
    inside = [i for i, w in enumerate(ex_words) if w[0] >= mention[0] and w[1] <= mention[1]]
    if not inside:
        return None
    said = example_text[mention[0]:mention[1]]
    matcher = difflib.SequenceMatcher(None, [w[2] for w in ex_words], [w[2] for w in q_words], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if not (a0 <= inside[0] and inside[-1] < a1):
            continue
        if op == "equal":
            j0, j1 = b0 + inside[0] - a0, b0 + inside[-1] - a0
            return Mention(q_words[j0][0], q_words[j1][1], question[q_words[j0][0]:q_words[j1][1]])
        if op != "replace":
            return None
        others = [ex_words[i][2] for i in range(a0, a1) if i not in inside]
        words = [w for w in q_words[b0:b1] if not any(fuzz.ratio(w[2], o) >= 80 for o in others)]
        while words and words[0][2] in STOPWORDS:
            words.pop(0)
        while words and words[-1][2] in STOPWORDS:
            words.pop()
        if not words or len(words) > 3:
            return None
        if said[:1].isupper() and not all(question[w[0]].isupper() or question[w[0]].isdigit() for w in words):
            return None
        return Mention(words[0][0], words[-1][1], question[words[0][0]:words[-1][1]])
    return None
