// Package recoverflow is `ichor restore --recover-cluster`: the recovery of a
// cluster whose every machine was wiped (architecture, "Backup, recovery,
// certificates": full-loss recovery is CLI-only and the bundle plus a
// snapshot is sufficient).
//
// It reads the cluster's secrets bundle from the local store
// (~/.ichor/clusters/<name>/), downloads the snapshot from the backup store,
// decrypts and checks it (contracts/pkg/etcdbackup/fetch, the live restore's
// code), and reads the cluster's own resources out of it
// (contracts/pkg/etcdbackup/contents): the TalosCluster and its
// TalosMachines say which machines were the control planes, at which
// addresses and with which SMBIOS UUIDs; the configuration of each is
// rendered from them as the controller renders it (render.LoadInput over the
// snapshot). Every control plane must answer in maintenance mode as itself
// before anything is sent. Then each gets its configuration, the snapshot is
// uploaded to one (EtcdRecover) and that one is bootstrapped from it
// (Bootstrap{recover_etcd}); the others join it as the emulator and Talos
// join a running member. Once the Kubernetes API answers, Ichor is installed
// as `ichor init` installs it, and every TalosMachine of the cluster is held
// (ichor.maesh.dev/hold-apply=ichor-restore): the controller reports each
// machine's drift and applies nothing until a person runs
// `ichor restore --confirm CLUSTER`. Workers are not touched: after the
// confirmation the controller re-installs them (they answer in maintenance
// mode with their approved identity).
//
// Each call that cannot be repeated is recorded first in recovery.json in the
// cluster's store directory (no secret in it), after the machine's identity
// check; a second run reads it and never sends a recorded call again.
package recoverflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/kube"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/contents"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/fetch"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/recovery"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// HoldValue is the value of the hold-apply annotation the recovery sets.
const HoldValue = recovery.HoldValue

// SnapshotLatest names the newest snapshot in the store.
const SnapshotLatest = "latest"

// RecordFile is the recovery's record in the cluster's store directory.
const RecordFile = "recovery.json"

// Options are the recovery's inputs.
type Options struct {
	// Cluster is the TalosCluster's name, and the store directory's.
	Cluster string
	// Namespace is where the cluster's resources lived (the store's layout
	// keeps snapshots per namespace and cluster).
	Namespace string
	// Snapshot is the snapshot's name as the store lists it (or its key), or latest.
	Snapshot string
	// Store is the backup store (its credentials included).
	Store store.Destination
	// Identities decrypt the snapshot.
	Identities []age.Identity
	// TalosPort is the Talos API port; zero is 50000.
	TalosPort int
	// Install and InstallerImage: how Ichor is installed (initflow's modes).
	Install, InstallerImage string
	// WriteKubeconfig also writes the admin kubeconfig there.
	WriteKubeconfig string
	// DryRun checks and prints the plan, and changes nothing.
	DryRun bool
	// Timeout bounds each wait.
	Timeout time.Duration
}

// Env is what the recovery runs with.
type Env struct {
	// Store is the cluster's secrets store.
	Store *secretstore.Store
	// Passphrase reads the store's passphrase.
	Passphrase secretstore.Passphrase
	// Progress shows the steps; Out receives the plan and the summary.
	Progress *initflow.Progress
	Out      io.Writer
	// Confirm asks the person to type the cluster's name after the plan.
	Confirm func(plan, want string) error
	// Version is this CLI's version.
	Version string
	// Scheme decodes the snapshot's resources.
	Scheme *runtime.Scheme
}

// machine is one control plane to rebuild.
type machine struct {
	m        *ichorv1alpha1.TalosMachine
	rendered *render.Result
	// fingerprint is the maintenance certificate seen at the check.
	fingerprint string
	// configured: the record says its configuration was sent (a second run).
	configured bool
}

