// Parser of libvirt's QEMU status XML (/run/libvirt/qemu/<domain>.xml),
// which libvirtd keeps for every running domain. No I/O.
#ifndef COSCHED_DISCOVERY_LIBVIRT_STATUS_XML_H_
#define COSCHED_DISCOVERY_LIBVIRT_STATUS_XML_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::discovery {

// What the status XML says about a running domain. libvirt 9.0 writes:
//   <domstatus state='paused' reason='user' pid='26896'>
//     <vcpus><vcpu id='0' pid='26900'/>...</vcpus>
//     <job type='none' async='migration in' phase='prepare' .../>  (during one)
//     ...
//     <domain type='qemu' id='1'><name>..</name><uuid>..</uuid>
//       <iothreads>2</iothreads> ...</domain>
//   </domstatus>
// It keeps no iothread thread ids (QEMU names them "IO iothread<id>").
struct LibvirtDomainStatus {
  struct Vcpu {
    int id = 0;
    int tid = 0;
    bool operator==(const Vcpu&) const = default;
  };

  std::string name;
  std::string uuid;
  // "running", "paused", ... as libvirt writes it.
  std::string state;
  // The domain's async job while one runs (<job async='migration in'/>):
  // "migration in", "migration out", "save", ...; empty when none.
  std::string async_job;
  // The QEMU process.
  int pid = 0;
  // Sorted by id. Only vCPUs that have a thread (online ones).
  std::vector<Vcpu> vcpus;
  // The ids of the domain's iothreads: from <iothreadids>, else 1..N from
  // <iothreads>N</iothreads>.
  std::vector<int> iothread_ids;

  bool operator==(const LibvirtDomainStatus&) const = default;
};

// INVALID_ARGUMENT when `xml` is not well-formed, is not a <domstatus>
// document, or lacks the QEMU pid or the domain's name.
absl::StatusOr<LibvirtDomainStatus> ParseLibvirtStatusXml(absl::string_view xml);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_LIBVIRT_STATUS_XML_H_
