#include "cli/server_address.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/transport.h"

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

std::string DefaultLocalSocketTarget() { return absl::StrCat("unix:", kDefaultLocalSocket); }

std::string ResolveServerAddress(const std::string& flag,
                                 const std::string& env,
                                 const std::string& config,
                                 bool local_socket_usable) {
  if (!flag.empty()) return flag;
  if (!env.empty()) return env;
  if (!config.empty()) return config;
  // On csd's host the socket tells csd who is calling; loopback TCP cannot.
  if (local_socket_usable) return DefaultLocalSocketTarget();
  return kDefaultServer;
}

void ExpandHomeInPaths(const std::string& home, v1::CsctlConfig* config) {
  if (home.empty()) return;
  auto expand = [&](const std::string& path) {
    return path.rfind("~/", 0) == 0 ? absl::StrCat(home, path.substr(1)) : path;
  };
  v1::TlsConfig* tls = config->mutable_tls();
  tls->set_ca_file(expand(tls->ca_file()));
  tls->set_cert_file(expand(tls->cert_file()));
  tls->set_key_file(expand(tls->key_file()));
  config->set_token_file(expand(config->token_file()));
}

ConnectionSettings ResolveConnectionSettings(const ConnectionFlags& flags,
                                             const std::string& env_server,
                                             const v1::CsctlConfig& config,
                                             bool local_socket_usable) {
  ConnectionSettings settings;
  settings.server = ResolveServerAddress(flags.server, env_server, config.server(),
                                         local_socket_usable);
  settings.tls.set_ca_file(FirstSet(flags.ca_file, config.tls().ca_file()));
  settings.tls.set_cert_file(
      FirstSet(flags.cert_file, config.tls().cert_file()));
  settings.tls.set_key_file(FirstSet(flags.key_file, config.tls().key_file()));
  settings.tls.set_refresh_interval_s(config.tls().refresh_interval_s());
  settings.insecure = flags.insecure || config.insecure();
  return settings;
}

namespace {

absl::StatusOr<std::string> TokenFromFile(const std::string& path,
                                          absl::string_view what) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", path, " cannot be read: ", text.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(
      absl::string_view(*text).substr(0, text->find('\n'))));
  if (token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, " is empty"));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::string> ResolveBearerToken(
    const std::string& flag, const std::string& flag_file,
    const std::string& env, const v1::CsctlConfig& config,
    const ConnectionSettings& settings) {
  std::string token = flag;
  if (token.empty() && !flag_file.empty()) {
    auto from_file = TokenFromFile(flag_file, "--token-file");
    if (!from_file.ok()) return from_file.status();
    token = *from_file;
  }
  if (token.empty()) token = env;
  if (token.empty() && !config.token_file().empty()) {
    auto from_file = TokenFromFile(config.token_file(), "token_file");
    if (!from_file.ok()) return from_file.status();
    token = *from_file;
  }
  if (!token.empty() && settings.tls.ca_file().empty()) {
    // Every replica of a list may receive it.
    absl::StatusOr<std::vector<std::string>> addresses =
        ParseServerList("server", settings.server);
    if (!addresses.ok()) return addresses.status();
    for (const std::string& address : *addresses) {
      if (!IsLoopbackAddress(address) && !IsUnixTarget(address)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "refusing to send a bearer token in plaintext to ", address, ": use TLS (--ca)"));
      }
    }
  }
  return token;
}

}  // namespace cosched::cli
