"""CLI of a hosted leaderboard: ``serve``, ``worker``, ``team``, ``submit`` and ``hosted-board``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from aegisbench.cli import command
from aegisbench.cli_options import add_no_verify_option, add_out_option, add_ray_address_option
from aegisbench.errors import BadInput

log = logging.getLogger(__name__)
_NO_VERIFY = "do not re-hash the dataset repo at start"


def _project(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", default=".", metavar="DIR",
                   help="the benchmark project: params.yaml (its hosting: section) and the dataset repo it names")
    p.add_argument("--db", default=None, metavar="URL",
                   help="database URL: sqlite:///PATH or postgresql://USER@HOST/DB (default: SQLite in WAL mode at "
                        "DIR/hosted/queue.sqlite3)")


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "serve", "serve the leaderboard, team pages and the submission API (ASGI, uvicorn)",
                "Public: the leaderboard (/) and /health. Teams sign in with their token on /team or send it as "
                "`Authorization: Bearer TOKEN` to the JSON API (/docs). Uploads are validated, stored and queued; "
                "`aegisbench worker` scores them. The hosting: section of params.yaml sets phases and limits.",
                ["aegisbench serve --project runs/fast",
                 "aegisbench serve --project . --host 0.0.0.0 --port 8000 --db postgresql://aegis@db/aegis"])
    _project(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    add_no_verify_option(p, _NO_VERIFY)
    p.set_defaults(func=cmd_serve)

    p = command(sub, "worker", "score queued submissions and rebuild the hosted leaderboard",
                "Scores with the evaluator's own code on the project's settings, writes "
                "hosted/store/results/<id>/, and publishes the board after each scored submission (one publisher "
                "at a time). A worker killed mid-scoring loses its lease; another worker finishes the job.",
                ["aegisbench worker --project runs/fast", "aegisbench worker --project . --processes 2",
                 "aegisbench worker --project . --db postgresql://aegis@db/aegis --ray-address auto"])
    _project(p)
    p.add_argument("--processes", type=int, default=1, help="worker processes (one submission at a time each)")
    add_ray_address_option(p, "score each submission's sources on this Ray cluster (auto or HOST:PORT)")
    add_no_verify_option(p, _NO_VERIFY)
    p.set_defaults(func=cmd_worker)

    p = command(sub, "team", "add, revoke or list the teams that may submit",
                "`team add NAME` prints the team's API token once, on its last line; only a salted hash is kept.",
                ["aegisbench team add 'My lab' --project runs/fast", "aegisbench team list --project runs/fast",
                 "aegisbench team revoke 'My lab' --project runs/fast"])
    p.add_argument("action", choices=("add", "revoke", "list"), help="what to do")
    p.add_argument("name", nargs="?", help="team name (add, revoke)")
    p.add_argument("--admin", action="store_true", help="(add) the team may also read the queue page")
    _project(p)
    p.set_defaults(func=cmd_team)

    p = command(sub, "submit", "upload a submission folder to a hosted leaderboard",
                "The token is read from AEGISBENCH_TOKEN or the config file (AEGISBENCH_CONFIG, default "
                "~/.config/aegisbench/tokens.yaml: `URL: TOKEN`, chmod 600), never from the command line. Prints "
                "the server's refusal line by line (exit 2) or the submission id; --wait follows it to the end "
                "and prints the team's row.",
                ["AEGISBENCH_TOKEN=aeg_1_... aegisbench submit submissions/my_yolo --server http://127.0.0.1:8000",
                 "aegisbench submit submissions/my_yolo --server https://lb.example.org --wait"])
    p.add_argument("submission", help="submission folder (submission.yaml + predictions)")
    p.add_argument("--server", required=True, metavar="URL", help="the leaderboard's address")
    p.add_argument("--wait", action="store_true", help="wait until it is scored and print the team's row")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits at most")
    p.set_defaults(func=cmd_submit)

    p = command(sub, "hosted-board", "rebuild the hosted leaderboard as it stood at a past revision",
                "Every scored submission is a revision of the ledger (hosted/store/ledger.jsonl). This rebuilds "
                "that revision's board from the append-only store and says whether its bytes equal the ones "
                "published then (exit 1 if not). Inputs changed since (the dataset, a pipeline result) are refused: "
                "check out the revision's git commit first.",
                ["aegisbench hosted-board --project runs/fast --revision 3 --out /tmp/board-3"])
    p.add_argument("--project", default=".", metavar="DIR", help="the benchmark project")
    p.add_argument("--revision", type=int, required=True, help="ledger revision (1 = the first)")
    add_out_option(p, "new folder for the rebuilt board", required=True)
    p.set_defaults(func=cmd_hosted_board)


def _host(args, verify: bool = True, project=None):
    from aegisbench.service.db import open_database
    from aegisbench.service.intake import Host
    from aegisbench.service.project import HostedProject
    project = project or HostedProject(args.project)
    project.rules  # noqa: B018 - a bad hosting: section is refused before anything starts
    runtime = open_database(args.db or project.default_db_url())
    return Host(project, runtime, verify=verify)


def cmd_serve(args) -> int:
    import uvicorn

    from aegisbench.service.app import create_app
    from aegisbench.service.intake import requeue_orphans
    if not 0 < args.port < 65536:
        raise BadInput(f"must be 1..65535, got {args.port}", where="--port")
    host = _host(args, verify=not args.no_verify)
    host.index  # noqa: B018 - verified before the first request
    requeue_orphans(host)
    app = create_app(host)
    print(f"serving {host.project.root} on http://{args.host}:{args.port}/ (API: /docs)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=10)
    return 0


def cmd_worker(args) -> int:
    from aegisbench.cli import export_global_options
    from aegisbench.service.worker import run_jobs, run_pool
    from aegisbench.service.project import HostedProject
    if args.processes < 1:
        raise BadInput(f"must be at least 1, got {args.processes}", where="--processes")
    project = HostedProject(args.project)
    executor = None
    if args.ray_address:  # the cluster is checked first: nothing is opened or written when it is refused
        from aegisbench.executor import Executor, connect
        executor = Executor.from_cli("ray", None, args.ray_address)
        connect(executor, (project.dataset, project.root))
    host = _host(args, verify=not args.no_verify, project=project)
    host.index  # noqa: B018 - checked once, before anything is scored
    if args.processes > 1:
        safe = ["-P"] if sys.version_info >= (3, 11) else []  # never a project's copy of the package in the cwd
        argv = [sys.executable, *safe, "-m", "aegisbench.cli", "worker", "--project", str(host.project.root),
                "--processes", "1", "--no-verify"]
        argv += ["--db", args.db] if args.db else []
        argv += ["--ray-address", args.ray_address] if args.ray_address else []
        export_global_options(args)
        return run_pool(argv, args.processes)
    return run_jobs(host, executor)


def cmd_team(args) -> int:
    from aegisbench.service.teams import add_team, list_teams, revoke_team
    if args.action != "list" and not args.name:
        raise BadInput("give the team's name", where=f"team {args.action}")
    host = _host(args, verify=False)
    if args.action == "add":
        team, token = add_team(host.runtime, args.name, admin=args.admin)
        print(f"added team {team.name!r} (id {team.id}{', admin' if team.admin else ''}); its token, shown once:",
              file=sys.stderr)
        print(token)
    elif args.action == "revoke":
        team = revoke_team(host.runtime, args.name)
        print(f"revoked team {team.name!r}: its token is refused from now on")
    else:
        for t in list_teams(host.runtime):
            state = f"revoked {t.revoked_at:%Y-%m-%d}" if t.revoked_at else "active"
            print(f"{t.id}\t{t.name}\t{'admin' if t.admin else 'team'}\t{state}\tadded {t.created_at:%Y-%m-%d}")
    return 0


def cmd_submit(args) -> int:
    from aegisbench.service.client import submit
    return submit(args.submission, args.server, wait=args.wait, timeout=args.timeout)


def cmd_hosted_board(args) -> int:
    from aegisbench.service.board import rebuild_revision
    from aegisbench.service.project import HostedProject
    entry, same = rebuild_revision(HostedProject(args.project), args.revision, Path(args.out))
    verdict = {True: "identical to the board published then", False: "DIFFERS from the board published then",
               None: "published together with a later revision, so never shown alone: nothing to compare"}[same]
    print(f"revision {entry['revision']} ({entry['event']} {entry['submission'] or ''}): rebuilt in {args.out}; "
          f"{verdict}")
    return 1 if same is False else 0
