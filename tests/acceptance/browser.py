"""Headless Chromium for the browser tests (Debian's ``chromium`` and ``chromium-driver``).

A module that imports this is skipped when they are missing, with the reason, except under
``CI``, where it fails.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

if CHROMIUM is None or CHROMEDRIVER is None:
    reason = (
        "the browser test needs chromium and chromedriver "
        "(apt-get install -y chromium chromium-driver)"
    )
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402


@pytest.fixture()
def new_browser(tmp_path: Path) -> Iterator[Callable[[], WebDriver]]:
    """Fresh headless Chromium sessions (each its own profile), a phone's width."""
    started: list[WebDriver] = []

    def start() -> WebDriver:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / uuid.uuid4().hex}",
            "--window-size=430,1900",
        ):
            options.add_argument(argument)
        driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        driver.implicitly_wait(10)
        started.append(driver)
        return driver

    yield start
    for driver in started:
        driver.quit()
