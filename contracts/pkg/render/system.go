package render

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/stdpatches"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.yaml.in/yaml/v4"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/authn"
)

// Names of Ichor's own patches, as Origin.Patch and Step.Name show them.
const (
	PatchCNI                = "ichor-cni"
	PatchKubeProxy          = "ichor-kube-proxy"
	PatchKubePrism          = "ichor-kubeprism"
	PatchRegistryMirrors    = "ichor-registry-mirrors"
	PatchVolumes            = "ichor-volumes"
	PatchInstall            = "ichor-install"
	PatchControlPlaneTaints = "ichor-controlplane-taints"
	PatchHostname           = "ichor-hostname"
	PatchNodeLabels         = "ichor-node-labels"
	PatchNetwork            = "ichor-network"
	PatchMetrics            = "ichor-metrics"
	PatchKubeletServing     = "ichor-kubelet-serving-certificates"
	PatchStorage            = "ichor-storage"
	PatchAuthentication     = "ichor-authentication"
)

// PrimaryLinkAlias is the alias of the primary NIC: a LinkAliasConfig selects
// it by its permanent MAC, so a kernel name that changes across boots does not
// move the configuration (architecture, "Nodes").
const PrimaryLinkAlias = "net0"

type doc = map[string]any

// Keys of the v1alpha1 document Ichor's own patches set.
const (
	keyMachine = "machine"
	keyCluster = "cluster"
)

// keyNetwork is the network section of the v1alpha1 document.
const keyNetwork = "network"

// Keys of the volume and install documents.
const (
	keyDiskSelector = "diskSelector"
	keyProvisioning = "provisioning"
)

// diskMatch is a provisioning section selecting a disk by a CEL expression.
func diskMatch(expr string) doc {
	return doc{keyDiskSelector: doc{"match": expr}}
}

func withWipe(d doc, wipe bool) doc {
	d["wipe"] = wipe

	return d
}

func multidoc(kind string, fields doc) doc {
	d := doc{"apiVersion": "v1alpha1", "kind": kind}
	for k, v := range fields {
		d[k] = v
	}

	return d
}

func legacy(fields doc) doc {
	d := doc{"version": "v1alpha1"}
	for k, v := range fields {
		d[k] = v
	}

	return d
}

// yamlStep loads Ichor's own documents with machinery's configpatcher, the
// same loader a user patch file goes through (delete selectors allowed).
func yamlStep(layer, name string, docs ...doc) (Step, error) {
	var buf bytes.Buffer

	for i, d := range docs {
		if i > 0 {
			buf.WriteString("---\n")
		}

		b, err := yaml.Marshal(d)
		if err != nil {
			return Step{}, err
		}

		buf.Write(b)
	}

	return bytesStep(layer, name, buf.Bytes())
}

func bytesStep(layer, name string, b []byte) (Step, error) {
	p, err := configpatcher.LoadPatch(b)
	if err != nil {
		return Step{}, fmt.Errorf("%s: %w", name, err)
	}

	sp, ok := p.(configpatcher.StrategicMergePatch)
	if !ok {
		return Step{}, fmt.Errorf("%s: not a strategic merge patch", name)
	}

	s := Step{Layer: layer, Name: name, patch: p}

	for _, d := range sp.Documents() {
		if _, del := d.(configloader.Selector); del {
			continue
		}

		s.docs = append(s.docs, d)
	}

	return s, nil
}

// SystemPatches are the system layer Ichor generates for a machine. storages
// are the candidate TalosStorages (those of other clusters, or that do not
// select m, are skipped); nil when the caller has none at hand.
func SystemPatches(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract, storages []ichorv1alpha1.TalosStorage,
	issuer *ichorv1alpha1.IssuerStatus,
) ([]Step, error) {
	var steps []Step

	add := func(name string, docs ...doc) error {
		if len(docs) == 0 {
			return nil
		}

		s, err := yamlStep(LayerSystem, name, docs...)
		if err != nil {
			return err
		}

		steps = append(steps, s)

		return nil
	}

	cni, err := cniDocs(c, vc)
	if err != nil {
		return nil, err
	}

	if err := add(PatchCNI, cni...); err != nil {
		return nil, err
	}

	if err := add(PatchKubeProxy, kubeProxyDocs(c, m, vc)...); err != nil {
		return nil, err
	}

	if err := add(PatchKubePrism, kubePrismDocs(vc)...); err != nil {
		return nil, err
	}

	if err := add(PatchRegistryMirrors, mirrorDocs(c, vc)...); err != nil {
		return nil, err
	}

	inst, err := installDocs(c, m, vc)
	if err != nil {
		return nil, err
	}

	if err := add(PatchInstall, inst...); err != nil {
		return nil, err
	}

	vols, err := volumeDocs(m)
	if err != nil {
		return nil, err
	}

	if err := add(PatchVolumes, vols...); err != nil {
		return nil, err
	}

	if err := add(PatchNetwork, networkDocs(m, vc)...); err != nil {
		return nil, err
	}

	metrics, err := metricsDocs(c, m, vc)
	if err != nil {
		return nil, err
	}

	if err := add(PatchMetrics, metrics...); err != nil {
		return nil, err
	}

	if err := add(PatchKubeletServing, kubeletServingDocs(c, vc)...); err != nil {
		return nil, err
	}

	authDocs, err := authenticationDocs(c, m, vc, issuer)
	if err != nil {
		return nil, err
	}

	if err := add(PatchAuthentication, authDocs...); err != nil {
		return nil, err
	}

	storage, err := storageDocs(m, storages, vc)
	if err != nil {
		return nil, err
	}

	if err := add(PatchStorage, storage...); err != nil {
		return nil, err
	}

	return steps, nil
}

