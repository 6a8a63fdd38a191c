"""Example retrieval: rank training questions by similarity to a new question.

The offline strategy adapts the gold query of the most similar *training* question, so what
"similar" means decides which template it starts from. Entity mentions, numbers and quoted
strings are masked to placeholders before anything is compared (``"Who wrote ENT?"``): two
questions of the same template then look alike whatever entities they name.

Three retrievers, chosen by the spec's ``retrieval`` knob:

* ``tfidf`` — TF-IDF cosine over word uni/bi-grams and character 3-5-grams (pure Python; the
  character n-grams make typos and inflections ("publish"/"published") count);
* ``fuzzy`` — rapidfuzz ``token_set_ratio`` on the masked texts;
* ``embeddings`` — sentence embeddings (``all-MiniLM-L6-v2`` through ``sentence-transformers``)
  when that optional package and a locally available model load; otherwise :func:`make_retriever`
  falls back to ``tfidf`` and says so in its note.

A retriever only ever sees the pool it was built with (``Retriever.pool``): the strategy builds
it from training examples, so validation and test questions can never leak into a template.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rapidfuzz import fuzz

from worker_agent.strategies import Example

__all__ = [
    "PLACEHOLDERS",
    "RETRIEVERS",
    "EmbeddingRetriever",
    "FuzzyRetriever",
    "Hit",
    "Retriever",
    "TfidfRetriever",
    "make_retriever",
    "normalize_text",
]

#: Placeholders that replace masked spans (kept lowercase: texts are casefolded).
PLACEHOLDERS = ("ent", "num", "str")
RETRIEVERS = ("tfidf", "fuzzy", "embeddings")
EMBEDDING_MODEL = "all-MiniLM-L6-v2"

_WORD_RE = re.compile(r"[^\W_]+")


def normalize_text(text: str) -> str:
    """Casefolded, accent-free, punctuation-free text with single spaces."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " ".join(_WORD_RE.findall(text))


@dataclass(frozen=True)
class Hit:
    """One retrieved training example and its similarity (higher is more similar)."""

    example: Example
    score: float


class Retriever:
    """Ranks the examples of ``pool`` (with their masked texts) against a masked question."""

    name = "base"

    def __init__(self, pool: Sequence[Example], masked: Sequence[str]) -> None:
        if len(pool) != len(masked):
            raise ValueError(f"retriever: {len(pool)} examples but {len(masked)} masked texts")
        self.pool: tuple[Example, ...] = tuple(pool)
        self.masked: tuple[str, ...] = tuple(normalize_text(m) for m in masked)

    def scores(self, masked_question: str) -> list[float]:
        raise NotImplementedError

    def rank(self, masked_question: str, k: int | None = None) -> list[Hit]:
        """The ``k`` most similar examples, best first; ties broken by uid (deterministic)."""
        if not self.pool:
            return []
        sims = self.scores(normalize_text(masked_question))
        order = sorted(range(len(self.pool)), key=lambda i: (-round(sims[i], 9), self.pool[i].uid))
        hits = [Hit(self.pool[i], round(sims[i], 6)) for i in order]
        return hits if k is None else hits[:k]


# --------------------------------------------------------------------------------------------
# TF-IDF
# --------------------------------------------------------------------------------------------


def _word_features(text: str) -> Counter[str]:
    words = text.split()
    feats: Counter[str] = Counter(f"w:{w}" for w in words)
    feats.update(f"b:{a} {b}" for a, b in itertools.pairwise(words))
    return feats


def _char_features(text: str) -> Counter[str]:
    """Character 3-5-grams inside word boundaries (like scikit-learn's ``char_wb``)."""
    feats: Counter[str] = Counter()
    for word in text.split():
        padded = f" {word} "
        for n in (3, 4, 5):
            feats.update(padded[i : i + n] for i in range(max(1, len(padded) - n + 1)))
    return feats


