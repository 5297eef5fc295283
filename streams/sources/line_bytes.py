"""Which text encodings let a source split its lines as bytes, before decoding them.

``from_textfile`` and ``from_stdin`` find each line's end in the bytes they
read (a line's byte count is the offset a checkpoint keeps), and decode the
line after. That is right only where the delimiter's bytes stand for the
delimiter alone. They do in UTF-8 (no character's bytes hold another's) and
in an encoding of one byte a character (latin-1, cp1252); in another, for
a delimiter whose bytes no other character writes, nor a shift escape (a
newline in EUC-JP, Shift_JIS, ISO-2022-JP). They do not in UTF-16 and
UTF-32, nor for a delimiter whose byte a character's second byte may be
(``|`` in Shift_JIS, Big5, GBK, GB18030: "ポ" is ``b"\\x83|"`` in Shift_JIS;
in ISO-2022-JP, Japanese text is ASCII bytes between escapes).
"""

from __future__ import annotations

import codecs
import functools

from ..sinks.basic import check_encoding

__all__ = ["delimiter_bytes"]


def delimiter_bytes(op: str, delimiter: str, encoding: str) -> bytes:
    """The bytes that end a line in ``encoding``, without a byte-order mark.

    Raises a ValueError naming ``op`` for an encoding whose lines cannot be
    split as bytes (see the module's text).

    Examples
    --------
    >>> delimiter_bytes("from_textfile", "\\n", "utf-8-sig"), delimiter_bytes("f", "§", "utf-8")
    (b'\\n', b'\\xc2\\xa7')
    >>> delimiter_bytes("from_textfile", "\\r\\n", "latin-1"), delimiter_bytes("f", "|", "euc_jp")
    (b'\\r\\n', b'|')
    >>> delimiter_bytes("from_textfile", "\\n", "shift_jis")
    b'\\n'
    >>> delimiter_bytes("from_textfile", "|", "shift_jis")
    Traceback (most recent call last):
    ...
    ValueError: from_textfile(): encoding 'shift_jis' may write the delimiter's bytes inside ...
    >>> delimiter_bytes("from_stdin", "\\n", "utf-16")
    Traceback (most recent call last):
    ...
    ValueError: from_stdin(): encoding 'utf-16' writes each character in several bytes, ...
    """
    check_encoding(op, encoding)  # an unknown name: a LookupError naming nothing
    bom = "".encode(encoding)  # utf-8-sig's, utf-16's: at the start of the file only
    if "\n x".encode(encoding)[len(bom):] != b"\n x":
        raise ValueError(
            f"{op}(): encoding {encoding!r} writes each character in several bytes, so its "
            f"lines cannot be split as bytes; {_convert(encoding)}")
    if not _split_safe(delimiter, codecs.lookup(encoding).name):
        raise ValueError(
            f"{op}(): encoding {encoding!r} may write the delimiter's bytes inside another "
            f"character (or between shift escapes), so its lines cannot be split as bytes; "
            f"{_convert(encoding)}")
    return delimiter.encode(encoding)[len(bom):]


def _convert(encoding: str) -> str:
    return (f"convert the input to UTF-8 (iconv -f {encoding} -t utf-8), or read it "
            "yourself and emit its lines")


@functools.lru_cache(maxsize=64)
def _split_safe(delimiter: str, codec: str) -> bool:
    """Whether ``delimiter``'s bytes in ``codec`` (a codec's own name) mark it alone."""
    if codec in ("utf-8", "utf-8-sig"):
        return True  # self-synchronising: no character's bytes hold another's
    written = _sample().encode(codec, errors="ignore")  # what the codec can write of it
    if len(written) == len(written.decode(codec, errors="ignore")):
        return True  # one byte a character (ascii: none written)
    # Else where no other character, nor a shift escape, writes the delimiter's bytes.
    return not set(delimiter.encode(codec)) & set(written)


@functools.cache
def _sample() -> str:
    """Characters that show an encoding's bytes: every one of the Basic Multilingual
    Plane above ASCII (surrogates aside), and some beyond it."""
    return "".join(map(chr, [*range(0x80, 0xD800), *range(0xE000, 0x10000),
                             0x10000, 0x1F600, 0x20000, 0x2A6D6]))