// cniDocs removes Talos's own CNI: Cilium is installed by Ichor. Under a
// contract with multi-document Kubernetes configuration the generator emits
// Flannel as the KubeFlannelCNIConfig document (machinery
// config/generate/kubernetes.go), which a delete selector removes; before, it
// is cluster.network.cni.name: none in the v1alpha1 document.
func cniDocs(c *ichorv1alpha1.TalosCluster, vc *coreconfig.VersionContract) ([]doc, error) {
	switch c.Spec.CNI.Preset {
	case ichorv1alpha1.CNIPresetCilium:
	case ichorv1alpha1.CNIPresetUnmanaged:
		if c.Spec.CNI.Unmanaged == nil || c.Spec.CNI.Unmanaged.TalosCNI != "none" {
			return nil, nil
		}
	default:
		return nil, fmt.Errorf("cluster %s: CNI preset %q is not supported", c.Name, c.Spec.CNI.Preset)
	}

	if vc.MultidocKubernetesConfigSupported() {
		return []doc{multidoc("KubeFlannelCNIConfig", doc{"$patch": "delete"})}, nil
	}

	return []doc{legacy(doc{keyCluster: doc{keyNetwork: doc{"cni": doc{keyName: "none"}}}})}, nil
}

// ClusterInput is the part of a TalosCluster that Render reads: its
// metadata's names, labels and annotations, its spec, and of its status the
// kube-proxy mode recorded (TalosKubeProxy). LoadInput reads more of the
// status (the Kubernetes upgrade's version, the CNI hand-over), and what it
// reads goes into Input.Kubernetes and Input.InlineManifests. A key of a
// render's input hashes this rather than the whole cluster, whose status
// moves with every discovery scan and machine count;
// TestRenderReadsNoOtherClusterField breaks when Render starts reading
// another field.
func ClusterInput(c *ichorv1alpha1.TalosCluster) any {
	return struct {
		Namespace, Name string
		Labels          map[string]string
		Annotations     map[string]string
		Spec            ichorv1alpha1.TalosClusterSpec
		KubeProxy       string
	}{c.Namespace, c.Name, c.Labels, c.Annotations, c.Spec, c.Status.CNI.KubeProxy}
}

// TalosKubeProxy is the kube-proxy mode Talos's side is rendered with:
// status.cni.kubeProxy once the controller has recorded it, spec.cni.kubeProxy
// before that. A switch moves the record at its Talos step, after Cilium's
// side when kube-proxy is being replaced (guard/kubeproxy.go), so a spec
// change alone never turns Talos's kube-proxy off first.
func TalosKubeProxy(c *ichorv1alpha1.TalosCluster) string {
	m := c.Status.CNI.KubeProxy
	if m == "" {
		m = c.Spec.CNI.KubeProxy
	}

	if m == "" {
		return ichorv1alpha1.KubeProxyEnabled
	}

	return m
}

// kubeProxyDocs follows TalosKubeProxy. KubeProxyConfig is a
// control-plane-only document (machinery refuses it on a worker), as is
// cluster.proxy in v1alpha1 in practice: kube-proxy is a DaemonSet the control
// planes' bootstrap manifests create.
func kubeProxyDocs(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract) []doc {
	if c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetCilium || m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		// An unmanaged CNI's kube-proxy only records what the node has.
		return nil
	}

	enabled := TalosKubeProxy(c) != ichorv1alpha1.KubeProxyReplaced

	if vc.MultidocKubernetesConfigSupported() {
		return []doc{multidoc("KubeProxyConfig", doc{"enabled": enabled})}
	}

	return []doc{legacy(doc{keyCluster: doc{"proxy": doc{"disabled": !enabled}}})}
}