// Record is what the recovery did, kept before each call that cannot be
// repeated (no secret).
type Record struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	// Snapshot is the snapshot's key and SHA256 its plain digest.
	Snapshot string `json:"snapshot"`
	SHA256   string `json:"sha256"`
	// ConfigSent names the control planes whose configuration was sent.
	ConfigSent map[string]time.Time `json:"configSent,omitempty"`
	// Uploaded and Bootstrapped name the control plane the snapshot was
	// uploaded to and bootstrapped on.
	Uploaded     string     `json:"uploaded,omitempty"`
	Bootstrapped string     `json:"bootstrapped,omitempty"`
	BootstrapAt  *time.Time `json:"bootstrapAt,omitempty"`
}

type state struct {
	o   Options
	env Env
	p   *initflow.Progress

	pass       string
	bundleYAML []byte
	bundle     *secrets.Bundle
	st         *store.Store
	key        string
	snap       *fetch.Snapshot
	dir        string
	cluster    *ichorv1alpha1.TalosCluster
	cps        []*machine
	workers    []string
	rec        *Record
	kubeconfig []byte
}

// Run runs the recovery.
func Run(ctx context.Context, o Options, env Env) error {
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Minute
	}

	if o.Namespace == "" {
		o.Namespace = "ichor-system"
	}

	s := &state{o: o, env: env, p: env.Progress}

	dir, err := os.MkdirTemp("", "ichor-recover-")
	if err != nil {
		return err
	}

	s.dir = dir
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory

	checks := []struct {
		title string
		do    func(context.Context) error
	}{
		{"Secrets bundle of cluster " + o.Cluster + " in " + env.Store.Dir, s.readBundle},
		{"Snapshot from " + o.Store.Endpoint + "/" + o.Store.Bucket, s.fetchSnapshot},
		{"The cluster's resources in the snapshot", s.readCluster},
		{"Control planes in maintenance mode, each as itself", s.checkMachines},
	}

	for _, st := range checks {
		s.p.Step(st.title)

		if err := st.do(ctx); err != nil {
			s.p.Fail()

			return err
		}
	}

	s.p.Done()

	plan := s.plan()
	if o.DryRun {
		_, _ = fmt.Fprintln(env.Out, plan)
		_, _ = fmt.Fprintln(env.Out, "Nothing was changed (--dry-run).")

		return nil
	}

	if err := env.Confirm(plan, o.Cluster); err != nil {
		return err
	}

	first := s.cps[0]
	steps := []struct {
		title string
		do    func(context.Context) error
	}{
		{"Configuration of the control planes (sent in maintenance mode, certificate pinned)", s.configure},
		{"Install and boot of the control planes", s.waitRunning},
		{"Snapshot uploaded to " + first.m.Name + " and etcd bootstrapped from it", s.recoverEtcd},
		{"The other control planes join etcd", s.waitJoined},
		{"Kubernetes API", s.waitAPI},
		{initflow.InstallTitle(initflow.Options{Namespace: o.Namespace, Install: o.Install, InstallerImage: o.InstallerImage}, initflow.Env{Version: env.Version}), s.install},
		{"Every TalosMachine of " + o.Cluster + " held until `ichor restore --confirm " + o.Cluster + "`", s.hold},
	}

	for _, st := range steps {
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

// readBundle reads the encrypted bundle from the store; it is decoded once
// the snapshot says the cluster's version contract.
func (s *state) readBundle(_ context.Context) error {
	st, err := s.env.Store.Status()
	if err != nil {
		return fmt.Errorf("reading the secrets store %s: %w", s.env.Store.Dir, err)
	}

	found := false

	for _, f := range st {
		if f.Name == secretstore.FileBundle && (f.Encrypted || f.Plaintext) {
			found = true
		}
	}

	if !found {
		return fmt.Errorf("there is no secrets bundle of cluster %s in %s: the recovery needs the bundle `ichor init` stored there "+
			"(restore the directory from your backup, or set %s to the Ichor home that holds it); nothing was changed",
			s.o.Cluster, s.env.Store.Dir, secretstore.HomeEnv)
	}

	data, err := s.env.Store.Read(secretstore.FileBundle, s.passphrase)
	if err != nil {
		return fmt.Errorf("reading the secrets bundle in %s: %w; nothing was changed", s.env.Store.Dir, err)
	}

	s.bundleYAML = data
	s.p.Detailf("read (%d bytes, decrypted)", len(data))

	return nil
}

// fetchSnapshot picks the snapshot, downloads, decrypts and checks it.
func (s *state) fetchSnapshot(ctx context.Context) error {
	st, err := store.Open(s.o.Store)
	if err != nil {
		return fmt.Errorf("the backup store: %w; nothing was changed", err)
	}

	s.st = st

	if err := st.Check(ctx); err != nil {
		return fmt.Errorf("the backup store does not answer: %w; nothing was changed", err)
	}

	objs, err := st.List(ctx, s.o.Namespace, s.o.Cluster)
	if err != nil {
		return fmt.Errorf("%w; nothing was changed", err)
	}

	where := etcdbackup.SnapshotsPrefix(s.o.Store.Prefix, s.o.Namespace, s.o.Cluster)
	if len(objs) == 0 {
		return fmt.Errorf("the store lists no snapshot of cluster %s in namespace %s (under %s in bucket %s): check --from-store (bucket and prefix) "+
			"and --namespace, the namespace the cluster's resources lived in; nothing was changed", s.o.Cluster, s.o.Namespace, where, s.o.Store.Bucket)
	}

	pick := -1

	if s.o.Snapshot == "" || s.o.Snapshot == SnapshotLatest {
		pick = 0
	} else {
		for i, o := range objs {
			if o.Key == s.o.Snapshot || path.Base(o.Key) == s.o.Snapshot {
				pick = i
			}
		}
	}

	if pick < 0 {
		names := make([]string, 0, len(objs))
		for _, o := range objs {
			names = append(names, path.Base(o.Key))
		}

		return fmt.Errorf("the store lists no snapshot %q of cluster %s; it lists %s (newest first); nothing was changed",
			s.o.Snapshot, s.o.Cluster, strings.Join(names, ", "))
	}

	s.key = objs[pick].Key

	snap, err := fetch.Fetch(ctx, st, s.key, s.o.Identities, s.dir)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w; nothing was changed", path.Base(s.key), err)
	}

	s.snap = snap
	s.p.Detailf("%s: etcd revision %d, %d keys, taken %s from %s; decrypted and checked", path.Base(s.key), snap.Verified.Revision,
		snap.Verified.TotalKeys, snap.Meta.TakenAt.UTC().Format(time.RFC3339), snap.Meta.Node)

	return nil
}

