"""The one exception type of the package."""


class Error(Exception):
    """A ptcfs failure: `code` is a ptc::Code name as the daemon sends it (``not_found``,
    ``invalid_argument``, ``failed_precondition``, ``permission_denied``, ``unavailable``,
    ``deadline_exceeded``, ...), `message` says what failed and names the file, tensor, job
    or step at fault."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def invalid(message: str) -> Error:
    return Error("invalid_argument", message)
