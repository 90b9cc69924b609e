#!/usr/bin/env python3
"""Reads TensorBoard event files from the published format alone, with no
TensorFlow or TensorBoard: TFRecord framing (both masked CRC-32Cs checked)
and the Event / Summary protos decoded from protobuf's wire format.

  tfevents_check.py FILE...

Prints, per file, "FILE records=N steps=S scalars=K" and, per step,
"step=E tag=value ..." (tags sorted); exits 1 on the first malformed byte.
"""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data):
    """(field number, wire type, value) of each field of a message."""
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        elif wire == 2:
            length, at = varint(data, at)
            value, at = data[at:at + length], at + length
        else:
            raise ValueError("wire type %d" % wire)
        yield number, wire, value


def read(path):
    data = open(path, "rb").read()
    at = records = 0
    steps = {}
    while at < len(data):
        length_bytes = data[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        if struct.unpack("<I", data[at + 8:at + 12])[0] != masked(length_bytes):
            raise ValueError("bad length crc at byte %d" % at)
        payload = data[at + 12:at + 12 + length]
        if len(payload) != length or len(data) < at + 16 + length:
            raise ValueError("torn record at byte %d" % at)
        if struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] != masked(payload):
            raise ValueError("bad data crc at byte %d" % at)
        event = {number: value for number, _, value in fields(payload)}
        if records == 0:
            if event.get(3) != b"brain.Event:2":
                raise ValueError("the first record is not file_version brain.Event:2")
        else:
            step = event[2]
            for number, _, value in fields(event[5]):  # Summary.value
                assert number == 1
                v = {n: x for n, _, x in fields(value)}
                tag = v[1].decode()
                if tag in steps.setdefault(step, {}):
                    raise ValueError("step %d: %s twice" % (step, tag))
                steps[step][tag] = struct.unpack("<f", v[2])[0]
        records += 1
        at += 16 + length
    return records, steps


def main():
    for path in sys.argv[1:]:
        try:
            records, steps = read(path)
        except (ValueError, KeyError, IndexError, struct.error) as e:
            print("%s: %s" % (path, e))
            return 1
        print("%s records=%d steps=%d scalars=%d" %
              (path, records, len(steps), sum(len(s) for s in steps.values())))
        for step in sorted(steps):
            print("step=%d %s" % (step, " ".join(
                "%s=%r" % (tag, steps[step][tag]) for tag in sorted(steps[step]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