// readCluster reads the TalosCluster and its machines out of the snapshot,
// decodes the bundle with the cluster's contract and renders each control
// plane's configuration as the controller does.
func (s *state) readCluster(ctx context.Context) error {
	c, err := contents.Read(s.snap.Path)
	if err != nil {
		return fmt.Errorf("reading the snapshot: %w; nothing was changed", err)
	}

	r := &contents.Reader{C: c, Scheme: s.env.Scheme}

	cluster := &ichorv1alpha1.TalosCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: s.o.Namespace, Name: s.o.Cluster}, cluster); err != nil {
		return fmt.Errorf("the snapshot holds no TalosCluster %s/%s (%w): it is not a snapshot of a cluster Ichor managed from inside it; nothing was changed",
			s.o.Namespace, s.o.Cluster, err)
	}

	s.cluster = cluster

	b, err := bundle.Decode(s.bundleYAML, cluster.Spec.VersionContract)
	if err != nil {
		return fmt.Errorf("the secrets bundle in %s does not load: %w; nothing was changed", s.env.Store.Dir, err)
	}

	if b.Cluster == nil || cluster.Status.ClusterID != "" && b.Cluster.ID != cluster.Status.ClusterID {
		return fmt.Errorf("the secrets bundle in %s is not cluster %s's (its cluster ID differs from the TalosCluster's status.clusterID): "+
			"the machines would not form the same cluster; nothing was changed", s.env.Store.Dir, s.o.Cluster)
	}

	s.bundle = b

	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.List(ctx, list, client.InNamespace(s.o.Namespace)); err != nil {
		return fmt.Errorf("reading the TalosMachines in the snapshot: %w", err)
	}

	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName != s.o.Cluster || m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved || m.Spec.Address == "" {
			continue
		}

		if m.Spec.Role != ichorv1alpha1.RoleControlPlane {
			s.workers = append(s.workers, m.Name)

			continue
		}

		in, err := render.LoadInput(ctx, r, m)
		if err != nil {
			return fmt.Errorf("reading what the render of %s needs from the snapshot: %w", m.Name, err)
		}

		in.Bundle = b

		res, err := render.Render(in)
		if err != nil {
			return fmt.Errorf("rendering %s's configuration from the snapshot's resources: %w; nothing was changed", m.Name, err)
		}

		s.cps = append(s.cps, &machine{m: m, rendered: res})
	}

	if len(s.cps) == 0 {
		return fmt.Errorf("the snapshot's TalosCluster %s has no approved control plane with an address: nothing to rebuild; nothing was changed", s.o.Cluster)
	}

	// The control plane the endpoint names is bootstrapped (its API server
	// is the one the admin kubeconfig reaches); else the first by name.
	slices.SortFunc(s.cps, func(a, b *machine) int { return strings.Compare(a.m.Name, b.m.Name) })

	if i := slices.IndexFunc(s.cps, func(m *machine) bool { return m.m.Spec.Address == cluster.Spec.Endpoint.Host }); i > 0 {
		s.cps[0], s.cps[i] = s.cps[i], s.cps[0]
	}

	s.p.Detailf("TalosCluster %s (Talos %s, Kubernetes %s): %d control plane(s), %d worker(s)", cluster.Name, cluster.Spec.TalosVersion,
		cluster.Spec.KubernetesVersion, len(s.cps), len(s.workers))

	return s.loadRecord()
}

