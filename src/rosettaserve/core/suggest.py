"""Did-you-mean: the closest known name to a mistyped one, for model.yaml keys and values and for
command-line options and their values."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Iterable, Sequence

CUTOFF = 0.6  # difflib's ratio below which a name is not offered as a suggestion


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word``, or None when none is close enough."""
    by_lower = {k.lower(): k for k in known}  # FP32 for fp32 too
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=CUTOFF)
    return by_lower[found[0]] if found else None


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """``": did you mean X?"`` (X prefixed), or ``""`` when nothing is close."""
    match = closest(word, known)
    return f": did you mean {prefix}{match}?" if match is not None else ""


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type`` for an option with ``choices``: an unknown value is refused with the
    closest choice suggested (argparse's own message lists the choices only)."""

    def check(value: str) -> str:
        if value in choices:
            return value
        listed = ", ".join(choices)
        raise argparse.ArgumentTypeError(
            f"invalid choice {value!r}{did_you_mean(value, choices)} (choose from {listed})"
        )

    return check


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with the closest known option suggested for a mistyped one."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        known = _option_strings(parser, args)
        hints = [_hinted(x, known) for x in extras]
        parser.error(f"unrecognized arguments: {' '.join(hints)}")
    return args


def _hinted(arg: str, known: list[str]) -> str:
    match = closest(arg.split("=", maxsplit=1)[0], known) if arg.startswith("--") else None
    return f"{arg} (did you mean {match}?)" if match else arg


def _option_strings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options of ``parser`` and of the subcommand ``args`` chose."""
    found: list[str] = []
    for action in parser._actions:
        found.extend(s for s in action.option_strings if s.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest or "", None) or "")
            if chosen is not None:
                found.extend(_option_strings(chosen, args))
    return found
