// A throw-away PKI for tests, made with the openssl command in a temporary
// directory: CAs, and certificates signed by them with chosen subject
// alternative names, including ones that have already expired.
#ifndef COSCHED_TESTS_TESTING_TEST_PKI_H_
#define COSCHED_TESTS_TESTING_TEST_PKI_H_

#include <cstdlib>
#include <string>
#include <utility>

namespace cosched::testing {

class TestPki {
 public:
  // Files go to `dir`; openssl's output to dir/openssl.log.
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA: <ca>.crt and <ca>.key.
  bool MakeCa(const std::string& ca) const {
    return Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=" + ca +
                 " -keyout " + ca + ".key -out " + ca + ".crt");
  }

  // <name>.crt and <name>.key with subject CN=<cn> and subjectAltName `san`
  // (e.g. "URI:spiffe://td/host/h1" or "DNS:localhost,IP:127.0.0.1"),
  // signed by <ca>, valid for a day from now.
  bool MakeCert(const std::string& ca, const std::string& name, const std::string& san,
                const std::string& cn = "") const {
    return Request(name, san, cn) &&
           Shell("openssl x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca +
                 ".key -CAcreateserial -days 1 -extfile " + name + ".ext -out " + name + ".crt");
  }

  // Like MakeCert, but valid only on 1 January 2020: expired. `openssl x509`
  // cannot backdate, `openssl ca` can.
  bool MakeExpiredCert(const std::string& ca, const std::string& name,
                       const std::string& san) const {
    return MakeCertByCa(ca, name, san, "20200101000000Z", "20200102000000Z");
  }

  // Like MakeCert, through `openssl ca` with explicit validity dates
  // (YYYYMMDDHHMMSSZ).
  bool MakeCertByCa(const std::string& ca, const std::string& name, const std::string& san,
                    const std::string& start, const std::string& end) const {
    return Request(name, san, "") &&
           Shell("printf '[ca]\\ndefault_ca=d\\n[d]\\ndatabase=index.txt\\n"
                 "new_certs_dir=.\\nserial=serial.txt\\ndefault_md=sha256\\npolicy=p\\n"
                 "copy_extensions=copy\\nunique_subject=no\\n[p]\\ncommonName=supplied\\n'"
                 " >ca.cnf && touch index.txt && (test -f serial.txt || echo 1000 >serial.txt)"
                 " && openssl ca -batch -config ca.cnf -cert " + ca + ".crt -keyfile " + ca +
                 ".key -in " + name + ".csr -extfile " + name + ".ext -out " + name +
                 ".crt -startdate " + start + " -enddate " + end);
  }

 private:
  bool Request(const std::string& name, const std::string& san, const std::string& cn) const {
    return Shell("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + (cn.empty() ? name : cn) +
                 " -keyout " + name + ".key -out " + name + ".csr && printf 'subjectAltName=" +
                 san + "' >" + name + ".ext");
  }

  // Runs `command` in the directory; true when it exits 0.
  bool Shell(const std::string& command) const {
    std::string full = "cd '" + dir_ + "' && (" + command + ") >>openssl.log 2>&1";
    return std::system(full.c_str()) == 0;
  }

  std::string dir_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_TEST_PKI_H_
