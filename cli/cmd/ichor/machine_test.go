package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var lastField = regexp.MustCompile(`\S+$`)

// normaliseTableAges replaces the AGE column (the last) of every row.
func normaliseTableAges(out string) string {
	lines := strings.Split(out, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i] != "" {
			lines[i] = lastField.ReplaceAllString(lines[i], "<age>")
		}
	}
	return strings.Join(lines, "\n")
}

var ageLine = regexp.MustCompile(`(?m)^(Age:\s+)\S+$`)

func hardwareMachine(ns, name string) *ichorv1alpha1.TalosMachine {
	m := newMachine(ns, name, "prod")
	m.Status = ichorv1alpha1.TalosMachineStatus{
		Stage: ichorv1alpha1.StageMaintenance,
		Hardware: ichorv1alpha1.MachineHardware{
			Manufacturer: "QEMU", ProductName: "Standard PC",
			Disks: []ichorv1alpha1.DiscoveredDisk{
				{DevicePath: "/dev/nvme0n1", WWID: "eui.0025388b91c2a1b2", Serial: "S4EWNX0R", SizeBytes: 512110190592},
				{DevicePath: "/dev/sdb", Serial: "ZA1B2C3D", BusPath: "/pci0000:00/0000:00:1f.2/ata2", SizeBytes: 4000787030016, HasPartitions: true},
			},
			Links: []ichorv1alpha1.DiscoveredLink{
				{Name: "enp1s0", PermanentMAC: "52:54:00:00:00:01", Addresses: []string{"192.168.10.21/24"}},
				{Name: "enp2s0", PermanentMAC: "52:54:00:00:00:02"},
			},
		},
	}
	return m
}

func TestMachineListAndGetGolden(t *testing.T) {
	ns := namespace(t, "golden")
	must(t, k8s.Create(context.Background(), newCluster(ns, "prod")))
	createMachine(t, hardwareMachine(ns, "m-pending"))
	w := newMachine(ns, "m-worker", "prod")
	w.Spec.Address = "192.168.10.22"
	w.Spec.Role = ichorv1alpha1.RoleWorker
	w.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "ada",
		DecidedAt: &metav1.Time{Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}}
	w.Status = ichorv1alpha1.TalosMachineStatus{Stage: ichorv1alpha1.StageRunning, Conditions: []metav1.Condition{{
		Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.InSyncReason, Message: "the node runs the rendered configuration",
		LastTransitionTime: metav1.Now(),
	}}}
	createMachine(t, w)

	list := mustSucceed(t, ichor(t, "machine", "list", "-n", ns))
	golden(t, "machine-list.golden", normaliseTableAges(list.stdout))

	get := mustSucceed(t, ichor(t, "machine", "get", "m-pending", "-n", ns))
	golden(t, "machine-get.golden", ageLine.ReplaceAllString(get.stdout, "${1}<age>"))

	var obj ichorv1alpha1.TalosMachine
	js := mustSucceed(t, ichor(t, "machine", "get", "m-worker", "-n", ns, "-o", "json"))
	must(t, json.Unmarshal([]byte(js.stdout), &obj))
	if obj.Spec.Role != ichorv1alpha1.RoleWorker || obj.Kind != "TalosMachine" || obj.ManagedFields != nil {
		t.Fatalf("-o json must print the machine without managed fields: %+v", obj.TypeMeta)
	}
	y := mustSucceed(t, ichor(t, "machine", "list", "-n", ns, "-o", "yaml"))
	if !strings.Contains(y.stdout, "kind: TalosMachineList") || !strings.Contains(y.stdout, "name: m-pending") {
		t.Fatalf("-o yaml must print the list:\n%s", y.stdout)
	}

	mustFail(t, ichor(t, "machine", "get", "m-nope", "-n", ns), `TalosMachine "m-nope" not found`, "m-pending, m-worker")
	mustFail(t, ichor(t, "machine", "get", "m-nope", "-n", "default"), "has no machines", "-n NAMESPACE")
	mustFail(t, ichor(t, "machine", "list", "-n", ns, "-o", "xml"), "table, yaml or json")

	filtered := mustSucceed(t, ichor(t, "machine", "list", "-n", ns, "--cluster", "other"))
	if !strings.Contains(filtered.stdout, "No machines in namespace golden for cluster other") {
		t.Fatalf("an empty filtered list must say so: %q", filtered.stdout)
	}
}

