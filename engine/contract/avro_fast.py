"""Avro binary primitives for the codec's fast path: the exact bytes fastavro writes, and readers
that never read past the end of a buffer or allocate more than it holds.

Generated encoders and decoders (:mod:`engine.contract.avro_codegen`) call these by name. Writers
return ``bytes`` and raise on any value they are not sure to write exactly as fastavro's
``schemaless_writer`` would (the codec then retries on fastavro itself, which either writes it or
says precisely what is wrong). Readers take ``(raw, pos, size)`` and return ``(value, pos)``;
they raise :class:`EOFError` (or :class:`IndexError`) when the input ends early and
:class:`ValueError` when it cannot be a valid encoding (bad length, varint longer than 10 bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

Writer = Callable[[Any], bytes]
Reader = Callable[[bytes, int, int], tuple[Any, int]]

ONE_BYTE = tuple(bytes((z,)) for z in range(128))  # varint bytes of zigzag values 0..127
_MIN_LONG, _MAX_LONG = -(1 << 63), (1 << 63) - 1
_MASK64 = (1 << 64) - 1
_MAX_VARINT = 10  # bytes in a 64-bit varint

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


def write_long(n: int) -> bytes:
    """An Avro int or long: zigzag varint. Raises on values fastavro would not write this way."""
    z = (n << 1) ^ (n >> 63)  # TypeError for anything but an int (fastavro truncates floats)
    if not z >> 7:  # 0 <= z < 128: n in [-64, 63]
        return ONE_BYTE[z]
    if not _MIN_LONG <= n <= _MAX_LONG:
        raise OverflowError(f"{n} does not fit an Avro long")
    return _SPREAD[(z.bit_length() + 6) // 7 - 1](z)


def write_string(s: str) -> bytes:
    """An Avro string: length, then UTF-8 bytes (AttributeError for anything but a str)."""
    data = s.encode()
    size = len(data)
    return (ONE_BYTE[size << 1] if size < 64 else write_long(size)) + data


def write_bytes(b: bytes) -> bytes:
    """Avro bytes: length, then the bytes (exactly ``bytes``; other buffers go to fastavro)."""
    if type(b) is not bytes:
        raise TypeError(f"fast path writes bytes only, not {type(b).__name__}")
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


def _varint_tail_reader() -> Callable[[bytes, int, int], tuple[int, int]]:
    """``read_varint_tail``, unrolled: one step per continuation byte, no loop or shift counter."""
    lines = ["def read_varint_tail(raw, pos, first):",
             '    """The unsigned value of a varint whose first byte (high bit set) was ``first``."""',
             "    value = first & 127"]
    for i in range(1, _MAX_VARINT):
        lines += [f"    byte = raw[pos + {i - 1}]", f"    value |= (byte & 127) << {7 * i}",
                  f"    if byte < 128: return value & {_MASK64}, pos + {i}"]
    lines.append('    raise ValueError("varint longer than 10 bytes")')
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # noqa: S102 - fixed template
    return namespace["read_varint_tail"]  # type: ignore[no-any-return]


read_varint_tail = _varint_tail_reader()


def read_size_tail(raw: bytes, pos: int, first: int) -> tuple[int, int]:
    """A length prefix whose first byte was ``first`` (negative or longer than one byte)."""
    z, pos = read_varint_tail(raw, pos, first) if first & 0x80 else (first, pos)
    if z & 1:
        raise ValueError(f"negative length {(z >> 1) ^ -1}")
    return z >> 1, pos


def read_long(raw: bytes, pos: int, size: int) -> tuple[int, int]:
    """An Avro int or long at ``pos``."""
    z = raw[pos]
    pos += 1
    if z & 0x80:
        z, pos = read_varint_tail(raw, pos, z)
    return (z >> 1) ^ -(z & 1), pos


def bad_length(length: int, left: int) -> None:
    """Raise for a length prefix longer than the ``left`` bytes that remain."""
    raise EOFError(f"length {length} but only {left} bytes left")


def bad_count(count: int, left: int) -> None:
    """Raise for a block of more entries than the ``left`` bytes can hold (each takes one or more)."""
    raise EOFError(f"block of {count} entries but only {left} bytes left")


def read_bytes(raw: bytes, pos: int, size: int) -> tuple[bytes, int]:
    """Avro bytes at ``pos``."""
    length, pos = read_size_tail(raw, pos + 1, raw[pos])
    end = pos + length
    if end > size:
        bad_length(length, size - pos)
    return raw[pos:end], end


def read_string(raw: bytes, pos: int, size: int) -> tuple[str, int]:
    """An Avro string at ``pos`` (UnicodeDecodeError, a ValueError, for bad UTF-8)."""
    data, pos = read_bytes(raw, pos, size)
    return data.decode(), pos


def read_boolean(raw: bytes, pos: int, size: int) -> tuple[bool, int]:
    """An Avro boolean: any byte but 0 is true, as fastavro reads it."""
    return raw[pos] != 0, pos + 1


def read_double(raw: bytes, pos: int, size: int) -> tuple[float, int]:
    """An Avro double (8 bytes, little-endian)."""
    if pos + 8 > size:
        raise EOFError("double: fewer than 8 bytes left")
    return _unpack_double(raw, pos)[0], pos + 8


def read_float(raw: bytes, pos: int, size: int) -> tuple[float, int]:
    """An Avro float (4 bytes, little-endian)."""
    if pos + 4 > size:
        raise EOFError("float: fewer than 4 bytes left")
    return _unpack_float(raw, pos)[0], pos + 4


def read_null(raw: bytes, pos: int, size: int) -> tuple[None, int]:
    """Avro null: no bytes."""
    return None, pos


def map_reader(read_value: Reader) -> Reader:
    """An Avro map reader: blocks of entries until a 0 count (negative counts carry a byte size)."""

    def read_map(raw: bytes, pos: int, size: int) -> tuple[dict[str, Any], int]:
        result: dict[str, Any] = {}
        count, pos = read_long(raw, pos, size)
        while count:
            if count < 0:
                count = -count
                _, pos = read_long(raw, pos, size)  # the block's size in bytes: not needed
            if count > size - pos:  # every entry takes at least one byte: refuse before looping
                raise EOFError(f"map block of {count} entries but only {size - pos} bytes left")
            for _ in range(count):
                key, pos = read_string(raw, pos, size)
                result[key], pos = read_value(raw, pos, size)
            count, pos = read_long(raw, pos, size)
        return result, pos

    return read_map


def bad_branch(index: int, branches: int) -> None:
    """Raise for a union index outside the union."""
    raise ValueError(f"union index {index} is not one of the {branches} branches")
