package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// TestUIAddress: `ichor ui` prints the address init recorded once ichor-ui
// answers ready there, says so when it is not, and without an address or a
// Service says what to install or pass.
func TestUIAddress(t *testing.T) {
	ctx := context.Background()
	ready := true
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()

	ns := namespace(t, "ui-none")
	mustFail(t, ichor(t, "ui", "--install-namespace", ns), "no Service ichor-ui in namespace "+ns, "--url")

	r := mustSucceed(t, ichor(t, "ui", "--url", srv.URL))
	if !strings.Contains(r.stdout, "The web console is at "+srv.URL) {
		t.Fatalf("ui --url: %s", r.stdout)
	}
	mustFail(t, ichor(t, "ui", "--url", "http://example.com"), "not an https URL")

	inst := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName, Annotations: map[string]string{install.UIURLAnnotation: srv.URL}},
		Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.0.1"}},
	}
	must(t, k8s.Create(ctx, inst))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), inst) })
	r = mustSucceed(t, ichor(t, "ui"))
	if !strings.Contains(r.stdout, "The web console is at "+srv.URL) {
		t.Fatalf("ui with the recorded address: %s", r.stdout)
	}
	ready = false
	mustFail(t, ichor(t, "ui"), "answers but is not ready", "503")
	mustFail(t, ichor(t, "ui", "--url", "https://ichor.invalid:8443"), "does not answer", "--url")
	// A recorded address on loopback where nothing listens is port-forwarded
	// to on its port (here: there is no ichor-ui Service to forward to).
	srv.Close()
	mustFail(t, ichor(t, "ui"), "nothing answers at ichor-ui's recorded address "+srv.URL, "no Service ichor-ui in namespace ichor-system", "--install-namespace")
}
