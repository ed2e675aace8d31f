"""When to compact a short-term list and how much of it (pure functions, no Redis)."""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from .store import Item

__all__ = ["CompactionPolicy", "RoundOutcome"]


class RoundOutcome(enum.Enum):
    """How one read-summarise-commit round of a session's compaction ended."""

    DONE = "done"          # nothing (more) to fold, or the round cannot go on (lease lost)
    MORE = "more"          # folded, and the list is still over a threshold
    CONFLICT = "conflict"  # the list or summary changed meanwhile: read it again


@dataclasses.dataclass(frozen=True)
class CompactionPolicy:
    """
    Args:
        token_threshold: compact when the list holds this many tokens (0: off).
        round_threshold: compact when the list holds this many exchanges (0: off).
        keep_recent: the newest exchanges, never compacted.
    """

    token_threshold: int = 4000
    round_threshold: int = 0
    keep_recent: int = 2

    def due(self, tokens: int, rounds: int, started: bool = False) -> bool:
        """Whether a list with these counters should be compacted; ``started``: a compaction
        that began over the token threshold goes on while the list holds more than
        :meth:`_left_after` (about half the threshold), whatever the requests could fold at once."""
        if rounds <= self.keep_recent:
            return False
        floor = self._left_after() if started else self.token_threshold
        return bool(self.token_threshold and tokens >= floor) or bool(
            self.round_threshold and rounds >= self.round_threshold)

    def _left_after(self) -> float:
        """What a token compaction leaves, with a margin: one more round for a few tokens over
        half the threshold would cost a model call for one exchange."""
        return 0.6 * self.token_threshold

    def cut(self, items: Sequence[Item]) -> int:
        """How many of the oldest items to fold into the summary (0: none).

        Cuts fall on exchange boundaries (before a USER message) and never into the newest
        ``keep_recent`` exchanges. The token trigger keeps about half the threshold of recent
        messages (as miso-agent documents it): at the threshold it folds the oldest half; after a burst it folds
        more, at most twice the threshold per round, so one summary request stays small.
        The round trigger folds all but ``keep_recent`` exchanges. Called once :meth:`due` said
        so, it goes on while more than :meth:`_left_after` is left (``due(started=True)``).

            >>> from ovos_memory_plugins._redis.store import Item
            >>> def item(user, tokens): return Item(b"", None, tokens, user)
            >>> items = [item(True, 10), item(False, 10)] * 4                 # 4 exchanges, 80 tokens
            >>> CompactionPolicy(token_threshold=80, keep_recent=1).cut(items)  # the oldest ~40 tokens
            4
            >>> CompactionPolicy(token_threshold=0, round_threshold=4, keep_recent=1).cut(items)
            6
        """
        users = [i for i, item in enumerate(items) if item.is_user]
        # A question not answered yet is no conversation: it is kept, and takes no kept place.
        answered = users[:-1] if items and items[-1].is_user else users
        limit = users[-1] if answered is not users else len(items)  # keep_recent 0: all answered may go
        if self.keep_recent:
            limit = answered[-self.keep_recent] if len(answered) >= self.keep_recent else 0
        cuts = [i for i in users if 0 < i <= limit]
        if limit == len(items) and limit:
            cuts.append(limit)
        if not cuts:
            return 0
        total = sum(item.tokens for item in items)
        if self.token_threshold and total >= self._left_after():
            half = self.token_threshold / 2
            target = min(total - half, 4 * half)
            prefix = [0]
            for item in items:
                prefix.append(prefix[-1] + item.tokens)
            return next((c for c in cuts if prefix[c] >= target), cuts[-1])
        if self.round_threshold and len(answered) >= self.round_threshold:
            return cuts[-1]
        return 0
