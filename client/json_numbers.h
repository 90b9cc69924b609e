// trainctl's JSON with 64-bit integers as numbers where they are exact.
#ifndef TRAIND_CLIENT_JSON_NUMBERS_H_
#define TRAIND_CLIENT_JSON_NUMBERS_H_

#include <string>

#include "google/protobuf/descriptor.h"

namespace traind::client {

// protobuf's JSON mapping writes int64 and uint64 fields as strings
// ("train_rows": "150"), which jq compares as text. This rewrites `json`, the
// JSON of a `root` message (proto field names), writing such a value as a
// number where a double holds it exactly (|v| <= 2^53): "train_rows": 150.
// Larger values (a uint64 seed near 2^64) stay strings. Only fields declared
// int64/uint64 (also repeated, and map values) change: a string field, a map
// key or a search parameter's JSON text that looks like a number does not.
std::string Int64sAsNumbers(const std::string& json, const google::protobuf::Descriptor* root);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_JSON_NUMBERS_H_
