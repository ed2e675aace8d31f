"""The calendar periods a question names ("in June", "on 7 May 2023", "in 2022"), to compare with
the time an exchange was stored.

``periods(text, now)`` returns ``(start, end)`` POSIX seconds (UTC, end exclusive) for:

* a full date: "7 July, 2023", "July 7, 2023", "7th of July 2023", "7 de julio de 2023",
  "2023-07-07": that day (numeric forms like "7/7/2023" are not read: the day/month order is
  ambiguous);
* a month with a year: "July 2023", "julio de 2023": that month;
* a month alone: "in July": the latest July not after ``now`` (asked in January, "December"
  means last December);
* a year alone, 1900-2099: that year.

Month names are read in the languages keyword recall has stop words for (en, pt, es, de, fr, it,
nl, ca), in full and in the usual abbreviations, diacritics ignored. A name that is also a
common word ("may", "mar" is Spanish for sea, "mai" Italian for never, "mars", "sept", "dez",
"marc") counts only next to a day number or a year ("May 3", "3 mai 2023"). Relative phrases
("last week", "yesterday") are not read: on LoCoMo they echo the dialogue's own words rather
than the time of asking, and what helps there could not be checked for live use.

A question names a few dates. Only the first :data:`MAX_MENTIONS` date mentions are read, so a
text of thousands ("2023 2023 2023 ...", a pasted list) costs time in proportion to its length,
not to the square of its mentions, and the periods compared with each candidate stay few.
"""
from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Iterator

__all__ = ["DAY", "MAX_MENTIONS", "MONTHS", "date_match", "periods"]

DAY = 86400.0
#: Date mentions read in one text; the rest are not read (see the module docstring).
MAX_MENTIONS = 32

# Folded (lower case, no diacritics) month names and abbreviations -> month number.
_NAMES = {
    1: "january jan januar janner janvier enero gennaio januari janeiro gener",
    2: "february feb februar fevrier febrero febbraio februari fevereiro febrer",
    3: "march mar marz maerz mars marzo maart marco marc",
    4: "april apr avril abril aprile",
    5: "may mai mayo maggio mei maio maig",
    6: "june jun juni juin junio giugno junho juny",
    7: "july jul juli juillet julio luglio julho juliol",
    8: "august aug aout agosto augustus agost",
    9: "september sep sept septembre septiembre setiembre settembre setembro setembre",
    10: "october oct oktober okt octobre octubre ottobre outubro",
    11: "november nov novembre noviembre novembro",
    12: "december dec dezember dez decembre diciembre dicembre dezembro desembre",
}
MONTHS: dict[str, int] = {name: month for month, names in _NAMES.items() for name in names.split()}
#: Names that are also ordinary words: a month only next to a day or a year.
_AMBIGUOUS = frozenset(("may", "mar", "mai", "mars", "marc", "sept", "dez", "jun", "jul", "dec", "oct", "nov", "aug",
                        "apr", "jan", "feb", "sep", "mei", "maig"))

_FOLD = str.maketrans("áàâäãéèêëíìîïóòôöõúùûüç", "aaaaaeeeeiiiiooooouuuuc")
_WORD = r"([^\W\d_]+)\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th|er|º|°)?"
_YEAR = r"((?:19|20)\d\d)"
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+|de\s+|di\s+)?{_WORD}(?:,?\s+(?:of\s+|de\s+|del\s+)?{_YEAR})?\b",
                        re.IGNORECASE)
_MONTH_DAY = re.compile(rf"\b{_WORD}\s+{_DAY}(?:,?\s+{_YEAR})?\b", re.IGNORECASE)
_MONTH_YEAR = re.compile(rf"\b{_WORD},?\s+(?:of\s+|de\s+|del\s+)?{_YEAR}\b", re.IGNORECASE)
_MONTH = re.compile(rf"\b{_WORD}\b", re.IGNORECASE)
_ISO = re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b")
_YEAR_ALONE = re.compile(rf"\b{_YEAR}\b")

Span = tuple[float, float]


def _fold(word: str) -> str:
    return word.lower().translate(_FOLD)


