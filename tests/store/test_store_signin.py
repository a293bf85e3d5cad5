"""The sign-in-limit port (:class:`~docgraph.store.signin.SignInLimitStore`) on both backends
that hold an index's rows: the embedded SQLite file and PostgreSQL (through each backend's
:class:`~docgraph.store.ports.StorePorts`, as ``docgraph serve`` opens it). Two ports over
one database stand for two server processes: they share every bucket, and concurrent
attempts never take more tokens than a bucket holds."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from docgraph.config import StoreSettings
from docgraph.errors import StoreError
from docgraph.store.ports import StorePorts, open_ports
from docgraph.store.signin import SignInLimitStore
from tests import store_backends
from tests.pg import pgvector_server  # noqa: F401  (fixture used by the postgres backend)
from tests.store_backends import Backend

backend = store_backends.product_backend


@pytest.fixture
def two(backend: Backend) -> Iterator[tuple[StorePorts, StorePorts]]:
    """Two servers' ports over the one database."""
    settings = StoreSettings.model_validate(backend.store_settings())
    first, second = open_ports(settings), open_ports(settings)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def test_a_bucket_refills_takes_and_answers_in_one_step(two):
    store = two[0].signin_limits
    new = store.take("10.0.0.1", 100.0, 2, 0.1)
    assert (new.wait, new.previous_wait, new.previous_at, new.succeeded_at) == (0, 0, None, None)
    second = store.take("10.0.0.1", 101.0, 2, 0.1)
    assert second.wait == 0 and second.previous_at == 100.0
    empty = store.take("10.0.0.1", 102.0, 2, 0.1)  # 0.2 tokens refilled: 8 s to wait
    assert empty.wait == pytest.approx(8.0) and empty.previous_wait == 0
    still = store.take("10.0.0.1", 103.0, 2, 0.1)  # a refused attempt took nothing
    assert still.wait == pytest.approx(7.0) and still.previous_wait == pytest.approx(8.0)
    assert store.take("10.0.0.2", 103.0, 2, 0.1).wait == 0  # another key, another bucket
    assert store.take("10.0.0.1", 110.0, 2, 0.1).wait == 0  # a whole token again
    store.succeeded("10.0.0.1", 111.0)
    after = store.take("10.0.0.1", 112.0, 2, 0.1)
    assert after.succeeded_at == 111.0 and after.previous_at == 110.0
    store.succeeded("never-seen", 112.0)  # a no-op


def test_two_servers_share_a_bucket_and_never_overspend_it(two):
    first, second = (ports.signin_limits for ports in two)
    for _ in range(3):
        assert first.take("10.0.0.9", 100.0, 6, 1e-6).wait == 0
    assert second.take("10.0.0.9", 100.0, 6, 1e-6).wait == 0  # the other server's 4th
    waits: list[float] = []
    lock = threading.Lock()

    def attempts(store: SignInLimitStore) -> None:
        for _ in range(5):
            wait = store.take("10.0.0.9", 100.0, 6, 1e-6).wait
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=attempts, args=(s,)) for s in (first, second) * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(waits) == 30 and waits.count(0) == 2  # 6 in all, 4 taken before


def test_prune_deletes_only_buckets_that_tell_nothing(two):
    store = two[0].signin_limits
    store.take("idle-full", 100.0, 2, 1.0)
    store.take("busy", 100.0, 2, 1e-6)  # far from full for a long time
    store.take("recent", 990.0, 2, 1.0)
    store.take("signed-in", 100.0, 2, 1.0)
    store.succeeded("signed-in", 100.0)
    assert store.prune(idle_before=900.0, now=1000.0, succeeded_before=50.0) == 1
    assert store.take("busy", 1000.0, 2, 1e-6).previous_at == 100.0  # kept
    assert store.take("signed-in", 1000.0, 2, 1.0).succeeded_at == 100.0  # kept
    assert store.take("idle-full", 1000.0, 2, 1.0).previous_at is None  # gone: new again
    assert store.prune(idle_before=2000.0, now=9e9, succeeded_before=200.0) == 4


@pytest.mark.parametrize("key", ["", "x" * 201])
def test_a_key_out_of_bounds_is_refused_by_name(two, key):
    with pytest.raises(StoreError, match="sign-in bucket key"):
        two[0].signin_limits.take(key, 1.0, 2, 1.0)
