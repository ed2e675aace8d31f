"""Secrets are never kept as facts: passwords, PINs, door codes, card and account numbers.

Facts are sent to the chat model on every turn, and a shared scope shows them on every device;
a password the user once said in passing must not travel that far. What the user said stays in
the conversation's history (recall finds it when asked for it, ``forget`` removes it); only the
fact is not made. A fact is refused when it names a kind of secret ("User's wifi password is
hunter2"), holds a card number (13 to 19 digits passing the Luhn check, as cards are numbered),
an IBAN or a US social security number, or holds what the user gave as a secret in the same
message ("my PIN is 4 3 2 1", then a model's "User's other: 4321"; or asked and answered,
"My wifi password? It's hunter22"; "the gate opens with 2580"; a value with a digit the user
calls a secret, "the same secret everywhere, it's mango42"). Digits spoken as words are digits
("my PIN is four three two one": speech to text writes them so as often as not), and a number
said as one after a word such as "PIN" or "code" is a secret too ("my PIN is forty two seventeen").

    >>> holds_secret("User's wifi password is hunter2")
    True
    >>> holds_secret("User's other: 4321", secrets_given("ok, my PIN is 4 3 2 1"))
    True
    >>> holds_secret("User pays by credit card"), holds_secret("User's name is Iban")
    (False, False)
"""
from __future__ import annotations

import re

from .kinds import wordset

__all__ = ["holds_secret", "secrets_given"]

#: Only the start of a very long message is read for the secrets it gives (as the rules read it).
MAX_SECRET_SCAN = 8_000

# Kinds of secret that name one whatever follows them, in English and the languages the rules
# read (pt, es, de, fr).
_NAMED = (
    r"pass(?:word|code|phrase)s?|passwd|pass[\s-]word|pin[\s-](?:number|code)s?"
    r"|(?:door|gate|alarm|lock|safe|access|security|verification|login|one[\s-]time|2fa|mfa|recovery|backup|entry|garage|keypad|locker|wi-?fi|wlan)[\s-]?(?:code|pin|password)s?"
    r"|(?:safe|lock|locker)\s+(?:combination|combo)|(?:api|secret|private|access)\s+keys?|seed\s+phrase"
    r"|recovery\s+phrase|(?:access|auth|bearer|refresh)\s+tokens?|cvv2?|cvc|(?:credit\s+|debit\s+|bank\s+)?card"
    r"\s+(?:number|details)|account\s+number|routing\s+number|sort\s+code|social\s+security\s+number|ssn"
    r"|national\s+insurance\s+number|passport\s+number|(?:wi-?fi|wlan|wpa2?|network|router|wireless)[\s-]?(?:key|passkey)s?"
    r"|(?:bank|banking)\s+(?:login|username|user\s+name|credentials)|credentials"
    r"|senhas?|palavras?[\s-]passe|c[óo]digo\s+(?:pin|secreto|de\s+acesso|de\s+seguran[çc]a|de\s+acceso|da\s+porta"
    r"|do\s+alarme|de\s+la\s+puerta|del\s+alarma)|n[úu]mero\s+(?:do|de)\s+(?:cart[ãa]o|tarjeta|conta|cuenta)"
    r"|contrase[ñn]as?|clave\s+(?:secreta|de\s+acceso|del\s+wifi|wifi)|passw[öo]rt(?:er)?|kennw[öo]rt(?:er)?"
    r"|geheimzahl|zugangscode|t[üu]rcode|wlan-schl[üu]ssel|(?:wlan|wifi|wi-fi)-passw[öo]rt|kartennummer|kontonummer"
    r"|mots?\s+de\s+passe|code\s+(?:secret|d'acc[èe]s|pin|de\s+(?:la\s+)?porte|wifi)|digicode"
    r"|num[ée]ro\s+de\s+(?:carte|compte)")
# Words that name a secret only when one follows: "my PIN is 4321", "mi clave es gato99", "my code
# is 4321" (not "pin-up", "my code is on GitHub", "my name is Iban"). Lower case or capitals: a
# capitalised "Pin" or "Iban" is a name.
_NOT_SECRET_CODES = "".join(f"(?<!{word} )" for word in ("postal", "post", "zip", "area", "country", "dress", "tax",
                                                           "source", "promo", "discount", "bar", "qr", "morse"))
_WEAK = (rf"(?-i:pin|PIN|iban|IBAN)|{_NOT_SECRET_CODES}code|clave|c[óo]digo|combination|combo|combinaison"
         r"|combina[çc][ãa]o|combinaci[óo]n|kombination|pw|otp|seed|key")
