package initflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// Env is what init runs with besides its options: the secrets store, how it
// gets a passphrase, and where it prints.
type Env struct {
	// Store is the cluster's secrets store.
	Store *secretstore.Store
	// Passphrase reads the passphrase of an existing store.
	Passphrase secretstore.Passphrase
	// NewPassphrase gets a passphrase for a new store, and whether it was generated.
	NewPassphrase func() (pass string, generated bool, err error)
	// Progress shows the steps.
	Progress *Progress
	// Out receives the summary; ErrOut the passphrase (once) and the backup nag.
	Out, ErrOut io.Writer
	// Version is this CLI's version, the version the IchorInstallation asks for.
	Version string
}

// state is one run's working set.
type state struct {
	o    Options
	env  Env
	p    *Progress
	pass string

	bundle     *secrets.Bundle
	bundleYAML []byte
	node       *Node
	configured bool
	cluster    *ichorv1alpha1.TalosCluster
	machine    *ichorv1alpha1.TalosMachine
	rendered   *render.Result
	kubeconfig []byte
	sentAt     time.Time
}

// Run runs init. Each step first looks at what exists, so a run after a
// failure continues where the last one stopped.
func Run(ctx context.Context, o Options, env Env) error {
	if err := o.Validate(); err != nil {
		return err
	}

	s := &state{o: o, env: env, p: env.Progress}

	steps := []struct {
		title string
		do    func(context.Context) error
	}{
		{"Secrets bundle", s.secretsBundle},
		{"First control plane " + o.Node, s.firstNode},
		{"Configuration (Cilium " + o.CiliumVersion + " as the only inline manifest)", s.configure},
		{"Install and boot of " + o.Node, s.waitRunning},
		{"etcd bootstrap", s.bootstrap},
		{"Admin kubeconfig and os:admin talosconfig", s.credentials},
	}

	for _, st := range steps {
		s.p.Step(st.title)

		if err := st.do(ctx); err != nil {
			s.p.Fail()

			return err
		}
	}

	k := &kubeSteps{s: s}

	kSteps := []struct {
		title string
		do    func(context.Context) error
	}{
		{"Kubernetes API at " + s.apiURL(), k.connect},
		{k.installTitle(), k.install},
		{"Bundle Secret, TalosCluster, first TalosMachine, IchorInstallation", k.resources},
	}

	if o.Wait {
		kSteps = append(kSteps, struct {
			title string
			do    func(context.Context) error
		}{"The controller takes over the first control plane", k.wait}, struct {
			title string
			do    func(context.Context) error
		}{"Network policies of " + o.Namespace, k.networkPolicies})
	}

	for _, st := range kSteps {
		s.p.Step(st.title)

		if err := st.do(ctx); err != nil {
			s.p.Fail()

			return err
		}
	}

	s.p.Done()
	s.summary()

	return nil
}

func (s *state) apiURL() string {
	u, _ := render.Endpoint(s.clusterEndpoint())

	return u
}

func (s *state) clusterEndpoint() ichorv1alpha1.ClusterEndpoint {
	return ichorv1alpha1.ClusterEndpoint{Type: s.o.EndpointType, Host: s.o.Endpoint, Port: s.o.EndpointPort}
}

func (s *state) talosVersion() string {
	if s.o.TalosVersion != "" {
		return s.o.TalosVersion
	}

	return release.DefaultTalosVersion
}

// versionContract is the Talos version's major.minor (v1.14.1 → v1.14).
func (s *state) versionContract() string {
	v := strings.TrimPrefix(s.talosVersion(), "v")
	parts := strings.SplitN(v, ".", 3)

	if len(parts) < 2 {
		return "v" + v
	}

	return "v" + parts[0] + "." + parts[1]
}

// passphrase reads the store's passphrase once per run.
func (s *state) passphrase() (string, error) {
	if s.pass != "" {
		return s.pass, nil
	}

	p, err := s.env.Passphrase()
	if err != nil {
		return "", err
	}

	s.pass = p

	return p, nil
}

