package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/contents"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/fetch"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The full-loss recovery of issue 23 through the CLI: a cluster made by
// `ichor init` (two control planes and a worker, Ichor's resources in the
// cluster itself, the controller a local process as in the scenario above),
// a backup taken by the controller to a real S3 store (versitygw), every
// machine's disk wiped, then `ichor restore --recover-cluster` with nothing
// but the local secrets store, the snapshot and the age identity.

const (
	// recoverSubnet is this test's loopback subnet (no other suite uses it).
	recoverSubnet = "127.0.163.0/24"
	// recoverPodSubnet is where the recovery world's pod runner puts pods.
	recoverPodSubnet = "127.172.0.0/24"
	recoverCluster   = "lost"
	recoverNS        = "ichor-system"
	recoverBucket    = "etcd-backups"
	recoverPrefix    = "offsite"
	applyRPC         = "/machine.MachineService/ApplyConfiguration"
)

// control sends a request to talosemu's control API.
func (w *world) controlDo(ctx context.Context, method, p string) error {
	req, err := http.NewRequestWithContext(ctx, method, w.control+p, nil)
	if err != nil {
		return err
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()

	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s %s: %s", method, p, resp.Status)
	}

	return nil
}

// emuState is what the control API says of a machine.
type emuState struct {
	Stage       string `json:"stage"`
	Maintenance bool   `json:"maintenance"`
	Powered     bool   `json:"powered"`
}

func (w *world) emuMachineState(ctx context.Context, name string) (emuState, error) {
	var st emuState

	return st, w.controlGet(ctx, "/machines/"+name, &st)
}

// tmCondition is a condition of a TalosMachine as kubectl shows it.
func tmCondition(m talosMachine, t string) (status, reason string) {
	for _, c := range m.Status.Conditions {
		if c.Type == t {
			return c.Status, c.Reason
		}
	}

	return "", ""
}

