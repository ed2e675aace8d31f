"""The one exception tree of ovos-memory-plugins.

::

    MemoryPluginError
    ├── ConfigError (also a ValueError)      bad config key or value, raised at construction
    ├── MissingDependencyError (ImportError) an optional extra is not installed
    ├── StorageError                         a store could not be read or written
    │   ├── StoreUnavailable                 the store cannot be opened or reached
    │   ├── MigrationError                   the schema could not be brought up to date
    │   └── MemoryClosed                     a write to a memory after its close()
    ├── LLMError                             the chat endpoint failed
    │   ├── LLMTimeout
    │   ├── LLMUnavailable                   refused, unreachable, or circuit open
    │   └── LLMContextOverflow               the prompt is longer than the model's context
    ├── EmbeddingsError                      the embedder or vector store failed
    └── NotSupported (NotImplementedError)   a member cannot do what was asked (nothing was done)

The three contract methods never let a ``MemoryPluginError`` escape at run time: they log it
once and degrade (no recall, no summary, no facts). Config errors are the exception: they are
raised at construction so that a broken persona fails to load loudly, and so is
``MemoryClosed``: an update handed to a closed memory is a mistake of the caller, and returning
normally would acknowledge a message that went nowhere.
"""
from __future__ import annotations

__all__ = [
    "ConfigError",
    "EmbeddingsError",
    "LLMContextOverflow",
    "LLMError",
    "LLMTimeout",
    "LLMUnavailable",
    "MemoryClosed",
    "MemoryPluginError",
    "MigrationError",
    "MissingDependencyError",
    "NotSupported",
    "StorageError",
    "StoreUnavailable",
]


class MemoryPluginError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(MemoryPluginError, ValueError):
    """A config key or value is invalid; the message names the key and what is allowed."""


class MissingDependencyError(MemoryPluginError, ImportError):
    """An optional dependency is missing; the message names the ``pip install`` that fixes it."""


class StorageError(MemoryPluginError):
    """A store could not be read or written."""


class StoreUnavailable(StorageError):
    """The store cannot be opened or reached (a locked file, a dead server)."""


class MigrationError(StorageError):
    """The store's schema could not be brought up to date."""


class MemoryClosed(StorageError):
    """A write (``update_history``) reached a memory after its ``close()``: nothing was stored."""


class LLMError(MemoryPluginError):
    """The OpenAI-compatible chat endpoint failed."""


class LLMTimeout(LLMError):
    """The chat endpoint did not answer within ``request_timeout``."""


class LLMUnavailable(LLMError):
    """The chat endpoint refused the connection, is unreachable, or its circuit is open."""


class LLMContextOverflow(LLMError):
    """The request is longer than the model's context; the endpoint itself is fine.

    ``limit`` is the context size the server named (0 when it named none).
    """

    def __init__(self, message: str, limit: int = 0):
        super().__init__(message)
        self.limit = limit


class EmbeddingsError(MemoryPluginError):
    """The embedder or the vector store failed."""


class NotSupported(MemoryPluginError, NotImplementedError):
    """A memory cannot do what was asked, and did nothing (a composite member that keeps whole
    sessions only, asked to forget one exchange)."""


def opening_error(message: str, cause: BaseException) -> MemoryPluginError:
    """The error a backend raises when its file cannot be opened: :class:`StoreUnavailable`
    when the store's own error was one (a full disk, a file locked: it passes, and a persona's
    memory waits for it), else a :class:`ConfigError` (the path is wrong). A server that does not
    answer stays a ``ConfigError`` raised from the ``StoreUnavailable``, as it always was."""
    return StoreUnavailable(message) if isinstance(cause, StoreUnavailable) else ConfigError(message)