func (s *state) recordPath() string { return filepath.Join(s.env.Store.Dir, RecordFile) }

// loadRecord reads the record of an earlier run of this recovery (the same
// snapshot); a record of another snapshot is left for this run to replace
// (its machines then must answer in maintenance mode like any other).
func (s *state) loadRecord() error {
	s.rec = &Record{Cluster: s.o.Cluster, Namespace: s.o.Namespace, Snapshot: s.key, SHA256: s.snap.Verified.SHA256}

	data, err := os.ReadFile(s.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}

	if err != nil {
		return err
	}

	prev := &Record{}
	if err := json.Unmarshal(data, prev); err != nil {
		return fmt.Errorf("%s does not read (%w): move it away if no recovery of %s is under way", s.recordPath(), err, s.o.Cluster)
	}

	if prev.SHA256 != s.rec.SHA256 {
		return nil
	}

	s.rec = prev
	s.p.Detailf("continuing the recovery %s records", s.recordPath())

	return nil
}

// save writes the record before a call that cannot be repeated.
func (s *state) save() error {
	data, err := json.MarshalIndent(s.rec, "", "  ")
	if err != nil {
		return err
	}

	tmp := s.recordPath() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("recording the recovery in %s: %w (nothing was sent)", s.recordPath(), err)
	}

	return os.Rename(tmp, s.recordPath())
}

func (s *state) dialer() *talos.Dialer {
	return &talos.Dialer{Port: s.o.TalosPort, CertTTL: 30 * time.Minute}
}

