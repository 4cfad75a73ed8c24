"""``interlude serve``: the resume API and the web inbox in one process (uvicorn)."""

from __future__ import annotations

import argparse
import socket
from typing import TYPE_CHECKING

from worker.cli.exits import FAILURE, OK, CliError
from worker.cli.output import Output
from worker.cli.parser import Parser, Subparsers, name_text, port, verb

if TYPE_CHECKING:
    from fastapi import FastAPI

    from models.settings import Settings


def register(sub: Subparsers, common: Parser) -> None:
    parser = verb(
        sub,
        "serve",
        _serve,
        "serve the JSON resume API and the web inbox (OpenAPI at /docs)",
        common,
        description=(
            "Serve the JSON resume API (/v1, OpenAPI at /docs) and the web inbox (/inbox)\n"
            "over the resume gateway. Host and port default to INTERLUDE_WEB_HOST and\n"
            "INTERLUDE_WEB_PORT (127.0.0.1:8000)."
        ),
    )
    parser.add_argument(
        "--host", type=name_text, help="address to bind (default: INTERLUDE_WEB_HOST)"
    )
    parser.add_argument("--port", type=port, help="port to bind (default: INTERLUDE_WEB_PORT)")


def _serve(args: argparse.Namespace, out: Output) -> int:
    # FastAPI and uvicorn load here only, so that every other verb starts fast.
    import logging

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from models.settings import get_settings
    from worker.ops import runlog
    from worker.web.protocol import head_deadline_protocol

    settings = get_settings()
    if args.host:
        settings = settings.model_copy(update={"web_host": args.host})
    if args.port is not None:
        settings = settings.model_copy(update={"web_port": args.port})
    host = settings.web_host
    where = f"[{host}]:{settings.web_port}" if ":" in host else f"{host}:{settings.web_port}"
    try:
        listening = bound_sockets(host, settings.web_port)
    except OSError as exc:
        raise CliError(f"cannot serve on {where}: {exc.strerror or exc}", FAILURE) from None
    # interlude's own records (resume outcomes, throttling) next to uvicorn's access log.
    # (force: the command's stderr handler, at WARNING, would keep them out.)
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s", force=True
    )
    runlog.install()
    app = app_to_serve(settings)
    if out.as_json:
        out.json({"inbox": f"{settings.inbox_url()}/inbox", "docs": f"{settings.inbox_url()}/docs"})
    else:
        out.line(f"interlude serve: {settings.inbox_url()}/inbox (API docs at /docs)")
    config = uvicorn.Config(
        app,
        host=settings.web_host,
        port=settings.web_port,
        log_level="info",
        # uvicorn's own lines (the access log quotes request targets) are escaped too.
        log_config=runlog.escaped_config(LOGGING_CONFIG),
        # h11 (uvicorn's own) with a deadline on request heads: see worker.web.protocol.
        http=head_deadline_protocol(settings.web_head_seconds),
    )
    try:
        uvicorn.Server(config).run(sockets=listening)
    except KeyboardInterrupt:
        return OK  # Ctrl-C is how a foreground server is meant to stop
    except SystemExit as exc:
        # uvicorn exits 3 when the application fails to start; 3 is "not found" here.
        if exc.code in (None, 0):
            return OK
        raise CliError(f"cannot serve on {where}: the application did not start", FAILURE) from None
    finally:
        for sock in listening:
            sock.close()
    return OK


def app_to_serve(settings: Settings) -> FastAPI:
    """The application, with the process's start-up objects then frozen out of full garbage
    collections (``worker.engine.heap``), as a worker's are: a full collection walks every
    object while it holds the GIL. The 126,000 objects FastAPI, SQLAlchemy, Celery and the
    flows leave took 73 to 77 ms to walk on the 2-core bench machine, during which no request,
    no answer, moved; with them frozen, a full collection walks what requests left alive."""
    from worker.engine.heap import freeze_startup_heap
    from worker.web.asgi import create_app

    app = create_app(settings)
    freeze_startup_heap()
    return app


def bound_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address ``host`` names, as uvicorn (asyncio) would bind them.

    Bound here, before uvicorn starts, so that a port in use or a host that does not resolve
    is one OSError to report in one line, not uvicorn's log lines and its exit status 3.
    """
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    listening: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            listening.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # An IPv6 socket would take the IPv4 port too, which its own socket binds.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError:
        for sock in listening:
            sock.close()
        raise
    return listening