def _ts(year: int, month: int, day: int = 1) -> float:
    return dt.datetime(year, month, day, tzinfo=dt.timezone.utc).timestamp()


def _month_span(year: int, month: int) -> Span:
    return _ts(year, month), _ts(year + (month == 12), month % 12 + 1)


def _day_span(year: int, month: int, day: int) -> Span | None:
    try:
        start = _ts(year, month, day)
    except ValueError:  # 31 June
        return None
    return start, start + DAY


def _latest_year(month: int, now: float | None) -> int | None:
    if now is None:
        return None
    today = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    return today.year if month <= today.month else today.year - 1


def periods(text: str, now: float | None = None) -> list[Span]:
    """The periods ``text`` names (see the module docstring); ``[]`` when it names none.

    A day or month without a year takes the one year the text names elsewhere, else the latest
    such month up to ``now`` (skipped when ``now`` is None).

        >>> import datetime as dt
        >>> [dt.datetime.fromtimestamp(a, dt.timezone.utc).date().isoformat()
        ...  for a, _ in periods("What did she do on 7 de julio de 2023 and in 2024?")]
        ['2023-07-07', '2024-01-01']
        >>> periods("you may know")
        []
    """
    years = [m.group(1) for m in itertools.islice(_YEAR_ALONE.finditer(text), 2)]  # the second settles it
    only_year = int(years[0]) if len(years) == 1 else None

    def year_of(month: int, given: str | None) -> int | None:
        if given:
            return int(given)
        return only_year if only_year is not None else _latest_year(month, now)

    read = _Mentions(text)
    for m in read.matches(_ISO):
        read.keep(_day_span(int(m.group(1)), int(m.group(2)), int(m.group(3))), m)
    for pattern, day_at, month_at, year_at in ((_DAY_MONTH, 1, 2, 3), (_MONTH_DAY, 2, 1, 3)):
        for m in read.matches(pattern):
            month = MONTHS.get(_fold(m.group(month_at)))
            year = year_of(month, m.group(year_at)) if month is not None and read.free(m) else None
            if month is not None and year is not None:
                read.keep(_day_span(year, month, int(m.group(day_at))), m)
    for m in read.matches(_MONTH_YEAR):
        month = MONTHS.get(_fold(m.group(1)))
        if month is not None and read.free(m):
            read.keep(_month_span(int(m.group(2)), month), m)
    for m in read.matches(_MONTH):
        word = _fold(m.group(1))
        month = MONTHS.get(word)
        if month is None or word in _AMBIGUOUS or not read.free(m):
            continue
        year = year_of(month, None)
        if year is not None:
            read.keep(_month_span(year, month), m)
    for m in read.matches(_YEAR_ALONE):
        if read.free(m):
            read.keep((_ts(int(m.group(1)), 1), _ts(int(m.group(1)) + 1, 1)), m)
    return read.found


class _Mentions:
    """The periods read in a text so far, and where it names them (each pattern in turn, the more
    precise first: a mention read is not read again); at most MAX_MENTIONS mentions."""

    def __init__(self, text: str):
        self.text = text
        self.found: list[Span] = []
        self.taken: list[tuple[int, int]] = []  # character spans read

    def matches(self, pattern: re.Pattern[str]) -> Iterator[re.Match[str]]:
        """``pattern``'s matches in the text, until MAX_MENTIONS mentions are read."""
        for m in pattern.finditer(self.text):
            if len(self.taken) >= MAX_MENTIONS:
                return
            yield m

    def free(self, m: re.Match[str]) -> bool:
        return all(m.end() <= a or m.start() >= b for a, b in self.taken)

    def keep(self, span: Span | None, m: re.Match[str]) -> None:
        if span is not None:
            if span not in self.found:  # "2023 ... 2023" names one period
                self.found.append(span)
            self.taken.append(m.span())


def date_match(spans: list[Span], ts: float | None) -> float:
    """+1 when ``ts`` falls in one of ``spans``, -1 when spans are named and it falls in none, 0 when
    none is named or the time is unknown."""
    if not spans or ts is None:
        return 0.0
    return 1.0 if any(a <= ts < b for a, b in spans) else -1.0
