"""Loading INTERLUDE_FLOWS never deadlocks with a thread importing the same module.

``load_flow_modules`` used to import while holding the registry's lock; a thread that was
importing the module at that moment held the module's import lock and waited in ``register``
for the registry's: each waited for the other for ever. The reproduction runs in a
subprocess, so that a deadlock ends in its timeout instead of hanging this test process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SLOW_MODULE = """
import time

from worker import Flow

# The importing thread is inside this module: the test lets the loader start now.
ENTERED.set()
time.sleep(0.5)
flow = Flow("slow-import", version=1)


@flow.step()
def only(ctx):
    return None
"""

SCRIPT = """
import builtins, importlib, sys, threading

entered = threading.Event()
builtins.ENTERED = entered  # the module signals through it
from worker.flows.flow import load_flow_modules, registered_versions

importer = threading.Thread(target=importlib.import_module, args=("slow_flows",), daemon=True)
importer.start()
entered.wait(10)
loader = threading.Thread(target=load_flow_modules, daemon=True)
loader.start()
importer.join(10)
loader.join(10)
if importer.is_alive() or loader.is_alive():
    print("deadlock", flush=True)
    sys.exit(3)
print(registered_versions())
"""


def test_a_thread_importing_a_flow_module_while_it_is_loaded_does_not_deadlock(
    tmp_path: Path,
) -> None:
    # Given a flow module that takes a while to import, named in INTERLUDE_FLOWS
    (tmp_path / "slow_flows.py").write_text(textwrap.dedent(SLOW_MODULE))
    env = {
        **os.environ,
        "INTERLUDE_FLOWS": "slow_flows",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    # When one thread imports it and another loads the flows meanwhile
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    # Then both finish, and the flow is registered once
    assert done.returncode == 0, done.stdout + done.stderr
    assert "('slow-import', 1)" in done.stdout
