"""``interlude serve``: the resume API and the web inbox in one process (uvicorn)."""

from __future__ import annotations

import argparse

from worker.cli.exits import OK
from worker.cli.output import Output
from worker.cli.parser import Parser, Subparsers, name_text, port, verb


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
    from worker import runlog
    from worker.web.app import create_app

    settings = get_settings()
    if args.host:
        settings = settings.model_copy(update={"web_host": args.host})
    if args.port is not None:
        settings = settings.model_copy(update={"web_port": args.port})
    # interlude's own records (resume outcomes, throttling) next to uvicorn's access log.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    runlog.install()
    app = create_app(settings)
    if out.as_json:
        out.json({"inbox": f"{settings.inbox_url()}/inbox", "docs": f"{settings.inbox_url()}/docs"})
    else:
        out.line(f"interlude serve: {settings.inbox_url()}/inbox (API docs at /docs)")
    uvicorn.run(
        app,
        host=settings.web_host,
        port=settings.web_port,
        log_level="info",
        # uvicorn's own lines (the access log quotes request targets) are escaped too.
        log_config=runlog.escaped_config(LOGGING_CONFIG),
    )
    return OK
