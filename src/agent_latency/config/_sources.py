"""Where settings come from: ``config.toml``, ``settings.json`` and the environment.

Reading a file gives ``{"section.field": (value, "file: key.path")}`` (the environment's places
are ``"environment VARIABLE"``), so every later error can name where a value came from.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent_latency._validation import file_problem, is_integer

ENV_BASE_URL: Final = "AGENT_LATENCY_BASE_URL"
ENV_API_KEY: Final = "AGENT_LATENCY_API_KEY"
ENV_MODEL: Final = "AGENT_LATENCY_MODEL"
ENV_OPENAI_API_KEY: Final = "OPENAI_API_KEY"
ENV_PLACE: Final = "environment "
"""What the place of a value set in the environment starts with: ``environment VARIABLE``."""


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Key:
    """One leaf key of a file: where its value goes in Settings and what type it must have."""

    target: str  # "section.field" in Settings
    kind: str  # "int", "number", "bool", "str", "list"


@dataclass(frozen=True)
class FileSchema:
    """The keys of one file, each dotted (``"llm.prompt.token_budget"``) with its :class:`Key`.

    Attributes:
        name: The file's usual name, ``"config.toml"`` or ``"settings.json"``.
        keys: Every leaf key, in the order the docs list them.
        tree: The same keys nested as the file nests them.
    """

    name: str
    keys: Mapping[str, Key]
    tree: Mapping[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        tree: dict[str, Any] = {}
        for dotted, key in self.keys.items():
            *tables, leaf = dotted.split(".")
            node = tree
            for table in tables:
                node = node.setdefault(table, {})
            node[leaf] = key
        object.__setattr__(self, "tree", tree)  # derived once, while the value is made
        object.__setattr__(self, "keys", dict(_leaves(tree)))  # grouped by table

    @property
    def toml(self) -> bool:
        """Whether this is ``config.toml``'s schema."""
        return self.name.endswith(".toml")


_REMOVED_KEYS: Final = {
    "allow_over_budget_on_warm_cache": "it went with the removed cost_aware mode "
    "(docs/trimming.md)",
    "allowOverBudgetOnWarmCache": "it went with the removed cost_aware mode (docs/trimming.md)",
    "trim_strategy": "priority, its only value, is how the trimmer always works",
    "cache_lifetime_seconds": "nothing read it after the cost_aware mode was removed",
}
"""Keys of removed settings: a file still holding one is told to delete it, and why."""


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Key]]:
    for key, spec in tree.items():
        if isinstance(spec, Key):
            yield f"{prefix}{key}", spec
        else:
            yield from _leaves(spec, f"{prefix}{key}.")


_KIND_NAMES: Final = {
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list",
}

Found = dict[str, tuple[Any, str]]
"""Values by ``Settings`` target, each with its place (``"settings.json: metrics.ttftWarnMs"``)."""


def resolve(path: str | os.PathLike[str] | None, default_name: str) -> Path | None:
    """Returns the file to read: ``path``, which must be a regular file of at most
    ``MAX_FILE_BYTES``, or ``default_name`` if present."""
    if path is None:
        resolved = Path.cwd() / default_name
        if not os.path.lexists(resolved):
            return None
        problem = file_problem(resolved)
        if problem is not None:
            # A folder (a Docker bind mount of a missing file makes one) or a dangling link
            # stands where the file is read from: the user's settings would silently not apply.
            shown = "a link to a file that does not exist" if not resolved.exists() else problem
            raise ConfigError(
                f"{resolved}: {shown}; it is read as the {default_name} of the working "
                f"directory. Fix: put your {default_name} there, or remove it to use the defaults."
            )
        return resolved
    resolved = Path(path)
    problem = file_problem(resolved)
    if problem is not None:
        raise ConfigError(
            f"{resolved}: {problem}. Fix: check the path, or leave it out to use the "
            f"defaults (and {default_name} in the working directory if present)."
        )
    return resolved


def _read_text(path: Path) -> str:
    try:
        # utf-8-sig: editors on Windows often save UTF-8 with a byte-order mark.
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}). Fix: save the file as UTF-8."
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror}). Fix: check the file's permissions."
        ) from None


