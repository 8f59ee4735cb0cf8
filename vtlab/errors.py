"""One exception type for user-facing errors: the entry point prints its message as one line and exits 2."""


class VtlabError(Exception):
    """A problem with the user's input (file, line, config key) or environment (missing asset, offline hub)."""


class DataError(VtlabError):
    """Malformed data: the message names file:line and the missing or bad field."""


class AssetError(VtlabError):
    """An offline asset or hub model that cannot be found or loaded."""