class _TfidfSpace:
    """Sublinear TF, smoothed IDF, L2-normalized sparse vectors (dicts)."""

    def __init__(self, docs: Sequence[Counter[str]]) -> None:
        n = len(docs)
        df: Counter[str] = Counter()
        for doc in docs:
            df.update(doc.keys())
        self.idf = {t: math.log((1 + n) / (1 + d)) + 1.0 for t, d in df.items()}
        self.default_idf = math.log(1 + n) + 1.0
        self.vectors = [self.vector(doc) for doc in docs]

    def vector(self, doc: Counter[str]) -> dict[str, float]:
        vec = {t: (1.0 + math.log(c)) * self.idf.get(t, self.default_idf) for t, c in doc.items() if c > 0}
        norm = math.sqrt(sum(v * v for v in vec.values())) or 1.0
        return {t: v / norm for t, v in vec.items()}

    def cosines(self, doc: Counter[str]) -> list[float]:
        q = self.vector(doc)
        return [sum(w * v.get(t, 0.0) for t, w in q.items()) for v in self.vectors]


class TfidfRetriever(Retriever):
    """Mean of a word (uni+bi-gram) and a character (3-5-gram) TF-IDF cosine."""

    name = "tfidf"

    def __init__(self, pool: Sequence[Example], masked: Sequence[str]) -> None:
        super().__init__(pool, masked)
        self._words = _TfidfSpace([_word_features(m) for m in self.masked])
        self._chars = _TfidfSpace([_char_features(m) for m in self.masked])

    def scores(self, masked_question: str) -> list[float]:
        words = self._words.cosines(_word_features(masked_question))
        chars = self._chars.cosines(_char_features(masked_question))
        return [0.5 * w + 0.5 * c for w, c in zip(words, chars)]


class FuzzyRetriever(Retriever):
    """rapidfuzz ``token_set_ratio`` (0-1) of the masked texts."""

    name = "fuzzy"

    def scores(self, masked_question: str) -> list[float]:
        return [fuzz.token_set_ratio(masked_question, m) / 100.0 for m in self.masked]


class EmbeddingRetriever(Retriever):
    """Cosine of sentence embeddings; needs the optional ``sentence-transformers`` package and
    a locally cached model (nothing is downloaded at run time)."""

    name = "embeddings"
    _models: ClassVar[dict[str, Any]] = {}

    def __init__(self, pool: Sequence[Example], masked: Sequence[str], model: Any = None) -> None:
        super().__init__(pool, masked)
        self.model = model if model is not None else self._load()
        self._matrix = self._encode(list(self.masked)) if self.masked else []

    @classmethod
    def _load(cls) -> Any:
        if EMBEDDING_MODEL not in cls._models:
            from sentence_transformers import SentenceTransformer  # optional dependency

            cls._models[EMBEDDING_MODEL] = SentenceTransformer(EMBEDDING_MODEL, local_files_only=True)
        return cls._models[EMBEDDING_MODEL]

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors = self.model.encode(texts, normalize_embeddings=True)
        return [[float(x) for x in row] for row in vectors]

    def scores(self, masked_question: str) -> list[float]:
        (q,) = self._encode([masked_question])
        return [sum(a * b for a, b in zip(q, row)) for row in self._matrix]


def make_retriever(name: str, pool: Sequence[Example], masked: Sequence[str]) -> tuple[Retriever, str | None]:
    """The retriever ``name`` over ``pool``; the note says why another one was used instead."""
    if name == "tfidf":
        return TfidfRetriever(pool, masked), None
    if name == "fuzzy":
        return FuzzyRetriever(pool, masked), None
    if name == "embeddings":
        try:
            return EmbeddingRetriever(pool, masked), None
        except Exception as exc:  # ImportError, or a model that is not available offline
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return TfidfRetriever(pool, masked), f"embeddings unavailable ({reason}); using tfidf"
    raise ValueError(f"unknown retrieval {name!r}; expected one of {', '.join(RETRIEVERS)}")
