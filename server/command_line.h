// traind's command line: every setting as a flag, applied over the config
// file (--config FILE) over the built-in defaults, then the state directory
// and listen addresses filled in and the whole validated (config.h).
#ifndef TRAIND_SERVER_COMMAND_LINE_H_
#define TRAIND_SERVER_COMMAND_LINE_H_

#include <optional>

#include "server/config.h"

namespace traind::server {

// Sets `*config` from argv. Nothing when traind should run with it; else the
// status to exit with (0 after --help or --version, 2 for a bad flag, file
// or value, said on stderr).
std::optional<int> ParseCommandLine(int argc, char** argv, ServerConfig* config);

}  // namespace traind::server

#endif  // TRAIND_SERVER_COMMAND_LINE_H_
