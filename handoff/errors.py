"""The one base of user errors.

A `HandoffError` is bad input from the user (a config, an override, a run directory, a task or
label file, a results file): the command line and the sweep print its message and exit with status
2, without a traceback (`exit_on_user_error`). Any other exception is a bug: it keeps its traceback
and exits 1.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable

from pydantic import ValidationError


class HandoffError(Exception):
    """Bad input from the user: reported as `<prog>: <message>` with exit status 2."""


class ConfigError(HandoffError, ValueError):
    """A config (sweep config, reward weights) that cannot run; the message names the offending keys."""

    @classmethod
    def of(cls, what: str, problems: list[str]) -> ConfigError:
        return cls(f"invalid {what}:\n  " + "\n  ".join(problems))

    @classmethod
    def from_validation(cls, what: str, exc: ValidationError, prefix: str = "") -> ConfigError:
        """pydantic's errors as `key.path: message` lines (`prefix` names where the model sits)."""
        keys = [prefix + ".".join(str(p) for p in e["loc"]) for e in exc.errors()]
        return cls.of(what, [f"{key or '<root>'}: {e['msg']}{_did_you_mean_choice(e)}" for key, e in zip(keys, exc.errors())])


def did_you_mean(word: str, choices) -> str:
    """` (did you mean 'x'?)` for the closest of `choices` (difflib), or nothing."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _did_you_mean_choice(error: dict) -> str:
    """A suggestion for a value outside a Literal or an Enum (pydantic's `expected` lists the choices)."""
    expected = (error.get("ctx") or {}).get("expected")
    if error.get("type") not in ("literal_error", "enum") or not expected or not isinstance(error.get("input"), str):
        return ""
    return did_you_mean(error["input"], re.findall(r"'([^']*)'", expected))


USER_ERROR_STATUS = 2


def exit_on_user_error(prog: str, func: Callable[..., int | None], *args) -> int:
    """func(*args) as an exit status; a HandoffError becomes `prog: message` on stderr and status 2."""
    try:
        return int(func(*args) or 0)
    except HandoffError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return USER_ERROR_STATUS