// authenticationDocs replace a control plane's KubeAuthenticationConfig
// with the configuration spec.authentication asks for (package authn, which
// validates it: Talos does not). Without spec.authentication the document
// machinery generates stays (anonymous access to the health paths only).
func authenticationDocs(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract, iss *ichorv1alpha1.IssuerStatus) ([]doc, error) {
	if !authn.Enabled(c.Spec.Authentication) || m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return nil, nil
	}

	if !vc.MultidocKubernetesConfigSupported() {
		return nil, fmt.Errorf("spec.authentication needs the KubeAuthenticationConfig document of the v1.14 version contract; the cluster's is %s", c.Spec.VersionContract)
	}

	cfg, err := authn.Configuration(c.Spec.Authentication, iss)
	if err != nil {
		return nil, err
	}

	return []doc{multidoc("KubeAuthenticationConfig", doc{"configuration": cfg})}, nil
}

func kubePrismDocs(vc *coreconfig.VersionContract) []doc {
	if vc.MultidocKubernetesConfigSupported() {
		return []doc{multidoc("KubePrismConfig", doc{"port": constants.DefaultKubePrismPort})}
	}

	return []doc{legacy(doc{keyMachine: doc{"features": doc{"kubePrism": doc{"enabled": true, "port": constants.DefaultKubePrismPort}}}})}
}

func mirrorDocs(c *ichorv1alpha1.TalosCluster, vc *coreconfig.VersionContract) []doc {
	if len(c.Spec.Registry.Mirrors) == 0 {
		return nil
	}

	if vc.MultidocNetworkConfigSupported() {
		out := make([]doc, 0, len(c.Spec.Registry.Mirrors))

		for _, m := range c.Spec.Registry.Mirrors {
			eps := make([]any, 0, len(m.Endpoints))
			for _, e := range m.Endpoints {
				eps = append(eps, doc{"url": e})
			}

			out = append(out, multidoc("RegistryMirrorConfig", doc{keyName: m.Registry, "endpoints": eps}))
		}

		return out
	}

	mirrors := doc{}

	for _, m := range c.Spec.Registry.Mirrors {
		eps := make([]any, 0, len(m.Endpoints))
		for _, e := range m.Endpoints {
			eps = append(eps, e)
		}

		mirrors[m.Registry] = doc{"endpoints": eps}
	}

	return []doc{legacy(doc{keyMachine: doc{"registries": doc{"mirrors": mirrors}}})}
}

// Installer images.
const (
	// DefaultInstallerRepository is Talos's installer without a schematic.
	DefaultInstallerRepository = "ghcr.io/siderolabs/installer"
	// DefaultImageFactoryHost serves installers built from a schematic.
	DefaultImageFactoryHost = "factory.talos.dev"
)

// installDocs are the install target: the machine's system disk and the
// installer image. Under a contract with UnattendedInstallConfig they are
// that document (as machinery's generator writes it, config/generate/init.go,
// unattendedInstallConfig, wipe false); before, machine.install. Nothing is
// rendered without an install disk, as the generator does.
func installDocs(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract) ([]doc, error) {
	if m.Spec.Install.Disk == nil {
		return nil, nil
	}

	image, err := InstallerImage(c, m)
	if err != nil {
		return nil, err
	}

	if vc.UnattendedInstallConfig() {
		sel, err := DiskSelectorExpression(*m.Spec.Install.Disk)
		if err != nil {
			return nil, fmt.Errorf("machine %s: install.disk: %w", m.Name, err)
		}

		return []doc{multidoc("UnattendedInstallConfig", doc{
			"installer":     doc{"image": image},
			keyProvisioning: withWipe(diskMatch(sel), m.Spec.Install.ConfirmWipe),
		})}, nil
	}

	install := doc{"image": image, "wipe": m.Spec.Install.ConfirmWipe}

	d := m.Spec.Install.Disk

	switch {
	case d.WWID != "":
		install[keyDiskSelector] = doc{"wwid": d.WWID}
	case d.Serial != "":
		install[keyDiskSelector] = doc{"serial": d.Serial}
	case d.BusPath != "":
		install[keyDiskSelector] = doc{"busPath": d.BusPath}
	case d.ByID != "":
		id := d.ByID
		if !strings.HasPrefix(id, "/dev/") {
			id = "/dev/disk/by-id/" + id
		}

		install["disk"] = id
	case d.DevicePath != "":
		install["disk"] = d.DevicePath
	default:
		return nil, fmt.Errorf("machine %s: install.disk: the disk selector names no attribute", m.Name)
	}

	return []doc{legacy(doc{keyMachine: doc{"install": install}})}, nil
}

