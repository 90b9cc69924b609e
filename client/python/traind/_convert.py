"""Protobuf messages as plain Python values."""

from __future__ import annotations

from typing import Any, Dict

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
          FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}
_FLOATS = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


def to_dict(message: Message) -> Dict[str, Any]:
    """`message` as a dict: json_format.MessageToDict with proto field names
    and default values (fold 0 has "fold": 0; enums are their names, e.g.
    "SUCCEEDED"; timestamps RFC 3339 strings), except that 64-bit integers are
    ints and NaN/Infinity doubles are floats, not the strings of protobuf's
    JSON mapping."""
    try:
        d = json_format.MessageToDict(message, including_default_value_fields=True,
                                      preserving_proto_field_name=True)
    except TypeError:  # protobuf >= 5.26 renamed the option
        d = json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                      preserving_proto_field_name=True)
    _restore_numbers(message.DESCRIPTOR, d)
    return d


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type in _INT64 and isinstance(value, str):
        return int(value)
    if field.type in _FLOATS and isinstance(value, str):
        return float(value)  # "NaN", "Infinity", "-Infinity"
    return value


def _is_well_known(desc: Descriptor) -> bool:
    return desc.full_name.startswith("google.protobuf.")


def _restore_numbers(desc: Descriptor, d: Dict[str, Any]) -> None:
    for field in desc.fields:
        if field.name not in d:
            continue
        value = d[field.name]
        msg = field.message_type
        if msg is not None and msg.GetOptions().map_entry:
            value_field = msg.fields_by_name["value"]
            if value_field.message_type is not None:
                if not _is_well_known(value_field.message_type):
                    for v in value.values():
                        _restore_numbers(value_field.message_type, v)
            else:
                d[field.name] = {k: _scalar(value_field, v) for k, v in value.items()}
        elif msg is not None:
            if _is_well_known(msg):
                continue
            items = value if field.label == FieldDescriptor.LABEL_REPEATED else [value]
            for item in items:
                _restore_numbers(msg, item)
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            d[field.name] = [_scalar(field, v) for v in value]
        else:
            d[field.name] = _scalar(field, value)
