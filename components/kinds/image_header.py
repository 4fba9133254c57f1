"""An encoded image's header and end, read without decoding the pixels: the format (by the
signatures TFDV's image statistics use), height, width, channels, and whether the file is
whole (JPEG: an end-of-image marker; PNG: the IEND chunk; GIF: the trailer byte; BMP: as
long as its header says). What ingest checks on every image, and what the image
statistics (format, height and width distributions) are made of."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

# The formats tf.io.decode_image reads, by their first bytes (TFDV's image_stats_generator).
SIGNATURES = (("png", b"\x89PNG\r\n\x1a\n"), ("jpeg", b"\xff\xd8\xff"), ("gif", b"GIF8"), ("bmp", b"BM"))
FORMATS = tuple(name for name, _ in SIGNATURES)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}  # by IHDR colour type
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


class NotAnImage(ValueError):
    """Why bytes are not a whole image of a supported format (one phrase)."""


@dataclass(frozen=True)
class ImageHeader:
    format: str
    height: int
    width: int
    channels: int

    @property
    def pixels(self) -> int:
        return self.height * self.width


def image_format(data: bytes) -> Optional[str]:
    return next((name for name, signature in SIGNATURES if data.startswith(signature)), None)


def read_header(data: bytes) -> ImageHeader:
    """The header of a whole image; NotAnImage says what is wrong (empty, not an image,
    cut short)."""
    if not data:
        raise NotAnImage("is empty (0 bytes)")
    fmt = image_format(data)
    if fmt is None:
        raise NotAnImage(f"is not a JPEG, PNG, GIF or BMP image (it starts with {data[:8]!r})")
    try:
        header = _READERS[fmt](data)
    except (struct.error, IndexError):
        raise NotAnImage(f"is a {fmt.upper()} file cut short in its header") from None
    if header.height <= 0 or header.width <= 0:
        raise NotAnImage(f"is a {fmt.upper()} image of {header.width}x{header.height} pixels")
    return header


def _png(data: bytes) -> ImageHeader:
    if data[12:16] != b"IHDR":
        raise NotAnImage("is a PNG file without its IHDR header")
    width, height, _, colour = struct.unpack(">IIBB", data[16:26])
    if data.rstrip(b"\0")[-8:-4] != b"IEND":
        raise NotAnImage("is a PNG image cut short (no IEND chunk at its end)")
    return ImageHeader("png", height, width, _PNG_CHANNELS.get(colour, 3))


def _jpeg(data: bytes) -> ImageHeader:
    i, found = 2, None
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise NotAnImage("is a JPEG file whose markers are corrupt")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if marker in _JPEG_SOF:
            height, width, components = struct.unpack(">HHB", data[i + 5:i + 10])
            found = ImageHeader("jpeg", height, width, components)
            break
        if marker == 0xDA:  # start of scan before any frame header
            break
        i += 2 + length
    if found is None:
        raise NotAnImage("is a JPEG file without a frame header")
    if b"\xff\xd9" not in data[-64:]:
        raise NotAnImage("is a JPEG image cut short (no end-of-image marker)")
    return found


def _gif(data: bytes) -> ImageHeader:
    width, height = struct.unpack("<HH", data[6:10])
    if data.rstrip(b"\0")[-1:] != b"\x3b":
        raise NotAnImage("is a GIF image cut short (no trailer at its end)")
    return ImageHeader("gif", height, width, 3)


def _bmp(data: bytes) -> ImageHeader:
    size = struct.unpack("<I", data[2:6])[0]
    width, height = struct.unpack("<ii", data[18:26])
    bits = struct.unpack("<H", data[28:30])[0]
    if len(data) < size:
        raise NotAnImage(f"is a BMP image cut short ({len(data)} of its {size} bytes)")
    return ImageHeader("bmp", abs(height), width, 4 if bits == 32 else (1 if bits <= 8 else 3))


_READERS = {"png": _png, "jpeg": _jpeg, "gif": _gif, "bmp": _bmp}