// secretsBundle loads the cluster's bundle from the store, or generates one
// when the store is empty. It never generates a bundle over an existing one.
func (s *state) secretsBundle(_ context.Context) error {
	st, err := s.env.Store.Status()
	if err != nil {
		return fmt.Errorf("reading the secrets store %s: %w", s.env.Store.Dir, err)
	}

	var hasBundle, hasOther bool

	for _, f := range st {
		present := f.Encrypted || f.Plaintext
		if f.Name == secretstore.FileBundle {
			hasBundle = present
		} else if present {
			hasOther = true
		}
	}

	if hasBundle {
		s.p.Detailf("continuing with the bundle stored in %s", s.env.Store.Dir)

		data, err := s.env.Store.Read(secretstore.FileBundle, s.passphrase)
		if err != nil {
			return fmt.Errorf("cluster %s already has a secrets bundle in %s, and init continues with it (it never makes a second one): %w",
				s.o.Cluster, s.env.Store.Dir, err)
		}

		b, err := bundle.Decode(data, s.versionContract())
		if err != nil {
			return fmt.Errorf("the secrets bundle in %s does not load (%w): restore it from your backup, or pick another --cluster name", s.env.Store.Dir, err)
		}

		s.bundle, s.bundleYAML = b, data

		return nil
	}

	if hasOther {
		return fmt.Errorf("%s holds files of cluster %s but no secrets bundle: restore secrets.yaml.age from your backup, "+
			"or move the directory away to start a new cluster of that name", s.env.Store.Dir, s.o.Cluster)
	}

	pass, generated, err := s.env.NewPassphrase()
	if err != nil {
		return err
	}

	b, err := bundle.Generate(secrets.NewClock(), s.versionContract())
	if err != nil {
		return fmt.Errorf("generating the secrets bundle: %w", err)
	}

	data, err := bundle.Encode(b)
	if err != nil {
		return err
	}

	if err := s.env.Store.Save(secretstore.Contents{Bundle: data}, pass); err != nil {
		return fmt.Errorf("storing the secrets bundle in %s: %w", s.env.Store.Dir, err)
	}

	s.bundle, s.bundleYAML, s.pass = b, data, pass

	if generated {
		s.p.Notef("\nThe generated passphrase of %s (shown only now; Ichor does not keep it, store it in your password manager):\n\n    %s\n", s.env.Store.Dir, pass)
	}

	s.p.Notef("Back up %s now, and keep the passphrase apart from it: the bundle holds the cluster's CA keys, "+
		"and without it a cluster that lost its control planes cannot be recovered.", s.env.Store.Dir)

	return nil
}

// firstNode finds the node: configured with this bundle (an earlier run sent
// the configuration), or in maintenance mode, whose identity and disks it reads.
func (s *state) firstNode(ctx context.Context) error {
	if c, err := s.dialConfigured(ctx); err == nil {
		defer c.Close()

		inv, err := talos.ReadInventory(ctx, c.Client())
		if err == nil {
			n := &Node{Address: s.o.Node, Inventory: *inv}
			s.node, s.configured = n, true
			s.p.Detailf("the node already runs this cluster's configuration (stage %s): continuing", n.Stage)

			return nil
		}
	}

	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	mn, err := talos.DialMaintenance(rctx, s.o.Node, s.o.TalosPort, s.o.Fingerprint)
	if err != nil {
		return err
	}
	defer mn.Close()

	inv, err := mn.Inventory(rctx)

	switch {
	case err == nil:
	case errors.Is(err, talos.ErrFingerprintMismatch) || (s.o.Fingerprint != "" && mn.Fingerprint() != "" && mn.Fingerprint() != s.o.Fingerprint):
		return fmt.Errorf("the node at %s presents maintenance certificate %s, not %s given with --node-fingerprint: nothing was sent. "+
			"Check the fingerprint on the node's console; if another machine answers on this address, fix the address", s.o.Node, mn.Fingerprint(), s.o.Fingerprint)
	case mn.Configured(err):
		return fmt.Errorf("%w (%s): init never reconfigures a running node; boot it into maintenance mode (or reset it) first, "+
			"or bring the running cluster it belongs to under Ichor with `ichor adopt` (`ichor adopt --plan` shows what that would take)", ErrConfiguredElsewhere, s.o.Node)
	default:
		return fmt.Errorf("reading the node at %s in maintenance mode: %w; is it booted from Talos media and reachable on port %d?",
			s.o.Node, err, portOr(s.o.TalosPort))
	}

	n := &Node{Address: s.o.Node, Fingerprint: mn.Fingerprint(), Inventory: *inv}

	if n.Stage != ichorv1alpha1.StageMaintenance {
		return fmt.Errorf("the node at %s is in stage %s, not maintenance: wait for it to reach maintenance mode, then run init again", s.o.Node, n.Stage)
	}

	s.node = n
	s.p.Detailf("Talos %s, SMBIOS UUID %s, %d disk(s), maintenance certificate %s", n.TalosVersion, orDash(n.Identity.UUID), len(n.Hardware.Disks), n.Fingerprint)

	return nil
}

