# The lab's site settings for the packaged configs in /etc/cosched (sourced
# by guest/init_systemd.sh after it places the packages' files, and by
# scenarios that install the packages with dpkg themselves): an operator's
# first step after installing them (docs/operating.md, "First deployment").

# lab_configure_site BUILD: appends the lab's settings to the packaged
# csd.yaml and cs-agent.yaml; BUILD is the build tree of the fake QEMU.
lab_configure_site() {
  # Its cs-agent reaches csd over loopback without certificates (the
  # unit's agent cannot use csd's socket: root without CAP_DAC_OVERRIDE is
  # not in the socket's group).
  echo 'plaintext_agents: true' >>/etc/cosched/csd.yaml
  # Its VMs are the lab's fake QEMU, run from the build tree: a VMM binary
  # for this site (docs/agent.md, "Which processes are VMs"). The scenarios
  # run them as uid 107, as libvirt runs QEMU as libvirt-qemu, a user this
  # root may not have.
  printf 'vmm_binaries: ["/usr/bin/qemu-system-*", "%s"]\nvmm_users: [root, "107"]\n' \
    "$1/tests/lab/fake_qemu/qemu-system-x86_64" >>/etc/cosched/cs-agent.yaml
  # The packaged file names no csd (a first install starts no agent): the
  # one csd of this lab.
  echo 'server: 127.0.0.1:7443' >>/etc/cosched/cs-agent.yaml
}
