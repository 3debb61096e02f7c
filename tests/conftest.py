import os
import sys
import tempfile

import pytest

# `branchc serve --http` keeps runs in $BRANCHC_STATE_DIR/runs.db by default: the test servers (subprocesses
# inherit this) use a folder of this session's, never the user's ~/.local/state/branchc
os.environ.setdefault("BRANCHC_STATE_DIR", tempfile.mkdtemp(prefix="branchc-state-"))


@pytest.fixture(scope="module")
def state_key_in_env():
    """`branchc serve` and `branchc runs` subprocesses (which inherit it) seal and open the stores with the
    tests' state key (_bridge_support.KEY); a module asks for it with `pytest.mark.usefixtures`."""
    from _bridge_support import KEY

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BRANCHC_STATE_KEY", KEY)
        yield


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server of this module's, on a free loopback port (the test skips without one)."""
    from _redis_support import REDIS_SERVER, SKIP_REASON, RedisServer

    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL of this session's, on a free loopback port (the test skips without one): tests share
    it, each in a schema of its own (`?schema=`), as Redis's tests each use a key prefix of their own."""
    from _postgres_support import BIN, SKIP_REASON, PostgresServer

    if BIN is None:
        pytest.skip(SKIP_REASON)
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`@pytest.mark.anyio`) run on asyncio."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _workflow_modules_of_this_test_only():
    """A workflow's generated module is imported under `workflow_<path>`: a test that loads a copy of a
    workflow from a folder of its own would leave its module in the way of the next test's copy. Each test
    gets back the workflow modules it found."""
    before = {name: module for name, module in sys.modules.items() if name.startswith("workflow_")}
    yield
    for name in [name for name in sys.modules if name.startswith("workflow_") and name not in before]:
        del sys.modules[name]
    sys.modules.update(before)
