"""Avro binary primitives for the codec's fast path: the exact bytes fastavro writes, and readers
that never read past the end of a buffer or allocate more than it holds.

Generated encoders and decoders (:mod:`engine.contract.avro_codegen`) call these by name. Writers
return ``bytes`` and raise on any value they are not sure to write exactly as fastavro's
``schemaless_writer`` would (:class:`Unsupported`; the codec then retries on fastavro itself, which
either writes it or says precisely what is wrong). Readers take ``(raw, pos)`` and return ``(value, pos)``;
they raise :class:`MalformedError` for bytes no valid encoding holds, :class:`TruncatedError` for a count
that the bytes left cannot hold, and may raise anything else (:class:`Unsupported`, an IndexError past the
end, a short struct) for what the codec then hands to fastavro to explain.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from engine.errors import MalformedError as MalformedError  # its name here too: the compiled readers raise it
from engine.errors import TruncatedError


class Unsupported(Exception):
    """What the compiled codec does not serve — a schema feature it does not compile, a value it does not write
    exactly as fastavro would, an encoding it does not read — so the codec takes the fastavro path for it.

    A control-flow signal inside ``engine.contract``, never an error a caller sees: the codec catches it
    where it falls back, so it sits outside the error tree (like ``Cancelled``)."""

Writer = Callable[[Any], bytes]

ONE_BYTE = tuple(bytes((z,)) for z in range(128))  # varint bytes of zigzag values 0..127
_MIN_LONG, _MAX_LONG = -(1 << 63), (1 << 63) - 1
_MASK64 = (1 << 64) - 1
_MAX_VARINT = 10  # bytes in a 64-bit varint
_CACHE_LIMIT = 4096  # entries in each timestamp cache (cleared when full)

pack_double = struct.Struct("<d").pack
pack_float = struct.Struct("<f").pack
_unpack_double = struct.Struct("<d").unpack_from
_unpack_float = struct.Struct("<f").unpack_from


# --- writing -------------------------------------------------------------------------------------


def _spreaders() -> tuple[Callable[[int], bytes], ...]:
    """One unrolled varint writer per encoded length (1..10 bytes): no loop per 7-bit group."""
    found: list[Callable[[int], bytes]] = [ONE_BYTE.__getitem__]
    for size in range(2, _MAX_VARINT + 1):
        groups = [f"z >> {7 * i} & 127 | 128" for i in range(size - 1)] + [f"z >> {7 * (size - 1)}"]
        namespace: dict[str, Any] = {}
        exec(f"def spread(z): return bytes(({', '.join(groups)},))", namespace)  # noqa: S102 - fixed template
        found.append(namespace["spread"])
    return tuple(found)


_SPREAD = _spreaders()
_HIGH_BYTES: dict[int, bytes] = {}  # bits 21..55 of a value -> bytes 3..7 of its 8-byte varint


def _write_eight(z: int) -> bytes:
    """The 8-byte varint of ``z`` (2**49 <= z < 2**56): its last five bytes from a small cache."""
    tail = _HIGH_BYTES.get(z >> 21)
    if tail is None:
        if len(_HIGH_BYTES) >= _CACHE_LIMIT:
            _HIGH_BYTES.clear()
        tail = _HIGH_BYTES[z >> 21] = _SPREAD[7](z)[3:]
    return bytes((z & 0x7F | 0x80, z >> 7 & 0x7F | 0x80, z >> 14 & 0x7F | 0x80)) + tail


def write_long(n: int) -> bytes:
    """An Avro int or long: zigzag varint. Raises on values fastavro would not write this way."""
    z = (n << 1) ^ (n >> 63)  # TypeError for anything but an int (fastavro truncates floats)
    if not z >> 7:  # 0 <= z < 128: n in [-64, 63]
        return ONE_BYTE[z]
    if not _MIN_LONG <= n <= _MAX_LONG:
        raise Unsupported(f"{n} does not fit an Avro long")  # fastavro says so in its words
    if z >> 49 and not z >> 56:  # a timestamp in microseconds, these decades
        return _write_eight(z)
    return _SPREAD[(z.bit_length() + 6) // 7 - 1](z)


def write_string(s: str) -> bytes:
    """An Avro string: length, then UTF-8 bytes (AttributeError for anything but a str)."""
    data = s.encode()
    size = len(data)
    return (ONE_BYTE[size << 1] if size < 64 else write_long(size)) + data


def write_bytes(b: bytes) -> bytes:
    """Avro bytes: length, then the bytes (exactly ``bytes``; other buffers go to fastavro)."""
    if type(b) is not bytes:
        raise Unsupported(f"fast path writes bytes only, not {type(b).__name__}")
    size = len(b)
    return (ONE_BYTE[size << 1] if size < 64 else write_long(size)) + b


def map_writer(write_value: Writer) -> Writer:
    """An Avro map writer: one block with every entry (as fastavro writes it), then 0."""

    def write_map(d: Any) -> bytes:
        if not d:
            return b"\x00"
        parts = [write_long(len(d))]
        for key, value in d.items():
            parts.append(write_string(key))
            parts.append(write_value(value))
        parts.append(b"\x00")
        return b"".join(parts)

    return write_map


# --- reading -------------------------------------------------------------------------------------

ZIGZAG = tuple((b >> 1) ^ -(b & 1) if b < 0x80 else None for b in range(256))  # one-byte varints


def _varint_tail_reader() -> Callable[[bytes, int, int], tuple[int, int]]:
    """``read_varint_tail``, unrolled: one step per continuation byte, no loop or shift counter."""
    lines = ["def read_varint_tail(raw, pos, first):", "    value = first & 127"]
    for i in range(1, _MAX_VARINT):
        lines += [f"    byte = raw[pos + {i - 1}]", f"    value |= (byte & 127) << {7 * i}",
                  f"    if byte < 128: return value & {_MASK64}, pos + {i}"]
    lines.append('    raise MalformedError("varint longer than 10 bytes")')
    namespace: dict[str, Any] = {"MalformedError": MalformedError}
    exec("\n".join(lines), namespace)  # noqa: S102 - fixed template
    return namespace["read_varint_tail"]  # type: ignore[no-any-return]


_read_varint_tail = _varint_tail_reader()
_HIGH_VALUES: dict[bytes, int] = {}  # bytes 3..7 of an 8-byte varint -> its value's bits 21..55



def read_long(raw: bytes, pos: int) -> tuple[int, int]:
    """The Avro int or long at ``pos``, and where it ends.

    Today's timestamps in microseconds are 8-byte varints whose last five bytes change about once
    a second: their high bits come from a small cache, keyed by these five bytes. A hit is only
    possible when they are those of a valid 8-byte varint and bytes 0 to 2 continue it.
    """
    first = raw[pos]
    if not first & 0x80:
        return ZIGZAG[first], pos + 1  # type: ignore[return-value]
    key = raw[pos + 3:pos + 8]
    high = _HIGH_VALUES.get(key)
    if high is not None and raw[pos + 1] & raw[pos + 2] & 0x80:
        z = high | (raw[pos + 2] & 0x7F) << 14 | (raw[pos + 1] & 0x7F) << 7 | first & 0x7F
        return (z >> 1) ^ -(z & 1), pos + 8
    z, end = _read_varint_tail(raw, pos + 1, first)
    if end - pos == 8:
        if len(_HIGH_VALUES) >= _CACHE_LIMIT:
            _HIGH_VALUES.clear()
        _HIGH_VALUES[key] = z & ~0x1FFFFF
    return (z >> 1) ^ -(z & 1), end


def read_span(raw: bytes, pos: int) -> tuple[int, int]:
    """Where the bytes or string whose length prefix is at ``pos`` start and end."""
    length, start = read_long(raw, pos)
    if length < 0:
        raise MalformedError(f"negative length {length}")
    return start, start + length


def read_double(raw: bytes, pos: int) -> tuple[float, int]:
    """An Avro double (8 bytes, little-endian); struct.error if fewer are left."""
    return _unpack_double(raw, pos)[0], pos + 8


def read_float(raw: bytes, pos: int) -> tuple[float, int]:
    """An Avro float (4 bytes, little-endian); struct.error if fewer are left."""
    return _unpack_float(raw, pos)[0], pos + 4


def bad_count(count: int, left: int) -> None:
    """Raise for a block of more entries than the ``left`` bytes can hold (each takes one or more)."""
    raise TruncatedError(f"block of {count} entries but only {left} bytes left")


def bad_branch(index_byte: int) -> None:
    """Raise for a union index byte that names no branch.

    A first byte with the high bit set may still be a (non-minimal) varint of a valid index: that
    is left to fastavro (:class:`Unsupported`); any other byte cannot be a valid index.
    """
    if index_byte & 0x80:
        raise Unsupported("a union index longer than one byte")
    raise MalformedError(f"union index {ZIGZAG[index_byte]} names no branch")
