package talosmachine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// bundleSecrets are the secret values of the test bundle, raw and in the
// base64 form a machine configuration carries them in.
func bundleSecrets(t *testing.T) map[string]string {
	t.Helper()

	out := map[string]string{
		"bootstrap token":             theBun.Secrets.BootstrapToken,
		"AESCBC encryption secret":    theBun.Secrets.AESCBCEncryptionSecret,
		"secretbox encryption secret": theBun.Secrets.SecretboxEncryptionSecret,
		"trustd token":                theBun.TrustdInfo.Token,
		"cluster secret":              theBun.Cluster.Secret,
	}

	keys := map[string][]byte{
		"etcd CA key": theBun.Certs.Etcd.Key, "Kubernetes CA key": theBun.Certs.K8s.Key,
		"aggregator CA key": theBun.Certs.K8sAggregator.Key, "service account key": theBun.Certs.K8sServiceAccount.Key,
		"OS CA key": theBun.Certs.OS.Key,
	}
	for what, k := range keys {
		out[what] = string(k)
		out[what+" (base64)"] = base64.StdEncoding.EncodeToString(k)
	}

	// A contract may leave a secret unset (v1.14 has no AESCBC secret);
	// the others must be there, or the check would prove nothing.
	if theBun.Secrets.AESCBCEncryptionSecret == "" {
		delete(out, "AESCBC encryption secret")
	}

	for what, v := range out {
		if len(v) < 8 {
			t.Fatalf("the test bundle's %s is empty or short: the check would prove nothing", what)
		}
	}

	return out
}

// TestTalosMachineReconciler_NoSecretsInStatusOrEvents: after the other tests
// applied, staged, waited and corrected, no secret of the bundle appears in
// any machine's status or in any Event.
func TestTalosMachineReconciler_NoSecretsInStatusOrEvents(t *testing.T) {
	ctx := context.Background()

	for _, n := range machineNames {
		inSync(t, n)
	}

	var machines ichorv1alpha1.TalosMachineList
	testenv.Must(t, k8s.List(ctx, &machines, client.InNamespace(ns)))

	var events eventsv1.EventList
	testenv.Must(t, k8s.List(ctx, &events, client.InNamespace(ns)))

	// The tests before this one (file order) applied, staged, waited and corrected.
	reasons := map[string]bool{}
	for _, e := range events.Items {
		reasons[e.Reason] = true
	}

	for _, r := range []string{ichorv1alpha1.AppliedReason, ichorv1alpha1.StagedReason, ichorv1alpha1.WaitingForRolloutReason} {
		if !reasons[r] {
			t.Errorf("no %s Event to check", r)
		}
	}

	if len(machines.Items) != len(machineNames) || len(events.Items) == 0 {
		t.Fatalf("%d machines and %d Events: nothing to check", len(machines.Items), len(events.Items))
	}

	texts := make([]string, 0, len(machines.Items)+len(events.Items))

	for _, m := range machines.Items {
		b, err := json.Marshal(m.Status)
		testenv.Must(t, err)
		texts = append(texts, string(b))
	}

	for _, e := range events.Items {
		b, err := json.Marshal(e)
		testenv.Must(t, err)
		texts = append(texts, string(b))
	}

	all := strings.Join(texts, "\n")
	for what, v := range bundleSecrets(t) {
		// As JSON holds it (a PEM key's newlines escaped), and its first line alone.
		quoted, err := json.Marshal(strings.TrimSpace(v))
		testenv.Must(t, err)

		forms := []string{strings.Trim(string(quoted), `"`)}
		if lines := strings.Split(strings.TrimSpace(v), "\n"); len(lines) > 2 {
			forms = append(forms, lines[1])
		}

		for _, f := range forms {
			if strings.Contains(all, f) {
				t.Errorf("the bundle's %s appears in a status or an Event", what)
			}
		}
	}
}
