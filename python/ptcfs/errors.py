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

    def __reduce__(self):  # pickled whole (DCP sends a rank's failure to the others)
        return (type(self), (self.code, self.message))


def invalid(message: str) -> Error:
    return Error("invalid_argument", message)


# errno -> code, for a failed file operation on the mount (which maps the daemon's codes to these).
_ERRNO_CODES = {"ENOENT": "not_found", "EINVAL": "invalid_argument", "EBUSY": "failed_precondition",
                "EEXIST": "already_exists", "EACCES": "permission_denied", "EPERM": "permission_denied",
                "EROFS": "permission_denied", "ENOSPC": "resource_exhausted", "EIO": "io_error",
                "ETIMEDOUT": "deadline_exceeded", "EHOSTUNREACH": "unavailable"}


def from_os_error(e: OSError, where: str) -> Error:
    """An OSError of a file operation as the package's one error, naming the file."""
    import errno
    import os
    name = errno.errorcode.get(e.errno or 0, "")
    return Error(_ERRNO_CODES.get(name, "io_error"), f"{where}: {os.strerror(e.errno) if e.errno else e}")
