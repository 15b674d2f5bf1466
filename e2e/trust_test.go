package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// Issue 17, "Who the node is": an operator deletes a worker and repoints its
// address at a control plane. The control plane receives no Reset. Either
// admission refuses the repoint (spec.address is immutable once approved,
// and no spec change is taken while deleting), and the worker's removal
// resets the worker; or the change got in (admission without that rule), and
// the controller's identity check refuses the removal's steps, names both
// SMBIOS UUIDs and pauses the machine, until the address is the worker's
// again. The emulator's RPC counters say who got a Reset.
//
// Admission is as installed: ichor-controller serves its webhooks (called by
// URL, with a certificate the test makes) and the CRDs' rules apply. Its
// reconcilers wait for a leader Lease the test holds while the operator acts
// (as while a replica takes over), so the removal cannot reset the worker
// before the repoint lands: every step it takes sees the repointed address.

// operator is how the test acts as a user of the built-in ichor-operator
// role: the admin kubeconfig impersonating a member of ichor:operator.
var operator = []string{"--as=e2e-operator", "--as-group=ichor:operator", "--as-group=system:authenticated"}

func (w *world) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv(assetsEnv), "kubectl"), args...) //nolint:gosec // the test's own kubectl
	cmd.Env = w.env

	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}

	return out.String(), nil
}

// controlGet reads path of talosemu's control API as JSON into out.
func (w *world) controlGet(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.control+path, nil)
	if err != nil {
		return err
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}

	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}

	return nil
}

// rpcs reads a machine's RPC counters from talosemu's control API.
func (w *world) rpcs(ctx context.Context, name string) (map[string]int, error) {
	var out map[string]int
	if err := w.controlGet(ctx, "/machines/"+name+"/rpcs", &out); err != nil {
		return nil, fmt.Errorf("the control API's RPC counters of %s: %w", name, err)
	}

	return out, nil
}

func (w *world) resets(t *testing.T, ctx context.Context, m emuMachine) int {
	t.Helper()

	c, err := w.rpcs(ctx, m.Name)
	if err != nil {
		t.Fatal(err)
	}

	return c["/machine.MachineService/Reset"]
}

// talosMachine is what the test reads of a TalosMachine through kubectl.
type talosMachine struct {
	Metadata struct {
		Name              string  `json:"name"`
		Namespace         string  `json:"namespace"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Address  string `json:"address"`
		Role     string `json:"role"`
		Identity struct {
			UUID string `json:"uuid"`
		} `json:"identity"`
		Approval struct {
			State string `json:"state"`
		} `json:"approval"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
		Removal *struct {
			Phase   string `json:"phase"`
			Message string `json:"message"`
		} `json:"removal"`
	} `json:"status"`
}

func (w *world) talosMachines(ctx context.Context) ([]talosMachine, error) {
	out, err := w.kubectl(ctx, "get", "talosmachines", "-A", "-o", "json")
	if err != nil {
		return nil, err
	}

	var l struct {
		Items []talosMachine `json:"items"`
	}

	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("kubectl get talosmachines: %w\n%s", err, out)
	}

	return l.Items, nil
}

