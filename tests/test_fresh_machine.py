"""What a machine with only Python and ``make`` (the README's promise) gets.

``make run`` indexes the sample corpus there: without Tesseract the scanned page is listed as
skipped with its reason and everything else is indexed, exit 0. A test that needs a missing
system program skips naming it, and ``DOCGRAPH_REQUIRE_SERVICES=1`` (CI, which installs
them all) turns any skip, one raised in a test's body included, into a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLE_CORPUS
from tests.programs import SAMPLE_SCAN

WITHOUT = REPO / ".ci" / "without-programs"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")}
    return env | extra


def test_the_sample_corpus_indexes_without_tesseract_and_names_the_skipped_scan(tmp_path):
    done = subprocess.run(
        [str(WITHOUT), "tesseract", "--", sys.executable, "-m", "docgraph.serve.cli",
         "--index", str(tmp_path / "demo.db"), "index", str(SAMPLE_CORPUS),
         "--namespace", "demo"],
        capture_output=True, text=True, timeout=600,
        env=_env(DOCGRAPH_EMBED__MODEL="hashing", DOCGRAPH_CONFIG=str(tmp_path / "none.toml")))
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    files = sum(1 for p in SAMPLE_CORPUS.rglob("*") if p.is_file())
    assert f"{files - 1} added" in out and "1 failed" in out, out
    assert SAMPLE_SCAN.rsplit("/", 1)[1] in out and "no text layer" in out, out
    assert "tesseract" in out.lower(), out


def _pytest(tests: Path, require: bool) -> subprocess.CompletedProcess[str]:
    env = _env(**({"DOCGRAPH_REQUIRE_SERVICES": "1"} if require else {}))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(REPO), "-c", str(REPO / "pyproject.toml"), str(tests)],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO)


def test_a_skip_fails_under_require_services_wherever_it_is_raised(tmp_path):
    """The module's own skips in a test body, a function fixture and a skipif mark (the
    conftest hook once missed the first two: the isolated-config fixture had already removed
    DOCGRAPH_REQUIRE_SERVICES when they were reported)."""
    tests = REPO / "tests" / f"test_zz_skips_{os.getpid()}.py"
    tests.write_text(
        "import pytest\n\n"
        "@pytest.fixture\n"
        "def server():\n"
        "    pytest.skip('needs the frobnicator program')\n\n"
        "def test_in_body():\n"
        "    pytest.skip('needs the frobnicator program')\n\n"
        "def test_in_fixture(server):\n"
        "    pass\n\n"
        "@pytest.mark.skipif(True, reason='needs the frobnicator program')\n"
        "def test_by_mark():\n"
        "    pass\n", encoding="utf-8")
    try:
        relaxed = _pytest(tests, require=False)
        required = _pytest(tests, require=True)
    finally:
        tests.unlink()
    assert relaxed.returncode == 0 and "3 skipped" in relaxed.stdout, relaxed.stdout
    # a skip in the call fails the test; one in its set-up reports an error: both exit 1
    assert required.returncode == 1 and "1 failed, 2 errors" in required.stdout, \
        required.stdout
    assert "skipped" not in required.stdout.splitlines()[-1]
