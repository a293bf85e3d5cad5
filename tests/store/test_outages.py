"""Which errors mean the store is unreachable (503, retry) and which do not (the request
or the data is wrong): the driver's real exception classes, as psycopg raises them."""

from __future__ import annotations

import pytest

from docgraph.errors import StoreError, StoreUnavailable
from docgraph.store.outages import store_unavailable

psycopg = pytest.importorskip("psycopg")


def raised_from(cause: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:
        return caught


@pytest.mark.parametrize("error", [
    psycopg.OperationalError("connection failed: Connection refused"),  # no SQLSTATE
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    psycopg.errors.CannotConnectNow("the database system is starting up"),
    psycopg.errors.TooManyConnections("sorry, too many clients already"),
    psycopg.errors.ConnectionFailure("connection failure"),
])
def test_connection_failures_are_outages(error: BaseException):
    outage = store_unavailable(error)
    assert isinstance(outage, StoreUnavailable) and isinstance(outage, StoreError)
    assert type(error).__name__ in str(outage) and outage.__cause__ is error


def test_an_outage_is_found_under_the_errors_that_wrap_it():
    wrapped = raised_from(psycopg.errors.AdminShutdown("terminating"),
                          StoreError("cannot read the refresh leader"))
    assert store_unavailable(wrapped) is not None
    assert store_unavailable(ExceptionGroup("tasks", [ValueError("x"), wrapped])) is not None
    deliberate = StoreUnavailable("cannot connect to PostgreSQL at db:5432")
    assert store_unavailable(deliberate) is deliberate


@pytest.mark.parametrize("error", [
    psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    psycopg.errors.LockNotAvailable("could not obtain lock"),
    psycopg.errors.UndefinedTable("relation does not exist"),
    psycopg.errors.UniqueViolation("duplicate key"),
    StoreError("query vector has shape (3,), the index 384"),
    ValueError("not a store error at all"),
])
def test_errors_a_retry_would_not_cure_are_not_outages(error: BaseException):
    assert store_unavailable(error) is None
