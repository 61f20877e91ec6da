"""Choosing by name, in one place: :func:`one_of` (a value among fixed choices), :func:`closest` (the
"did you mean"), and :class:`Registry` (named records that everything reads: ``get``, ``names`` and
the one error that lists them). Every "must be one of" of the package is written here."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

__all__ = ["MAX_SHOWN", "Registry", "choice_error", "closest", "one_of", "shown"]

T = TypeVar("T")
V = TypeVar("V")

MAX_SHOWN = 60
"""Characters of a refused string shown back (a stranger's whole value is never echoed)."""


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """``value`` as an error shows it: a string or number as written (a string cut at ``limit``
    characters), anything else by its type only (never a whole model or array)."""
    if isinstance(value, str):
        return repr(value[:limit]) + ("..." if len(value) > limit else "")
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    return f"a {type(value).__name__}"


def closest(name: object, valid: Iterable[object], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The ``n`` names of ``valid`` closest to ``name`` (none for a name that is not a string); a
    name that starts or ends another (``"relu"``, ``"features.2.relu"``) counts as close."""
    if not isinstance(name, str) or not name:
        return []
    names = [str(v) for v in valid]
    close = difflib.get_close_matches(name, names, n=n, cutoff=cutoff)
    if not close:
        close = [v for v in names if v and (v.startswith(name) or v.endswith(name))][:n]
    return close


Refusal = Callable[[str], Exception]
"""What makes the error of a refused choice from its message (``ValueError``; the app's ``refuse``)."""


def choice_error(
    name: str, value: object, choices: Iterable[object], *, also: str = "", error: Refusal = ValueError
) -> Exception:
    """The error of ``value`` not among ``choices`` for argument ``name``: ``"<name> must be one of
    a, b, c<also>, got 'x'; did you mean 'a'?"``. ``also``: what else is accepted (``" or None"``)
    or where (``" on this server"``)."""
    listed = tuple(choices)
    typed = next((c for c in listed if type(c) is not type(value) and str(c) == str(value)), None)
    hint = closest(value, listed)
    tail = f"; did you mean {hint[0]!r}?" if hint else ""
    if typed is not None:  # the text "0" for the number 0: say which kind, not "did you mean '0'"
        tail = f" ({type(value).__name__}); send it as {type(typed).__name__} {typed!r}"
    return error(f"{name} must be one of {', '.join(map(str, listed))}{also}, got {shown(value)}{tail}")


def one_of(name: str, value: V, choices: Iterable[Any], *, also: str = "", error: Refusal = ValueError) -> V:
    """``value`` if it is one of ``choices`` (compared as what they are: ``1`` is not ``"1"``), else
    :func:`choice_error` raised.

    Raises:
        ValueError: (or ``error``) naming ``name``, the choices and the value shortened.
    """
    listed = tuple(choices)
    if _plain(value) and any(_same(value, c) for c in listed):
        return value
    raise choice_error(name, value, listed, also=also, error=error)


def _plain(value: object) -> bool:
    """A value compared with ``==`` safely (never an array's elementwise ``==``)."""
    return value is None or isinstance(value, (str, int, float))


def _same(value: object, choice: object) -> bool:
    """``value`` is ``choice``, a string only a string and a bool only a bool (``1`` is not ``"1"``
    nor ``True``)."""
    kinds = (isinstance(value, str), isinstance(value, bool))
    return kinds == (isinstance(choice, str), isinstance(choice, bool)) and value == choice


class Registry(MutableMapping[str, T], Generic[T]):
    """Named records in the order given: a mapping (``reg[name]``, ``name in reg``, ``reg.items()``)
    with :meth:`get` refusing an unknown name through :func:`choice_error`, and :meth:`register`
    (or ``reg[name] = record``) adding one, as a plug-in or a test does.

    Args:
        argument: the argument that names a record (``"method"``, ``"style_loss"``): what an error
            names.
        records: ``(name, record)`` pairs or a mapping.
    """

    def __init__(self, argument: str, records: Mapping[str, T] | Iterable[tuple[str, T]]) -> None:
        self.argument = argument
        self._records: dict[str, T] = dict(records)

    def __getitem__(self, name: str) -> T:
        return self._records[name]

    def __setitem__(self, name: str, record: T) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.argument}'s name must be a non-empty string, got {shown(name)}")
        self._records[name] = record

    def __delitem__(self, name: str) -> None:
        del self._records[name]

    def register(self, name: str, record: T) -> T:
        """Adds ``record`` as ``name`` (replacing one of that name) and returns it."""
        self[name] = record
        return record

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return f"Registry({self.argument!r}: {', '.join(self._records)})"

    def names(self) -> tuple[str, ...]:
        """Every record's name, in order."""
        return tuple(self._records)

    def get(self, name: Any, *default: Any) -> Any:  # type: ignore[override]
        """The record ``name``; with a ``default``, that for an unknown name (as a mapping's ``get``).

        Raises:
            ValueError: an unknown name, without a default: the message names the argument, every
                choice and the closest.
        """
        if isinstance(name, str) and name in self._records:
            return self._records[name]
        if default:
            return default[0]
        raise choice_error(self.argument, name, self._records)
