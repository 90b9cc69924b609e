#!/usr/bin/env python3
"""Writes the image fixtures of data/image_decode_test.cc and
data/image_folder_test.cc, and what Pillow makes of them (expected.txt).

  cd data/testdata/images && /usr/bin/python3 make_fixtures.py

Needs Pillow 9.4 and NumPy (Debian 12's python3-pil and python3-numpy, whose
Pillow decodes JPEG with the same libjpeg-turbo as traind). The images are
tiny (a few hundred bytes each) and written once; the tests read them from
the source tree.

The PNG files Pillow cannot write (16-bit RGB, 16-bit and 2-bit gray, a gAMA
chunk, Adam7 interlacing) are written here chunk by chunk.

expected.txt holds one line per check, the pixels in hex, HWC order:

  decode FILE CHANNELS HEIGHT WIDTH HEX
      Image.open(FILE).convert("RGB" or "L")
  resize FILE CHANNELS HEIGHT WIDTH HEX
      the same, then .resize((WIDTH, HEIGHT), Image.BILINEAR)

One line is not Pillow's: Pillow 9.4 opens a 16-bit grayscale PNG as mode
"I" and convert() clips its values to 255 (a white image); traind keeps the
high byte of each sample, as Pillow does for 16-bit RGB, and the line for
gray16.png says so.
"""

import io
import struct
import zlib

import numpy as np
from PIL import Image

rng = np.random.RandomState(20240607)


def smooth(h, w, c):
    """A gradient with noise: something for JPEG to keep and resizing to mix."""
    y, x = np.mgrid[0:h, 0:w]
    planes = []
    for k in range(c):
        base = 40 + 170 * ((x * (k + 1) + y * (3 - k)) % (w + h)) / (w + h)
        planes.append(base + rng.randint(-30, 31, size=(h, w)))
    return np.clip(np.stack(planes, axis=-1), 0, 255).astype(np.uint8)


def chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png(width, height, depth, color_type, rows, extra=b"", interlaced=False):
    """A PNG of `rows` (each a bytes of packed samples), filter 0."""
    if interlaced:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                  (1, 0, 2, 2), (0, 1, 1, 2)]
        bpp = {(8, 2): 3, (8, 0): 1}[(depth, color_type)]
        raw = b""
        for x0, y0, dx, dy in passes:
            for y in range(y0, height, dy):
                if x0 >= width:
                    continue
                raw += b"\0" + b"".join(rows[y][x * bpp:(x + 1) * bpp]
                                        for x in range(x0, width, dx))
    else:
        raw = b"".join(b"\0" + r for r in rows)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 1 if interlaced else 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def save(name, data):
    with open(name, "wb") as f:
        f.write(data)


def pillow_bytes(im, **kwargs):
    out = io.BytesIO()
    im.save(out, **kwargs)
    return out.getvalue()


# 8-bit PNGs through Pillow's own writer.
rgb = smooth(7, 11, 3)
save("rgb.png", pillow_bytes(Image.fromarray(rgb, "RGB"), format="PNG"))
save("gray.png", pillow_bytes(Image.fromarray(smooth(5, 9, 1)[:, :, 0], "L"), format="PNG"))
# A 20x24 gray image to shrink by up to 4.8x (a filter 9 pixels wide).
save("wide.png", pillow_bytes(Image.fromarray(smooth(20, 24, 1)[:, :, 0], "L"), format="PNG"))
palette = Image.fromarray(rng.randint(0, 6, size=(6, 8)).astype(np.uint8), "P")
palette.putpalette([255, 0, 0, 0, 200, 0, 10, 20, 250, 250, 250, 250, 0, 0, 0, 128, 64, 32])
save("palette.png", pillow_bytes(palette, format="PNG", transparency=3))  # a tRNS chunk
rgba = np.concatenate([smooth(5, 7, 3), rng.randint(0, 256, size=(5, 7, 1)).astype(np.uint8)], 2)
save("rgba.png", pillow_bytes(Image.fromarray(rgba, "RGBA"), format="PNG"))
la = np.concatenate([smooth(4, 5, 1), rng.randint(0, 256, size=(4, 5, 1)).astype(np.uint8)], 2)
save("la.png", pillow_bytes(Image.fromarray(la, "LA"), format="PNG"))

