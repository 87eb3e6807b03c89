"""User-facing errors. Anything a person can cause (bad file, bad folder, bad option) raises
`UserError` with one line that says what went wrong and what to do; the CLI prints it and the
worker turns it into `JobFailed`. Any other exception is a bug: logged in full, shown briefly."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix. `str(exc)` is the whole message, one line."""
