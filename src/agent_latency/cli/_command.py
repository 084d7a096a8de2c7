"""A typer command whose options are declared once, as the fields of a frozen dataclass.

Each field is an option: its name, its type with its ``typer.Option`` in ``Annotated``, and its
default. :func:`options_command` turns a function of one such options value into the command
typer reads (one keyword parameter per field, the function's name and docstring), so the
command's body is a recipe of named steps handed the options value, not 20 loose parameters.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

_Options = TypeVar("_Options")


def options_command(
    options_type: type[_Options],
) -> Callable[[Callable[[_Options], None]], Callable[..., None]]:
    """Makes a function of one options value a typer command with one option per field.

    Args:
        options_type: A dataclass whose fields carry their ``typer.Option`` in ``Annotated``
            and a default each.

    Returns:
        A decorator: the command it returns builds ``options_type`` from the command line's
        values and calls the function with it.
    """
    hints = typing.get_type_hints(options_type, include_extras=True)
    parameters = [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=hints[field.name],
        )
        for field in dataclasses.fields(options_type)  # type: ignore[arg-type]
    ]

    def decorate(steps: Callable[[_Options], None]) -> Callable[..., None]:
        def command(**values: Any) -> None:
            steps(options_type(**values))

        command.__name__ = steps.__name__
        command.__qualname__ = steps.__qualname__
        command.__module__ = steps.__module__
        command.__doc__ = steps.__doc__
        command.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        return command

    return decorate
