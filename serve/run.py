"""``python -m serve.run serve/config.yaml``: ``serve run`` for a config file, except that a config error stops it.

Ray Serve's ``serve run CONFIG`` submits the config, then sleeps until Ctrl-C whatever becomes of it
(ray 2.60, ``ray/serve/scripts.py``). An application whose builder refused its config (a placeholder
API key, an unknown field) stays DEPLOY_FAILED, the command keeps running, and the proxy answers every
path with "Path '/health' not found". This runner submits the same config the same way, waits until every
application in it is RUNNING or one has failed, and on a failure prints the builder's error, deletes the
config's applications and exits 1. Once everything runs it blocks like ``serve run`` (Ctrl-C shuts Serve
down), or returns at once with ``--non-blocking``.

    python -m serve.run serve/config.yaml [--address auto] [--non-blocking] [--timeout-s 900]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import yaml


def _last_error_line(message: str) -> str:
    """The exception line at the end of a DEPLOY_FAILED message (which carries the builder's traceback)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return lines[-1] if lines else message


def auth_refusal(e: BaseException) -> str | None:
    """The cluster's refusal of this client's authentication behind ``e``, in Ray's words; None for another
    failure. ``ray.init`` (ray 2.60) raises "ConnectionError: Failed to connect to Ray cluster", caused by a
    RuntimeError whose text holds the AuthenticationError's traceback."""
    from ray.exceptions import AuthenticationError

    for _ in range(10):
        if e is None:
            break
        if isinstance(e, AuthenticationError):
            return str(e)
        said = re.search(r"AuthenticationError: (.*)", str(e))
        if said:
            return said.group(1)
        e = e.__cause__ or e.__context__
    return None


def auth_fix(error: str, environ: dict[str, str]) -> str:
    """What to do when the cluster refused this client's authentication (Ray 2.60 turns token auth on for
    ``ray start``; a client reads its mode from its own environment, never from the cluster)."""
    mode = environ.get("RAY_AUTH_MODE", "")
    first = (error.strip().splitlines() or [""])[0]
    if mode != "token":
        fix = ("the Ray cluster uses token auth and this shell does not: export RAY_AUTH_MODE=token and the "
               "head's token (RAY_AUTH_TOKEN_PATH=<its token file>, or RAY_AUTH_TOKEN), then run this again")
    else:
        fix = ("the Ray cluster refused this shell's token: point RAY_AUTH_TOKEN_PATH (or RAY_AUTH_TOKEN) at the "
               "token the head was started with, then run this again")
    return f"{fix} (docs/serve.md, 'On a running Ray head'). Ray said: {first}"


def wait_for_apps(names: list[str], timeout_s: float, poll_s: float = 0.5) -> dict[str, str]:
    """Poll Serve until every app in ``names`` is RUNNING or one failed; returns {app: message} of the
    failed ones (empty: all running). Raises TimeoutError naming the apps still deploying."""
    from ray import serve
    from ray.serve.schema import ApplicationStatus

    failed_states = (ApplicationStatus.DEPLOY_FAILED, ApplicationStatus.UNHEALTHY)
    deadline = time.monotonic() + timeout_s
    while True:
        apps = serve.status().applications
        failed = {n: apps[n].message for n in names if n in apps and apps[n].status in failed_states}
        if failed:
            return failed
        pending = [n for n in names if n not in apps or apps[n].status != ApplicationStatus.RUNNING]
        if not pending:
            return {}
        if time.monotonic() > deadline:
            raise TimeoutError(f"applications {pending} not RUNNING after {timeout_s:g}s "
                               f"(status: {[str(apps[n].status) if n in apps else 'absent' for n in pending]})")
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serve.run", description=__doc__.splitlines()[0])
    p.add_argument("config", help="a Serve config file, e.g. serve/config.yaml")
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                   help="Ray cluster to deploy on (default: RAY_ADDRESS, else a new local one, as serve run)")
    p.add_argument("--non-blocking", action="store_true", help="return once every application is RUNNING")
    p.add_argument("--timeout-s", type=float, default=900.0,
                   help="give up when an application is neither RUNNING nor failed after this long")
    args = p.parse_args(argv)

    import ray
    from ray import serve
    from ray.serve._private import api as _private_api
    from ray.serve._private.constants import SERVE_NAMESPACE
    from ray.serve.config import gRPCOptions
    from ray.exceptions import AuthenticationError
    from ray.serve.schema import ServeDeploySchema

    config = ServeDeploySchema.model_validate(yaml.safe_load(Path(args.config).read_text()))
    names = [a.name for a in config.applications]
    sys.path.insert(0, os.getcwd())  # as serve run's --app-dir ".": import paths resolve from here
    try:
        ray.init(address=args.address, namespace=SERVE_NAMESPACE)
    except (ConnectionError, RuntimeError, AuthenticationError) as e:
        refused = auth_refusal(e)
        if refused is None:
            raise
        print(f"rlrouter serve: error: {auth_fix(refused, os.environ)}", file=sys.stderr, flush=True)
        return 1
    client = _private_api.serve_start(http_options=config.http_options.model_dump(),
                                      proxy_location=config.proxy_location,
                                      grpc_options=gRPCOptions(**config.grpc_options.model_dump()),
                                      controller_options=config.controller_options)
    client.deploy_apps(config, _blocking=False)
    print(f"rlrouter serve: submitted {names} from {args.config}; waiting until they run", flush=True)
    try:
        failed = wait_for_apps(names, args.timeout_s)
    except TimeoutError as e:
        print(f"rlrouter serve: error: {e}", file=sys.stderr, flush=True)
        return 1
    if failed:
        for name, message in failed.items():
            print(f"rlrouter serve: application '{name}' failed to start:\n{message}", file=sys.stderr)
            print(f"rlrouter serve: error: {_last_error_line(message)}", file=sys.stderr, flush=True)
        for name in names:  # they cannot serve: a half-deployed app would only answer 404s
            serve.delete(name)
        return 1
    print(f"rlrouter serve: {names} RUNNING", flush=True)
    if args.non_blocking:
        return 0
    try:
        while True:
            time.sleep(10)
    except KeyboardInterrupt:
        print("rlrouter serve: shutting down", flush=True)
        serve.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
