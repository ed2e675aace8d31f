"""Function words that carry no topic, per language, for keyword recall.

Without them a query like "what is my name" matches every stored exchange containing "is" or
"my" (the reference's observed behaviour). The lists are short on purpose: only words that
are frequent in speech and never the point of a question. Diacritics are removed before
comparison, matching the FTS5 tokenizer (``remove_diacritics 2``).
"""
from __future__ import annotations

import dataclasses
import itertools
import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["LANGUAGES", "MAX_QUERY_TERMS", "StopWords", "content_words", "normalise_term", "query_words", "stopwords",
           "term_set"]

#: A word as FTS5's unicode61 tokenizer sees it: a run of letters and digits.
WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: Query terms beyond this many are ignored: a 1 MB utterance must not build a 1 MB query.
MAX_QUERY_TERMS = 32

_WORDS = {
    "en": """
        a about above after again against all also am an and any are aren't as at be because been before
        being below between both but by can can't could couldn't did didn't do does doesn't doing don't down
        during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here
        here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its
        itself just let's me more most mustn't my myself no nor not now of off on once only or other ought our
        ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than that
        that's the their theirs them themselves then there there's these they they'd they'll they're they've
        this those through to too under until up very was wasn't we we'd we'll we're we've were weren't what
        what's when when's where where's which while who who's whom why why's will with won't would wouldn't
        you you'd you'll you're you've your yours yourself yourselves s t d ll m re ve yeah yes oh ok okay um
        uh hey hi hello well really tell know think please thanks thank remember said say
        """,
    "pt": """
        a à ao aos aquela aquelas aquele aqueles aquilo as às até com como da das de dela delas dele deles
        depois do dos e é ela elas ele eles em entre era eram essa essas esse esses esta está estão estas
        estava estavam este estes estou eu foi fomos for foram há isso isto já lhe lhes mais mas me mesmo meu
        meus minha minhas muito na não nas nem no nos nós nossa nossas nosso nossos num numa o os ou para pela
        pelas pelo pelos por qual quando que quem se seja sem ser seu seus só sua suas também te tem têm tinha
        tu tua tuas um uma umas uns você vocês vos qual quais onde porque sim olá oi então
        """,
    "es": """
        a al algo algunas algunos ante antes como con contra cual cuando de del desde donde durante e el él
        ella ellas ellos en entre era eras es esa esas ese eso esos esta está estaba estado están estar estas
        este esto estos estoy fue fueron ha han hasta hay la las le les lo los más me mi mis mucho muy nada ni
        no nos nosotros o os otra otro para pero poco por porque que qué quien quién se sea sí sin sobre son
        su sus también te tengo ti tiene tu tú tus un una uno unos vosotros y ya yo cuál cuáles dónde cómo
        hola pues
        """,
    "de": """
        aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes auch auf
        aus bei bin bis bist da damit dann das dass dein deine dem den denn der des dich dir doch dort du durch
        ein eine einem einen einer eines er es etwas euch euer für hat hatte hattest hätte ich ihm ihn ihnen
        ihr ihre im in ist ja jede jedem jeden jeder jedes kann kein keine können mein meine mich mir mit muss
        nach nicht nichts noch nun nur ob oder ohne sehr sein seine sich sie sind so über um und uns unser
        unter viel vom von vor war waren warst was weil welche welchem welchen welcher welches wenn wer wie
        wieder will wir wird wo wurde zu zum zur hallo heißt heisst
        """,
    "fr": """
        a à ai au aux avec avez avons c ce ces cet cette d dans de des du elle elles en es est et été être eu
        il ils j je l la le les leur leurs lui m ma mais me même mes moi mon n ne nos notre nous on ont ou où
        par pas pour qu que quel quelle quelles quels qui s sa sans se ses si son sont sur t ta te tes toi ton
        tu un une vos votre vous y suis était bonjour salut comment
        """,
    "it": """
        a ad al alla alle allo agli ai anche che chi ci come con cosa da dal dalla dalle dei del della delle
        dello di dove e è ed era gli ha hai hanno ho i il in io la le lei li lo loro lui ma mi mia mie miei mio
        ne negli nei nel nella nelle no noi non o per perché più quale quando quella quelle quello questa
        queste questo se sei si sia sono su sua sue suo suoi ti tu tua tue tuo tuoi un una uno vi voi ciao
        """,
    "nl": """
        aan al alles als altijd andere ben bij daar dan dat de der deze die dit doch doen door dus een eens en
        er ge geen geweest haar had heb hebben heeft hem het hier hij hoe hun iemand iets ik in is ja je kan
        kon kunnen maar me meer men met mij mijn moet na naar niet niets nog nu of om omdat ons ook op over
        reeds te tegen toch toen tot u uit uw van veel voor want waren was wat we wel werd wie wij wil word
        worden wordt zal ze zei zelf zich zij zijn zo zonder zou hallo hoi
        """,
    "ca": """
        a al als amb és el els ell ella elles ells em en era eren és això aquest aquesta aquests aquestes
        aquell aquella com de del dels els en entre era i ja jo la les li lo ma mai més meu meva meus meves
        molt ni no nosaltres o on per però perquè que què qui quan se seu seva seus seves si sí sense sóc són
        sou també te tu un una uns unes vosaltres hola
        """,
}

LANGUAGES = tuple(sorted(_WORDS))