def _parses(parse: Any, text: str) -> bool:
    """Whether ``text`` is a non-empty table/object in the other format."""
    try:
        return bool(text.strip()) and isinstance(parse(text), dict)
    except (ValueError, RecursionError):  # TOMLDecodeError and JSONDecodeError are ValueErrors
        return False


def parse_toml(path: Path) -> Any:
    """Reads a TOML file (TOML itself refuses a key given twice)."""
    return _parse(path, tomllib.loads, "arrays/tables")


def parse_json(path: Path) -> Any:
    """Reads a JSON file, refusing a key given twice in one object (JSON would keep the last)."""

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        tree: dict[str, Any] = {}
        for key, value in pairs:
            if key in tree:
                shown = key if key.isprintable() else repr(key)
                raise ConfigError(
                    f"{path}: key {shown!r} appears twice in the same object; JSON would "
                    "silently keep the last one. Fix: keep one of them."
                )
            tree[key] = value
        return tree

    return _parse(
        path, lambda text: json.loads(text, object_pairs_hook=unique_keys), "lists/objects"
    )


def _parse(path: Path, loads: Callable[[str], Any], nested: str) -> Any:
    name, other, other_loads = (
        ("TOML", "JSON", json.loads) if loads is tomllib.loads else ("JSON", "TOML", tomllib.loads)
    )
    text = _read_text(path)  # outside the try: its ConfigError is a ValueError too
    if name == "JSON" and not text.strip():  # an empty TOML file is a valid, empty one
        raise ConfigError(
            f"{path}: the file is empty, which is no JSON. Fix: write {{}} to keep the "
            "defaults, or your settings, or remove the file."
        )
    try:
        return loads(text)
    except ConfigError:
        raise
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        if _parses(other_loads, text):
            raise ConfigError(
                f"{path}: {other}, not {name}: config.toml and settings.json look swapped. Fix: "
                f"give this file as {_FLAGS[other]} and the {name} file as {_FLAGS[name]}."
            ) from None
        detail, hint = f": {exc}", ""
        if isinstance(exc, json.JSONDecodeError):
            detail = f" at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            hint = " (JSON allows no comments or trailing commas)"
        elif "\\" in text:
            hint = (
                " (in double quotes a backslash starts an escape: write a Windows path in "
                "single quotes, 'C:\\models\\tokenizer.json', or with forward slashes)"
            )
        raise ConfigError(
            f"{path}: malformed {name}{detail}. Fix: correct the syntax there{hint}."
        ) from None
    except ValueError:  # an integer of more than sys.get_int_max_str_digits() digits
        # Python's own message suggests sys.set_int_max_str_digits(), which a user cannot call.
        raise ConfigError(
            f"{path}: a number has more than {sys.get_int_max_str_digits()} digits. "
            "Fix: shorten it to a real value."
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{path}: {name} nested too deeply to read. Fix: flatten the nested {nested}."
        ) from None


_FLAGS: Final = {"JSON": "settings.json (--settings)", "TOML": "config.toml (--config)"}


def collect(
    tree: Any, schema: FileSchema, other: FileSchema, file: str, prefix: tuple[str, ...] = ()
) -> Found:
    """Walks a parsed file along its schema, checking keys and types.

    Args:
        tree: The parsed file, or the table at ``prefix``.
        schema: The file's keys.
        other: The other file's keys, named in the fix of a key that belongs there.
        file: The file's path, named in every error.
        prefix: Where ``tree`` is in the file.
    """
    where = ".".join(prefix) or "the top level"
    if not isinstance(tree, dict):
        raise ConfigError(
            f"{file}: {where} must be a table/object, got {_type_name(tree)}. "
            "Fix: see examples/ for the expected layout."
        )
    node: Mapping[str, Any] = schema.tree
    for table in prefix:
        node = node[table]
    found: Found = {}
    for key, value in tree.items():
        path = (*prefix, key)
        place = f"{file}: {'.'.join(path)}"
        spec = node.get(key)
        if spec is None:
            # repr() keeps a key holding a newline or control character on the message's line.
            shown = key if key.isprintable() else repr(key)
            removed = _REMOVED_KEYS.get(key)
            fix = f"delete it: {removed}." if removed else _moved(key, prefix, schema, other)
            raise ConfigError(
                f"{file}: {'.'.join((*prefix, shown))}: unknown key. Fix: "
                f"{fix or _suggest(key, node)}"
            )
        if isinstance(spec, Key):
            found[spec.target] = (_checked(value, spec, place), place)
        else:
            found.update(collect(value, schema, other, file, path))
    return found