// checkMachines checks that every control plane answers in maintenance mode
// with the SMBIOS UUID its TalosMachine recorded (or, after an earlier run
// sent its configuration, as itself with this bundle).
func (s *state) checkMachines(ctx context.Context) error {
	var problems []string

	for _, cp := range s.cps {
		m := cp.m

		if _, sent := s.rec.ConfigSent[m.Name]; sent {
			if n, err := s.dialer().Dial(ctx, m.Spec.Address, s.bundle); err == nil {
				v, verr := n.VerifyIdentity(ctx, talos.Identity{UUID: m.Spec.Identity.UUID})
				n.Close()

				if verr == nil {
					v.Close()

					cp.configured = true
					s.p.Detailf("%s at %s: configured by an earlier run", m.Name, m.Spec.Address)

					continue
				}
			}
		}

		fp, err := s.maintenanceIdentity(ctx, m)
		if err != nil {
			problems = append(problems, err.Error())

			continue
		}

		// In maintenance mode again (wiped since an earlier run): nothing of
		// what that run sent survives on it, its etcd data included.
		if _, sent := s.rec.ConfigSent[m.Name]; sent {
			delete(s.rec.ConfigSent, m.Name)

			if s.rec.Bootstrapped == m.Name || s.rec.Uploaded == m.Name {
				s.rec.Uploaded, s.rec.Bootstrapped, s.rec.BootstrapAt = "", "", nil
			}
		}

		cp.fingerprint = fp
		s.p.Detailf("%s at %s: maintenance mode, SMBIOS UUID %s, certificate %s", m.Name, m.Spec.Address, m.Spec.Identity.UUID, fp)
	}

	if len(problems) > 0 {
		return fmt.Errorf("every control plane must answer in maintenance mode as the machine the snapshot records: %s. "+
			"Boot wiped machines from Talos media at their old addresses; a cluster that still runs is restored with `ichor etcd restore`; nothing was changed",
			strings.Join(problems, "; "))
	}

	return nil
}

// maintenanceIdentity checks that m answers in maintenance mode as itself and
// returns the fingerprint of the certificate it presented.
func (s *state) maintenanceIdentity(ctx context.Context, m *ichorv1alpha1.TalosMachine) (string, error) {
	mn, err := s.dialMaintenance(ctx, m, "")
	if err != nil {
		return "", err
	}
	defer mn.Close()

	return mn.Fingerprint(), nil
}

// dialMaintenance connects to m in maintenance mode and checks who answers.
func (s *state) dialMaintenance(ctx context.Context, m *ichorv1alpha1.TalosMachine, pin string) (*talos.Maintenance, error) {
	if m.Spec.Identity.UUID == "" {
		return nil, fmt.Errorf("%s has no SMBIOS UUID recorded, so the node at %s cannot be shown to be it", m.Name, m.Spec.Address)
	}

	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	mn, err := talos.DialMaintenance(rctx, m.Spec.Address, s.o.TalosPort, pin)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", m.Name, m.Spec.Address, err)
	}

	stage, err := mn.Stage(rctx)

	switch {
	case err == nil && stage != ichorv1alpha1.StageMaintenance:
		err = fmt.Errorf("%s at %s is in stage %s, not maintenance", m.Name, m.Spec.Address, stage)
	case err != nil && mn.Configured(err):
		err = fmt.Errorf("%s at %s is not in maintenance mode: it runs a configured Talos", m.Name, m.Spec.Address)
	case err != nil:
		err = fmt.Errorf("%s at %s does not answer in maintenance mode: %s", m.Name, m.Spec.Address, talos.Message(err))
	}

	if err == nil {
		uuid, uerr := mn.UUID(rctx)
		if uerr != nil {
			err = fmt.Errorf("%s at %s: %s", m.Name, m.Spec.Address, talos.Message(uerr))
		} else if cerr := talos.Compare(m.Spec.Address, talos.Identity{UUID: m.Spec.Identity.UUID}, talos.Identity{UUID: uuid}); cerr != nil {
			err = fmt.Errorf("%s: %w", m.Name, cerr)
		}
	}

	if err != nil {
		mn.Close()

		return nil, err
	}

	return mn, nil
}

