"""Each setting declared once, as its field: name, type, default and a :class:`Declared`.

:func:`declarations` reads them back as :class:`Setting` values, from which the file schemas, the
checks of loaded settings and options and docs/configuration.md's tables are made. A ``Literal``
type is the setting's allowed values; ``X | None`` allows leaving it unset.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import SecretStr

from agent_latency._validation import is_integer, is_number

T = TypeVar("T")

Kind = Literal["int", "number", "bool", "str", "list"]
"""What a file must hold for a setting."""

_METADATA: Final = "agent_latency.setting"
_KIND_OF_TYPE: Final[dict[object, Kind]] = {
    bool: "bool",
    int: "int",
    float: "number",
    str: "str",
    SecretStr: "str",
    tuple: "list",
}
_REQUIRED_KIND: Final[dict[Kind, str]] = {
    "int": "an integer",
    "number": "a finite number",
    "bool": "True or False",
    "str": "a string",
    "list": "a list",
}


@dataclass(frozen=True)
class Declared:
    """What a setting declares beside its name, type and default.

    Attributes:
        doc: What it does (Markdown: the docstring and the docs' "effect" cell).
        toml: Its ``config.toml`` key (``"llm.prompt.token_budget"``), if it has one.
        json: Its ``settings.json`` key (``"promptTrimmer.defaultBudget"``), if it has one.
        minimum: The smallest value of a number.
        above: Whether a number must be above ``minimum``, not equal to it.
        maximum: The largest value of a number.
        note: What the maximum is in words, e.g. ``" (a day)"``.
        example: A good value, or how to find one, after the bounds in the fix; by default
            ``"e.g. {default}"``.
        rule: Another check, with what it requires (``"must not be empty; ..."``).
        trimmer: The ``PriorityTrimmer`` option it sets, if any.
        accepts: The docs' "type" cell, when kind and bounds do not say it all.
    """

    doc: str
    toml: str | None = None
    json: str | None = None
    minimum: float | None = None
    above: bool = False
    maximum: float | None = None
    note: str = ""
    example: str = ""
    rule: tuple[Callable[[Any], bool], str] | None = None
    trimmer: str | None = None
    accepts: str | None = None


def setting(default: T, doc: str, **declared: Any) -> T:
    """A settings field: ``default``, with the :class:`Declared` made of ``doc`` and ``declared``.

    Typed as its default so that ``token_budget: int = setting(6000, ...)`` type-checks.
    """
    return field(default=default, metadata={_METADATA: Declared(doc, **declared)})


@dataclass(frozen=True)
class Setting:
    """One declared setting, read back from its class by :func:`declarations`.

    Attributes:
        target: ``"section.field"`` in ``Settings`` (``"prompt.token_budget"``).
        kind: What a file must hold.
        default: The field's default.
        choices: The allowed values of a ``Literal`` type, else empty.
        optional: Whether ``None`` (unset) is allowed.
        declared: The rest of its declaration.
    """

    target: str
    kind: Kind
    default: Any
    choices: tuple[str, ...]
    optional: bool
    declared: Declared

    @property
    def name(self) -> str:
        """The field's name (``"token_budget"``)."""
        return self.target.partition(".")[2]

    @property
    def requirement(self) -> str:
        """What a value of the right kind must be, and an example: the fix of a bad one."""
        declared = self.declared
        if declared.rule is not None:
            return declared.rule[1]
        if self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if declared.minimum is None or declared.maximum is None:
            return f"must be {_REQUIRED_KIND[self.kind]}"
        return (
            f"must be {'>' if declared.above else '>='} {_shown(declared.minimum)} and at most "
            f"{_shown(declared.maximum)}{declared.note}; "
            f"{declared.example or f'e.g. {_shown(self.default)}'}"
        )

    def violated(self, value: Any) -> bool:
        """Whether ``value``, of the right kind, breaks the setting's bounds, choices or rule."""
        declared = self.declared
        if value is None and self.optional:
            return False
        if declared.rule is not None:
            return not declared.rule[0](value)
        if self.choices:
            return value not in self.choices
        low, high = declared.minimum, declared.maximum
        return (low is not None and (value < low or (declared.above and value == low))) or (
            high is not None and value > high
        )

    def problem(self, value: object) -> str | None:
        """What ``value`` (of any type) must be instead, or ``None`` when it is good."""
        if not self.of_kind(value):
            return f"must be {_REQUIRED_KIND[self.kind]}"
        if value is None and self.optional:
            return None
        return self.requirement if self.violated(value) else None

    def of_kind(self, value: object) -> bool:
        """Whether ``value`` is of the setting's type (``None`` too, where it may be unset)."""
        if value is None and self.optional:
            return True
        return {
            "int": is_integer(value),
            "number": is_number(value),
            "bool": isinstance(value, bool),
            "str": isinstance(value, str),
            "list": isinstance(value, Sequence) and not isinstance(value, str),
        }[self.kind]


def _shown(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def declarations(*sections: type[Any]) -> Iterator[Setting]:
    """The declared settings of the settings classes ``sections``, in declaration order.

    Args:
        sections: Settings dataclasses; a section's name is its class name less ``Settings``,
            lowercased (``PromptSettings`` -> ``prompt``).
    """
    for section in sections:
        prefix = section.__name__.removesuffix("Settings").lower()
        hints = get_type_hints(section)
        for each in dataclasses.fields(section):
            declared = each.metadata.get(_METADATA)
            if declared is None:
                continue
            kind, choices, optional = _kind(hints[each.name])
            yield Setting(f"{prefix}.{each.name}", kind, each.default, choices, optional, declared)


def _kind(hint: Any) -> tuple[Kind, tuple[str, ...], bool]:
    """The kind, choices and whether ``None`` is allowed, of a field's type."""
    arguments = get_args(hint)
    optional = get_origin(hint) in (Union, types.UnionType) and type(None) in arguments
    if optional:
        (hint,) = (argument for argument in arguments if argument is not type(None))
    if get_origin(hint) is Literal:
        return "str", get_args(hint), optional
    return _KIND_OF_TYPE[get_origin(hint) or hint], (), optional


def documented(cls: type[T]) -> type[T]:
    """Adds an ``Attributes:`` section made of the declarations to ``cls``'s docstring."""
    lines = [
        f"        {each.name}: {each.declared.doc.replace('`', '``')}" for each in declarations(cls)
    ]
    cls.__doc__ = f"{cls.__doc__}\n\n    Attributes:\n" + "\n".join(lines) + "\n"
    return cls
