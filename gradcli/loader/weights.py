"""Weight files: the arrays of ``.npy`` files, ``.npz`` archives and ``.safetensors``
files (``safetensors_file.py``) that a graph's leaves name, each file opened once per
loaded graph and each array read once.

Note [Weights read once]: the loader reads every member's header through one
``WeightFiles`` (one zip directory parse per archive, however many leaves name it;
each leaf re-opening the archive and parsing its whole directory was quadratic in
the number of weights). The data is read the first time a run needs it and kept,
read-only, for the graph's life: an uncompressed member (``np.savez``, gradcli's
own export), a ``.npy`` file and a ``.safetensors`` tensor are memory-mapped without a copy; a compressed
member is inflated once. Read-only is what keeps one run from altering the next
(an op that writes into an input, batch norm's running statistics, copies it
first: Note [Copy on write of leaves] in ops/aten/registry.py). The check that the
array is still the one the header promised happens at that first read, with the
messages it always had. A file truncated while a graph maps it is outside the
contract, as with ``numpy.load(mmap_mode="r")`` and ``torch.load(mmap=True)``.
"""
from __future__ import annotations

import io
import mmap
import os
import re
import struct
import threading

import numpy as np

from ..errors import first_line as _first_line
from .safetensors_file import Safetensors

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")   # zipfile's structFileHeader
_LOCAL_MAGIC = b"PK\x03\x04"


class WeightFiles:
    """The weight files of one loaded graph: ``peek`` (shape and dtype, at load) and
    ``array`` (the read-only data, at the first run), each file opened once.

    >>> files = WeightFiles()
    >>> shape, dtype = files.peek("weights.npz", "fc.weight")     # doctest: +SKIP
    >>> w = files.array("weights.npz", "fc.weight")               # doctest: +SKIP
    """

    def __init__(self):
        self._archives = {}      # path -> _Archive (while loading, then on first read)
        self._arrays = {}        # (path, key) -> read-only array
        self._lock = threading.Lock()   # concurrent runs of one graph read a file once

    def peek(self, full, key):
        """Shape and dtype of an array in a .npy/.npz/.safetensors file, without loading it."""
        if key is None:
            with open(full, "rb") as fh:
                return read_npy_header(fh)
        return self._archive(full).header(key)

    def array(self, full, key):
        """The array of a .npy file, or of member ``key`` of an .npz or a .safetensors
        file (the member ``peek`` read the header of), without pickles: read once, then
        shared read-only (Note [Weights read once])."""
        cached = self._arrays.get((full, key))
        if cached is not None:
            return cached
        with self._lock:
            cached = self._arrays.get((full, key))
            return cached if cached is not None else self._read(full, key)

    def _read(self, full, key):
        arr = _map_npy(full) if key is None else self._archive(full, at_load=False).read(key)
        arr.flags.writeable = False
        self._arrays[(full, key)] = arr
        return arr

    def close(self):
        """Close the open archives (their mapped arrays stay valid)."""
        for archive in self._archives.values():
            archive.close()
        self._archives.clear()

    def _archive(self, full, at_load=True):
        """The open archive (or safetensors file) ``full``. At load its headers are read
        in one pass, the file opened by the first leaf that names it; at the first run
        (``at_load=False``) a file replaced since is read again, and refused there if
        it no longer holds what the load checked."""
        archive = self._archives.get(full)
        if archive is not None and not at_load and archive.stamp != _stamp(full):
            archive.close()             # replaced since: its directory is read again
            archive = None
        if archive is None:
            stamp = _stamp(full)
            kind = Safetensors if full.lower().endswith(".safetensors") else _Archive
            archive = self._archives[full] = kind(full)
            archive.stamp = stamp
        return archive