// plan says what the recovery does.
func (s *state) plan() string {
	var b strings.Builder

	fmt.Fprintf(&b, "This recovers cluster %s from etcd snapshot %s (revision %d, taken %s), with the secrets bundle in %s.\n",
		s.o.Cluster, path.Base(s.key), s.snap.Verified.Revision, s.snap.Meta.TakenAt.UTC().Format(time.RFC3339), s.env.Store.Dir)
	fmt.Fprintf(&b, "Everything written to the cluster after %s is lost.\nSteps:\n", s.snap.Meta.TakenAt.UTC().Format(time.RFC3339))

	for _, cp := range s.cps {
		fmt.Fprintf(&b, "  - send %s its configuration (%s) at %s in maintenance mode\n", cp.m.Name, cp.rendered.Hash[:19], cp.m.Spec.Address)
	}

	fmt.Fprintf(&b, "  - upload the snapshot to %s (EtcdRecover) and bootstrap etcd from it there; the other control planes join it\n", s.cps[0].m.Name)
	fmt.Fprintf(&b, "  - wait for the Kubernetes API, install Ichor (--install %s)\n", orDefault(s.o.Install, initflow.InstallManifest))
	fmt.Fprintf(&b, "  - hold every TalosMachine of %s (%s=%s): the controller reports drift and applies nothing until `ichor restore --confirm %s`",
		s.o.Cluster, ichorv1alpha1.HoldApplyAnnotation, HoldValue, s.o.Cluster)

	if len(s.workers) > 0 {
		fmt.Fprintf(&b, "\n  - workers (%s) are not touched: once confirmed, the controller re-installs those that answer in maintenance mode", strings.Join(s.workers, ", "))
	}

	return b.String()
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}

	return v
}

// configure sends each control plane its configuration over a maintenance
// connection pinned to the certificate seen at the check, after the UUID is
// checked again on that connection and the send is recorded.
func (s *state) configure(ctx context.Context) error {
	for _, cp := range s.cps {
		if cp.configured {
			s.p.Detailf("%s: sent by an earlier run", cp.m.Name)

			continue
		}

		mn, err := s.dialMaintenance(ctx, cp.m, cp.fingerprint)
		if err != nil {
			return fmt.Errorf("%w; nothing was sent to it", err)
		}

		if s.rec.ConfigSent == nil {
			s.rec.ConfigSent = map[string]time.Time{}
		}

		s.rec.ConfigSent[cp.m.Name] = time.Now().UTC()

		if err := s.save(); err != nil {
			mn.Close()

			return err
		}

		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = mn.Apply(actx, cp.rendered.Bytes)

		cancel()
		mn.Close()

		if err != nil {
			return fmt.Errorf("sending %s its configuration: %w; run the recovery again to continue", cp.m.Name, err)
		}

		s.p.Detailf("%s: sent (certificate %s pinned)", cp.m.Name, cp.fingerprint)
	}

	return nil
}

// poll calls f every 2 s until it reports done, ctx ends or the timeout passes.
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
		case <-time.After(2 * time.Second):
		}
	}
}

// verified connects to cp with the bundle and checks it is cp.
func (s *state) verified(ctx context.Context, cp *machine) (*talos.Verified, error) {
	n, err := s.dialer().Dial(ctx, cp.m.Spec.Address, s.bundle)
	if err != nil {
		return nil, err
	}

	v, err := n.VerifyIdentity(ctx, talos.Identity{UUID: cp.m.Spec.Identity.UUID})
	if err != nil {
		n.Close()

		return nil, err
	}

	return v, nil
}

