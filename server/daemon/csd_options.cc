// csd.yaml's options: what CsdOptionsFromConfig makes of the file and what
// ValidateCsdOptions checks before CsdServer::Start touches the store or the
// network (declared in csd_server.h, beside the options). Kept apart from
// csd_server.cc, which builds and runs the rooms.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "common/validation.h"
#include "server/api/replica_identity.h"
#include "server/daemon/csd_server.h"

namespace cosched::server {

CsdOptions CsdOptionsFromConfig(const v1::CsdConfig& config) {
  CsdOptions options;
  if (!config.listen().empty()) options.listen = config.listen();
  if (!config.data_dir().empty()) options.data_dir = config.data_dir();
  options.tls = config.tls();
  options.insecure = config.insecure();
  if (config.changelog_retention() != 0) {
    options.changelog_retention = config.changelog_retention();
  }
  if (config.audit_retention_days() != 0) {
    options.audit_retention_days = config.audit_retention_days();
  }
  const v1::AuditConfig& audit = config.audit();
  options.audit.file = audit.file().empty()   ? kDefaultAuditFile
                       : audit.file() == "off" ? ""
                                               : audit.file();
  if (audit.has_file_max_mib()) options.audit.file_max_mib = audit.file_max_mib();
  if (audit.has_file_keep()) options.audit.file_keep = audit.file_keep();
  if (audit.has_window_records()) options.audit.window_records = audit.window_records();
  if (config.host_stale_after_s() != 0) {
    options.host_stale_after_s = config.host_stale_after_s();
  }
  if (config.has_enforcement_write_interval_s()) {
    options.enforcement_write_interval_s = config.enforcement_write_interval_s();
  }
  options.tag_from_metadata = config.tag_from_metadata();
  options.enforce = config.enforce();
  options.when_vulnerable.assign(config.when_vulnerable().begin(), config.when_vulnerable().end());
  options.authz = AuthzOptionsFromConfig(config);
  // Plaintext off loopback: any machine on the network is a plaintext
  // caller.
  if (config.insecure() && config.plaintext_role().empty()) options.authz.plaintext_role = "none";
  options.metrics_listen =
      config.metrics_listen().empty()
          ? kDefaultMetricsListen
          : metrics::NormalizeMetricsListen(config.metrics_listen());
  for (const v1::ClassConflict& c : config.class_conflicts()) {
    options.class_conflicts.emplace_back(c.a(), c.b());
  }
  options.engine = EngineOptionsFromConfig(config.engine());
  options.rollout = RolloutOptionsFromConfig(config.rollout());
  const v1::LocalSocketConfig& local = config.local_socket();
  if (local.path().empty()) {
    options.local_socket.path = kDefaultLocalSocket;
  } else if (local.path() != "off") {
    options.local_socket.path = local.path();
    options.local_socket.required = true;
  }
  options.local_socket.group = local.group();
  if (!local.mode().empty()) options.local_socket.mode = local.mode();
  if (config.store().has_etcd()) {
    const v1::EtcdStoreConfig& etcd = config.store().etcd();
    store::EtcdStoreOptions store;
    store.client.endpoints.assign(etcd.endpoints().begin(), etcd.endpoints().end());
    store.client.tls = etcd.tls();
    store.client.insecure = etcd.insecure();
    if (etcd.timeout_ms() != 0) store.client.timeout = absl::Milliseconds(etcd.timeout_ms());
    if (etcd.max_txn_ops() != 0) store.client.max_txn_ops = etcd.max_txn_ops();
    if (etcd.max_request_bytes() != 0) {
      store.client.max_request_bytes = etcd.max_request_bytes();
    }
    store.prefix = etcd.prefix();
    store.replicas.name = etcd.replica_name();
    if (etcd.lease_ttl_s() != 0) store.replicas.ttl = absl::Seconds(etcd.lease_ttl_s());
    if (etcd.maintenance_interval_s() != 0) {
      store.maintenance.interval = absl::Seconds(etcd.maintenance_interval_s());
    }
    store.maintenance.compact = etcd.compact_history();
    options.etcd_disable_compaction = etcd.disable_compaction();
    store.replicas.address = etcd.advertise_address();
    if (etcd.liveness_interval_ms() != 0) {
      store.replicas.seen_interval = absl::Milliseconds(etcd.liveness_interval_ms());
    }
    options.etcd_store = std::move(store);
    if (etcd.peer_timeout_ms() != 0) {
      options.peer_timeout = absl::Milliseconds(etcd.peer_timeout_ms());
    }
    if (etcd.end_streams_after_store_lost_s() != 0) {
      options.end_streams_after_store_lost = absl::Seconds(etcd.end_streams_after_store_lost_s());
    }
  }
  return options;
}

namespace {

// The store.etcd checks: each error starts with the field it is about.
absl::Status ValidateEtcdStoreOptions(const store::EtcdStoreOptions& etcd) {
  if (etcd.client.endpoints.empty()) {
    return absl::InvalidArgumentError(
        "store.etcd.endpoints is required: list at least one etcd member as host:port");
  }
  const v1::TlsConfig& tls = etcd.client.tls;
  if (tls.ca_file().empty() && (!tls.cert_file().empty() || !tls.key_file().empty())) {
    return absl::InvalidArgumentError(
        "store.etcd.tls.ca_file is required with cert_file or key_file: the members' "
        "certificates are verified against it");
  }
  if (tls.cert_file().empty() != tls.key_file().empty()) {
    return absl::InvalidArgumentError(
        "store.etcd.tls.cert_file and store.etcd.tls.key_file go together");
  }
  for (const auto& [key, path] : {std::pair{"ca_file", &tls.ca_file()},
                                  std::pair{"cert_file", &tls.cert_file()},
                                  std::pair{"key_file", &tls.key_file()}}) {
    if (!path->empty() && access(path->c_str(), R_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("store.etcd.tls.", key, " '", *path,
                                                     "' cannot be read: ", std::strerror(errno)));
    }
  }
  for (size_t i = 0; i < etcd.client.endpoints.size(); ++i) {
    const std::string field = absl::StrCat("store.etcd.endpoints[", i, "]");
    const std::string& endpoint = etcd.client.endpoints[i];
    RETURN_IF_ERROR(ValidateListenAddress(field, endpoint));
    if (etcd.client.tls.ca_file().empty() && !etcd.client.insecure &&
        !IsLoopbackAddress(endpoint)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " '", endpoint, "' is not a loopback address: plaintext to it is refused; set "
          "store.etcd.tls.ca_file (and cert_file, key_file for mutual TLS), or "
          "store.etcd.insecure"));
    }
  }
  if (etcd.prefix.empty()) {
    return absl::InvalidArgumentError(
        "store.etcd.prefix is required: an absolute key prefix such as /cosched");
  }
  if (etcd.prefix[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.prefix '", etcd.prefix, "' is relative: it must start with '/'"));
  }
  if (etcd.prefix == "/" || etcd.prefix.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.prefix '", etcd.prefix, "' must not end with '/' (e.g. /cosched)"));
  }
  if (etcd.client.timeout < absl::Milliseconds(10) || etcd.client.timeout > absl::Minutes(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.timeout_ms must be 10 to 60000 (unset: 2000), got ",
        absl::ToInt64Milliseconds(etcd.client.timeout)));
  }
  if (etcd.client.max_txn_ops < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.max_txn_ops must be at least 2 (unset: 128), got ", etcd.client.max_txn_ops));
  }
  if (etcd.client.max_request_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("store.etcd.max_request_bytes must be at least 4096 (unset: 1572864), got ",
                     etcd.client.max_request_bytes));
  }
  RETURN_IF_ERROR(store::ValidateEtcdReplicasOptions(etcd.replicas));
  if (const std::string& address = etcd.replicas.address; !address.empty()) {
    RETURN_IF_ERROR(ValidateListenAddress("store.etcd.advertise_address", address));
    const std::string host = address.substr(0, address.rfind(':'));
    if (absl::EndsWith(address, ":0") || host == "0.0.0.0" || host == "[::]") {
      return absl::InvalidArgumentError(absl::StrCat(
          "store.etcd.advertise_address '", address,
          "' must be where the other replicas dial this one: a host name or address of "
          "this host and its port, not a wildcard or port 0"));
    }
  }
  const absl::Duration interval = etcd.maintenance.interval;
  if (interval < absl::Seconds(10) || interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.maintenance_interval_s must be 10 to 86400 (unset: 300), got ",
        absl::ToInt64Seconds(interval)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Duration EnforcementWriteInterval(const CsdOptions& options) {
  if (options.enforcement_write_interval_s >= 0) {
    return absl::Seconds(options.enforcement_write_interval_s);
  }
  return options.etcd_store ? absl::Seconds(60) : absl::InfiniteDuration();
}

std::string DefaultReplicaName(const std::string& listen) {
  if (absl::EndsWith(listen, ":0")) return "";
  return store::HostReplicaName();
}

absl::Status ValidateCsdOptions(const CsdOptions& options) {
  if (absl::Status valid = ValidateListenAddress("listen", options.listen); !valid.ok()) {
    return valid;
  }
  if (options.changelog_retention < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "changelog_retention must be at least 1 (unset: 100000), got ",
        options.changelog_retention));
  }
  const int64_t audit_days = options.audit_retention_days;
  if (audit_days != -1 && (audit_days < 1 || audit_days > kMaxAuditRetentionDays)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit_retention_days must be -1 (keep every record) or 1 to ",
        kMaxAuditRetentionDays, " days, got ", audit_days));
  }
  if (options.audit.file_max_mib < 1 || options.audit.file_max_mib > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit.file_max_mib must be 1 to 4096 (unset: 100), got ", options.audit.file_max_mib));
  }
  if (options.audit.file_keep < 0 || options.audit.file_keep > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit.file_keep must be 0 to 1000 (unset: 10), got ", options.audit.file_keep));
  }
  if (options.audit.window_records < 1000 || options.audit.window_records > 10000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("audit.window_records must be 1000 to 10000000 (unset: 100000), got ",
                     options.audit.window_records));
  }
  if (!options.audit.file.empty() && options.audit.file[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit.file '", options.audit.file, "' must be an absolute path (or off)"));
  }
  if (options.host_stale_after_s < 1 || options.host_stale_after_s > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_stale_after_s must be 1 to 86400 seconds (unset: 60), got ",
        options.host_stale_after_s));
  }
  if (options.enforcement_write_interval_s < -1 || options.enforcement_write_interval_s > 3600) {
    return absl::InvalidArgumentError(absl::StrCat(
        "enforcement_write_interval_s must be 0 to 3600 seconds (unset: 60 on etcd, never on "
        "SQLite), got ",
        options.enforcement_write_interval_s));
  }
  RETURN_IF_ERROR(ParseEnforcePolicy(options.enforce, options.when_vulnerable).status());
  for (size_t i = 0; i < options.class_conflicts.size(); ++i) {
    const auto& [a, b] = options.class_conflicts[i];
    for (const auto& [key, value] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
      absl::Status valid =
          ValidateId(absl::StrCat("class_conflicts[", i, "].", key), *value);
      if (!valid.ok()) return valid;
    }
  }
  if (options.etcd_store) {
    RETURN_IF_ERROR(ValidateEtcdStoreOptions(*options.etcd_store));
    // What the other replicas will make of this one when it dials them.
    RETURN_IF_ERROR(CheckReplicaIdentity(options.tls, options.authz));
    if (options.etcd_store->maintenance.compact && options.etcd_disable_compaction) {
      return absl::InvalidArgumentError(
          "store.etcd.compact_history: true and store.etcd.disable_compaction: true contradict "
          "each other: set compact_history only when this etcd cluster is csd's alone, and "
          "drop disable_compaction (csd leaves etcd's history alone unless told otherwise)");
    }
  }
  if (options.peer_timeout < absl::Milliseconds(100) ||
      options.peer_timeout > absl::Seconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.peer_timeout_ms must be 100 to 10000 (unset: 1000), got ",
        absl::ToInt64Milliseconds(options.peer_timeout)));
  }
  if (options.end_streams_after_store_lost < absl::Seconds(2) ||
      options.end_streams_after_store_lost > absl::Seconds(600)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.end_streams_after_store_lost_s must be 2 to 600 (unset: 10), got ",
        absl::ToInt64Seconds(options.end_streams_after_store_lost)));
  }
  RETURN_IF_ERROR(ValidateEngineOptions(options.engine));
  RETURN_IF_ERROR(ValidateRolloutOptions(options.rollout));
  RETURN_IF_ERROR(ValidateLocalSocketOptions(options.local_socket));
  if (options.insecure && (options.authz.plaintext_role == "operator" ||
                           options.authz.plaintext_role == "admin")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plaintext_role '", options.authz.plaintext_role,
        "' is refused with insecure: plaintext callers can then be any machine on the "
        "network; use viewer or none (the default with insecure), and give roles to "
        "certificates or tokens"));
  }
  return Authorizer::Create(options.authz).status();
}

}  // namespace cosched::server