def _stamp(full):
    """What tells a file replaced or rewritten: its inode, size and modification time."""
    try:
        st = os.stat(full)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class _Archive:
    """One open .npz: its zip directory parsed once, members by name."""

    def __init__(self, full):
        self.full = full
        self.zf = _open_npz(full)
        self.counts = {}
        for name in self.zf.namelist():
            self.counts[name] = self.counts.get(name, 0) + 1
        self.map = None

    # Note [One member, checked and loaded]: np.load's NpzFile reads key ``a`` from
    # member ``a`` when there is one and from ``a.npy`` otherwise, so an archive holding
    # both had its header checked on one member and its data loaded from the other
    # (shape and budget checks walked around). Here one function picks the member, for
    # the header at load and for the data at run; a key that could mean two members
    # (``a`` and ``a.npy``, or a name repeated in the zip directory) is refused. Every
    # failure of zipfile on a hostile archive (unsupported compression, encryption, an
    # unknown zip version, patched-data flags, bad CRCs, truncation) is a ValueError
    # with zipfile's own first line.
    def header(self, key):
        """Shape and dtype of member ``key``, from its .npy header."""
        info = self.member(key)
        try:
            with self.zf.open(info) as fh:
                return read_npy_header(fh)
        except (KeyError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - zipfile's many ways to refuse an archive
            raise _zip_error(exc) from None

    def read(self, key):
        """Member ``key``'s array: mapped when stored, else inflated through zipfile."""
        info = self.member(key)
        arr = self.mapped(info)
        if arr is None:
            try:
                with self.zf.open(info) as fh:
                    arr = np.lib.format.read_array(fh, allow_pickle=False)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - zipfile's many ways to refuse an archive
                raise _zip_error(exc) from None
        return arr

    def member(self, key):
        """The ZipInfo of the array ``key`` names."""
        counts = self.counts
        candidates = [key] if key.endswith(".npy") else [key + ".npy", key]
        found = [c for c in candidates if c in counts]
        if not found:
            raise KeyError(key)
        if len(found) > 1:
            raise ValueError(f"ambiguous key {key!r}: the archive holds both {found[1]!r} and "
                             f"{found[0]!r}")
        if counts[found[0]] > 1:
            raise ValueError(f"ambiguous key {key!r}: the archive holds {found[0]!r} "
                             f"{counts[found[0]]} times")
        info = self.zf.getinfo(found[0])
        if info.flag_bits & 0x1:
            raise ValueError(f"member {info.filename!r} is encrypted (not supported)")
        return info

    # Note [Mapping a stored member]: a member the archive stores uncompressed is the
    # bytes of a .npy file at an offset of the archive: its local header (30 bytes,
    # the name, the extra field) comes first. It is mapped only when the local and
    # the central headers agree that it is stored, unencrypted, under the same name,
    # and its .npy header is a plain one whose data fits inside the member; anything
    # else (a compressed member, a patched header) is read through zipfile, which
    # checks it and raises its own error. Mapping skips zipfile's CRC check of the
    # data: a flipped bit in a stored member gives its (wrong) value, as np.load with
    # mmap_mode does for a .npy file.
    def mapped(self, info):
        """The member's array mapped from the archive, or None to read it through zipfile."""
        import zipfile  # noqa: PLC0415

        if (info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1
                or info.compress_size != info.file_size):
            return None
        try:
            if self.map is None:
                with open(self.full, "rb") as fh:
                    self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            mm = self.map
            start = info.header_offset
            head = mm[start:start + _LOCAL_HEADER.size]
            if len(head) != _LOCAL_HEADER.size:
                return None
            fields = _LOCAL_HEADER.unpack(head)
            magic, flags, method, name_len, extra_len = (fields[0], fields[3], fields[4],
                                                         fields[10], fields[11])
            name = mm[start + _LOCAL_HEADER.size:start + _LOCAL_HEADER.size + name_len]
            if (magic != _LOCAL_MAGIC or flags & 0x1 or method != zipfile.ZIP_STORED
                    or name != info.orig_filename.encode("utf-8" if flags & 0x800 else "cp437")):
                return None
            begin = start + _LOCAL_HEADER.size + name_len + extra_len
            end = begin + info.file_size
            if end > len(mm):
                return None
            return _array_at(mm, begin, end)
        except (OSError, ValueError, UnicodeEncodeError, OverflowError):
            return None

    def close(self):
        self.zf.close()
        self.map = None


def _array_at(buffer, begin, end):
    """The .npy file in ``buffer[begin:end]`` as an array over the buffer, or None."""
    if buffer[begin + 6:begin + 8] not in (b"\x01\x00", b"\x02\x00"):
        return None                  # (another version: zipfile and numpy read it)
    fh = io.BytesIO(buffer[begin:min(end, begin + 65536 + 16)])
    try:
        shape, fortran, dtype = _header_fields(fh)
    except Exception:  # noqa: BLE001 - zipfile reads it again and reports it
        return None
    dtype = np.dtype(dtype)
    if dtype.hasobject or not all(isinstance(n, int) and n >= 0 for n in shape):
        return None
    count = 1
    for n in shape:
        count *= n
    offset = begin + fh.tell()
    if offset + count * dtype.itemsize > end:
        return None
    flat = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def _map_npy(full):
    """A .npy file mapped read-only (read whole when it cannot be mapped: an empty array)."""
    try:
        arr = np.load(full, mmap_mode="r", allow_pickle=False)
    except ValueError:
        return np.load(full, allow_pickle=False)   # the error np.load gives, or a 0-byte array
    return arr.view(np.ndarray)       # a plain ndarray over the map: the engine's fast paths


def _open_npz(full):
    import zipfile  # noqa: PLC0415

    try:
        return zipfile.ZipFile(full)
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not a valid .npz archive ({_first_line(exc)})") from None
    except (OSError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - an unknown zip version, a bad directory, ...
        raise _zip_error(exc) from None


def _zip_error(exc):
    return ValueError(f"not a valid .npz archive ({type(exc).__name__}: {_first_line(exc)})")


def read_npy_header(fh):
    """``(shape, dtype)`` from an open .npy stream's header (ValueError if malformed)."""
    try:
        shape, _, dtype = _header_fields(fh)
    except Exception as exc:  # noqa: BLE001 - any malformed header
        raise ValueError(f"not a valid .npy file ({exc})") from None
    return tuple(shape), np.dtype(dtype)


# Note [Canonical npy headers]: numpy writes every .npy header (``np.save``, each
# member of ``np.savez``) in one form, ``{'descr': '<f8', 'fortran_order': False,
# 'shape': (3, 4), }`` padded with spaces to a newline, and its reader parses it with
# ``ast.literal_eval``: two thirds of the load of a graph whose leaves are 2000 small
# arrays of one .npz. A version 1.0 header in exactly that form, with a plain bool,
# int or float dtype, is read by the pattern below; any other header (another
# version, another dtype, another spelling, a malformed one) goes to numpy's reader,
# which accepts and refuses what it always did, with its own messages.
_CANONICAL = re.compile(rb"\{'descr': '([<>|][biuf][1248])', 'fortran_order': (False|True), "
                        rb"'shape': \(((?:[0-9]+, )*(?:[0-9]+,?)?)\), \} *\n")


def _header_fields(fh):
    """``(shape, fortran_order, dtype)`` of the .npy stream ``fh``, read past its header
    (Note [Canonical npy headers]); numpy's exceptions for a malformed one."""
    head = fh.read(10)
    text = b""
    if len(head) == 10 and head[:8] == b"\x93NUMPY\x01\x00":
        text = fh.read(int.from_bytes(head[8:], "little"))
        found = _CANONICAL.fullmatch(text)
        if found is not None:
            descr, fortran, dims = found.groups()
            return (tuple(int(d) for d in dims.split(b",") if d.strip()), fortran == b"True",
                    np.dtype(descr.decode("ascii")))
    rest = _Rest(head + text, fh)
    fmt = np.lib.format
    if fmt.read_magic(rest) == (1, 0):
        return fmt.read_array_header_1_0(rest)
    return fmt.read_array_header_2_0(rest)


class _Rest:
    """What was read of a stream, then the stream: for numpy's reader after a look."""

    def __init__(self, read, fh):
        self.buffer = read
        self.fh = fh

    def read(self, n=-1):
        if n is None or n < 0:
            out, self.buffer = self.buffer + self.fh.read(), b""
            return out
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out + self.fh.read(n - len(out)) if len(out) < n else out
