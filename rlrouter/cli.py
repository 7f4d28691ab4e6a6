"""The ``rlrouter`` console command: small operational tools that need no Ray.

    rlrouter validate FILE --format router_r1|gmtrouter   check a data file (one JSON object, a JSON list,
                                                          JSONL or parquet: the output says which), stop
                                                          at the first problem
    rlrouter validate FILE --format ... --all             report every bad record (count and position)
    rlrouter validate FILE --format routerbench           check a table of logged outcomes (CSV or parquet):
                                                          name the row and column of a bad cell, count
                                                          blank scores and repeated ids
    rlrouter model NAME                                    resolve a model name to a local folder
    rlrouter env                                           check the installed stack
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from rlrouter.data.formats import FORMATS


def _validate_routerbench(args: argparse.Namespace) -> int:
    """A RouterBench-style table (CSV or parquet): the first malformed cell stops it, named by file, row and
    column; blank correctness cells and repeated ids are counted and their first places listed."""
    from rlrouter.data.io import DataFileError
    from rlrouter.data.routerbench import read_routerbench_table

    try:
        table = read_routerbench_table(args.file, args.candidates.split(",") if args.candidates else None,
                                       blank_scores="drop", repeated_ids="keep")
    except DataFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t = table.report
    print(f"{args.file}: RouterBench table, {t.rows} rows, {len(table.candidates)} candidates, tasks "
          f"{sorted(set(table.sources))}; {len(table.responses)} with logged replies, "
          f"{int(np.isfinite(table.costs).all(axis=0).sum())} with logged costs")
    for line in t.lines():
        print(f"warning: {line.split(': ', 1)[1]}")
    for ex in t.examples:
        print(f"  {ex}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from rlrouter.data.io import DataFileError, read_records

    if args.format == "routerbench":
        return _validate_routerbench(args)

    try:
        result = read_records(args.file, args.format, strict=not args.all)
    except DataFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    n_bad = len(result.errors)
    print(f"{args.file}: {result.layout}, {len(result.records)} valid {args.format} records, {n_bad} invalid")
    return 1 if n_bad else 0


def _model(args: argparse.Namespace) -> int:
    from rlrouter.models import ModelNotAvailable, resolve_model

    try:
        print(resolve_model(args.name))
    except ModelNotAvailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _env(_: argparse.Namespace) -> int:
    from rlrouter.env_check import check

    for k, v in check().items():
        print(f"{k}: {v}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlrouter", description="rlrouter command-line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check a Router-R1 or GMTRouter data file (JSON object or list, JSONL, "
                                        "parquet) or a RouterBench table of logged outcomes (CSV, parquet)")
    v.add_argument("file")
    v.add_argument("--format", required=True, choices=sorted([*FORMATS, "routerbench"]))
    v.add_argument("--candidates", help="routerbench: comma-separated model columns (default: every <model> column)")
    v.add_argument("--all", action="store_true", help="report every bad record instead of stopping at the first")
    v.set_defaults(fn=_validate)
    m = sub.add_parser("model", help="resolve a model name (built-in, path or hub id) to weights")
    m.add_argument("name")
    m.set_defaults(fn=_model)
    e = sub.add_parser("env", help="check the installed stack")
    e.set_defaults(fn=_env)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
