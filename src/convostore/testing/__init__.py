"""The contract suite, runnable against any backend by URL (needs the ``testing`` extra).

Every backend passes the same tests, in `convostore.testing.contract`; they decide what to
run from ``store.capabilities`` only. To run them on a backend of yours, write a conftest
in an (otherwise empty) test directory, as this project's ``tests/contract/conftest.py``
does: name your backends and known divergences, and collect the suite there
(`convostore.testing.fixtures` explains each piece). The fixtures a test asks for:

- ``backend``: the backend and the URL of this test's fresh database;
- ``connect_store(**options)``: opens stores on that database, all closed at teardown;
- ``store``, ``indexed_store``: one store, the second indexing ``tenant`` and ``topic``.

`convostore.testing.helpers` holds the users, writes and walks the tests share.
"""
