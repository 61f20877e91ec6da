"""What the engines' options objects share (:class:`nstcam.StyleOptions`, :class:`nstcam.CamOptions`):
an options object with keyword changes over it, naming the closest option for an unknown keyword, and
a function's ``**changes`` spelt out as those options where people look (``help()``, notebooks)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from nstcam._choices import closest

__all__ = ["option_names", "options_of", "shows_options"]

_O = TypeVar("_O")
_F = TypeVar("_F", bound=Callable[..., Any])


def option_names(cls: type) -> tuple[str, ...]:
    """The options of the dataclass ``cls``, in its order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def options_of(cls: type[_O], options: _O | None, changes: dict[str, Any], what: str) -> _O:
    """``options`` (default: ``cls()``) with ``changes``: the keyword API's way in.

    Raises:
        TypeError: ``options`` is not a ``cls``, or a change names no option (the message names the
            closest and says where the options are listed).
        ValueError: a value is out of range (``cls``'s own checks).
    """
    if options is not None and not isinstance(options, cls):
        raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
    names = option_names(cls)
    unknown = sorted(set(changes) - set(names))
    if unknown:
        close = closest(unknown[0], names)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"{unknown[0]!r} is not {what}{hint} (see {cls.__name__})")
    if not changes:
        return options if options is not None else cls()
    return dataclasses.replace(options, **changes) if options is not None else cls(**changes)  # type: ignore[type-var]


def shows_options(cls: type) -> Callable[[_F], _F]:
    """A decorator: ``fn``'s ``**changes`` spelt out as one keyword-only parameter per option of the
    dataclass ``cls`` (its type and default) in the signature that ``help()``, ``inspect.signature``
    and notebooks show; options the function already takes by name stay where they are. The call
    itself is unchanged."""

    def decorate(fn: _F) -> _F:
        sig = inspect.signature(fn)
        kept = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        own = {p.name for p in kept}
        options = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
            for f in dataclasses.fields(cls)
            if f.name not in own
        ]
        fn.__signature__ = sig.replace(parameters=[*kept, *options])  # type: ignore[attr-defined]
        return fn

    return decorate
