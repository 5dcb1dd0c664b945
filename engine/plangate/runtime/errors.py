"""The runtime's one error type: a run cannot go on (or a command on it cannot be done) for a
reason a person must read. `JournalError` (the journal cannot be opened, read or written) is a
kind of it, so an embedding catches every runtime failure as a `RunError`."""


class RunError(Exception):
    """The run cannot go on for a reason a person must read (shown without a traceback)."""