# Each piece of it opens with its own spaces and the count is bounded: no run of spaces or dashes
# can be split two ways, so a search is linear whatever the text ("code - - - - ... x").
_VERB = r"(?:\s*(?:(?:is|was|é|es|era|ist|lautet|est|c'est|e)(?!\w)|=|:|->|-)){1,4}\s*"
# Digits as a voice assistant hears them: speech to text writes "my PIN is four three two one" as
# often as "4321". A run of three or more digit words reads as the digits it spells (English and
# the languages the rules read); fewer are left as words ("one of them", "dois cafés").
_DIGIT_WORDS = {word: str(digit) for digit, words in enumerate([
    "zero oh cero null zéro", "one um uno eins un", "two dois dos zwei deux", "three três tres drei trois",
    "four quatro cuatro vier quatre", "five cinco fünf fuenf cinq", "six seis sechs", "seven sete siete sieben sept",
    "eight oito ocho acht huit", "nine nove nueve neun neuf"]) for word in words.split()}
_DIGIT_WORD = "(?:" + "|".join(sorted(map(re.escape, _DIGIT_WORDS), key=len, reverse=True)) + ")"
_SPOKEN_DIGITS = re.compile(rf"(?i)(?<![\w-]){_DIGIT_WORD}(?:[\s,-]+{_DIGIT_WORD}){{2,}}(?![\w-])")
# Numbers said as numbers, not digit by digit ("my PIN is forty two seventeen", "nineteen eighty
# four", "four thousand two hundred"): teens, tens, hundreds and thousands in the same languages,
# German compounds included.
_NUMBER_WORD = (
    r"(?:(?:ten|eleven|twelve|(?:thir|four|fif|six|seven|eigh|nine)teen|(?:twen|thir|for|fif|six|seven|eigh|nine)ty"
    r"|hundred|thousand|dez|onze|doze|treze|(?:c|qu)atorze|quinze|dez[ae]sseis|dez[ae]ssete|dezoito|dez[ae]nove"
    r"|vinte|trinta|quarenta|cinquenta|sessenta|setenta|oitenta|noventa|cem|cento|mil|diez|once|doce|trece|catorce"
    r"|quince|diecis[ée]is|diecisiete|dieciocho|diecinueve|veinte|veinti\w+|treinta|cuarenta|cincuenta|sesenta"
    r"|ochenta|cien|ciento|(?:dos|tres|cuatro|seis|sete|ocho|nove)cientos|quinientos|(?:duz|trez|quatroc|quinh"
    r"|seisc|setec|oitoc|novec)entos|zehn|elf|zw[öo]lf|(?:drei|vier|f[üu]nf|sech|sieb|acht|neun)zehn"
    r"|(?:\w+und)?(?:zwanzig|drei(?:ß|ss)ig|vierzig|f[üu]nfzig|sechzig|siebzig|achtzig|neunzig)|\w*(?:hundert|tausend)"
    r"|dix|douze|treize|quatorze|seize|vingt|trente|quarante|cinquante|soixante|cent|mille)(?!\w))")
_NUMBER_JOIN = r"(?:[\s,-]+(?:(?:and|y|e|et|und)\s+)?)"
_CLAUSE_END = r"\s*(?:$|[.,;:!?)\"'”’])"
# A number said as one, digit words before and after it included ("one hundred twenty three"),
# that ends the clause: "my code is twenty lines long", "... twenty-one thousand lines", "o código
# é dez e um pouco" name none. Its first number word is the first word that is not a digit's,
# so the run splits one way only (a search is linear whatever follows it).
_NUMBER_RUN = (rf"(?:{_DIGIT_WORD}{_NUMBER_JOIN})*{_NUMBER_WORD}(?:{_NUMBER_JOIN}(?:{_NUMBER_WORD}|{_DIGIT_WORD}))*"
               rf"{_CLAUSE_END}")
# A digit in the next word, or a digit word ("my pin is Four, Three..." cut to "User's pin is Four").
# A lone digit word only where the clause ends with it: "my code is one of the best", "o código é
# um pouco confuso" ("um" is also "a") name no secret.
_DIGIT_SOON = (rf"(?=[\"'“”«‘]?(?:[^\s\d]{{0,64}}\d|{_DIGIT_WORD}(?:[\s,-]+{_DIGIT_WORD}(?![\w-])|{_CLAUSE_END})"
               rf"|{_NUMBER_RUN}))")
