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


def _compare(args: argparse.Namespace) -> int:
    import json

    from rlrouter.eval.compare_single import compare_export, render

    try:
        r = compare_export(args.export, args.cost_weight, args.task_column, args.level)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1)
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
    c = sub.add_parser("compare-to-single", help="the served router against the best single model (and the per-task "
                                                 "rule), with intervals, from a traffic export (jobs/export_traffic.py)")
    c.add_argument("export", help="the export folder: train.parquet (where the best single model is chosen) and "
                                  "test.parquet (where it is reported)")
    c.add_argument("--cost-weight", type=float, default=0.1,
                   help="reward = score - w x 1000 x USD (default 0.1, traffic_knn's; use your router's)")
    c.add_argument("--task-column", help="a column holding each request's task, for the per-task rule")
    c.add_argument("--level", type=float, default=0.95, help="interval level (default 0.95)")
    c.add_argument("--json", help="also write the figures to this file")
    c.set_defaults(fn=_compare)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
