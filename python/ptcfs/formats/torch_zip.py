"""The zip archive of a torch checkpoint, read so that no member costs more memory than the file holds.

torch (1.6 and later) writes ``<name>/data.pkl`` (the pickle), ``<name>/data/<key>`` (one member per
storage, its raw bytes), ``<name>/version`` and, since 2.1, ``<name>/byteorder``, every member stored
uncompressed. So a member that is compressed, that claims more bytes than the archive has, whose name
leaves the archive's folder (``..``, an absolute path) or appears twice, is not torch's doing and is
refused before it is read: a deflated 1 GiB member in a 1 MB file would otherwise be inflated in full.
The members together hold at most the archive's size, so reading all of them costs at most that.
Storage members are read straight into one buffer each (no second copy) and their CRC-32 is checked.
"""

from __future__ import annotations

import io
import os
import re
import struct
import zipfile
import zlib
from typing import Dict, Optional

from ..errors import invalid

MAX_PICKLE_BYTES = 64 << 20      # data.pkl: Megatron's pickles are KBs to a few MB (docs/FORMATS.md)
MAX_DIRECTORY_BYTES = 8 << 20    # the central directory: ~100k members of torch's names (~500 B each parsed)

_LOCAL_HEADER = struct.Struct(zipfile.structFileHeader)
_KEY = re.compile(r"^[A-Za-z0-9_]+$")


class _Window(io.RawIOBase):
    """Bytes [offset, offset + length) of an open file, as a file of its own (seek, tell, read):
    one torch.save archive among others in a DCP .distcp file."""

    def __init__(self, f, offset: int, length: int):
        super().__init__()
        self._f, self._base, self._len, self._pos = f, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._len}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b) -> int:
        n = max(0, min(len(b), self._len - self._pos))
        if n == 0:
            return 0
        self._f.seek(self._base + self._pos)
        got = self._f.readinto(memoryview(b)[:n])
        self._pos += got
        return got

    def close(self) -> None:
        self._f.close()
        super().close()


class TorchZip:
    """An open torch zip archive whose members have been checked; close() (or `with`) when done.
    With `offset` and `length`, the archive is those bytes of the file (a DCP item); `path` then
    names it in errors as PATH[offset:offset+length]."""

    def __init__(self, path: str, offset: int = 0, length: Optional[int] = None):
        f = open(path, "rb")
        if length is None:
            self.path, self._size, self._f = path, os.fstat(f.fileno()).st_size, f
        else:
            self.path, self._size = f"{path}[{offset}:{offset + length}]", length
            self._f = io.BufferedReader(_Window(f, offset, length))
        try:
            self._check()
        except zipfile.BadZipFile as e:
            self._f.close()
            raise invalid(f"{path}: not a torch checkpoint (a damaged or truncated zip: {e})") from None
        except BaseException:
            self._f.close()
            raise

    def __enter__(self) -> "TorchZip":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def _check(self) -> None:
        size = self._size
        end = zipfile._EndRecData(self._f)  # the end record alone, before zipfile parses the directory
        if end is None:
            raise invalid(f"{self.path}: not a torch checkpoint (not a zip archive; files of torch < 1.6 are not read)")
        if end[zipfile._ECD_SIZE] > MAX_DIRECTORY_BYTES:
            raise invalid(f"{self.path}: a zip directory of {end[zipfile._ECD_SIZE]} bytes (more than "
                          f"{MAX_DIRECTORY_BYTES}; torch writes ~80 bytes per tensor)")
        with zipfile.ZipFile(self._f) as z:  # (leaves the file open: it was passed in)
            infos = z.infolist()
        if not infos:
            raise invalid(f"{self.path}: not a torch checkpoint (an empty zip)")
        prefix = infos[0].filename.split("/", 1)[0] + "/"
        members: Dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            name = info.filename
            parts = name.split("/")
            if not name.startswith(prefix) or ".." in parts or "" in parts[1:-1] or "\\" in name:
                raise invalid(f"{self.path}: zip member '{name[:200]}' is outside the archive's folder "
                              f"'{prefix}' (torch writes every member under one folder)")
            if name in members:
                raise invalid(f"{self.path}: zip member '{name[:200]}' appears twice")
            if info.compress_type != zipfile.ZIP_STORED:
                raise invalid(f"{self.path}: zip member '{name}' is compressed (method {info.compress_type}); "
                              "torch stores every member uncompressed")
            if info.flag_bits & 0x1:
                raise invalid(f"{self.path}: zip member '{name}' is encrypted")
            total += info.file_size
            if info.file_size != info.compress_size or total > size:
                raise invalid(f"{self.path}: zip member '{name}' claims {info.file_size} bytes; the members "
                              f"up to it claim {total}, more than the file's {size}")
            members[name] = info
        self.prefix, self._members = prefix, members
        if prefix + "data.pkl" not in members:
            raise invalid(f"{self.path}: not a torch checkpoint (no {prefix}data.pkl in the zip)")
        order = self.read_small("byteorder", 16)
        if order is not None and order.strip() != b"little":
            raise invalid(f"{self.path}: storages in {order.strip()[:16]!r} byte order (only little-endian is read)")

    def member(self, rel: str) -> Optional[zipfile.ZipInfo]:
        return self._members.get(self.prefix + rel)

    def read_small(self, rel: str, limit: int) -> Optional[bytes]:
        """A member under the archive's folder, at most `limit` bytes; None when absent."""
        info = self.member(rel)
        if info is None:
            return None
        if info.file_size > limit:
            raise invalid(f"{self.path}: zip member '{info.filename}' is {info.file_size} bytes "
                          f"(at most {limit} are read)")
        return bytes(self.read(info))

    def storage_member(self, key: str) -> Optional[zipfile.ZipInfo]:
        """The member of storage `key` (data/<key>; torch's keys are numbers), or None."""
        return self.member("data/" + key) if _KEY.match(key) else None

    def read(self, info: zipfile.ZipInfo) -> bytearray:
        """A member's bytes, in one buffer of its size."""
        buf = bytearray(info.file_size)
        self._read_into(info, buf)
        return buf

    def _read_into(self, info: zipfile.ZipInfo, buf: bytearray) -> None:
        where = f"{self.path}: zip member '{info.filename}'"
        self._f.seek(info.header_offset)
        head = self._f.read(_LOCAL_HEADER.size)
        if len(head) != _LOCAL_HEADER.size or head[:4] != zipfile.stringFileHeader:
            raise invalid(f"{where}: no local header at offset {info.header_offset}")
        fields = _LOCAL_HEADER.unpack(head)
        name = self._f.read(fields[zipfile._FH_FILENAME_LENGTH])
        if name.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace") != info.filename:
            raise invalid(f"{where}: the local header names '{name[:200]!r}'")
        self._f.seek(fields[zipfile._FH_EXTRA_FIELD_LENGTH], os.SEEK_CUR)
        got = self._f.readinto(memoryview(buf)) if buf else 0
        if got != len(buf):
            raise invalid(f"{where}: truncated ({got} of {len(buf)} bytes in the file)")
        if zlib.crc32(buf) != info.CRC:
            raise invalid(f"{where}: damaged (CRC-32 mismatch)")