// holdOf reads the TalosMachines' hold-apply annotations.
func (w *world) holds(ctx context.Context) (map[string]string, error) {
	out, err := w.kubectl(ctx, "get", "talosmachines", "-n", recoverNS, "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations.ichor\.maesh\.dev/hold-apply}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}

	h := map[string]string{}

	for l := range strings.Lines(out) {
		name, v, _ := strings.Cut(strings.TrimSpace(l), "=")
		if name != "" {
			h[name] = v
		}
	}

	return h, nil
}

// namespacedKeys are the keys of a snapshot's namespaced objects: those with
// a path segment after the resource that names a namespace the snapshot holds.
func namespacedKeys(c *contents.Contents) []string {
	nss := map[string]bool{}
	for _, k := range c.Keys(contents.RegistryPrefix + "namespaces/") {
		nss[path.Base(k)] = true
	}

	var out []string

	for _, k := range c.Keys(contents.RegistryPrefix) {
		segs := strings.Split(strings.TrimPrefix(k, contents.RegistryPrefix), "/")
		if len(segs) < 3 || segs[0] == "namespaces" {
			continue
		}

		for _, s := range segs[1 : len(segs)-1] {
			if nss[s] {
				out = append(out, k)

				break
			}
		}
	}

	return out
}

// readSnapshot downloads, decrypts and checks a snapshot and reads it.
func readSnapshot(t *testing.T, ctx context.Context, st *store.Store, key string, id age.Identity) *contents.Contents {
	t.Helper()

	dir := t.TempDir()

	snap, err := fetch.Fetch(ctx, st, key, []age.Identity{id}, dir)
	if err != nil {
		t.Fatal(err)
	}

	c, err := contents.Read(snap.Path)
	if err != nil {
		t.Fatal(err)
	}

	return c
}

func TestFullLossRecovery(t *testing.T) { fullLossRecovery(t) }

// fullLossRecovery runs the scenario in a world of its own, stopped when it
// ends (e2e:full runs it ten times, TestFullLossRecoveryRepeated).
func fullLossRecovery(t *testing.T) {
	start := time.Now()
	durations := map[string]time.Duration{}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	// The pod runner runs the ichor-cni Job that hands Cilium over to Helm
	// (init waits for it); the controller itself runs as a local process.
	w, err := startWorldIn(recoverSubnet, 3, 2, recoverPodSubnet)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		if w.ctrl != nil {
			stopProcess(w.ctrl)
		}

		stopProcess(w.emu)
	})

	s3, err := testenv.StartS3(ctx, filepath.Join(w.dir, "s3"), "", recoverBucket)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = s3.Stop() })

	durations["world"] = time.Since(start)
	step := time.Now()

	// --- a cluster: init on the first machine, the controller, a second control plane and a worker.
	cp1, cp2, wk := w.machines[0], w.machines[1], w.machines[2]
	w.initLocal(t, ctx, recoverCluster, cp1.ip(), "4m")

	pending := w.discover(t, ctx, 3*time.Minute, cp2.ip(), wk.ip())

	w.mustIchor(t, ctx, "machine", "approve", pending[cp2.ip()], "--role", "controlplane")
	w.mustIchor(t, ctx, "machine", "approve", pending[wk.ip()], "--role", "worker")

	allReady := func(what string) { w.waitAllReady(t, ctx, 3, 6*time.Minute, what) }

	allReady("3 Ready machines")

	durations["init+approve"] = time.Since(step)
	step = time.Now()

	// --- objects, and a backup to S3 taken by the controller.
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}

	manifest := filepath.Join(w.dir, "backup.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, `apiVersion: v1
kind: Secret
metadata: {name: s3-creds, namespace: %[1]s}
stringData: {accessKeyID: %[2]q, secretAccessKey: %[3]q}
---
apiVersion: v1
kind: Secret
metadata: {name: backup-age, namespace: %[1]s}
stringData: {recipients: %[4]q}
---
apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosEtcdBackup
metadata: {name: nightly, namespace: %[1]s}
spec:
  clusterName: %[5]s
  schedule: "0 3 * * *"
  s3: {endpoint: %[6]q, bucket: %[7]s, prefix: %[8]s, credentialsRef: {name: s3-creds}}
  encryptionKeyRef: {name: backup-age}
---
apiVersion: v1
kind: Namespace
metadata: {name: keep}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: before, namespace: keep}
data: {written: before-the-backup}
---
apiVersion: v1
kind: Secret
metadata: {name: before, namespace: keep}
stringData: {token: kept-across-the-loss}
`, recoverNS, s3.AccessKeyID, s3.SecretAccessKey, id.Recipient().String(), recoverCluster, s3.Endpoint, recoverBucket, recoverPrefix), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := w.kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}

	w.mustIchor(t, ctx, "-n", recoverNS, "etcd", "backup", "now", "nightly", "--wait", "--timeout", "3m")

	if _, err := w.kubectl(ctx, "-n", "keep", "create", "configmap", "after", "--from-literal=written=after-the-backup"); err != nil {
		t.Fatal(err)
	}

	st, err := store.Open(store.Destination{Endpoint: s3.Endpoint, Bucket: recoverBucket, Prefix: recoverPrefix,
		AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}

	objs, err := st.List(ctx, recoverNS, recoverCluster)
	if err != nil || len(objs) != 1 {
		t.Fatalf("the store lists %d snapshots (%v), want 1", len(objs), err)
	}

	snapName := path.Base(objs[0].Key)
	before := readSnapshot(t, ctx, st, objs[0].Key, id)
	beforeKeys := namespacedKeys(before)

	if !slices.Contains(beforeKeys, "/registry/configmaps/keep/before") || !slices.Contains(beforeKeys, "/registry/ichor.maesh.dev/talosclusters/"+recoverNS+"/"+recoverCluster) {
		t.Fatalf("the snapshot lacks the test's objects: %d namespaced keys", len(beforeKeys))
	}

	durations["backup"] = time.Since(step)
	step = time.Now()

	dir := t.TempDir()
	idFile, otherID := filepath.Join(dir, "identity.txt"), filepath.Join(dir, "other.txt")

	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}

	for f, k := range map[string]*age.X25519Identity{idFile: id, otherID: other} {
		if err := os.WriteFile(f, []byte(k.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	w.env = append(w.env, "ICHOR_S3_ACCESS_KEY_ID="+s3.AccessKeyID, "ICHOR_S3_SECRET_ACCESS_KEY="+s3.SecretAccessKey)
	from := s3.Endpoint + "/" + recoverBucket + "/" + recoverPrefix
	recoverArgs := func(extra ...string) []string {
		return append([]string{"-n", recoverNS, "restore", "--recover-cluster", recoverCluster, "--from-store", from, "--identity", idFile,
			"--install", "none", "--timeout", "5m"}, extra...)
	}

	// A cluster that still runs is not recovered: every control plane must be in maintenance mode.
	if out, err := w.ichor(ctx, recoverArgs("--dry-run")...); err == nil || !strings.Contains(out, "is not in maintenance mode") ||
		!strings.Contains(out, "nothing was changed") {
		t.Fatalf("a recovery of a running cluster was not refused as it should be (%v):\n%s", err, out)
	}

	// --- the full loss: the controller is gone with the cluster, every disk wiped.
	stopProcess(w.ctrl)

	for _, m := range w.machines {
		for _, a := range []string{"power-off", "wipe-disk", "power-on"} {
			if err := w.controlDo(ctx, http.MethodPost, "/machines/"+m.Name+"/"+a); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, m := range w.machines {
		testenv.EventuallyEvery(t, 2*time.Minute, time.Second, m.Name+" in maintenance mode", func() (bool, string) {
			s, err := w.emuMachineState(ctx, m.Name)

			return err == nil && s.Maintenance && s.Powered, fmt.Sprintf("%+v %v", s, err)
		})

		if err := w.controlDo(ctx, http.MethodDelete, "/machines/"+m.Name+"/rpcs"); err != nil {
			t.Fatal(err)
		}
	}

	durations["wipe"] = time.Since(step)
	step = time.Now()

	applies := func(m emuMachine) int {
		c, err := w.rpcs(ctx, m.Name)
		if err != nil {
			t.Fatal(err)
		}

		return c[applyRPC]
	}

	// Bad input is refused and changes nothing.
	emptyHome := append(slices.Clone(w.env), "ICHOR_HOME="+filepath.Join(dir, "empty-home"))
	saved := w.env
	w.env = emptyHome

	if out, err := w.ichor(ctx, recoverArgs("--yes")...); err == nil || !strings.Contains(out, "no secrets bundle of cluster lost") {
		t.Errorf("a missing bundle was not refused (%v):\n%s", err, out)
	}

	w.env = saved

	for _, bad := range []struct {
		args []string
		want string
	}{
		{recoverArgs("--snapshot", "20200101T000000Z-r1.db.age", "--yes"), "lists no snapshot \"20200101T000000Z-r1.db.age\""},
		{append(recoverArgs("--yes"), "--identity", otherID), "is the identity one of the backup's recipients?"},
		{[]string{"-n", recoverNS, "restore", "--recover-cluster", recoverCluster, "--from-store", s3.Endpoint + "/" + recoverBucket + "/elsewhere", "--identity", idFile, "--yes"}, "lists no snapshot of cluster lost"},
	} {
		if out, err := w.ichor(ctx, bad.args...); err == nil || !strings.Contains(out, bad.want) || !strings.Contains(out, "nothing was changed") {
			t.Errorf("ichor %s: want a refusal saying %q (%v):\n%s", strings.Join(bad.args, " "), bad.want, err, out)
		}
	}

	dry := w.mustIchor(t, ctx, recoverArgs("--dry-run")...)
	for _, want := range []string{snapName, "upload the snapshot to", "Nothing was changed (--dry-run)", "workers (" + pending[wk.ip()] + ") are not touched"} {
		if !strings.Contains(dry, want) {
			t.Errorf("--dry-run does not say %q:\n%s", want, dry)
		}
	}

	for _, m := range w.machines {
		if n := applies(m); n != 0 {
			t.Fatalf("a refused recovery or a dry run sent %s %d configuration(s)", m.Name, n)
		}
	}

	// --- the recovery.
	out := w.mustIchor(t, ctx, recoverArgs("--snapshot", snapName, "--yes", "--write-kubeconfig", w.kubeconfig)...)
	if !strings.Contains(out, "ichor restore --confirm "+recoverCluster) {
		t.Errorf("the recovery does not say how to confirm:\n%s", out)
	}

	durations["recover"] = time.Since(step)
	step = time.Now()

	if got, err := w.kubectl(ctx, "-n", "keep", "get", "configmap", "before", "-o", "jsonpath={.data.written}"); err != nil || got != "before-the-backup" {
		t.Errorf("the ConfigMap written before the backup: %q %v", got, err)
	}

	if got, err := w.kubectl(ctx, "-n", "keep", "get", "secret", "before", "-o", "jsonpath={.data.token}"); err != nil || got == "" {
		t.Errorf("the Secret written before the backup: %q %v", got, err)
	}

	if out, err := w.kubectl(ctx, "-n", "keep", "get", "configmap", "after"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("the ConfigMap written after the backup is still there (%v):\n%s", err, out)
	}

	holds, err := w.holds(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if len(holds) != 3 {
		t.Fatalf("%d TalosMachines after the recovery, want 3: %v", len(holds), holds)
	}

	for name, v := range holds {
		if v != "ichor-restore" {
			t.Errorf("TalosMachine %s is not held by the recovery (hold-apply=%q)", name, v)
		}
	}

	// A second run finds what the first recorded (recovery.json) and the
	// machines configured: it sends nothing again (no configuration, upload
	// or Bootstrap) and ends the same way.
	w.mustIchor(t, ctx, recoverArgs("--snapshot", snapName, "--yes")...)

	for _, m := range []emuMachine{cp1, cp2} {
		c, err := w.rpcs(ctx, m.Name)
		if err != nil {
			t.Fatal(err)
		}

		boots := c["/machine.MachineService/Bootstrap"]
		if c[applyRPC] != 1 || c["/machine.MachineService/EtcdRecover"] > 1 || boots > 1 || (m == cp1) != (boots == 1) {
			t.Fatalf("after a second run, %s was sent %d configurations, %d uploads and %d Bootstraps; want one configuration each, and one upload and Bootstrap on %s only",
				m.Name, c[applyRPC], c["/machine.MachineService/EtcdRecover"], boots, cp1.Name)
		}
	}

	// The controller comes back (as a process, as in the scenario above) and
	// holds every machine: the worker, wiped, waits in maintenance mode.
	if err := w.startController(); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, "every machine held (AdoptionHeld), the worker's re-installation held", func() (bool, string) {
		ms, err := w.talosMachines(ctx)
		if err != nil {
			return false, err.Error()
		}

		ok := 0

		for _, m := range ms {
			held, _ := tmCondition(m, "AdoptionHeld")
			_, ready := tmCondition(m, "Ready")

			switch {
			case m.Spec.Role == "worker" && held == "True" && ready == "Held":
				ok++
			case m.Spec.Role == "controlplane" && held == "True":
				ok++
			}
		}

		return ok == 3, describeTM(ms)
	})

	if n := applies(wk); n != 0 {
		t.Fatalf("the held worker was sent %d configuration(s) before the confirmation", n)
	}

	for _, m := range []emuMachine{cp1, cp2} {
		if n := applies(m); n != 1 {
			t.Fatalf("control plane %s was sent %d configurations, want only the recovery's", m.Name, n)
		}
	}

	if s, err := w.emuMachineState(ctx, wk.Name); err != nil || !s.Maintenance {
		t.Fatalf("the held worker left maintenance mode before the confirmation: %+v %v", s, err)
	}

	durations["held"] = time.Since(step)
	step = time.Now()

	// --- the confirmation lifts the holds; the controller re-installs the worker.
	list := w.mustIchor(t, ctx, "-n", recoverNS, "restore", "--confirm", recoverCluster, "--dry-run")
	if !strings.Contains(list, pending[wk.ip()]) || !strings.Contains(list, "Nothing was changed") {
		t.Errorf("--confirm --dry-run does not list the held worker:\n%s", list)
	}

	if out, err := w.ichor(ctx, "-n", recoverNS, "restore", "--confirm", "other"); err == nil || !strings.Contains(out, "no TalosMachine of cluster other") {
		t.Errorf("--confirm of a cluster without holds was not refused (%v):\n%s", err, out)
	}

	w.mustIchor(t, ctx, "-n", recoverNS, "restore", "--confirm", recoverCluster, "--yes")

	holds, err = w.holds(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for name, v := range holds {
		if v != "" {
			t.Errorf("TalosMachine %s still held after the confirmation (%q)", name, v)
		}
	}

	allReady("3 Ready machines after the confirmation")

	if n := applies(wk); n == 0 {
		t.Error("the worker became Ready without being sent its configuration")
	}

	ms, err := w.talosMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, m := range ms {
		if s, _ := tmCondition(m, "AdoptionHeld"); s != "" {
			t.Errorf("TalosMachine %s keeps AdoptionHeld=%s after the confirmation", m.Metadata.Name, s)
		}
	}

	durations["confirm→Ready"] = time.Since(step)
	step = time.Now()

	// --- every namespaced object of the snapshot is back: a new backup of
	// the recovered cluster holds every namespaced key of the old one.
	w.mustIchor(t, ctx, "-n", recoverNS, "etcd", "backup", "now", "nightly", "--wait", "--timeout", "3m")

	// The restored TalosEtcdBackup may carry the request it was answering
	// when the snapshot was read, so the controller may take one more; the
	// newest is the one this request waited for.
	objs, err = st.List(ctx, recoverNS, recoverCluster)
	if err != nil || len(objs) < 2 || path.Base(objs[0].Key) == snapName {
		t.Fatalf("the store lists %d snapshots (%v), want a new one after %s", len(objs), err, snapName)
	}

	after := readSnapshot(t, ctx, st, objs[0].Key, id)

	var missing []string

	for _, k := range beforeKeys {
		if _, ok := after.Get(k); !ok {
			missing = append(missing, k)
		}
	}

	if len(missing) > 0 {
		t.Errorf("%d of the snapshot's %d namespaced objects are not in the recovered cluster: %s", len(missing), len(beforeKeys), strings.Join(missing, ", "))
	}

	durations["second backup"] = time.Since(step)
	t.Logf("%d namespaced objects of snapshot %s are back; durations %v; test %s", len(beforeKeys), snapName, durations, time.Since(start).Round(time.Second))
}
