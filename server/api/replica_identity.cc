#include "server/api/replica_identity.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace cosched::server {

absl::StatusOr<CertificateIdentity> ReadCertificateIdentity(const std::string& path) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_file(path.c_str(), "r"), &BIO_free);
  if (bio == nullptr) {
    ERR_clear_error();
    return absl::NotFoundError(absl::StrCat("certificate file ", path, " cannot be read"));
  }
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate file ", path, " holds no PEM certificate"));
  }
  CertificateIdentity identity;
  // Extended key usage: absent means any use.
  using Usages = std::unique_ptr<EXTENDED_KEY_USAGE, decltype(&EXTENDED_KEY_USAGE_free)>;
  Usages usages(static_cast<EXTENDED_KEY_USAGE*>(
                    X509_get_ext_d2i(cert.get(), NID_ext_key_usage, nullptr, nullptr)),
                &EXTENDED_KEY_USAGE_free);
  identity.client_auth = usages == nullptr;
  for (int i = 0; usages != nullptr && i < sk_ASN1_OBJECT_num(usages.get()); ++i) {
    const int nid = OBJ_obj2nid(sk_ASN1_OBJECT_value(usages.get(), i));
    if (nid == NID_client_auth || nid == NID_anyExtendedKeyUsage) identity.client_auth = true;
  }
  using Names = std::unique_ptr<GENERAL_NAMES, decltype(&GENERAL_NAMES_free)>;
  Names names(static_cast<GENERAL_NAMES*>(
                  X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)),
              &GENERAL_NAMES_free);
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    identity.uri_sans.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                                   static_cast<size_t>(ASN1_STRING_length(uri)));
  }
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  const int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (at >= 0) {
    const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at));
    identity.common_name.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(cn)),
                                static_cast<size_t>(ASN1_STRING_length(cn)));
  }
  ERR_clear_error();
  return identity;
}

absl::Status CheckReplicaIdentity(const v1::TlsConfig& tls, const AuthzOptions& authz) {
  if (tls.cert_file().empty()) return absl::OkStatus();
  absl::StatusOr<CertificateIdentity> identity = ReadCertificateIdentity(tls.cert_file());
  if (!identity.ok()) {
    return absl::Status(identity.status().code(),
                        absl::StrCat("tls.cert_file: ", identity.status().message()));
  }
  if (!identity->client_auth) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tls.cert_file ", tls.cert_file(), ": the certificate's extended key usage lacks "
        "clientAuth, and this replica presents it when it dials the other replicas (stats "
        "forwarded to the leader, GetStats, explain and plan): issue it for both serverAuth "
        "and clientAuth"));
  }
  // As the other replicas, which share this csd.yaml's roles, would see it.
  ASSIGN_OR_RETURN(Authorizer authorizer, Authorizer::Create(authz));
  Peer self;
  self.verified_certificate = true;
  self.uri_sans = identity->uri_sans;
  self.common_name = identity->common_name;
  self.address = "ipv4:127.0.0.1:0";
  absl::StatusOr<Caller> caller = authorizer.Identify(self);
  const Role role = caller.ok() ? caller->role : Role::kNone;
  if (role < Role::kOperator) {
    const std::string who =
        caller.ok() ? caller->who
                    : absl::StrCat(absl::StrJoin(identity->uri_sans, ", "),
                                   identity->common_name.empty() ? "" : " cn:",
                                   identity->common_name);
    return absl::FailedPreconditionError(absl::StrCat(
        "roles: the other replicas know this one as ", who, " (tls.cert_file ",
        tls.cert_file(), "), which roles give ", role == Role::kNone ? "no role" : RoleName(role),
        ": it needs operator (stats it forwards to the leader are refused without it); bind "
        "that identity to operator in every replica's roles"));
  }
  return absl::OkStatus();
}

}  // namespace cosched::server