func portOr(p int) int {
	if p == 0 {
		return 50000
	}

	return p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}

	return s
}

// dialConfigured connects to the node as os:admin with a certificate issued
// from the bundle's OS CA, verifying the node against that CA, and checks
// that it answers.
func (s *state) dialConfigured(ctx context.Context) (*talos.Node, error) {
	d := &talos.Dialer{Port: s.o.TalosPort, CertTTL: adminCertTTL}

	c, err := d.Dial(ctx, s.o.Node, s.bundle)
	if err != nil {
		return nil, err
	}

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	if _, _, err := c.Stage(sctx); err != nil {
		c.Close()

		return nil, err
	}

	return c, nil
}

// installDisk picks the system disk: the one given, else the node's only
// disk, else its first disk without partitions; keyed on its most stable
// attribute (WWID, serial, by-id path, bus path, device path).
func (s *state) installDisk() (*ichorv1alpha1.DiskSelector, bool, error) {
	disks := s.node.Hardware.Disks
	if s.o.InstallDisk != nil {
		for _, d := range disks {
			if s.o.InstallDisk.Matches(d) {
				return s.o.InstallDisk, d.HasPartitions, nil
			}
		}

		if len(disks) > 0 {
			return nil, false, fmt.Errorf("--install-disk selects none of the node's disks (%s)", diskList(disks))
		}

		return s.o.InstallDisk, false, nil
	}

	if len(disks) == 0 {
		return nil, false, fmt.Errorf("the node at %s reports no disk: give one with --install-disk", s.o.Node)
	}

	sorted := slices.Clone(disks)
	slices.SortFunc(sorted, func(a, b ichorv1alpha1.DiscoveredDisk) int { return strings.Compare(a.DevicePath, b.DevicePath) })

	pick := sorted[0]

	for _, d := range sorted {
		if !d.HasPartitions {
			pick = d

			break
		}
	}

	if len(sorted) > 1 {
		s.p.Notef("The node has %d disks (%s); installing to %s. Pass --install-disk to choose another.", len(sorted), diskList(sorted), pick.DevicePath)
	}

	sel, _ := pick.StableSelector()

	return &sel, pick.HasPartitions, nil
}

func diskList(ds []ichorv1alpha1.DiscoveredDisk) string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.DevicePath)
	}

	return strings.Join(out, ", ")
}

// objects builds the TalosCluster and the first TalosMachine init renders for and writes.
func (s *state) objects() error {
	topo, err := PresetTopology(s.o.Preset)
	if err != nil {
		return err
	}

	schedulable := topo.Schedulable
	s.cluster = &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.o.Namespace, Name: s.o.Cluster,
			// Cilium is booted from the inline manifest configure sends; the
			// controller keeps it in the render and hands it over to Helm.
			Annotations: map[string]string{
				ichorv1alpha1.CNIBootstrapAnnotation: ichorv1alpha1.CNIBootstrapInline, ichorv1alpha1.CNIBootstrapChartAnnotation: s.o.CiliumVersion,
			},
		},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      s.talosVersion(),
			VersionContract:   s.versionContract(),
			KubernetesVersion: s.kubernetesVersion(),
			Endpoint:          s.clusterEndpoint(),
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: s.o.Cluster + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: topo.ControlPlanes, Schedulable: &schedulable},
			CNI: ichorv1alpha1.CNISpec{
				Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: s.o.Tunnel, KubeProxy: ichorv1alpha1.KubeProxyReplaced,
			},
		},
	}

	meta := objectMeta(s.o.Namespace, ichorv1alpha1.MachineName(s.o.Cluster, s.node.Identity))
	meta.Labels = map[string]string{ichorv1alpha1.ClusterLabel: s.o.Cluster}
	s.machine = &ichorv1alpha1.TalosMachine{
		ObjectMeta: meta,
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: s.o.Cluster,
			Identity:    s.node.Identity,
			Address:     s.o.Node,
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved},
			Role:        ichorv1alpha1.RoleControlPlane,
		},
	}

	if s.configured {
		return nil
	}

	disk, parted, err := s.installDisk()
	if err != nil {
		return err
	}

	if parted && !s.o.ConfirmWipe {
		return fmt.Errorf("the install disk (%s) holds partitions, which the install wipes: pass --confirm-wipe if that is intended, "+
			"or choose another disk with --install-disk", disk.String())
	}

	s.machine.Spec.Install = ichorv1alpha1.MachineInstall{Disk: disk, ConfirmWipe: parted}

	return nil
}

