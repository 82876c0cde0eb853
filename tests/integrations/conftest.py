"""The adapters run on every backend through the contract suite's fixtures.

A test module whose framework is not installed is left out on a laptop (install the
extras with scripts/setup.sh); under ``CI=true`` it is collected and its import fails
the run, so CI can never pass by leaving a framework out.
"""

import importlib.util

from tests.contract.conftest import (
    backend,
    connect_store,
    falkordb_server,
    in_ci,
    postgresql_server,
    store,
)

__all__ = ["backend", "connect_store", "falkordb_server", "postgresql_server", "store"]

_FRAMEWORK_OF = {
    "test_openai_agents.py": "agents",
    "test_adk.py": "google.adk",
    "test_langchain.py": "langchain_core",
    "test_langgraph.py": "langgraph.checkpoint.conformance",
    "test_importers.py": "langchain_community",
}


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


collect_ignore = [
    name for name, module in _FRAMEWORK_OF.items() if not in_ci() and _missing(module)
]
