"""Does a user message explicitly confirm? A lexical check, exactly as the spec defines it.

A message confirms when one of its clauses holds an affirmative (yes, confirm, go ahead, ...) that
is not negated: no negation within the three words before it in its clause, nor right after it.
A message that opens with a refusal phrase ("No, please do not proceed", "Please don't cancel it,
okay?") never confirms; "Don't worry" ("Do not worry", "Dont worry"), "not a problem", "never
mind" are not refusals. Clauses end at punctuation; ‘ and ’ read as apostrophes, and a contraction
typed without its apostrophe (dont, havent, wouldnt) negates as it does with it. The check is lexical: docs/rules.md lists what it misses.
"""

from __future__ import annotations

import re

AFFIRMATIVES: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in (
        "yes", "yeah", "yep", "yup", "sure", "ok", "okay", "alright", "all right",
        "confirm", "confirmed", "proceed", "go ahead", "please do", "do it", "correct",
        "that's right", "absolutely", "definitely", "certainly", "agreed", "sounds good", "affirmative",
    )
)  # fmt: skip
NEGATORS = frozenset(
    {"no", "not", "never", "nope", "nah", "cannot", "neither", "nor"}
    | {f"{verb}nt" for verb in ("do", "did", "does", "is", "are", "was", "were", "has", "have", "had", "would",
                                "should", "could", "must", "need", "ca", "wo", "ai", "sha")}
)  # plus every word ending in n't; the n't contractions are here as typed without their apostrophe
REFUSAL_OPENERS: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in (
        "no", "nope", "nah", "not", "never", "don't", "dont", "do not", "negative", "stop",
        "please don't", "please dont", "please do not", "i don't want", "i dont want",
    )
)  # fmt: skip
NOT_REFUSALS: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in ("no problem", "no worries", "not a problem", "don't worry", "dont worry", "do not worry",
                   "never mind")
)
NEGATION_WINDOW = 3

_CLAUSE_END = re.compile(r"[.,;:!?\n]+")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def confirms(text: str | None) -> bool:
    """True when the message holds an explicit, non-negated affirmative and opens with no refusal."""
    clauses = [_WORD.findall(c) for c in _CLAUSE_END.split(_normalize(text or ""))]
    clauses = [c for c in clauses if c]
    if not clauses or _opens_with_refusal(clauses[0]):
        return False
    return any(_has_affirmative(words) for words in clauses)


APOSTROPHES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'"})
"""Typographic apostrophes (left and right single quotation marks, modifier letter apostrophe)."""


def _normalize(text: str) -> str:
    return text.lower().translate(APOSTROPHES)


def _opens_with(words: list[str], phrases: tuple[tuple[str, ...], ...]) -> bool:
    return any(tuple(words[: len(p)]) == p for p in phrases)


def _opens_with_refusal(words: list[str]) -> bool:
    return _opens_with(words, REFUSAL_OPENERS) and not _opens_with(words, NOT_REFUSALS)


def _is_negator(word: str) -> bool:
    return word in NEGATORS or word.endswith("n't")


_BY_FIRST_WORD: dict[str, list[tuple[str, ...]]] = {}
for _phrase in AFFIRMATIVES:
    _BY_FIRST_WORD.setdefault(_phrase[0], []).append(_phrase)


def _has_affirmative(words: list[str]) -> bool:
    for start, word in enumerate(words):
        for phrase in _BY_FIRST_WORD.get(word, ()):
            end = start + len(phrase)
            if tuple(words[start:end]) != phrase:
                continue
            before = words[max(0, start - NEGATION_WINDOW) : start]
            after = words[end : end + 1]
            if not any(map(_is_negator, before + after)):
                return True
    return False
