import os
import tempfile

import pytest

# `branchc serve --http` keeps runs in $BRANCHC_STATE_DIR/runs.db by default: the test servers (subprocesses
# inherit this) use a folder of this session's, never the user's ~/.local/state/branchc
os.environ.setdefault("BRANCHC_STATE_DIR", tempfile.mkdtemp(prefix="branchc-state-"))


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`@pytest.mark.anyio`) run on asyncio."""
    return "asyncio"
