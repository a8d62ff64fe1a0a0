"""Hot statements run through libpq's prepared-statement call, past psycopg's cursor layer.

``schedule()`` of a new task is one ``INSERT``, and the library's own work around it is a small
part of the client's time: psycopg's execution of a statement (a cursor, the query converted,
each parameter dumped, the result waited for by its generator-driven wait loop) costs the
client more than the insert costs the server. :class:`Statement` sends one fixed statement by
name (``PQsendQueryPrepared``) and waits for its result with psycopg's own wait
(``Connection.wait`` of its ``execute`` generator, compiled in psycopg's C implementation): the
waiting is psycopg's, so Ctrl-C cancels the query as it does for ``execute``, at about half of
``execute``'s client CPU (``benchmarks/bench_pg_insert.py``, the ``schedule`` and ``row-due``
variants).

* The statement is prepared on a connection the first time it runs there (once per
  connection: the name is remembered per connection object, and prepared again if the server
  no longer knows it).
* Parameters go as psycopg would send them, by type: ``None`` as ``NULL``; ``int`` and
  ``float`` as text (the server's types are the statement's columns or casts); ``str`` in the
  binary format, its bytes in the connection's encoding exactly, so a NUL character is refused
  by the server (text-format parameters would be cut at it).
* Errors are psycopg's: an error result raises the exception psycopg raises for its SQLSTATE,
  and a connection lost meanwhile raises ``psycopg.OperationalError``, as a retry expects.

It serves statements run in autocommit mode whose parameters are the store's encoded values;
anything else goes through psycopg's ``Connection.execute``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import cast

import psycopg
from psycopg import errors as pgerrors
from psycopg import pq
from psycopg.generators import execute

from timewheel.stores.postgres.connections import Conn

__all__ = ["Statement"]

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


class Statement:
    """One statement (``%s`` placeholders, no literal ``%``), run by name on any connection.

    Args:
        name: the name it is prepared under (unique among the store's statements; psycopg's own
            prepared statements are named ``_pg3_...``).
        text: the statement.
    """

    def __init__(self, name: str, text: str) -> None:
        if "%%" in text:
            raise ValueError("a prepared statement's text has no literal %")
        pieces = text.split("%s")
        last = len(pieces) - 1
        self.name = name.encode()
        self.text = "".join(
            piece + (f"${k + 1}" if k < last else "") for k, piece in enumerate(pieces)
        ).encode()
        self._prepared_on: weakref.WeakSet[Conn] = weakref.WeakSet()

    def run(self, conn: Conn, params: Sequence[object]) -> pq.abc.PGresult:
        """Run on *conn* (in autocommit mode) with *params*; the result (``get_value(row,
        column)`` gives a value's text as ``bytes``, ``command_tuples`` the rows changed).

        Raises:
            psycopg.Error: as ``conn.execute`` raises it.
        """
        encoding = conn.info.encoding
        values: list[bytes | None] = []
        formats: list[pq.Format] = []
        text, binary = pq.Format.TEXT, pq.Format.BINARY
        for value in params:
            if isinstance(value, str):
                values.append(value.encode(encoding))
                formats.append(binary)
            elif value is None:
                values.append(None)
                formats.append(text)
            elif type(value) is int or type(value) is float:  # (a bool is refused)
                values.append(repr(value).encode())
                formats.append(text)
            else:
                raise TypeError(f"a prepared statement's parameter is {type(value).__name__}")
        if conn not in self._prepared_on:
            self._prepare(conn)
        # (libpq takes None for NULL, as psycopg passes it; the stub's type says bytes only)
        sent = cast("list[bytes]", values)
        result = self._send(conn, sent, formats)
        if result.status in _OK:
            return result
        error = self._error(conn, result)
        if not isinstance(error, pgerrors.InvalidSqlStatementName):
            raise error
        # the session lost it (a DISCARD ALL, say): prepare it again, once
        self._prepare(conn)
        result = self._send(conn, sent, formats)
        if result.status in _OK:
            return result
        raise self._error(conn, result)

    def _send(self, conn: Conn, values: list[bytes], formats: list[pq.Format]) -> pq.abc.PGresult:
        conn.pgconn.send_query_prepared(self.name, values, formats)
        results: list[pq.abc.PGresult] = conn.wait(execute(conn.pgconn))
        return results[-1]

    def _prepare(self, conn: Conn) -> None:
        conn.pgconn.send_prepare(self.name, self.text)
        results: list[pq.abc.PGresult] = conn.wait(execute(conn.pgconn))
        result = results[-1]
        if result.status != pq.ExecStatus.COMMAND_OK:
            error = self._error(conn, result)
            if not isinstance(error, pgerrors.DuplicatePreparedStatement):
                raise error
        self._prepared_on.add(conn)

    @staticmethod
    def _error(conn: Conn, result: pq.abc.PGresult) -> psycopg.Error:
        if conn.pgconn.status != pq.ConnStatus.OK:
            message = conn.pgconn.get_error_message() or "the connection was lost"
            return psycopg.OperationalError(message)
        return pgerrors.error_from_result(result, encoding=conn.info.encoding)