// networkDocs configure the primary NIC chosen at approval. Under a contract
// with multi-document network configuration: a LinkAliasConfig whose CEL
// selector matches the permanent MAC (machinery config/types/network
// link_alias.go), then DHCPv4Config or a LinkConfig with the static addresses
// and default route on the alias (or on a VLANConfig over it), and a
// ResolverConfig for the nameservers. Before: machine.network.interfaces with
// a deviceSelector on the permanent address. Nothing is rendered without a MAC.
func networkDocs(m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract) []doc {
	n := m.Spec.Network
	if n.MACAddress == "" {
		return nil
	}

	dhcp := n.DHCP != nil && *n.DHCP

	var routes []any
	if n.Gateway != "" {
		routes = append(routes, doc{"gateway": n.Gateway})
	}

	addresses := make([]any, 0, len(n.Addresses))
	nameservers := make([]any, 0, len(n.Nameservers))

	if vc.MultidocNetworkConfigSupported() {
		out := []doc{multidoc("LinkAliasConfig", doc{
			keyName:    PrimaryLinkAlias,
			"selector": doc{"match": "mac(link.permanent_addr) == " + strconv.Quote(n.MACAddress)},
		})}

		link := PrimaryLinkAlias
		if n.VLAN != nil {
			link = fmt.Sprintf("%s.%d", PrimaryLinkAlias, *n.VLAN)
			out = append(out, multidoc("VLANConfig", doc{keyName: link, "vlanID": *n.VLAN, "parent": PrimaryLinkAlias, "up": true}))
		}

		if dhcp {
			out = append(out, multidoc("DHCPv4Config", doc{keyName: link}))
		} else if len(n.Addresses) > 0 {
			for _, a := range n.Addresses {
				addresses = append(addresses, doc{"address": a})
			}

			lc := doc{keyName: link, "up": true, "addresses": addresses}
			if len(routes) > 0 {
				lc["routes"] = routes
			}

			if n.VLAN != nil {
				// The VLAN document carries its own addresses and routes.
				for k, v := range lc {
					if k != keyName {
						out[len(out)-1][k] = v
					}
				}
			} else {
				out = append(out, multidoc("LinkConfig", lc))
			}
		}

		if len(n.Nameservers) > 0 {
			for _, ns := range n.Nameservers {
				nameservers = append(nameservers, doc{"address": ns})
			}

			out = append(out, multidoc("ResolverConfig", doc{"nameservers": nameservers}))
		}

		return out
	}

	iface := doc{"deviceSelector": doc{"permanentAddr": n.MACAddress}}
	target := iface

	if n.VLAN != nil {
		target = doc{"vlanId": *n.VLAN}
		iface["vlans"] = []any{target}
	}

	if dhcp {
		target["dhcp"] = true
	} else if len(n.Addresses) > 0 {
		for _, a := range n.Addresses {
			addresses = append(addresses, a)
		}

		target["addresses"] = addresses

		if n.Gateway != "" {
			target["routes"] = []any{doc{"network": "0.0.0.0/0", "gateway": n.Gateway}}
		}
	}

	network := doc{"interfaces": []any{iface}}

	if len(n.Nameservers) > 0 {
		for _, ns := range n.Nameservers {
			nameservers = append(nameservers, ns)
		}

		network["nameservers"] = nameservers
	}

	return []doc{legacy(doc{keyMachine: doc{keyNetwork: network}})}
}

// volumeProvisioning is the provisioning block of a volume document placed on
// disk d: a disk selector, and the size cap when d has one.
func volumeProvisioning(d ichorv1alpha1.DiskRole) (doc, error) {
	sel, err := DiskSelectorExpression(d.Disk)
	if err != nil {
		return nil, err
	}

	prov := diskMatch(sel)
	if d.MaxSize != "" {
		prov["maxSize"] = d.MaxSize
	}

	return prov, nil
}