_OF_WHAT = r"(?:\s+(?:to|for|of|on|at)\s+(?:my|the|our)(?:\s+\w+){1,2}?)?"
# Who uses it, between the kind and its verb: "the password I use everywhere is swordfish".
_WHOSE = r"(?:\s+(?:that\s+)?(?:I|we)\s+(?:use|used|have|had|chose|picked|set|made)(?:\s+\w+)?)?"
# Digits that open something: "the gate opens with 2580", "I unlock it with 4 3 2 1".
_OPENS = (r"(?:opens?|unlocks?|disarms?)(?:\s+(?:it|them))?\s+with"
          r"(?:\s+(?:the|a|my|code|pin|number|combination)){0,2}\s+")
# The digits end the clause: "opens with 300 paintings" gives none.
_DIGITS = r"\d(?:[\s-]?\d){2,}(?![\d\w])(?=\s*(?:$|[.,;:!?)\"'”’]|(?:and|but|or|then|so)(?!\w)))"
_SECRET = re.compile(rf"(?i)(?<![\w-])(?:{_NAMED})(?![\w-])|(?<![\w-])(?:{_WEAK}){_VERB}{_DIGIT_SOON}"
                     rf"|(?<![\w-]){_OPENS}{_DIGITS}")
# What the user gave: the word (or the digits, spoken apart: "4 3 2 1") after a kind of secret,
# or before "is my password".
_PIN = r"(?-i:pin|PIN)"
_QUOTES = r"[\"'`“”«‘(]{0,3}"
_GIVEN = r"(?P<secret>\d(?:[\s-]?\d){2,}|\S{1,200})"
# After the kind and a verb ("my password is hunter2"): a word, or digits spoken apart.
# A hesitation before the value: "my PIN is, um, 4321".
_FILLER = r"(?:[\s,]*(?:um|uh|er|erm|oh)[\s,]+)?"
_AFTER = re.compile(rf"(?i)(?<![\w-])(?:{_NAMED}|{_PIN}){_OF_WHAT}{_WHOSE}{_VERB}{_QUOTES}{_FILLER}{_GIVEN}")
# Only a value holding a digit: after a word that names a secret only then ("my code is 4321"),
# after a kind with no verb ("my password, hunter2, is weak"; not "my password again").
_AFTER_LOOSELY = re.compile(rf"(?i)(?<![\w-])(?:(?:{_NAMED}|{_PIN}){_OF_WHAT}(?:[\s,?]+|['’]s\s+){_FILLER}"
                            rf"|(?:{_WEAK}){_OF_WHAT}{_VERB}{_FILLER}){_QUOTES}{_GIVEN}")
# Asked and answered: "My wifi password? It's hunter22." (a word needs the answer's verb, as above).
_ANSWERED = re.compile(rf"(?i)(?<![\w-])(?:{_NAMED}|{_PIN}){_OF_WHAT}\s*[?:]\s*(?:(?:it|that)(?:'s|’s|\s+is|\s+was)"
                       rf"|(?:é|es|ist|c'est))\s+{_QUOTES}{_GIVEN}")
# A value with a digit the user calls their secret: "my secret is mango42", "I use the same
# secret everywhere, it's mango42" (a word alone is too often no secret: "it's a secret").
_CALLED_SECRET = re.compile(rf"(?i)(?<![\w-])secret(?:\s+[\w-]+){{0,3}}?[\s,;:]+(?:(?:it|that)(?:'s|’s|\s+is)|is|=)"
                            rf"\s+{_QUOTES}{_GIVEN}")
_OPENED_WITH = re.compile(rf"(?i)(?<![\w-]){_OPENS}(?P<secret>{_DIGITS})")
_BEFORE = re.compile(rf"(?i)(?P<secret>\S{{1,200}})\s+(?:is|as)\s+(?:my|the)\s+(?:\w+\s+)?(?:{_NAMED}|{_PIN})(?![\w-])")
#: Words after "my password is" that are no password ("my password is changed", "... is where?").
_NOT_GIVEN = wordset("""
again yesterday today tomorrow where which there here written saved stored changed different wrong
secret private simple strong short somewhere something nothing complicated forgotten unknown probably
expired reset
""")
_ANY_KIND = re.compile(rf"(?i)(?<![\w-])(?:{_NAMED}|{_WEAK}|secret|opens?|unlocks?|disarms?)(?![\w-])")
# Card numbers start 2-6 (Mastercard, Amex, Visa, Discover...); a phone's "+" or "00" is none.
_CARD = re.compile(r"(?<![\d+])[2-6]\d(?:[ -]?\d){11,17}(?!\d)")
_IBAN = re.compile(r"(?<![\w])[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?(?!\w)")
_SSN = re.compile(r"(?<![\d-])\d{3}-\d{2}-\d{4}(?![\d-])")
_EDGE = "\"'`.,;:!?()[]{}<>“”«»‘’"


