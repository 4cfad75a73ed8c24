"""Flower, as ``celery -A worker flower`` starts it: on this machine only unless told
otherwise, and never without a login.

Flower's pages show every task's arguments and the workers; by default it listens on every
interface and asks for a login only on its ``/api``. Started with interlude's app, it listens
on 127.0.0.1 unless ``--address`` (``FLOWER_ADDRESS``) names another, and refuses to start
without ``--basic-auth`` (``FLOWER_BASIC_AUTH``) or ``--auth`` (OAuth). Its options are read
by tornado after the app is loaded; the check runs when they are.
"""

from __future__ import annotations

import os
import sys

LOOPBACK = "127.0.0.1"
NO_LOGIN = (
    "Flower shows task arguments and workers to whoever reaches it: give it a login "
    "(FLOWER_BASIC_AUTH=user:password or --basic-auth; or --auth with OAuth)"
)


def is_flower_command() -> bool:
    """Whether this process is ``celery ... flower``."""
    return "flower" in sys.argv[1:]


def guard_flower() -> None:
    """Check Flower's options once they are parsed (tornado's parse callbacks)."""
    from tornado.options import options

    deferred: list[bool] = []

    def checked() -> None:
        if not options.address:
            options.address = LOOPBACK
        if options.basic_auth or options.auth:
            return
        # Flower parses its command line, then its configuration file (if there is one) and
        # the command line again: a login set in that file is known only the second time.
        if not deferred and os.path.exists(os.path.abspath(options.conf)):
            deferred.append(True)
            return
        raise SystemExit(f"interlude: error: {NO_LOGIN}")

    options.add_parse_callback(checked)
