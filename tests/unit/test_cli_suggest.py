"""A mistyped option or option value is refused naming the closest known one."""

from __future__ import annotations

import pytest

from rosettaserve.cli.parser import build_parser
from rosettaserve.core.suggest import closest, parse_args


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        parse_args(build_parser(), list(argv))
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("serve", "REPO", "--log-level", "debg"),
            "argument --log-level: invalid choice 'debg': did you mean debug? "
            "(choose from debug, info, warning, error)",
        ),
        (("serve", "REPO", "--role", "prefil"), "invalid choice 'prefil': did you mean prefill?"),
        (
            (
                "scheduler",
                "--prefill",
                "http://a",
                "--decode",
                "http://b",
                "--policy",
                "roundrobin",
            ),
            "invalid choice 'roundrobin': did you mean round-robin?",
        ),
        (
            ("serve", "REPO", "--log-levl", "debug"),
            "unrecognized arguments: --log-levl (did you mean --log-level?) debug",
        ),
        (
            ("serve", "REPO", "--max-queue-sise=4"),
            "unrecognized arguments: --max-queue-sise=4 (did you mean --max-queue-size?)",
        ),
        (
            ("scheduler", "--prefill", "http://a", "--decode", "http://b", "--max-retrys", "3"),
            "(did you mean --max-retry?)",
        ),
    ],
)
def test_a_mistyped_option_or_value_names_the_closest(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    assert message in refusal(capsys, *argv)


def test_nothing_close_is_not_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, "serve", "REPO", "--log-level", "zzzz")
    assert "invalid choice 'zzzz' (choose from debug, info, warning, error)" in err
    assert "did you mean" not in refusal(capsys, "serve", "REPO", "--qqqqqqqq")


def test_valid_choices_still_parse() -> None:
    args = parse_args(build_parser(), ["serve", "REPO", "--log-level", "debug", "--role", "decode"])
    assert (args.log_level, args.role) == ("debug", "decode")


def test_closest_ignores_case() -> None:
    assert closest("fp32", ["FP16", "FP32", "BYTES"]) == "FP32"
    assert closest("nothing", ["FP16"]) is None