#: Digit words that are also a hesitation ("my PIN is um, four three two one"): not a digit
#: where a run starts with them.
_FILLERS = frozenset({"um", "oh"})


#: An answer to a question asking for a secret is the secret when it is this short (in words).
ANSWER_WORDS = 4


def _answered_secret(user: str, asked: str) -> list[str]:
    """The words of a short answer to a question that asks for a secret ("What PIN do you want
    for the alarm?" - "123456."): each with a digit, or of five letters or more."""
    words = [w.strip(_EDGE).casefold() for w in user.split()]
    if not words or len(words) > ANSWER_WORDS or "?" not in asked or not _ANY_KIND.search(asked):
        return []
    return [w for w in words if (any(c.isdigit() for c in w) and len(w) >= 3)
            or (len(w) >= 5 and w not in _NOT_GIVEN and not w.startswith(("it's", "that's")))]


def _spelled(run: str) -> str:
    words = re.findall(r"[^\s,-]+", run)
    digits = [d for d in (_DIGIT_WORDS.get(w.casefold()) for w in words) if d is not None]
    if len(digits) < len(words):  # case-insensitive matching reads "NİNE" as "nine"; its casefold is not: as said
        return run
    lead = 1 if words[0].casefold() in _FILLERS and len(words) > 3 else 0
    return " ".join(words[:lead] + ["".join(digits[lead:])])


def _as_digits(text: str) -> str:
    """``text`` with each run of three or more spoken digits written as digits ("four three two
    one" -> "4321"); the rest unchanged."""
    if not _SPOKEN_DIGITS.search(text):
        return text
    return _SPOKEN_DIGITS.sub(lambda m: _spelled(m.group()), text)


def _luhn(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(reversed(digits)))
    return total % 10 == 0


def _holds_number_secret(text: str) -> bool:
    """Whether ``text`` holds a card number, an IBAN or a social security number."""
    return (any(_luhn(m.group()) for m in _CARD.finditer(text)) or bool(_IBAN.search(text))
            or bool(_SSN.search(text)))


def secrets_given(user: str, asked: str = "") -> frozenset[str]:
    """What the user's message gave as secrets, case-folded: read once per message, then handed
    to :func:`holds_secret` for each fact drawn from it. A word needs a digit unless a verb
    gave it after a kind of secret ("my password is swordfish"). ``asked``: the assistant's
    question the message answers; a short answer to one asking for a secret ("What's your
    password?" - "bluebird") is one, whatever its words.

        >>> sorted(secrets_given("bluebird", asked="What's your email password?"))
        ['bluebird']
    """
    user = _as_digits(user[:MAX_SECRET_SCAN])
    found = set(_answered_secret(user, asked)) if asked else set()
    if not _ANY_KIND.search(user):
        return frozenset(found)
    for pattern, needs_digit in ((_AFTER, False), (_ANSWERED, False), (_AFTER_LOOSELY, True), (_BEFORE, False),
                                 (_CALLED_SECRET, True), (_OPENED_WITH, True)):
        for match in pattern.finditer(user):
            word = match.group("secret").strip(_EDGE)
            if word[:1].isdigit():
                word = re.sub(r"[\s-]", "", word)
            digit = any(c.isdigit() for c in word)
            if (digit and len(word) >= 3) or (not needs_digit and len(word) >= 5
                                              and word.casefold() not in _NOT_GIVEN):
                found.add(word.casefold())
    return frozenset(found)


def holds_secret(fact: str, given: frozenset[str] = frozenset()) -> bool:
    """Whether the fact ``fact`` names or holds a secret, or one of ``given`` (:func:`secrets_given`)."""
    fact = _as_digits(fact)
    if _SECRET.search(fact) or _holds_number_secret(fact):
        return True
    if not given:
        return False
    folded = fact.casefold()
    digits = re.sub(r"(?<=\d)[\s-](?=\d)", "", folded)
    return any(re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", digits if word[:1].isdigit() else folded)
               for word in given)
