package talosemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"
)

// The CNI a talosctl-made cluster starts with.
const (
	// TalosctlCNIFlannel is Talos's default: its own flannel.
	TalosctlCNIFlannel = "flannel"
	// TalosctlCNINone turns Talos's CNI off, as the documented patch for a
	// CNI of one's own does (the KubeFlannelCNIConfig document deleted under
	// the v1.14 contract, cluster.network.cni.name: none before it).
	TalosctlCNINone = "none"
)

// TalosctlCluster describes a cluster made the way `talosctl gen secrets`,
// `talosctl gen config`, `talosctl apply-config --insecure` and `talosctl
// bootstrap` make one, with no Ichor involved.
type TalosctlCluster struct {
	// Name is the cluster name (default "talosctl").
	Name string
	// ControlPlanes and Workers are machines in maintenance mode; the first
	// control plane is the endpoint and is bootstrapped.
	ControlPlanes, Workers []*Machine
	// KubernetesVersion defaults to 1.37.2.
	KubernetesVersion string
	// CNI is TalosctlCNIFlannel (the default) or TalosctlCNINone.
	CNI string
	// InlineManifests go into cluster.inlineManifests of the control planes.
	InlineManifests []InlineManifest
	// InstallDisk defaults to /dev/nvme0n1 (the emulator's default disk).
	InstallDisk string
	// Timeout bounds each wait (default 2 minutes).
	Timeout time.Duration
}

// InlineManifest is one cluster.inlineManifests entry.
type InlineManifest struct {
	Name, Contents string
}

// TalosctlResult is what talosctl leaves the operator with.
type TalosctlResult struct {
	// Bundle is the secrets bundle (`talosctl gen secrets`).
	Bundle *secrets.Bundle
	// SecretsYAML is the bundle as `talosctl gen secrets` writes it.
	SecretsYAML []byte
	// ControlPlane and Worker are the generated configurations as applied.
	ControlPlane, Worker []byte
	// Talosconfig is the os:admin talosconfig `talosctl gen config` writes
	// (its endpoint the first control plane).
	Talosconfig []byte
}

// CiliumInlineManifest is the part of a Cilium install (`cilium install
// --dry-run`, `helm template cilium`) that adoption reads: the cilium-config
// ConfigMap with its IPAM mode ("" leaves the key out, as Cilium's own default
// does) and the cilium DaemonSet.
func CiliumInlineManifest(ipam string) InlineManifest {
	var b strings.Builder

	b.WriteString("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: cilium\n  namespace: kube-system\n---\n")
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cilium-config\n  namespace: kube-system\ndata:\n  tunnel-protocol: vxlan\n  kube-proxy-replacement: \"false\"\n")

	if ipam != "" {
		b.WriteString("  ipam: " + ipam + "\n")
	}

	b.WriteString("---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: cilium\n  namespace: kube-system\n  labels:\n    k8s-app: cilium\n" +
		"spec:\n  selector:\n    matchLabels:\n      k8s-app: cilium\n  template:\n    metadata:\n      labels:\n        k8s-app: cilium\n" +
		"    spec:\n      serviceAccountName: cilium\n      hostNetwork: true\n      containers:\n      - name: cilium-agent\n        image: quay.io/cilium/cilium:v1.19.3\n")

	return InlineManifest{Name: "cilium", Contents: b.String()}
}