func TestOperatorRepointsDeletedWorkerNoReset(t *testing.T) {
	w := approvedWorld(t)

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	if w.control == "" {
		t.Fatal("talosemu printed no control API address")
	}

	// The world: machines 1–3 control planes (the first runs the cluster's
	// API server), machines 4 and 5 workers; the earlier scenarios (the CLI's
	// and the console's) each removed a worker, so which one is approved now
	// depends on which ran: take the approved one, and approve the other again.
	cp := w.machines[1]

	ms, err := w.talosMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var (
		tm     talosMachine
		worker = w.machines[3]
	)

	for _, em := range w.machines[3:] {
		for _, m := range ms {
			if m.Spec.Address == em.ip() && m.Spec.Approval.State == "approved" && m.Metadata.DeletionTimestamp == nil && tm.Metadata.Name == "" {
				tm, worker = m, em
			}
		}
	}

	if tm.Metadata.Name == "" || tm.Spec.Role != "worker" || tm.Spec.Identity.UUID != worker.UUID {
		t.Fatalf("no approved worker at %s or %s:\n%s", w.machines[3].ip(), w.machines[4].ip(), describeTM(ms))
	}

	name, ns := tm.Metadata.Name, tm.Metadata.Namespace

	// The admission rules keep a last worker of a cluster whose control planes
	// take no workloads: the worker an earlier scenario removed comes back first.
	for _, em := range w.machines[3:] {
		if em == worker {
			continue
		}

		testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, em.ip()+" pending again", func() (bool, string) {
			ms, err := w.talosMachines(ctx)
			if err != nil {
				return false, err.Error()
			}

			for _, m := range ms {
				if m.Spec.Address != em.ip() || m.Metadata.DeletionTimestamp != nil {
					continue
				}

				switch m.Spec.Approval.State {
				case "approved":
					return true, ""
				case "pending":
					w.mustIchor(t, ctx, "machine", "approve", m.Metadata.Name, "--role", "worker")

					return true, ""
				}
			}

			return false, describeTM(ms)
		})
	}

	testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, "two Ready workers", func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		ready := 0

		for _, m := range ms {
			if m.Spec.Role == "worker" && m.ready() {
				ready++
			}
		}

		return ready == 2, describe(ms)
	})
	cpResets, workerResets := w.resets(t, ctx, cp), w.resets(t, ctx, worker)

	release := w.admissionOnly(t, ctx, ns, name)

	// The operator removes the worker, then repoints its address.
	if _, err := w.kubectl(ctx, append(operator, "-n", ns, "annotate", "talosmachine", name, "ichor.maesh.dev/allow-delete=true")...); err != nil {
		t.Fatal(err)
	}

	if _, err := w.kubectl(ctx, append(operator, "-n", ns, "delete", "talosmachine", name, "--wait=false")...); err != nil {
		t.Fatal(err)
	}

	repoint := fmt.Sprintf(`{"spec":{"address":%q}}`, cp.ip())
	out, perr := w.kubectl(ctx, append(operator, "-n", ns, "patch", "talosmachine", name, "--type=merge", "-p", repoint)...)

	release()

	if perr != nil {
		// Admission refused the repoint: the removal goes on with the worker's address.
		t.Logf("the repoint was refused at admission: %s", strings.TrimSpace(out))

		if !strings.Contains(out, "address") {
			t.Fatalf("the refusal does not name spec.address: %s", out)
		}

		waitRemoved(t, ctx, w, name)

		if n := w.resets(t, ctx, worker) - workerResets; n != 1 {
			t.Errorf("the worker got %d Reset calls, want 1", n)
		}
	} else {
		t.Log("the repoint got through admission; the controller's identity check must refuse the removal")
		identityRefused(t, ctx, w, name, worker, cp, cpResets)

		if n := w.resets(t, ctx, worker) - workerResets; n != 0 {
			t.Errorf("the worker got %d Reset calls while its machine pointed at %s", n, cp.ip())
		}

		// The allowed neighbour: with its own address back (admission without
		// the rule takes it), the same removal resets the worker.
		back := fmt.Sprintf(`{"spec":{"address":%q}}`, worker.ip())
		if _, err := w.kubectl(ctx, "-n", ns, "patch", "talosmachine", name, "--type=merge", "-p", back); err != nil {
			t.Fatal(err)
		}

		waitRemoved(t, ctx, w, name)

		if n := w.resets(t, ctx, worker) - workerResets; n != 1 {
			t.Errorf("the worker got %d Reset calls once its address was its own, want 1", n)
		}
	}

	if n := w.resets(t, ctx, cp) - cpResets; n != 0 {
		t.Fatalf("the control plane %s got %d Reset calls from the removal of worker %s", cp.Name, n, name)
	}

	if cordoned(t, ctx, w, cp.ip()) {
		t.Errorf("the control plane's Node was cordoned by the removal of worker %s", name)
	}
}

// cordoned reports whether the Node with the InternalIP address is unschedulable.
func cordoned(t *testing.T, ctx context.Context, w *world, address string) bool {
	t.Helper()

	out, err := w.kubectl(ctx, "get", "nodes", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}

	var l struct {
		Items []struct {
			Spec struct {
				Unschedulable bool `json:"unschedulable"`
			} `json:"spec"`
			Status struct {
				Addresses []struct{ Type, Address string } `json:"addresses"`
			} `json:"status"`
		} `json:"items"`
	}

	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kubectl get nodes: %v", err)
	}

	for _, n := range l.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == "InternalIP" && a.Address == address {
				return n.Spec.Unschedulable
			}
		}
	}

	t.Fatalf("no Node has the address %s", address)

	return false
}