func (s *state) kubernetesVersion() string {
	if s.o.KubernetesVersion != "" {
		return strings.TrimPrefix(s.o.KubernetesVersion, "v")
	}

	return release.DefaultKubernetesVersion
}

// configure renders the first control plane's configuration with Cilium as
// the only inline manifest and sends it over the maintenance connection with
// the fingerprint read in firstNode pinned.
func (s *state) configure(ctx context.Context) error {
	if err := s.objects(); err != nil {
		return err
	}

	if s.configured {
		s.p.Detailf("already sent by an earlier run")

		return nil
	}

	// The controller's render keeps these bytes until the hand-over.
	ch, err := cilium.BootstrapManifest(ctx, s.cluster)
	if err != nil {
		return fmt.Errorf("rendering the pinned Cilium chart: %w", err)
	}

	res, err := render.Render(render.Input{
		Cluster: s.cluster, Machine: s.machine, Bundle: s.bundle,
		InlineManifests: []render.InlineManifest{{Name: cilium.InlineManifestName, Contents: ch.Manifest}},
	})
	if err != nil {
		return fmt.Errorf("rendering the first control plane's configuration: %w", err)
	}

	s.rendered = res
	s.p.Detailf("rendered %s (Cilium chart %s, sha256 %s…)", res.Hash[:19], ch.Version, ch.SHA256[:12])

	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	mn, err := talos.DialMaintenance(actx, s.o.Node, s.o.TalosPort, s.node.Fingerprint)
	if err != nil {
		return err
	}
	defer mn.Close()

	if err := mn.Apply(actx, res.Bytes); err != nil {
		if errors.Is(err, talos.ErrFingerprintMismatch) || mn.Fingerprint() != s.node.Fingerprint {
			return fmt.Errorf("the node at %s changed its maintenance certificate between the read and the apply (%s, then %s): nothing was sent; "+
				"check which machine answers on the address", s.o.Node, s.node.Fingerprint, mn.Fingerprint())
		}

		return fmt.Errorf("%w; nothing else was changed, fix the cause and run init again", err)
	}

	s.sentAt = time.Now()
	s.p.Detailf("sent over the maintenance connection (certificate %s pinned)", s.node.Fingerprint)

	return nil
}

// pollInterval is how often init looks again.
const pollInterval = 2 * time.Second

// poll calls f every pollInterval until it reports done, ctx ends or timeout passes.
func poll(ctx context.Context, timeout time.Duration, f func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	for {
		done, err := f(ctx)
		if err != nil || done {
			return err
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// waitRunning follows MachineStatus over the configured API until running.
func (s *state) waitRunning(ctx context.Context) error {
	last := "the node restarts its API with the new configuration"

	err := poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
		c, err := s.dialConfigured(ctx)
		if err != nil {
			s.p.Detailf("%s", last)

			return false, nil
		}
		defer c.Close()

		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()

		stage, _, err := c.Stage(sctx)
		if err != nil {
			return false, nil
		}

		last = "stage " + stage
		s.p.Detailf("%s", last)

		return stage == ichorv1alpha1.StageRunning, nil
	})
	if err != nil {
		return fmt.Errorf("the node at %s did not reach stage running within %s (last: %s); check its console, then run init again to continue",
			s.o.Node, s.o.Timeout, last)
	}

	return nil
}

// bootstrap creates the etcd cluster on the first control plane.
func (s *state) bootstrap(ctx context.Context) error {
	var last error

	err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		c, err := s.dialConfigured(ctx)
		if err != nil {
			last = err

			return false, nil
		}
		defer c.Close()

		already, err := bootstrap(ctx, c.Client())

		switch status.Code(err) {
		case codes.OK:
			if already {
				s.p.Detailf("etcd was bootstrapped by an earlier run")
			}

			return true, nil
		case codes.FailedPrecondition, codes.Unavailable, codes.DeadlineExceeded:
			last = err
			s.p.Detailf("the node is not ready for the bootstrap yet")

			return false, nil
		default:
			return false, fmt.Errorf("bootstrapping etcd on %s: %w", s.o.Node, err)
		}
	})
	if err != nil && last != nil && !strings.HasPrefix(err.Error(), "bootstrapping") {
		return fmt.Errorf("bootstrapping etcd on %s did not succeed within 5m (last: %w); run init again to continue", s.o.Node, last)
	}

	return err
}