// volumeDocs turns disk roles into volume documents: ephemeral gives the
// EPHEMERAL VolumeConfig on that disk, userVolume a UserVolumeConfig named
// after volumeName. The system disk is the install target (not a volume
// document); storage disks are prepared by the TalosStorage preset; unused
// disks are left alone. Under systemDiskLayout shared, EPHEMERAL is capped on
// the system disk (sharedEphemeralDoc).
func volumeDocs(m *ichorv1alpha1.TalosMachine) ([]doc, error) {
	var (
		out       []doc
		ephemeral bool
	)

	if SharedLayout(m) {
		d, err := sharedEphemeralDoc(m)
		if err != nil {
			return nil, err
		}

		out = append(out, d)
	}

	for i, d := range m.Spec.Disks {
		switch d.Role {
		case ichorv1alpha1.DiskRoleEphemeral:
			if SharedLayout(m) {
				return nil, fmt.Errorf("machine %s: disks[%d]: an ephemeral disk with systemDiskLayout shared, "+
					"which keeps EPHEMERAL on the system disk: use one or the other", m.Name, i)
			}

			if ephemeral {
				return nil, fmt.Errorf("machine %s: disks[%d]: a second ephemeral disk", m.Name, i)
			}

			ephemeral = true

			prov, err := volumeProvisioning(d)
			if err != nil {
				return nil, fmt.Errorf("machine %s: disks[%d]: %w", m.Name, i, err)
			}

			out = append(out, multidoc("VolumeConfig", doc{keyName: constants.EphemeralPartitionLabel, keyProvisioning: prov}))
		case ichorv1alpha1.DiskRoleUserVolume:
			if d.VolumeName == "" {
				return nil, fmt.Errorf("machine %s: disks[%d]: role userVolume needs a volumeName", m.Name, i)
			}

			prov, err := volumeProvisioning(d)
			if err != nil {
				return nil, fmt.Errorf("machine %s: disks[%d]: %w", m.Name, i, err)
			}

			if d.MaxSize == "" {
				// machinery requires a size (config/types/block UserVolumeConfig
				// validation: "min size or max size is required"); a disk given
				// to one user volume is used whole.
				prov["maxSize"] = "100%"
			}

			out = append(out, multidoc("UserVolumeConfig", doc{keyName: d.VolumeName, keyProvisioning: prov}))
		case ichorv1alpha1.DiskRoleSystem, ichorv1alpha1.DiskRoleStorage, ichorv1alpha1.DiskRoleUnused:
		default:
			return nil, fmt.Errorf("machine %s: disks[%d]: unknown disk role %q", m.Name, i, d.Role)
		}
	}

	return out, nil
}

// DiskSelectorExpression is the CEL expression over Talos's disk resource
// (machinery resources/block DiskSpec: wwid, serial, symlinks, bus_path,
// dev_path) that matches a disk by its most stable attribute.
func DiskSelectorExpression(s ichorv1alpha1.DiskSelector) (string, error) {
	switch {
	case s.WWID != "":
		return "disk.wwid == " + strconv.Quote(s.WWID), nil
	case s.Serial != "":
		return "disk.serial == " + strconv.Quote(s.Serial), nil
	case s.ByID != "":
		id := s.ByID
		if !strings.HasPrefix(id, "/dev/disk/by-id/") {
			id = "/dev/disk/by-id/" + id
		}

		return strconv.Quote(id) + " in disk.symlinks", nil
	case s.BusPath != "":
		return "disk.bus_path == " + strconv.Quote(s.BusPath), nil
	case s.DevicePath != "":
		return "disk.dev_path == " + strconv.Quote(s.DevicePath), nil
	default:
		return "", fmt.Errorf("the disk selector names no attribute")
	}
}

// MachineValues are the machine's own values, the start of the machine
// layer: its hostname (machinery's stdpatches.WithStaticHostname) and its
// node labels.
func MachineValues(m *ichorv1alpha1.TalosMachine, vc *coreconfig.VersionContract) ([]Step, error) {
	var steps []Step

	if m.Spec.Hostname != "" {
		b, err := stdpatches.WithStaticHostname(vc, m.Spec.Hostname)
		if err != nil {
			return nil, fmt.Errorf("machine %s: hostname: %w", m.Name, err)
		}

		s, err := bytesStep(LayerMachine, PatchHostname, b)
		if err != nil {
			return nil, err
		}

		steps = append(steps, s)
	}

	if len(m.Spec.Labels) > 0 {
		l := make(doc, len(m.Spec.Labels))
		for k, v := range m.Spec.Labels {
			l[k] = v
		}

		var d doc
		if vc.MultidocKubernetesConfigSupported() {
			d = multidoc("KubeNodeConfig", doc{"labels": l})
		} else {
			d = legacy(doc{keyMachine: doc{"nodeLabels": l}})
		}

		s, err := yamlStep(LayerMachine, PatchNodeLabels, d)
		if err != nil {
			return nil, err
		}

		steps = append(steps, s)
	}

	return steps, nil
}
