#!/usr/bin/env python3
"""make bench-check: compares the figures a benchmark run recorded (bench/lib.sh's
`figure`, one "NAME VALUE" per line) with the thresholds of this host's class
(bench/thresholds/<cores>-core.txt: "NAME min|max VALUE", # comments).

  bench/check-thresholds.py FIGURES [THRESHOLDS]

Prints one line per threshold: ok, MISSED, or not measured (its benchmark was not in the
run). Exit status: 0 no threshold missed, 1 one was missed or a figure is not a number,
2 no thresholds for this host class or no figures at all.
"""
import os
import pathlib
import sys


def read_thresholds(path):
    thresholds = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 3 or fields[1] not in ("min", "max"):
            sys.exit(f"check-thresholds: {path}:{number}: not NAME min|max VALUE")
        thresholds[fields[0]] = (fields[1], float(fields[2]))
    return thresholds


def read_figures(path):
    figures = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2:
            figures[fields[0]] = fields[1]  # the last run of a figure counts
    return figures


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = pathlib.Path(__file__).resolve().parent
    host_class = f"{os.cpu_count()}-core"
    threshold_path = pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else root / "thresholds" / f"{host_class}.txt"
    if not threshold_path.exists():
        print(f"check-thresholds: no thresholds for a {host_class} host ({threshold_path}); "
              "measure one and write them", file=sys.stderr)
        return 2
    figures_path = pathlib.Path(sys.argv[1])
    figures = read_figures(figures_path) if figures_path.exists() else {}
    if not figures:
        print(f"check-thresholds: no figures in {figures_path}", file=sys.stderr)
        return 2
    missed = 0
    for name, (bound, limit) in read_thresholds(threshold_path).items():
        if name not in figures:
            print(f"  {name:34s} not measured")
            continue
        try:
            value = float(figures[name])
        except ValueError:
            print(f"  {name:34s} MISSED: {figures[name]!r} is not a number")
            missed += 1
            continue
        good = value >= limit if bound == "min" else value <= limit
        missed += not good
        print(f"  {name:34s} {'ok    ' if good else 'MISSED'} {value:g} ({bound} {limit:g})")
    unknown = sorted(set(figures) - set(read_thresholds(threshold_path)))
    if unknown:
        print(f"  recorded without a threshold: {', '.join(unknown)}")
    print(f"check-thresholds: {missed} missed ({threshold_path.name})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
