"""The stages' digest reads each function's source as ``inspect.getsource`` reads it
(``core/stage_digest.py`` finds the lines itself, without ``inspect``'s scan of every
loaded module): a decorated function, a method, a nested function and a lambda give the
tokens ``inspect`` gives, so states saved before keep restoring."""

from __future__ import annotations

import functools
import inspect

from datarax.core import stage_digest


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@_decorate
def decorated(x):
    return x + 1  # a comment the digest does not see


class Holder:
    def method(self, x):
        return [v * 2 for v in x]


def outer():
    def nested(x):
        return x - 1
    return nested


def _read(fn) -> str | None:
    code = fn.__code__
    return stage_digest._source(code.co_filename, code)


def test_functions_are_read_as_inspect_reads_them():
    for fn in (decorated.__wrapped__, Holder.method, outer(), outer):
        assert _read(fn) is not None
        assert _read(fn) == stage_digest._tokens(inspect.getsource(fn))


def test_a_lambda_is_read_as_its_expression():
    pick = lambda e: e * 3  # noqa: E731
    assert _read(pick) == "lambda e:\ne\n*\n3"  # its tokens, one a line
