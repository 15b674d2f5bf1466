// Package adopt is the read-only first phase of `ichor adopt` (architecture,
// "ichor adopt"): from what a running Talos cluster that Ichor did not create
// says about itself (each machine's running version and live configuration,
// read with the operator's own talosconfig), it works out the TalosCluster and
// TalosMachines an adoption would write, renders each machine as the
// controller would, and sorts every difference from the live configuration
// into three classes:
//
//   - A, representable: documents a TalosConfigPatch may carry
//     (contracts/pkg/configpatch), and values Ichor keeps in spec fields (the
//     install target);
//   - B, Ichor-owned: Talos's own CNI, kube-proxy, KubePrism and the Cilium
//     inline manifest, which the first render changes; listed, they need
//     consent and do not block;
//   - C, everything else, secret material that differs from the bundle among
//     it: it blocks that machine, with the paths and a hint.
//
// It also refuses, before anything is written, what adoption never takes: a
// Talos older than v1.12 or a cluster of mixed versions ("upgrade Talos
// first"), a version this Ichor does not know, two CNIs, a Cilium whose IPAM
// is not `kubernetes`, and another CNI without --cni-unmanaged.
//
// Everything here is pure except Read, which reads one node; the CLI prints
// the Plan. Plans carry paths, never values: a configuration holds secrets.
package adopt