# PNGs written chunk by chunk. 16-bit RGB with a gAMA chunk of 1.0, which
# Pillow (and traind) ignore: each sample's high byte, as it is.
rgb16 = (rng.randint(0, 65536, size=(3, 5, 3))).astype(">u2")
save("rgb16.png", png(5, 3, 16, 2, [r.tobytes() for r in rgb16],
                      extra=chunk(b"gAMA", struct.pack(">I", 100000))))
gray16 = (rng.randint(0, 65536, size=(3, 4))).astype(">u2")
save("gray16.png", png(4, 3, 16, 0, [r.tobytes() for r in gray16]))
gray2 = rng.randint(0, 4, size=(2, 8))
save("gray2.png", png(8, 2, 2, 0, [bytes([int(a) << 6 | int(b) << 4 | int(c) << 2 | int(d)
                                          for a, b, c, d in r.reshape(-1, 4)]) for r in gray2]))
save("interlaced.png", png(11, 7, 8, 2, [r.tobytes() for r in rgb], interlaced=True))

# JPEGs: 4:2:0 color (odd size: the chroma planes' edges), grayscale,
# progressive, and Adobe CMYK (Pillow writes it inverted, as Photoshop does).
save("rgb.jpg", pillow_bytes(Image.fromarray(smooth(9, 13, 3), "RGB"), format="JPEG", quality=90))
save("gray.jpg", pillow_bytes(Image.fromarray(smooth(6, 10, 1)[:, :, 0], "L"), format="JPEG",
                              quality=90))
save("progressive.jpeg", pillow_bytes(Image.fromarray(smooth(7, 9, 3), "RGB"), format="JPEG",
                                      quality=85, progressive=True))
save("cmyk.jpg", pillow_bytes(Image.fromarray(smooth(4, 6, 4), "CMYK"), format="JPEG", quality=90))

lines = []


def line(kind, name, channels, pixels):
    pixels = np.asarray(pixels, dtype=np.uint8)
    h, w = pixels.shape[:2]
    lines.append(f"{kind} {name} {channels} {h} {w} {pixels.tobytes().hex()}")


def convert(name, channels):
    return Image.open(name).convert("RGB" if channels == 3 else "L")


for name in ["rgb.png", "gray.png", "palette.png", "rgba.png", "la.png", "rgb16.png",
             "gray2.png", "interlaced.png", "rgb.jpg", "gray.jpg", "progressive.jpeg",
             "cmyk.jpg"]:
    for channels in (3, 1):
        line("decode", name, channels, convert(name, channels))
# gray16.png: the high bytes (see above), not Pillow's clipped values.
high = (gray16.astype(np.uint16) >> 8).astype(np.uint8)
line("decode", "gray16.png", 1, high)
line("decode", "gray16.png", 3, np.stack([high] * 3, axis=-1))

# Down, up, one axis only, non-integer ratios both ways.
for name, channels, sizes in [
        ("rgb.png", 3, [(3, 5), (10, 17), (7, 4), (4, 11), (5, 8), (2, 2), (1, 1)]),
        ("rgb.png", 1, [(3, 5), (9, 13)]),
        ("wide.png", 1, [(4, 5), (9, 7), (13, 30), (33, 31)]),
        ("rgb.jpg", 3, [(4, 6)])]:
    for h, w in sizes:
        line("resize", name, channels, convert(name, channels).resize((w, h), Image.BILINEAR))

with open("expected.txt", "w") as f:
    f.write("\n".join(lines) + "\n")
