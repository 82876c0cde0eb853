"""The divergence registry of `convostore.testing`: a known failure is strict-xfail on its
backend only, a fixed one fails the run, and a failure other than the known one is
never hidden behind it (in the test or in its fixtures, as a broken migration is)."""

from __future__ import annotations

import pytest

pytest_plugins = ("pytester",)

CONFTEST = """
import pytest
from convostore.testing.fixtures import Divergence, mark_divergences

DIVERGENCES = [
    Divergence("b", "test_x.py::test_known", "fails as known", KeyError),
    Divergence("b", "test_x.py::test_another_failure", "fails as known", KeyError),
    Divergence("b", "test_x.py::test_broken_fixture", "fails as known", KeyError),
    Divergence("b", "test_x.py::test_fixed", "fails as known", KeyError),
    Divergence("b", "test_x.py::test_any_failure", "fails somehow"),
]

def pytest_collection_modifyitems(config, items):
    mark_divergences(items, DIVERGENCES)

@pytest.fixture
def broken(backend):
    if backend == "b":
        raise ValueError("the database could not be migrated")
"""

TESTS = """
import pytest

on_each = pytest.mark.parametrize("backend", ["a", "b"])

@on_each
def test_known(backend):
    if backend == "b":
        raise KeyError("the known failure")

@on_each
def test_another_failure(backend):
    if backend == "b":
        raise ValueError("a second breakage")

@on_each
def test_broken_fixture(backend, broken):
    pass

@on_each
def test_fixed(backend):
    pass

@on_each
def test_any_failure(backend):
    if backend == "b":
        raise ValueError("whatever it raises")
"""


def test_a_divergence_hides_its_own_failure_and_no_other(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_x=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=5, xfailed=2, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "XFAIL test_x.py::test_known[[]b[]]*",
            "XFAIL test_x.py::test_any_failure[[]b[]]*",
            "ERROR test_x.py::test_broken_fixture[[]b[]]*",
            "FAILED test_x.py::test_another_failure[[]b[]]*",
            "FAILED test_x.py::test_fixed[[]b[]]*",
        ],
        consecutive=False,
    )
