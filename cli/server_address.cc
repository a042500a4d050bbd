#include "cli/server_address.h"

namespace cosched::cli {
namespace {

const std::string& FirstSet(const std::string& a, const std::string& b) {
  return a.empty() ? b : a;
}

}  // namespace

std::optional<std::string> ResolveConfigPath(const std::string& flag,
                                             const std::string& env,
                                             bool default_exists) {
  if (!flag.empty()) return flag;
  if (!env.empty()) return env;
  if (default_exists) return std::string(kDefaultConfigPath);
  return std::nullopt;
}

std::string ResolveServerAddress(const std::string& flag,
                                 const std::string& env,
                                 const std::string& config) {
  if (!flag.empty()) return flag;
  if (!env.empty()) return env;
  if (!config.empty()) return config;
  return kDefaultServer;
}

ConnectionSettings ResolveConnectionSettings(const ConnectionFlags& flags,
                                             const std::string& env_server,
                                             const v1::CsctlConfig& config) {
  ConnectionSettings settings;
  settings.server =
      ResolveServerAddress(flags.server, env_server, config.server());
  settings.tls.set_ca_file(FirstSet(flags.ca_file, config.tls().ca_file()));
  settings.tls.set_cert_file(
      FirstSet(flags.cert_file, config.tls().cert_file()));
  settings.tls.set_key_file(FirstSet(flags.key_file, config.tls().key_file()));
  settings.insecure = flags.insecure || config.insecure();
  return settings;
}

}  // namespace cosched::cli