// lockedBuffer collects a subprocess's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startWatch runs the binary with args in the background and collects its
// output line by line; stop ends it (as Ctrl-C would) and waits.
func startWatch(t *testing.T, args ...string) (out, errOut *lockedBuffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // the binary the suite built
	cmd.Env = baseEnv(t)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	errOut, out = &lockedBuffer{}, &lockedBuffer{}
	cmd.Stderr = errOut
	must(t, cmd.Start())
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			_, _ = io.WriteString(out, s.Text()+"\n")
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	return out, errOut, stop
}

func TestMachineListWatch(t *testing.T) {
	ns := namespace(t, "watch")
	createMachine(t, newMachine(ns, "m-first", "prod"))
	out, errOut, stop := startWatch(t, "machine", "list", "--watch", "-n", ns)
	testenv.Eventually(t, 0, "the first table", testenv.Holds(func() bool { return strings.Contains(out.String(), "m-first") }))

	createMachine(t, newMachine(ns, "m-second", "prod"))
	testenv.Eventually(t, 0, "the new machine", testenv.Holds(func() bool { return strings.Contains(out.String(), "m-second") }))

	m := getMachine(t, ns, "m-first")
	m.Status.Stage = ichorv1alpha1.StageInstalling
	must(t, k8s.Status().Update(context.Background(), m))
	testenv.Eventually(t, 0, "the stage change", testenv.Holds(func() bool {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "m-first ") && strings.Contains(l, "installing") {
				return true
			}
		}
		return false
	}))
	stop()
	if errOut.String() != "" && !strings.Contains(errOut.String(), "signal") {
		t.Fatalf("the watch printed errors: %s", errOut.String())
	}
}

// TestMachineGetWatch: `machine get --watch` shows the machine, then a line
// for each change of that machine only.
func TestMachineGetWatch(t *testing.T) {
	ns := namespace(t, "getwatch")
	createMachine(t, newMachine(ns, "m-watched", "prod"))
	createMachine(t, newMachine(ns, "m-other", "prod"))
	out, errOut, stop := startWatch(t, "machine", "get", "m-watched", "--watch", "-n", ns)
	testenv.Eventually(t, 0, "the machine and the changes header", testenv.Holds(func() bool { return strings.Contains(out.String(), "Changes (Ctrl-C stops):") }))

	other := getMachine(t, ns, "m-other")
	other.Status.Stage = ichorv1alpha1.StageInstalling
	must(t, k8s.Status().Update(context.Background(), other))
	m := getMachine(t, ns, "m-watched")
	m.Status.Stage = ichorv1alpha1.StageRebooting
	must(t, k8s.Status().Update(context.Background(), m))
	testenv.Eventually(t, 0, "the watched machine's change", testenv.Holds(func() bool {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "m-watched ") && strings.Contains(l, "rebooting") {
				return true
			}
		}
		return false
	}))
	stop()
	if strings.Contains(out.String(), "m-other") {
		t.Fatalf("the watch printed another machine:\n%s", out.String())
	}
	if errOut.String() != "" && !strings.Contains(errOut.String(), "signal") {
		t.Fatalf("the watch printed errors: %s", errOut.String())
	}
}

