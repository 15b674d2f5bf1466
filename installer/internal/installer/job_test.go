package installer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestInstallerJob: the Job `ichor init --install=manifest` (and later the
// controller) starts is admitted in Ichor's namespace, which enforces the
// restricted Pod Security Standard, runs as the installer's ServiceAccount
// and is scheduled; WaitJob follows it to its end. The pods are kwok's here:
// the Job "completes" without running the installer, which CheckInstalled
// catches (the IchorInstallation does not report the version). A Job whose
// pod cannot be scheduled fails at its deadline, and the result says why and
// that its log cannot be read. Running the real binary in the pod is the
// emulator's pod runner's part (e2e TestInClusterInstall).
func TestInstallerJob(t *testing.T) {
	installed(t, "v0.1.0")

	ctx := t.Context()
	name := install.JobName("v0.9.0")
	job := install.InstallerJob(ns, name, install.InstallerImage("v0.9.0"))
	testenv.Must(t, k8s.Create(ctx, job))
	t.Cleanup(func() { _ = k8s.Delete(ctx, job, client.PropagationPolicy("Background")) })

	var states []string

	res, err := install.WaitJob(ctx, k8s, clientset, ns, name, 2*time.Minute, func(s string) { states = append(states, s) })
	if err != nil || !res.Succeeded {
		t.Fatalf("the installer Job did not complete: %+v, %v (states %v)", res, err, states)
	}

	err = install.CheckInstalled(ctx, k8s, "v0.9.0")
	if !errors.Is(err, install.ErrNotInstalled) || !strings.Contains(err.Error(), `reports "v0.1.0", not v0.9.0`) {
		t.Fatalf("a Job that installed nothing passed the check: %v", err)
	}

	// A pod that never runs: the Job fails at its deadline.
	stuck := install.InstallerJob(ns, "ichor-install-stuck", install.InstallerImage("v0.9.0"))
	stuck.Spec.Template.Spec.NodeSelector = map[string]string{"ichor.test/nowhere": "true"}
	stuck.Spec.ActiveDeadlineSeconds = new(int64(5))
	testenv.Must(t, k8s.Create(ctx, stuck))
	t.Cleanup(func() { _ = k8s.Delete(ctx, stuck, client.PropagationPolicy("Background")) })

	states = nil

	res, err = install.WaitJob(ctx, k8s, clientset, ns, stuck.Name, 2*time.Minute, func(s string) { states = append(states, s) })
	if err != nil || res.Succeeded || !strings.Contains(res.Reason, "DeadlineExceeded") {
		t.Fatalf("a Job past its deadline: %+v, %v", res, err)
	}

	if !strings.Contains(strings.Join(states, "\n"), "is not scheduled: 0/2 nodes are available") {
		t.Fatalf("the progress did not say why the pod waits: %q", states)
	}

	if !strings.HasPrefix(res.Log, "(") {
		t.Fatalf("the log of a pod that never ran: %q", res.Log)
	}
}