// MakeTalosctlCluster makes the cluster: secrets and configurations from
// machinery's generate (what talosctl runs), each configuration applied over
// the insecure maintenance API, every machine waited for until it runs, then
// Bootstrap on the first control plane with the generated talosconfig.
func MakeTalosctlCluster(ctx context.Context, c TalosctlCluster) (*TalosctlResult, error) {
	if len(c.ControlPlanes) == 0 {
		return nil, errors.New("a talosctl cluster needs a control plane")
	}

	name := c.Name
	if name == "" {
		name = "talosctl"
	}

	kube := c.KubernetesVersion
	if kube == "" {
		kube = "1.37.2"
	}

	disk := c.InstallDisk
	if disk == "" {
		disk = "/dev/nvme0n1"
	}

	timeout := c.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}

	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		return nil, err
	}

	in, err := generate.NewInput(name, "https://"+c.ControlPlanes[0].IP()+":6443",
		kube, generate.WithSecretsBundle(bundle), generate.WithInstallDisk(disk))
	if err != nil {
		return nil, err
	}

	res := &TalosctlResult{Bundle: bundle}

	if res.SecretsYAML, err = encodeBundle(bundle); err != nil {
		return nil, err
	}

	for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		b, err := talosctlConfig(in, typ, c)
		if err != nil {
			return nil, err
		}

		if typ == machine.TypeControlPlane {
			res.ControlPlane = b
		} else {
			res.Worker = b
		}
	}

	tc, err := in.Talosconfig()
	if err != nil {
		return nil, err
	}

	if res.Talosconfig, err = tc.Bytes(); err != nil {
		return nil, err
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)

	apply := func(m *Machine, cfg []byte) {
		defer wg.Done()

		if err := m.ApplyInMaintenance(ctx, cfg, timeout); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}

	for _, m := range c.ControlPlanes {
		wg.Add(1)

		go apply(m, res.ControlPlane)
	}

	for _, m := range c.Workers {
		wg.Add(1)

		go apply(m, res.Worker)
	}

	wg.Wait()

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	if err := bootstrap(ctx, tc, c.ControlPlanes[0], timeout); err != nil {
		return nil, err
	}

	return res, nil
}

// talosctlConfig is one generated configuration with the CNI choice and the
// inline manifests applied as a person would patch them.
//
//nolint:staticcheck // the v1alpha1 inline manifests are what generated configs carry in v1.14
func talosctlConfig(in *generate.Input, typ machine.Type, c TalosctlCluster) ([]byte, error) {
	cfg, err := in.Config(typ)
	if err != nil {
		return nil, err
	}

	if c.CNI == TalosctlCNINone {
		p, err := configpatcher.LoadPatch([]byte("apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n"))
		if err != nil {
			return nil, err
		}

		out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
		if err != nil {
			return nil, err
		}

		if cfg, err = out.Config(); err != nil {
			return nil, err
		}
	}

	if typ == machine.TypeControlPlane && len(c.InlineManifests) > 0 {
		cfg = cfg.Clone()
		for _, m := range c.InlineManifests {
			cfg.RawV1Alpha1().ClusterConfig.ClusterInlineManifests = append(cfg.RawV1Alpha1().ClusterConfig.ClusterInlineManifests,
				v1alpha1.ClusterInlineManifest{InlineManifestName: m.Name, InlineManifestContents: m.Contents})
		}
	}

	return cfg.EncodeBytes()
}

// bootstrap is `talosctl bootstrap`: retried while the node says it is not
// ready for it yet.
func bootstrap(ctx context.Context, tc *clientconfig.Config, cp *Machine, timeout time.Duration) error {
	cl, err := talosclient.New(ctx, talosclient.WithConfig(tc), talosclient.WithEndpoints(cp.IP()))
	if err != nil {
		return err
	}

	defer func() { _ = cl.Close() }()

	deadline := time.Now().Add(timeout)

	for {
		_, err := cl.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{})
		if err == nil {
			return nil
		}

		if status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return fmt.Errorf("bootstrap %s: %w", cp.Name(), err)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// encodeBundle writes the bundle as `talosctl gen secrets` does (YAML of
// machinery's Bundle).
func encodeBundle(b *secrets.Bundle) ([]byte, error) {
	var buf bytes.Buffer

	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(b); err != nil {
		return nil, err
	}

	if err := enc.Close(); err != nil {
		return nil, err
	}

	return buf.Bytes(), nil
}
