// traind's settings, declared once: one row per setting with its config key,
// flag, type, range and doc line. The config-file loader (config.cc), the
// command line and `traind --help` (command_line.cc), and the key reference
// in docs/operations.md (`traind --settings-markdown`) are all derived from
// this table. The default values stay in ServerConfig's member initializers
// (config.h): the table reads them from a default-constructed ServerConfig.
#ifndef TRAIND_SERVER_SETTINGS_H_
#define TRAIND_SERVER_SETTINGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/config.h"

namespace traind::server {

enum class SettingType {
  kString,
  kInt,             // int, within [min, max]
  kInt64,           // int64_t, within [min, max]
  kBool,            // true/false, yes/no, on/off
  kDuration,        // ParseDurationText
  kStringList,      // a YAML list (or one value); the flag is repeatable and replaces it
  kOctalMode,       // ParseStateDirMode, held in an int
  kOptionalString,  // unset until given (http_listen)
};

// Where a setting lives in ServerConfig: one of these, matching the type.
using SettingMember =
    std::variant<std::string* (*)(ServerConfig&), int* (*)(ServerConfig&),
                 int64_t* (*)(ServerConfig&), bool* (*)(ServerConfig&),
                 absl::Duration* (*)(ServerConfig&), std::vector<std::string>* (*)(ServerConfig&),
                 std::optional<std::string>* (*)(ServerConfig&)>;

struct Setting {
  std::string key;   // config key, dotted for nested sections: "limits.max_layers"
  std::string flag;  // "--max-layers", or empty: file only
  SettingType type;
  SettingMember member;
  std::string doc;  // one line, markdown
  // What an empty or zero default means, when it means something ("the
  // number of cores"); shown beside the default.
  std::string default_note;
  int64_t min = 0;  // kInt and kInt64 only
  int64_t max = 0;
  // A bool flag given without a value (--insecure) rather than with one
  // (--store-check=false).
  bool flag_is_switch = false;
};

// Every setting, in the order of docs/operations.md.
const std::vector<Setting>& Settings();

// The row with this config key, or null.
const Setting* FindSetting(const std::string& key);

// Sets the setting from one value as written in a config file or after its
// flag. For kStringList, `text` is one element, replacing the list. The
// error says what is wrong with the value, without naming the key.
absl::Status SetSettingText(const Setting& setting, const std::string& text, ServerConfig* config);

// Replaces a kStringList setting.
void SetSettingList(const Setting& setting, std::vector<std::string> values, ServerConfig* config);

// The setting's value in `config`, as SetSettingText reads it back (lists:
// elements joined by ", "; an unset optional: "").
std::string SettingValueText(const Setting& setting, const ServerConfig& config);

// True when the setting holds the same value in both.
bool SettingEquals(const Setting& setting, const ServerConfig& a, const ServerConfig& b);

// The type as a word for docs and --help: "string", "int", "duration", ...
std::string SettingTypeName(const Setting& setting);

// The default as shown in docs and --help: the value of a default-constructed
// ServerConfig, and the default note.
std::string SettingDefaultText(const Setting& setting);

// The configuration key reference of docs/operations.md: a markdown table,
// one row per setting (key, flag, type, default, meaning).
std::string SettingsMarkdown();

}  // namespace traind::server

#endif  // TRAIND_SERVER_SETTINGS_H_
