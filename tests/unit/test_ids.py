"""UUIDv7 ids: canonical, version 7, time-ordered, strictly increasing in a process."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
import uuid

import pytest

import convostore.ids
from convostore.ids import is_uuid7, new_id, random_hex, uuid7_time_ms

CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def strictly_increasing(values: list[str]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


def test_new_id_is_a_canonical_lowercase_uuid7() -> None:
    for _ in range(1000):
        value = new_id()
        assert CANONICAL.fullmatch(value), value
        parsed = uuid.UUID(value)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == value
        assert is_uuid7(value)


def test_new_id_carries_the_current_unix_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    value = new_id()
    after = time.time_ns() // 1_000_000
    assert before <= uuid7_time_ms(value) <= after


def test_ids_made_later_carry_later_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # A clock set forward by hand: the later id carries the later millisecond exactly.
    # The generator's memory of the last id is restored afterwards, so the clock set
    # ahead here moves no later test's ids.
    now_ms = time.time_ns() // 1_000_000 + 1_000
    monkeypatch.setattr("convostore.ids.time.time_ns", lambda: now_ms * 1_000_000)
    monkeypatch.setattr(convostore.ids, "_last_ms", convostore.ids._last_ms)
    monkeypatch.setattr(convostore.ids, "_last_random", convostore.ids._last_random)
    first = new_id()
    now_ms += 3
    second = new_id()
    assert uuid7_time_ms(first) == now_ms - 3
    assert uuid7_time_ms(second) == now_ms
    assert second > first


def test_100k_ids_in_a_tight_loop_strictly_increase() -> None:
    values = [new_id() for _ in range(100_000)]
    assert strictly_increasing(values)
    integers = [uuid.UUID(v).int for v in values]
    assert all(a < b for a, b in itertools.pairwise(integers))
    assert len(set(values)) == len(values)


def test_ids_strictly_increase_across_threads() -> None:
    threads_count, per_thread = 4, 25_000
    start = threading.Barrier(threads_count)
    results: list[list[str]] = [[] for _ in range(threads_count)]

    def make(index: int) -> None:
        start.wait()
        results[index] = [new_id() for _ in range(per_thread)]

    before = new_id()
    threads = [threading.Thread(target=make, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = new_id()
    for values in results:
        assert len(values) == per_thread
        assert strictly_increasing(values)
    everything = [v for values in results for v in values]
    assert len(set(everything)) == threads_count * per_thread
    assert before < min(everything)
    assert max(everything) < after


def test_ids_keep_increasing_when_the_clock_goes_backwards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time_ns()
    clock = iter([now, now - 5_000_000_000, now - 10_000_000_000, now, now + 1_000_000])
    monkeypatch.setattr("convostore.ids.time.time_ns", lambda: next(clock))
    values = [new_id() for _ in range(5)]
    assert strictly_increasing(values)


def test_ids_in_one_frozen_millisecond_increase(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = (time.time_ns() // 1_000_000 + 10) * 1_000_000
    monkeypatch.setattr("convostore.ids.time.time_ns", lambda: frozen)
    values = [new_id() for _ in range(10_000)]
    assert strictly_increasing(values)
    assert {uuid7_time_ms(v) for v in values} == {frozen // 1_000_000}


def test_overflowing_a_millisecond_borrows_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen_ms = time.time_ns() // 1_000_000 + 10
    monkeypatch.setattr("convostore.ids.time.time_ns", lambda: frozen_ms * 1_000_000)
    monkeypatch.setattr(convostore.ids, "_last_ms", frozen_ms)
    monkeypatch.setattr(convostore.ids, "_last_random", (1 << 74) - 2)
    first = new_id()
    second = new_id()
    assert uuid7_time_ms(first) == frozen_ms + 1
    assert second > first
    assert is_uuid7(first)
    assert is_uuid7(second)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not an id",
        # Named: a random value's id would differ between xdist's workers' collections.
        pytest.param(str(uuid.uuid4()), id="uuid4"),
        pytest.param(str(uuid.uuid1()), id="uuid1"),
        "0190f0a8-7c1e-7abc-8def-0123456789ab".upper(),
        "0190f0a87c1e7abc8def0123456789ab",
        "{0190f0a8-7c1e-7abc-8def-0123456789ab}",
        "urn:uuid:0190f0a8-7c1e-7abc-8def-0123456789ab",
        None,
        42,
    ],
)
def test_is_uuid7_refuses_other_values(value: object) -> None:
    assert is_uuid7(value) is False  # type: ignore[arg-type]


def test_is_uuid7_accepts_a_canonical_value() -> None:
    assert is_uuid7("0190f0a8-7c1e-7abc-8def-0123456789ab")


def test_uuid7_time_ms_reads_the_first_48_bits() -> None:
    ms = 0x0190F0A87C1E
    value = str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0b10 << 62)))
    assert uuid7_time_ms(value) == ms


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_draws_other_random_bytes_than_its_parent() -> None:
    # Random bits are read from the OS in blocks: a child must not reuse the unread
    # part of its parent's block, or both would make the same stamps and ids.
    random_hex(1)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its draws and leave at once
        os.close(read_end)
        os.write(write_end, " ".join([random_hex(8), new_id()]).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child_stamp, child_id = pipe.read().split()
    os.waitpid(pid, 0)
    stamp, made = random_hex(8), new_id()
    assert child_stamp != stamp
    assert child_id[14:] != made[14:]  # the random part, after the time