func TestApprove(t *testing.T) {
	ns := namespace(t, "approve")
	must(t, k8s.Create(context.Background(), newCluster(ns, "prod")))

	// One disk with nothing stable: keyed on the device path, and said so.
	vm := newMachine(ns, "m-virtio", "prod")
	vm.Status.Hardware.Disks = []ichorv1alpha1.DiscoveredDisk{{DevicePath: "/dev/vda", SizeBytes: 10 << 30}}
	createMachine(t, vm)
	r := mustSucceed(t, ichor(t, "machine", "approve", "m-virtio", "-n", ns, "--role", "worker", "--label", "zone=a", "--dhcp"))
	if !strings.Contains(r.stderr, "nothing stable to key on") || !strings.Contains(r.stderr, "/dev/vda") {
		t.Fatalf("approving a disk with only a device path must say there is nothing stable to key on; stderr:\n%s", r.stderr)
	}
	got := getMachine(t, ns, "m-virtio")
	a := got.Spec.Approval
	if a.State != ichorv1alpha1.ApprovalApproved || a.DecidedBy != testUser || a.DecidedAt == nil || time.Since(a.DecidedAt.Time) > 5*time.Minute {
		t.Fatalf("the approval must record who and when: %+v (user %s)", a, testUser)
	}
	if got.Spec.Role != ichorv1alpha1.RoleWorker || got.Spec.Labels["zone"] != "a" || got.Spec.Install.Disk == nil ||
		got.Spec.Install.Disk.DevicePath != "/dev/vda" || got.Spec.Network.DHCP == nil || !*got.Spec.Network.DHCP {
		t.Fatalf("the approval fields were not written: %+v", got.Spec)
	}
	mustFail(t, ichor(t, "machine", "approve", "m-virtio", "-n", ns, "--role", "worker"), "already approved")

	// Two disks: the install disk is not guessed, and nothing is written.
	createMachine(t, hardwareMachine(ns, "m-two"))
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker"),
		"--install-disk", "/dev/nvme0n1 (wwid=eui.0025388b91c2a1b2)", "/dev/sdb (serial=ZA1B2C3D)")
	if st := getMachine(t, ns, "m-two").Spec.Approval.State; st != ichorv1alpha1.ApprovalPending {
		t.Fatalf("a refused approval wrote the machine: %s", st)
	}
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--install-disk", "wwid=nope"),
		"no disk discovered on the machine matches wwid=nope")
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--install-disk", "wwid=eui.0025388b91c2a1b2",
		"--nic", "52:54:00:00:00:99"), "not a permanent MAC", "52:54:00:00:00:01 (enp1s0)")
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--dhcp", "--address", "10.0.0.5/24",
		"--install-disk", "wwid=eui.0025388b91c2a1b2"), "exclude each other")
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--install-disk", "wwid=eui.0025388b91c2a1b2"), "--role is required")
	// A storage disk is not an install candidate, so the install disk is the
	// other one; the storage disk holds partitions and needs the confirmation.
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--disk", "storage=serial=ZA1B2C3D"),
		"--disk storage=serial=ZA1B2C3D: /dev/sdb holds partitions", "add ,confirmWipe")
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--disk", "scratch=serial=ZA1B2C3D"),
		`role "scratch" is not a disk role`, "ephemeral, storage, userVolume, unused")

	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--install-disk", "serial=ZA1B2C3D"),
		"/dev/sdb holds partitions", "--confirm-wipe")
	mustFail(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "worker", "--install-disk", "wwid=eui.0025388b91c2a1b2",
		"--disk", "userVolume=serial=ZA1B2C3D,volume=data"), "add ,confirmWipe")

	r = mustSucceed(t, ichor(t, "machine", "approve", "m-two", "-n", ns, "--role", "controlplane",
		"--install-disk", "wwid=eui.0025388b91c2a1b2", "--disk", "userVolume=serial=ZA1B2C3D,volume=data,confirmWipe",
		"--nic", "52:54:00:00:00:02", "--address", "192.168.10.30/24", "--gateway", "192.168.10.1", "--nameserver", "1.1.1.1",
		"--vlan", "20", "--hostname", "cp-1"))
	if !strings.Contains(r.stdout, "approved as controlplane by "+testUser) {
		t.Fatalf("approval output: %s", r.stdout)
	}
	got = getMachine(t, ns, "m-two")
	n := got.Spec.Network
	if got.Spec.Install.Disk.WWID != "eui.0025388b91c2a1b2" || len(got.Spec.Disks) != 1 || got.Spec.Disks[0].VolumeName != "data" ||
		!got.Spec.Disks[0].ConfirmWipe || n.MACAddress != "52:54:00:00:00:02" || n.Gateway != "192.168.10.1" || n.VLAN == nil || *n.VLAN != 20 ||
		len(n.Nameservers) != 1 || got.Spec.Hostname != "cp-1" {
		t.Fatalf("approval fields: %+v", got.Spec)
	}

	// Storage and unused roles at approval: an unused disk is left alone and
	// needs no wipe confirmation even with partitions; a storage disk with
	// its confirmation is admitted, and neither is guessed as the install disk.
	createMachine(t, hardwareMachine(ns, "m-unused"))
	mustSucceed(t, ichor(t, "machine", "approve", "m-unused", "-n", ns, "--role", "worker", "--disk", "unused=serial=ZA1B2C3D"))
	got = getMachine(t, ns, "m-unused")
	if got.Spec.Install.Disk == nil || got.Spec.Install.Disk.WWID != "eui.0025388b91c2a1b2" || len(got.Spec.Disks) != 1 ||
		got.Spec.Disks[0].Role != ichorv1alpha1.DiskRoleUnused || got.Spec.Disks[0].ConfirmWipe {
		t.Fatalf("approval with an unused disk: %+v", got.Spec)
	}
	createMachine(t, hardwareMachine(ns, "m-storage"))
	mustSucceed(t, ichor(t, "machine", "approve", "m-storage", "-n", ns, "--role", "worker", "--disk", "storage=serial=ZA1B2C3D,confirmWipe"))
	got = getMachine(t, ns, "m-storage")
	if got.Spec.Install.Disk == nil || got.Spec.Install.Disk.WWID != "eui.0025388b91c2a1b2" || len(got.Spec.Disks) != 1 ||
		got.Spec.Disks[0].Role != ichorv1alpha1.DiskRoleStorage || !got.Spec.Disks[0].ConfirmWipe {
		t.Fatalf("approval with a storage disk: %+v", got.Spec)
	}

	// The cluster declares one control plane: a second is refused by the
	// shared guard before anything is written (at most count+1 while replacing).
	for _, name := range []string{"m-cp2", "m-cp3"} {
		m := newMachine(ns, name, "prod")
		m.Status.Hardware.Disks = []ichorv1alpha1.DiscoveredDisk{{DevicePath: "/dev/sda", WWID: "naa." + name}}
		createMachine(t, m)
	}
	mustSucceed(t, ichor(t, "machine", "approve", "m-cp2", "-n", ns, "--role", "controlplane"))
	mustFail(t, ichor(t, "machine", "approve", "m-cp3", "-n", ns, "--role", "controlplane"),
		"approving m-cp3 is refused; nothing was changed", "3 approved control planes")
	if st := getMachine(t, ns, "m-cp3").Spec.Approval.State; st != ichorv1alpha1.ApprovalPending {
		t.Fatalf("a refused approval wrote the machine: %s", st)
	}

	// Reject.
	createMachine(t, newMachine(ns, "m-stranger", "prod"))
	mustSucceed(t, ichor(t, "machine", "reject", "m-stranger", "-n", ns))
	rj := getMachine(t, ns, "m-stranger").Spec.Approval
	if rj.State != ichorv1alpha1.ApprovalRejected || rj.DecidedBy != testUser || rj.DecidedAt == nil {
		t.Fatalf("reject must record who and when: %+v", rj)
	}
	mustFail(t, ichor(t, "machine", "reject", "m-two", "-n", ns), "is approved", "ichor node remove m-two")
}