// identityRefused waits until the removal is refused for the node's identity
// at the repointed address: IdentityConflict (IdentityMismatch) names both
// machines' UUIDs, and the removal waits in its drain step (before any Reset).
func identityRefused(t *testing.T, ctx context.Context, w *world, name string, worker, cp emuMachine, cpResets int) {
	t.Helper()

	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "the removal refused by the identity check", func() (bool, string) {
		ms, err := w.talosMachines(ctx)
		if err != nil {
			return false, err.Error()
		}

		for _, m := range ms {
			if m.Metadata.Name != name {
				continue
			}

			for _, c := range m.Status.Conditions {
				if c.Type == "IdentityConflict" && c.Status == "True" && c.Reason == "IdentityMismatch" &&
					strings.Contains(c.Message, worker.UUID) && strings.Contains(c.Message, cp.UUID) &&
					m.Status.Removal != nil && m.Status.Removal.Phase == "Draining" {
					return true, ""
				}
			}

			return false, fmt.Sprintf("address %s, removal %+v, conditions %+v", m.Spec.Address, m.Status.Removal, m.Status.Conditions)
		}

		t.Fatalf("the removal finished at the repointed address %s: the control plane got %d Reset calls", cp.ip(), w.resets(t, ctx, cp)-cpResets)

		return false, ""
	})
}

// waitRemoved waits until the machine's removal finished (its object is gone).
func waitRemoved(t *testing.T, ctx context.Context, w *world, name string) {
	t.Helper()

	testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, name+" removed", func() (bool, string) {
		ms, err := w.talosMachines(ctx)
		if err != nil {
			return false, err.Error()
		}

		for _, m := range ms {
			if m.Metadata.Name == name && m.Metadata.DeletionTimestamp != nil {
				return false, fmt.Sprintf("address %s, removal %+v, conditions %+v", m.Spec.Address, m.Status.Removal, m.Status.Conditions)
			}
		}

		return true, ""
	})
}

// admissionOnly holds the controllers' leader Lease for the test: both
// replicas keep serving their admission webhooks, but the leader finds the
// Lease held by another at its next renewal, loses its leadership and its
// process exits (controller-runtime's "leader election lost"); its restart
// and the other replica wait for the Lease. The returned func gives it up.
func (w *world) admissionOnly(t *testing.T, ctx context.Context, ns, probe string) func() {
	t.Helper()

	leader, err := w.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	pid := w.podProcess("ichor-controller", leader)
	if pid == 0 {
		t.Fatalf("no process runs the leading controller pod %s", leader)
	}

	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	lease := fmt.Sprintf(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":%q,"namespace":%q},`+
		`"spec":{"holderIdentity":"e2e-test","leaseDurationSeconds":3600,"acquireTime":%q,"renewTime":%q}}`, leaseName, icNamespace, now, now)

	if _, err := w.kubectl(ctx, "patch", "lease", "-n", icNamespace, leaseName, "--type=merge", "-p", lease); err != nil {
		t.Fatal(err)
	}

	// The leader's process is gone (its container restarts and waits).
	testenv.EventuallyEvery(t, 2*time.Minute, time.Second, "the leading controller "+leader+" giving up", func() (bool, string) {
		err := syscall.Kill(pid, 0)

		return errors.Is(err, syscall.ESRCH), fmt.Sprintf("process %d of pod %s still runs", pid, leader)
	})

	// A dry-run write goes through the validating webhook: once it passes, admission runs.
	testenv.EventuallyEvery(t, 2*time.Minute, 2*time.Second, "the admission webhooks answer", func() (bool, string) {
		out, err := w.kubectl(ctx, "-n", ns, "annotate", "--dry-run=server", "--overwrite", "talosmachine", probe, "e2e.ichor.dev/probe=1")

		return err == nil, out
	})

	return func() {
		if _, err := w.kubectl(ctx, "-n", icNamespace, "delete", "lease", leaseName); err != nil {
			t.Fatal(err)
		}
	}
}

// describeTM lists the TalosMachines for a failure message.
func describeTM(ms []talosMachine) string {
	var b strings.Builder

	for _, m := range ms {
		deleting := ""
		if m.Metadata.DeletionTimestamp != nil {
			deleting = " (being deleted)"
		}

		fmt.Fprintf(&b, "  %s %s %s %s%s\n", m.Metadata.Name, m.Spec.Address, m.Spec.Role, m.Spec.Approval.State, deleting)
	}

	return b.String()
}
