#!/usr/bin/env python3
"""The figures of docs/reliability.md: runs the Python and CLI bad-input
matrices (python/tests/test_bad_input_matrix.py, test_cli_bad_inputs.py)
against a build, each input isolated (a forked child per Python input, a
process per command line) so that a crash or a hang is counted, not fatal.

    scripts/bad_input_report.py --python build/python --cli build/src/cli/attnkit

Prints, per matrix: inputs tried, refused with a catalogued code, ran with the
reference's result, crashes, hangs, wrong results, uncatalogued refusals (any
other exception, AK0000 / AK0003, a code without a page or a fix), and the
first inputs of each failing kind. Exit status 1 when any failure was seen."""
import argparse
import collections
import os
import pickle
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FAILURES = ("crash", "hang", "wrong", "uncatalogued")


def isolated(fn, seconds):
    """fn() in a forked child: its (kind, detail), or ("crash", signal) / ("hang", "")."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        signal.alarm(seconds)
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 - reported as what it is
            result = ("uncatalogued", f"{type(e).__name__}: {e}")
        os.write(write, pickle.dumps(result))
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return ("hang", "") if sig == signal.SIGALRM else ("crash", f"signal {sig}")
    return pickle.loads(data) if data else ("crash", f"exit {os.WEXITSTATUS(status)} without a result")


def report(title, outcomes):
    counts = collections.Counter(kind for kind, _, _ in outcomes)
    print(f"{title}: {len(outcomes)} inputs: {counts['refused']} refused with a catalogued code, "
          f"{counts['ran']} ran with the reference's result; {counts['crash']} crashes, {counts['hang']} hangs, "
          f"{counts['wrong']} wrong results, {counts['uncatalogued']} uncatalogued refusals")
    for kind in FAILURES:
        for _, case, detail in [o for o in outcomes if o[0] == kind][:8]:
            print(f"  {kind}: {case}: {detail[:200]}")
    return sum(counts[k] for k in FAILURES)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="directory holding the attnkit package to test")
    parser.add_argument("--cli", help="the attnkit CLI binary")
    parser.add_argument("--timeout", type=int, default=60, help="seconds an input may take before it is a hang")
    a = parser.parse_args()
    sys.path[:0] = [os.path.abspath(a.python), os.path.join(HERE, "..", "python", "tests")]
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    import test_bad_input_matrix as py_matrix  # noqa: E402 - after sys.path
    failures = 0
    outcomes = []
    for entry, case, name, value in py_matrix.CASES:
        kind, detail = isolated(lambda: py_matrix.outcome(entry, name, value), a.timeout)
        outcomes.append((kind, f"{entry} {case}", str(detail)))
    failures += report("Python", outcomes)
    if a.cli:
        os.environ["ATTNKIT_CLI"] = a.cli
        import test_cli_bad_inputs as cli_matrix  # noqa: E402
        outcomes = []
        for args in cli_matrix.CASES:
            kind, detail = cli_matrix.cli_outcome(a.cli, args, a.timeout)
            outcomes.append((kind, cli_matrix.shown(args), str(detail)))
        failures += report("CLI", outcomes)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