@lru_cache(maxsize=65536)  # speech repeats its words; the Unicode work is per character
def normalise_term(term: str) -> str:
    """Lower case without diacritics, as FTS5's ``unicode61 remove_diacritics 2`` indexes it."""
    decomposed = unicodedata.normalize("NFKD", term.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@lru_cache(maxsize=32)
def _stopwords(languages: tuple[str, ...], extra: tuple[str, ...]) -> frozenset[str]:
    words: set[str] = set()
    for lang in languages:
        for word in _WORDS[lang].split():
            # "don't" is indexed as the tokens "don" and "t": both go.
            words.update(normalise_term(part) for part in word.replace("'", " ").split())
    words.update(normalise_term(w) for w in extra)
    return frozenset(words)


def stopwords(languages: Iterable[str], extra: Iterable[str] = ()) -> frozenset[str]:
    """The union of the stop-word lists of ``languages`` plus ``extra`` words, normalised."""
    return _stopwords(tuple(sorted(languages)), tuple(sorted(extra)))


#: Stop words of one language a text must hold before that language's list is applied to it.
MIN_EVIDENCE = 2
#: The words of a text read to tell its language (a query is short; a pasted page is not read whole).
_EVIDENCE_WORDS = 256


@dataclasses.dataclass(frozen=True)
class StopWords:
    """The stop words to leave out of a query, by the language the query is in.

    One language's function words are another's content words: "son", "door", "men", "hat",
    "come" are stop words in Spanish, Dutch, German or Italian. So only the list of the language
    whose stop words the text holds most of (at least :data:`MIN_EVIDENCE` words of two letters or
    more) applies to it: "how old is my son?" is English, and "son" stays. Between languages
    holding as many, only the words they all list go. A text with too few stop words to tell
    ("set a timer", "yes") loses those of every language: its function words would otherwise
    match every exchange that has them. If that would leave nothing to search for, a word that is
    not an English one stays when English is as likely as any language ("my son"), else one that
    only one language lists: it may be a name ("where's Ben?", "Mia"), or the word asked about
    ("the door").

        >>> StopWords(("en", "es")).for_text("how old is my son?") >= {"how", "is", "my"}
        True
        >>> "son" in StopWords(("en", "es")).for_text("how old is my son?")
        False
        >>> [StopWords().query_words(t) for t in ("where's ben?", "Mia", "the door", "my son", "Yes", "set a timer")]
        [['ben'], ['mia'], ['door'], ['son'], [], ['set', 'timer']]
    """

    languages: tuple[str, ...] = LANGUAGES
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Sorted once: the lists are cached by these tuples, and a query must not sort them again.
        object.__setattr__(self, "languages", tuple(sorted(self.languages)))
        object.__setattr__(self, "extra", tuple(sorted(self.extra)))

    def query_words(self, text: str) -> list[str]:
        """:func:`query_words` of ``text`` without the stop words of its language."""
        return query_words(text, self.for_text(text))

    def for_text(self, text: str) -> frozenset[str]:
        languages, extra = self.languages, self.extra
        if len(languages) <= 1:
            return _stopwords(languages, extra)
        words = {normalise_term(m.group()) for m in itertools.islice(WORD.finditer(text), _EVIDENCE_WORDS)}
        words = {w for w in words if len(w) > 1}  # "s", "t", "l": pieces of "it's", "l'eau", not evidence
        hits = {lang: len(words & _stopwords((lang,), ())) for lang in languages}
        best = max(hits.values())
        if best < MIN_EVIDENCE:
            every = _stopwords(languages, extra)
            if not words <= every:
                return every
            return every - (_names(words, languages, english_likely=hits.get("en") == best) - _stopwords((), extra))
        tied = tuple(lang for lang in languages if hits[lang] == best)
        if len(tied) == 1:
            return _stopwords(tied, extra)
        return frozenset.intersection(*(_stopwords((lang,), ()) for lang in tied)) | _stopwords((), extra)


def _names(words: set[str], languages: tuple[str, ...], english_likely: bool) -> frozenset[str]:
    """The words of a short text made only of stop words that may still be what it is about.

    Not English ones ("yes", "will" and "hi"). When English is as likely as any language (it
    has as many of the text's stop words), every other word: "my son" is English, and "son" the
    word asked about, though Spanish and French list it. Otherwise those one language only
    lists ("ben" is Dutch for "am" and a name; "hola", "ja" and "si" are function words of
    several languages)."""
    english = _stopwords(("en",), ()) if "en" in languages else frozenset()
    if english and english_likely:
        return frozenset(words - english)
    return frozenset(w for w in words - english if sum(w in _stopwords((lang,), ()) for lang in languages) == 1)


def content_words(text: str, ignore: frozenset[str] = frozenset(), limit: int | None = None) -> list[str]:
    """The distinct content words of ``text`` in order (lower case, no diacritics, ``ignore``
    dropped), the first ``limit`` of them when given.

    >>> content_words("What is my NAME, my name?", frozenset({"what", "is", "my"}))
    ['name']
    """
    words: dict[str, None] = {}
    for match in WORD.finditer(text):
        word = normalise_term(match.group())
        if word and word not in ignore and word not in words:
            words[word] = None
            if limit is not None and len(words) >= limit:
                break
    return list(words)


def query_words(text: str, ignore: frozenset[str] = frozenset()) -> list[str]:
    """The distinct content words of a query (lower case, no diacritics, stop words dropped), at
    most ``MAX_QUERY_TERMS``.

    >>> query_words("What is my NAME, my name?", frozenset({"what", "is", "my"}))
    ['name']
    """
    return content_words(text, ignore, MAX_QUERY_TERMS)


def term_set(text: str) -> frozenset[str]:
    """Every distinct normalised word of ``text`` (each distinct spelling normalised once: a long
    reply repeats its words)."""
    return frozenset(normalise_term(w) for w in set(WORD.findall(text)))
