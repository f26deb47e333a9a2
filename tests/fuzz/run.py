"""Run fuzz targets under atheris (coverage-guided, libFuzzer's engine).

    python -m tests.fuzz.run TARGET [--seconds N | --runs N] [--work DIR]
    python -m tests.fuzz.run --all --seconds N        # every target in turn (``make fuzz``)

Each run starts from the checked-in seeds (``corpus/TARGET``) and regressions
(``regressions/TARGET``), keeps what it finds in ``--work`` (default ``build/fuzz/corpus``), and
on a failure writes the input to ``build/fuzz/crashes/TARGET-...`` and exits non-zero: copy that
file to ``regressions/TARGET/`` and fix the cause. The json_numbers target runs on the C reader
built with AddressSanitizer (``asan.py``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
from pathlib import Path

from tests.fuzz.targets import TARGETS, load

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CRASHES = ROOT / "build" / "fuzz" / "crashes"
MAX_LEN = 4096  # bytes per input: enough for every framing, small enough to run fast
TIMEOUT_S = 20  # one input taking longer is a failure (a hang)
RSS_LIMIT_MB = 3072


def seeds(target: str) -> list[Path]:
    return [d for d in (HERE / "corpus" / target, HERE / "regressions" / target) if d.is_dir()]


def replay(target: str) -> int:
    """Every seed and regression of ``target`` through its check, here: how many failed."""
    check = load(target)
    failed = 0
    for folder in seeds(target):
        for path in sorted(folder.iterdir()):
            try:
                check(path.read_bytes())
            except Exception:
                failed += 1
                print(f"FAILED: {path.relative_to(ROOT)}", file=sys.stderr)
                traceback.print_exc()
    return failed


def fuzz_in_process(target: str, libfuzzer_args: list[str]) -> None:
    """Replay the seeds and regressions, then run atheris here (it exits the process)."""
    import atheris

    with atheris.instrument_imports(include=["rosettaserve"]):
        check = load(target)
        check(b"")  # imports what the target imports lazily, instrumented too
    if replay(target):
        sys.exit(1)
    atheris.Setup([sys.argv[0], *libfuzzer_args], check)
    atheris.Fuzz()


def command(target: str, seconds: float | None, runs: int | None, work: Path) -> list[str]:
    corpus = work / target
    corpus.mkdir(parents=True, exist_ok=True)
    CRASHES.mkdir(parents=True, exist_ok=True)
    args = [
        f"-max_len={MAX_LEN}",
        f"-timeout={TIMEOUT_S}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-artifact_prefix={CRASHES}/{target}-",
        "-print_final_stats=1",
    ]
    if seconds is not None:
        args.append(f"-max_total_time={max(1, int(seconds))}")
    if runs is not None:
        args.append(f"-runs={runs}")
    dirs = [str(corpus), *(str(d) for d in seeds(target))]
    return [sys.executable, "-m", "tests.fuzz.run", target, "--in-process", "--", *args, *dirs]


def run_target(target: str, seconds: float | None, runs: int | None, work: Path) -> int:
    """One target in a process of its own; its exit status (0: nothing found)."""
    env = dict(os.environ)
    if target == "json_numbers":
        from tests.fuzz import asan

        env = asan.environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    finished = subprocess.run(command(target, seconds, runs, work), cwd=ROOT, env=env, check=False)
    return finished.returncode


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--in-process" in argv:  # the child: TARGET --in-process -- libFuzzer arguments...
        split = argv.index("--")
        fuzz_in_process(argv[0], argv[split + 1 :])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", choices=TARGETS)
    parser.add_argument("--all", action="store_true", help="every target, one after the other")
    parser.add_argument("--seconds", type=float, help="how long each target runs")
    parser.add_argument("--runs", type=int, help="how many inputs each target runs")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz" / "corpus")
    args = parser.parse_args(argv)
    targets = list(TARGETS) if args.all else [args.target] if args.target else []
    if not targets:
        parser.error("name a target, or --all")
    failed = [t for t in targets if run_target(t, args.seconds, args.runs, args.work) != 0]
    if failed:
        print(f"fuzzing found failures in: {', '.join(failed)} (inputs in {CRASHES})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
