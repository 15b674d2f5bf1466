package operation

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// serveReadyz serves /readyz over TLS on address's kube-apiserver port with
// status and body, as a kube-apiserver does.
func serveReadyz(t *testing.T, address string, status int, body string) {
	t.Helper()

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort(address, strconv.Itoa(workload.APIServerPort)))
	if err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
}

// TestReadyzOnlyAnAbsentServerIsARestart: the wait for a kube-apiserver
// restart counts only a server that is not there (nothing listens on its
// port) as the restart; a server that answers "not ready" (the previous one
// still starting, or slow on a busy machine) is not, or the wait ends before
// the real restart comes. The errors are the real ones of
// workload.APIServerReady against real listeners.
func TestReadyzOnlyAnAbsentServerIsARestart(t *testing.T) {
	// Addresses of this package's emulator subnet that no machine uses.
	const notReady, ready, nobody = "127.0.83.250", "127.0.83.251", "127.0.83.252"

	serveReadyz(t, notReady, http.StatusInternalServerError, "[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed")
	serveReadyz(t, ready, http.StatusOK, "ok")

	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

	for _, tc := range []struct {
		address string
		want    readyz
	}{
		{ready, readyzOK},
		{notReady, readyzUnknown},
		{nobody, readyzAway},
	} {
		err := workload.APIServerReady(context.Background(), cfg, tc.address)
		if got := readyzOf(err); got != tc.want {
			t.Errorf("%s: readyzOf(%v) = %d, want %d", tc.address, err, got, tc.want)
		}
	}
}
