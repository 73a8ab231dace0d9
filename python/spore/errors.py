"""spore's errors: every failure of the engine is a spore.Error carrying the engine's error code.

The subclasses also derive from the built-in exception a Python user would catch for that kind of mistake
(ValueError for bad arguments and shapes, TypeError for dtypes, MemoryError, OSError, KeyError for unknown names),
so ``except ValueError`` works as it does with NumPy.
"""


class Error(Exception):
    """Base class of spore's errors; ``code`` names the engine's error code ("shape_mismatch", ...)."""

    code = "internal"


class InvalidArgumentError(Error, ValueError):
    code = "invalid_argument"


class ShapeMismatchError(Error, ValueError):
    code = "shape_mismatch"


class DTypeMismatchError(Error, TypeError):
    code = "dtype_mismatch"


class UnsupportedError(Error, NotImplementedError):
    code = "unsupported"


class OutOfMemoryError(Error, MemoryError):
    code = "out_of_memory"


class ParseError(Error, ValueError):
    code = "parse_error"


class IOError(Error, OSError):  # noqa: A001 - spore.IOError, as the engine names it
    code = "io_error"


class NotFoundError(Error, KeyError):
    code = "not_found"

    def __str__(self):  # KeyError would quote the message
        return Exception.__str__(self)


class UnavailableError(Error, RuntimeError):
    code = "unavailable"


class InternalError(Error, RuntimeError):
    code = "internal"


def _by_code():
    classes = [InvalidArgumentError, ShapeMismatchError, DTypeMismatchError, UnsupportedError, OutOfMemoryError,
               ParseError, IOError, NotFoundError, UnavailableError, InternalError]
    table = {c.code: c for c in classes}
    table[""] = Error
    return table