def _moved(key: str, prefix: tuple[str, ...], schema: FileSchema, other: FileSchema) -> str | None:
    """Where ``key`` belongs when it is a key of another section, or of the other file."""
    for dotted in schema.keys:
        section, _, name = dotted.rpartition(".")
        if _spelled_alike(name, key) and section != ".".join(prefix):
            return f"{key!r} belongs in {_section(section, schema.toml)}; move it there."
    for dotted, spec in other.keys.items():
        if _spelled_alike(dotted.rpartition(".")[2], key):
            ours = [mine for mine, mine_spec in schema.keys.items() if mine_spec == spec]
            instead = f"write {ours[0]} here instead" if ours else "move it there"
            return f"{key!r} is a key of {other.name} ({dotted}); {instead}."
    return None


def _section(section: str, toml: bool) -> str:
    if not section:
        return "the top level"
    return f"[{section}]" if toml else f"the {section!r} object"


def _spelled_alike(name: str, key: str) -> bool:
    """Whether ``key`` is ``name`` in another case or style (``maxTokens``, ``max_tokens``,
    ``MAX-TOKENS``): each file spells its keys its own way, and users mix them up."""
    return _squashed(name) == _squashed(key)


def _squashed(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _suggest(key: str, schema: Mapping[str, Any]) -> str:
    known = sorted(schema)
    close = [name for name in known if _spelled_alike(name, str(key))] or (
        difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
    )
    if close:
        return f"did you mean {close[0]!r}? Known keys here: {', '.join(known)}."
    return f"remove it; known keys here: {', '.join(known)}."


def _type_name(value: Any) -> str:
    return {dict: "a table/object", list: "a list", bool: "a boolean", str: "a string"}.get(
        type(value), type(value).__name__
    )


def _checked(value: Any, spec: Key, place: str) -> Any:
    ok = {
        "int": is_integer(value),
        "number": is_integer(value) or isinstance(value, float),  # inf and nan: below
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "list": isinstance(value, list),
    }[spec.kind]
    if not ok:
        shown = "the value" if spec.target == "llm.api_key" else repr(value)
        raise ConfigError(
            f"{place}: expected {_KIND_NAMES[spec.kind]}, got {_type_name(value)} ({shown}). "
            f"Fix: write {_KIND_NAMES[spec.kind]} there."
        )
    # Only floats can be inf/nan; math.isfinite overflows on integers beyond float range.
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{place}: {value!r} is not a finite number. Fix: write a number.")
    if spec.kind == "list":
        return tuple(value)
    return value


def merge(found: Found, new: Found) -> None:
    """Adds one file's values, refusing a value the other file sets differently."""
    for target, (value, place) in new.items():
        if target in found and found[target][0] != value:
            first_value, first_place = found[target]
            raise ConfigError(
                f"{first_place} = {first_value!r} disagrees with {place} = {value!r}. "
                "Fix: set it in one file only, or make both equal."
            )
        found[target] = (value, place)


def apply_environment(found: Found) -> None:
    """Adds the channel set in the environment, which wins over both files."""
    for variable, target in (
        (ENV_BASE_URL, "llm.base_url"),
        (ENV_MODEL, "llm.model"),
        (ENV_API_KEY, "llm.api_key"),
    ):
        value = os.environ.get(variable)
        if value:
            found[target] = (value, f"{ENV_PLACE}{variable}")
    # OPENAI_API_KEY only fills a gap: it must not replace a key configured for another endpoint
    # (that would send the OpenAI key to a third party and fail authentication there).
    openai_key = os.environ.get(ENV_OPENAI_API_KEY)
    if openai_key and "llm.api_key" not in found:
        found["llm.api_key"] = (openai_key, f"{ENV_PLACE}{ENV_OPENAI_API_KEY}")