// waitRunning waits for every control plane to run the configuration.
func (s *state) waitRunning(ctx context.Context) error {
	for _, cp := range s.cps {
		last := "installing"

		err := poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
			v, err := s.verified(ctx, cp)
			if err != nil {
				if mm := talos.AsIdentityMismatch(err); mm != nil {
					return false, mm
				}

				last = talos.Message(err)

				return false, nil
			}
			defer v.Close()

			stage, _, err := v.Stage(ctx)
			if err != nil {
				last = talos.Message(err)

				return false, nil
			}

			last = "stage " + stage
			s.p.Detailf("%s: %s", cp.m.Name, last)

			return stage == ichorv1alpha1.StageRunning, nil
		})
		if err != nil {
			return fmt.Errorf("%s did not reach stage running within %s (last: %s); check its console, then run the recovery again to continue", cp.m.Name, s.o.Timeout, last)
		}
	}

	return nil
}

// recoverEtcd uploads the checked snapshot to the first control plane and
// bootstraps etcd from it there, each recorded first; a run that finds the
// Bootstrap recorded never sends it again.
func (s *state) recoverEtcd(ctx context.Context) error {
	cp := s.cps[0]

	if s.rec.Bootstrapped != "" {
		s.p.Detailf("the Bootstrap was sent to %s by an earlier run", s.rec.Bootstrapped)

		return nil
	}

	var last string

	err := poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
		v, err := s.verified(ctx, cp)
		if err != nil {
			last = talos.Message(err)

			return false, nil
		}
		defer v.Close()

		svc, err := v.EtcdService(ctx)
		if err != nil {
			last = talos.Message(err)

			return false, nil
		}

		if svc.State != talos.EtcdServicePreparing {
			return false, fmt.Errorf("the etcd service of %s is %s, not Preparing: its etcd data is not empty, so it cannot be bootstrapped from the snapshot; "+
				"wipe it (`talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL`) and run the recovery again", cp.m.Name, svc.State, cp.m.Spec.Address)
		}

		s.rec.Uploaded = cp.m.Name
		if err := s.save(); err != nil {
			return false, err
		}

		f, err := os.Open(s.snap.Path)
		if err != nil {
			return false, err
		}

		err = v.EtcdRecover(ctx, f)
		_ = f.Close()

		if err != nil {
			last = talos.Message(err)

			return false, nil
		}

		now := time.Now().UTC()
		s.rec.Bootstrapped, s.rec.BootstrapAt = cp.m.Name, &now

		if err := s.save(); err != nil {
			return false, err
		}

		if err := v.BootstrapRecover(ctx); err != nil {
			msg := talos.Message(err)
			if status.Code(err) == codes.AlreadyExists {
				msg += " (its etcd data is not empty: wipe its EPHEMERAL partition, move " + s.recordPath() + " away and run the recovery again)"
			}

			return false, fmt.Errorf("bootstrapping etcd on %s from the snapshot: %s", cp.m.Name, msg)
		}

		return true, nil
	})
	if err != nil {
		if last != "" && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s was not ready for the snapshot within %s (last: %s); run the recovery again to continue", cp.m.Name, s.o.Timeout, last)
		}

		return err
	}

	s.p.Detailf("bootstrapped %s from %s", cp.m.Name, path.Base(s.key))

	return nil
}

// waitJoined waits for etcd on the first control plane, then for every
// control plane to be a voting member.
func (s *state) waitJoined(ctx context.Context) error {
	var last string

	err := poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
		v, err := s.verified(ctx, s.cps[0])
		if err != nil {
			last = talos.Message(err)

			return false, nil
		}
		defer v.Close()

		members, err := v.EtcdMembers(ctx)
		if err != nil {
			last = talos.Message(err)

			return false, nil
		}

		voting := 0

		for _, mem := range members {
			if !mem.Learner {
				voting++
			}
		}

		last = fmt.Sprintf("%d of %d control planes are voting members", voting, len(s.cps))
		s.p.Detailf("%s", last)

		return voting >= len(s.cps), nil
	})
	if err != nil {
		return fmt.Errorf("not every control plane joined etcd within %s (last: %s); check their etcd service (`talosctl -n ADDRESS service etcd`), then run the recovery again",
			s.o.Timeout, last)
	}

	return nil
}

