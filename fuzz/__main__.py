"""``python -m fuzz``: run a fuzzing campaign, or replay stored cases (see fuzz/README.md)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from fuzz.common import HARNESSES, REPO, key_text


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m fuzz``."""
    ap = argparse.ArgumentParser(prog="python -m fuzz", description="Fuzz gradc.")
    budget = ap.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, help="time budget in seconds (default 60)")
    budget.add_argument("--minutes", type=float, help="time budget in minutes")
    ap.add_argument("--seed", type=int, help="campaign seed (default: from the clock)")
    ap.add_argument("--harness", default=",".join(HARNESSES),
                    help=f"comma-separated harnesses (default {','.join(HARNESSES)})")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--report", metavar="PATH", help="also write the report as Markdown")
    ap.add_argument("--no-save", action="store_true", help="do not store new crash classes")
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds per input (default 15)")
    ap.add_argument("--mem-mb", type=int, default=3072,
                    help="address-space limit of a worker in MiB (default 3072)")
    ap.add_argument("--replay", nargs="+", metavar="PATH",
                    help="replay stored cases (.ir, .onnx or .json) instead of fuzzing")
    ap.add_argument("--replay-all", action="store_true",
                    help="replay every case under fuzz/regressions")
    ap.add_argument("-q", "--quiet", action="store_true", help="only the report")
    return ap


def replay(paths: list[str], timeout: float, mem_mb: int) -> int:
    """Replay stored cases in a worker; 1 if any still crashes."""
    from fuzz import store
    from fuzz.supervisor import Worker

    failed = 0
    with Worker(mem_mb=mem_mb, timeout=timeout) as w:
        for path in paths:
            case = store.load_case(path)
            r = w.run(case.harness, case.payload)
            rel = os.path.relpath(case.path, REPO)
            if r.status == "crash":
                failed += 1
                same = " (same class)" if r.key == case.key else \
                    f" (stored as {key_text(case.key)})"
                print(f"{rel}: CRASH {key_text(r.key)}{same}\n  {r.message[:500]}")
                if r.detail:
                    print("  " + r.detail.strip()[-3000:].replace("\n", "\n  "))
            else:
                print(f"{rel}: {r.status}{' at ' + r.stage if r.stage else ''} "
                      f"({r.seconds:.2f} s){': ' + r.message if r.message else ''}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    if args.replay or args.replay_all:
        from fuzz import store

        paths = list(args.replay or []) + ([c.path for c in store.stored_cases()]
                                           if args.replay_all else [])
        if not paths:
            print("no stored cases")
            return 0
        return replay(paths, args.timeout, args.mem_mb)
    from fuzz.runner import Campaign

    harnesses = [h.strip() for h in args.harness.split(",") if h.strip()]
    unknown = [h for h in harnesses if h not in HARNESSES]
    if unknown or not harnesses:
        print(f"python -m fuzz: unknown harness {unknown[0] if unknown else '(none)'!r}; "
              f"choose from {', '.join(HARNESSES)}", file=sys.stderr)
        return 2
    seconds = args.seconds if args.seconds is not None else \
        (args.minutes * 60 if args.minutes is not None else 60.0)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    log = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    log(f"fuzzing {', '.join(harnesses)} for {seconds:.0f} s with seed {seed}, "
        f"{args.jobs} job(s)")
    c = Campaign(harnesses, seconds, seed, jobs=args.jobs, save=not args.no_save,
                 timeout=args.timeout, mem_mb=args.mem_mb, log=log)
    c.run()
    cmd = "python -m fuzz " + " ".join(shlex.quote(a) for a in (
        argv if argv is not None else sys.argv[1:]))
    print(c.report("text", cmd))
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(c.report("md", cmd))
    return 1 if c.new_classes else 0


if __name__ == "__main__":
    sys.exit(main())
