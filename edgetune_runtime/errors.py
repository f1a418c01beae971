"""Errors of the on-device loader (kept apart from edgetune's tree: the board has no edgetune)."""


class LoaderError(Exception):
    """A package cannot be loaded or run; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint


class PackageMismatchError(LoaderError):
    """The package was built for another architecture, runtime or package format."""


class InputError(LoaderError):
    """Inputs do not match the manifest (name, count, shape or dtype)."""