// waitAPI fetches the admin kubeconfig from the bootstrapped control plane,
// stores it and waits for the API.
func (s *state) waitAPI(ctx context.Context) error {
	var kc []byte

	err := poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
		v, err := s.verified(ctx, s.cps[0])
		if err != nil {
			return false, nil
		}
		defer v.Close()

		kc, err = v.Kubeconfig(ctx)

		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("fetching the admin kubeconfig from %s: %w; run the recovery again to continue", s.cps[0].m.Name, err)
	}

	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return errors.New("the node's admin kubeconfig does not parse")
	}

	for _, c := range cfg.Contexts {
		c.Namespace = s.o.Namespace
	}

	if kc, err = clientcmd.Write(*cfg); err != nil {
		return err
	}

	pass, err := s.passphrase()
	if err != nil {
		return err
	}

	if err := s.env.Store.Save(secretstore.Contents{Kubeconfig: kc}, pass); err != nil {
		return fmt.Errorf("storing the kubeconfig in %s: %w", s.env.Store.Dir, err)
	}

	if s.o.WriteKubeconfig != "" {
		if err := os.WriteFile(s.o.WriteKubeconfig, kc, 0o600); err != nil {
			return fmt.Errorf("writing the kubeconfig to %s: %w", s.o.WriteKubeconfig, err)
		}
	}

	s.kubeconfig = kc

	conn, err := s.conn()
	if err != nil {
		return err
	}

	var lastErr error

	err = poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
		lastErr = conn.Client.List(ctx, &ichorv1alpha1.TalosClusterList{}, client.InNamespace(s.o.Namespace), client.Limit(1))
		if lastErr != nil {
			s.p.Detailf("waiting for the API server: %v", lastErr)
		}

		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the Kubernetes API did not serve the restored TalosClusters within %s (last: %w); run the recovery again to continue", s.o.Timeout, lastErr)
	}

	s.p.Detailf("the API serves the restored resources; kubeconfig stored in %s", s.env.Store.Dir)

	return nil
}

func (s *state) conn() (*kube.Conn, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig)
	if err != nil {
		return nil, errors.New("the admin kubeconfig does not parse")
	}

	cfg.Timeout = 30 * time.Second

	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return nil, err
	}

	return &kube.Conn{Client: c, Config: cfg, Namespace: s.o.Namespace}, nil
}

// install installs Ichor as init does.
func (s *state) install(ctx context.Context) error {
	return initflow.InstallInto(ctx, s.kubeconfig,
		initflow.Options{Cluster: s.o.Cluster, Namespace: s.o.Namespace, Install: s.o.Install, InstallerImage: s.o.InstallerImage},
		initflow.Env{Store: s.env.Store, Progress: s.p, Out: s.env.Out, Version: s.env.Version})
}

// hold sets the recovery's hold on every TalosMachine of the cluster.
func (s *state) hold(ctx context.Context) error {
	conn, err := s.conn()
	if err != nil {
		return err
	}

	held, err := recovery.SetHolds(ctx, conn.Client, s.o.Namespace, s.o.Cluster)
	if err != nil {
		return conn.Explain(err, "holding the TalosMachines")
	}

	s.p.Detailf("%d machine(s) held", held)

	return nil
}

func (s *state) summary() {
	_, _ = fmt.Fprintf(s.env.Out, "\nCluster %s is recovered from %s: etcd runs it on %d control plane(s) and the Kubernetes API answers.\n"+
		"Every TalosMachine is held: the controller compares each node with its render and reports drift (`ichor machine list`, condition AdoptionHeld), "+
		"and applies nothing. Once the machines look right, run\n  ichor restore --confirm %s\n", s.o.Cluster, path.Base(s.key), len(s.cps), s.o.Cluster)
}
