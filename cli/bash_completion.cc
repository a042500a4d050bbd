#include "cli/bash_completion.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cosched::cli {
namespace {

// Each command's path (" rollout start"; "" for csctl itself) and the
// words that may follow it: its subcommands, then its options.
using Paths = std::vector<std::pair<std::string, std::vector<std::string>>>;

void Walk(const CLI::App& app, const std::string& path, Paths& paths) {
  std::vector<std::string> words;
  const std::vector<const CLI::App*> subs =
      app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* sub : subs) words.push_back(sub->get_name());
  std::sort(words.begin(), words.end());
  std::vector<std::string> options;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) options.push_back("--" + name);
    for (const std::string& name : option->get_snames()) options.push_back("-" + name);
  }
  std::sort(options.begin(), options.end());
  // Commands first: what a person most often completes.
  words.insert(words.end(), options.begin(), options.end());
  paths.emplace_back(path, std::move(words));
  for (const CLI::App* sub : subs) Walk(*sub, absl::StrCat(path, " ", sub->get_name()), paths);
}

}  // namespace

std::string BashCompletion(const CLI::App& app) {
  Paths paths;
  Walk(app, "", paths);
  std::vector<std::string> known;
  for (const auto& [path, words] : paths) {
    if (!path.empty()) known.push_back(absl::StrCat("\"", path, "\""));
  }
  std::string script = absl::StrCat(
      "# bash completion for csctl, made by `csctl completion bash` from its own commands.\n"
      "_csctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} path=\"\" words=\"\" i\n"
      "  # The command words typed so far (an option's value is not one).\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    case \"$path ${COMP_WORDS[i]}\" in\n"
      "      ",
      absl::StrJoin(known, "|"),
      ") path=\"$path ${COMP_WORDS[i]}\" ;;\n"
      "    esac\n"
      "  done\n"
      "  case \"$path\" in\n");
  for (const auto& [path, words] : paths) {
    absl::StrAppend(&script, "    \"", path, "\") words=\"", absl::StrJoin(words, " "),
                    "\" ;;\n");
  }
  absl::StrAppend(&script,
                  "  esac\n"
                  "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
                  "}\n"
                  "complete -F _csctl csctl\n");
  return script;
}

}  // namespace cosched::cli
