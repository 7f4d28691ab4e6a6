"""The ``rlrouter`` console command: small operational tools that need no Ray.

    rlrouter validate FILE --format router_r1|gmtrouter   check a data file (one JSON object, a JSON list,
                                                          JSONL or parquet: the output says which), stop
                                                          at the first problem
    rlrouter validate FILE --format ... --all             report every bad record (count and position)
    rlrouter model NAME                                    resolve a model name to a local folder
    rlrouter env                                           check the installed stack
"""

from __future__ import annotations

import argparse
import sys

from rlrouter.data.formats import FORMATS


def _validate(args: argparse.Namespace) -> int:
    from rlrouter.data.io import DataFileError, read_records

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
    v = sub.add_parser("validate", help="check a Router-R1 or GMTRouter data file (JSON object or list, JSONL, parquet)")
    v.add_argument("file")
    v.add_argument("--format", required=True, choices=sorted(FORMATS))
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
