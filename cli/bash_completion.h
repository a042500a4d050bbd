// `csctl completion bash`: a bash completion script made from csctl's own
// command tree (its subcommands and options as CLI11 holds them), so that
// it can never offer a command csctl does not have, nor miss one. The
// cosched-client package installs its output as
// /usr/share/bash-completion/completions/csctl.
#ifndef COSCHED_CLI_BASH_COMPLETION_H_
#define COSCHED_CLI_BASH_COMPLETION_H_

#include <string>

#include "CLI/CLI.hpp"

namespace cosched::cli {

// The script: defines _csctl and registers it for csctl. After the
// command words typed so far, it offers the next command's words and
// options, or the current command's options.
std::string BashCompletion(const CLI::App& app);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_BASH_COMPLETION_H_
