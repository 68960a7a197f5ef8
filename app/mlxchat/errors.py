"""The one error family. Ground floor: imports nothing of the project.

Every layer raises a subclass of ``MlxchatError`` whose message is one line
for the user; anything else reaching the top is a bug and keeps its traceback.
"""

from __future__ import annotations


class MlxchatError(Exception):
    """Something the user can act on; ``str(exc)`` is the one line they see."""

    def user_text(self) -> str:
        return " ".join(str(self).split()) or type(self).__name__


class UserError(MlxchatError):
    """Bad input on the command line: printed as one line, exit status 1."""

    exit_status = 1


class UsageError(UserError):
    """A command given wrongly (a flag's value, flags that conflict): one line,
    exit status 2, as argparse's own refusals."""

    exit_status = 2


def os_error_text(exc: OSError) -> str:
    """One line for an OSError: what failed and on which file."""
    if exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return exc.strerror or " ".join(str(exc).split()) or type(exc).__name__


def user_message(exc: BaseException) -> str | None:
    """The one-line message for an expected error, or None for a real bug."""
    if isinstance(exc, MlxchatError):
        return exc.user_text()
    if isinstance(exc, OSError):  # a missing file, a full disk, a permission
        return os_error_text(exc)
    return None
