"""The adapters run on every backend implementation through the contract suite's fixtures
(`tests.conftest.SAME_CODE`: a backend id that runs another's code runs the contract
alone).

A test module whose framework is not installed is left out on a laptop (install the
extras with scripts/setup.sh); under ``CI=true`` it is collected and its import fails
the run, so CI can never pass by leaving a framework out.
"""

import importlib.util

from convostore.testing.fixtures import OnServer
from tests.contract import conftest as contract

backend = contract.backend
connect_store = contract.connect_store
store = contract.store

# Each backend's session-wide server fixture, whichever backends the suite runs on.
for _entry in contract.BACKENDS.values():
    if isinstance(_entry, OnServer):
        globals()[_entry.server] = getattr(contract, _entry.server)

_FRAMEWORK_OF = {
    "test_openai_agents.py": "agents",
    "test_adk.py": "google.adk",
    "adk_conformance": "google.adk",
    "test_strands.py": "strands",
    "strands_suite": "strands",
    "test_langchain.py": "langchain_core",
    "test_langgraph.py": "langgraph.checkpoint.conformance",
    "test_importers.py": "langchain_community",
    "test_llama_index.py": "llama_index.core",
    "test_agent_framework.py": "agent_framework",
    "test_pydantic_ai.py": "pydantic_ai",
}


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


collect_ignore = [
    name for name, module in _FRAMEWORK_OF.items() if not contract.in_ci() and _missing(module)
]
