// traind's command line: the flags of the settings table (settings.h),
// applied over the config file (--config FILE) over the built-in defaults,
// then the state directory and listen addresses filled in and the whole
// validated (config.h).
#ifndef TRAIND_SERVER_COMMAND_LINE_H_
#define TRAIND_SERVER_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/config.h"

namespace traind::server {

// Sets `*config` from argv. Nothing when traind should run with it; else the
// status to exit with (0 after --help or --version, 2 for a bad flag, file
// or value, said on stderr).
// --settings-markdown prints the settings table (docs/operations.md) and exits 0.
std::optional<int> ParseCommandLine(int argc, char** argv, ServerConfig* config);

// Sets the settings whose flags `args` gives (no program name; no --config,
// defaults or validation) over `*config`, as ParseCommandLine does after
// the config file. An error names the flag.
absl::Status ParseSettingFlags(const std::vector<std::string>& args, ServerConfig* config);

}  // namespace traind::server

#endif  // TRAIND_SERVER_COMMAND_LINE_H_