// credentials fetches the admin kubeconfig (its context's namespace set to
// init's), makes the os:admin talosconfig and stores both encrypted.
func (s *state) credentials(ctx context.Context) error {
	var kc []byte

	err := poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		c, err := s.dialConfigured(ctx)
		if err != nil {
			return false, nil
		}
		defer c.Close()

		kc, err = c.Kubeconfig(ctx)

		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("fetching the admin kubeconfig from %s: %w; run init again to continue", s.o.Node, err)
	}

	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return errors.New("the node's admin kubeconfig does not parse")
	}

	for _, c := range cfg.Contexts {
		c.Namespace = s.o.Namespace
	}

	kc, err = clientcmd.Write(*cfg)
	if err != nil {
		return err
	}

	tc, err := talosconfig(s.o.Cluster, s.o.Node, s.bundle)
	if err != nil {
		return err
	}

	pass, err := s.passphrase()
	if err != nil {
		return err
	}

	if err := s.env.Store.Save(secretstore.Contents{Kubeconfig: kc, Talosconfig: tc}, pass); err != nil {
		return fmt.Errorf("storing the kubeconfig and talosconfig in %s: %w", s.env.Store.Dir, err)
	}

	s.kubeconfig = kc

	if s.o.WriteKubeconfig != "" {
		if err := writePrivate(s.o.WriteKubeconfig, kc); err != nil {
			return fmt.Errorf("writing the kubeconfig to %s: %w", s.o.WriteKubeconfig, err)
		}

		s.p.Detailf("stored in %s; also written to %s (mode 0600)", s.env.Store.Dir, s.o.WriteKubeconfig)
	} else {
		s.p.Detailf("stored in %s", s.env.Store.Dir)
	}

	return nil
}

// writePrivate writes data to path with mode 0600, through a temporary file.
func writePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}

	name := tmp.Name()
	defer func() { _ = os.Remove(name) }()

	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()

		return err
	}

	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()

		return err
	}

	if err := tmp.Close(); err != nil {
		return err
	}

	return os.Rename(name, path)
}

func (s *state) summary() {
	w := s.env.Out
	kubeconfig := s.o.WriteKubeconfig

	if kubeconfig == "" {
		kubeconfig = "KUBECONFIG_FILE"
		_, _ = fmt.Fprintf(w, "\nCluster %s is initialised. Its admin kubeconfig is in the secrets store; write it to a file with\n"+
			"  ichor secrets export kubeconfig --cluster %s --out %s\n", s.o.Cluster, s.o.Cluster, kubeconfig)
	} else {
		_, _ = fmt.Fprintf(w, "\nCluster %s is initialised. Its admin kubeconfig is %s.\n", s.o.Cluster, kubeconfig)
	}

	_, _ = fmt.Fprintf(w, "Next:\n"+
		"  ichor --kubeconfig %[1]s cluster discovery add ADDRESS|CIDR   # where the other machines are\n"+
		"  ichor --kubeconfig %[1]s machine list                         # the machines found, pending approval\n"+
		"  ichor --kubeconfig %[1]s machine approve MACHINE --role controlplane|worker\n", kubeconfig)
}

// WritePrivate writes data to path with mode 0600, through a temporary file.
func WritePrivate(path string, data []byte) error { return writePrivate(path, data) }

// Poll calls f every second until it is done, fails, or timeout passes.
func Poll(ctx context.Context, timeout time.Duration, f func(context.Context) (bool, error)) error {
	return poll(ctx, timeout, f)
}
