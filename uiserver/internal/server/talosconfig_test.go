package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
)

// TestReaderTalosconfigDownload downloads the console's os:reader
// talosconfig as an operator: the file talosctl reads, whose certificate
// reads the node and is refused a reboot; the request asked for the
// duration given (the controller's Event naming the operator is
// credentialrequest's TestRequesterIsCopiedFromTheWebhookStamp).
// A viewer and bad durations are refused before anything is made.
func TestReaderTalosconfigDownload(t *testing.T) {
	t.Cleanup(func() {
		_ = admin.DeleteAllOf(context.Background(), &corev1.Event{}, client.InNamespace(testNS),
			client.MatchingFields{"reason": download.EventReason})
		// the talosconfig's request stays for its hour (the audit record); the suite's other tests count requests
		list := &ichorv1alpha1.TalosCredentialRequestList{}
		_ = admin.List(context.Background(), list, client.InNamespace(testNS))

		for i := range list.Items {
			if list.Items[i].Spec.Purpose == ichorv1alpha1.PurposeTalosconfigReader {
				_ = admin.Delete(context.Background(), &list.Items[i])
			}
		}
	})

	for _, tc := range []struct {
		name, query, tok string
		code             int
		want             string
	}{
		{"viewer", "", viewer(t), http.StatusForbidden, "may not download talosclusters/talosconfig-reader"},
		{"too long", "?duration=13h", operator(t), http.StatusBadRequest, "lasts 1m to 12h"},
		{"not a duration", "?duration=soon", operator(t), http.StatusBadRequest, `duration "soon" is not a duration`},
		{"no token", "", "not-a-token", http.StatusUnauthorized, "sign in again"},
	} {
		code, _, body := downloadGet(t, "/api/v1/cluster/talosconfig"+tc.query, tc.tok)

		var msg struct{ Message string }
		_ = json.Unmarshal(body, &msg)

		if code != tc.code || !strings.Contains(msg.Message, tc.want) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, code, body, tc.code, tc.want)
		}
	}

	if ev := downloadEvents(t); len(ev) != 0 {
		t.Fatalf("refused downloads left Events: %v", ev)
	}

	if reqs := downloadRequests(t); len(reqs) != 0 {
		t.Fatalf("refused downloads made TalosCredentialRequests: %v", reqs)
	}

	code, hdr, body := downloadGet(t, "/api/v1/cluster/talosconfig?duration=2h", operator(t))
	if code != http.StatusOK {
		t.Fatalf("talosconfig: %d %s", code, body)
	}

	if hdr.Get("Cache-Control") != "no-store" || !strings.Contains(hdr.Get("Content-Disposition"), testCluster+"-talosconfig") {
		t.Errorf("headers: %v", hdr)
	}

	cfg, err := clientconfig.FromBytes(body)
	if err != nil {
		t.Fatalf("the download is not a talosconfig: %v", err)
	}

	if ctx := cfg.Contexts[cfg.Context]; cfg.Context != testCluster || ctx == nil || strings.Join(ctx.Endpoints, ",") != nodeAddr {
		t.Fatalf("context %q: %+v, want endpoints [%s]", cfg.Context, ctx, nodeAddr)
	}

	// The request: created as the operator, for talosconfig-reader and two hours.
	list := &ichorv1alpha1.TalosCredentialRequestList{}
	if err := admin.List(t.Context(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}

	var tcr *ichorv1alpha1.TalosCredentialRequest

	for i := range list.Items {
		if list.Items[i].Spec.Purpose == ichorv1alpha1.PurposeTalosconfigReader {
			tcr = &list.Items[i]
		}
	}

	if tcr == nil || tcr.Spec.Duration == nil || tcr.Spec.Duration.Duration != 2*time.Hour || tcr.Status.ExpiresAt == nil {
		t.Fatalf("the talosconfig's request: %+v", tcr)
	}

	if got := hdr.Get("X-Ichor-Expires-At"); got != tcr.Status.ExpiresAt.UTC().Format(time.RFC3339) {
		t.Errorf("X-Ichor-Expires-At %q, the certificate expires %s", got, tcr.Status.ExpiresAt.UTC())
	}

	// The talosconfig reads the node and changes nothing.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	c, err := talosclient.New(ctx, talosclient.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	nctx := talosclient.WithNode(ctx, nodeAddr)
	if _, err := c.Version(nctx); err != nil {
		t.Fatalf("Version with the reader talosconfig: %v", err)
	}

	if err := c.Reboot(nctx); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Reboot with the reader talosconfig: %v, want PermissionDenied", err)
	}

	if _, err := c.MachineClient.Reset(nctx, &machine.ResetRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Reset with the reader talosconfig: %v, want PermissionDenied", err)
	}

	// The key is in the file only: nothing the server logged holds it.
	if key := cfg.Contexts[cfg.Context].Key; strings.Contains(logBuf.String(), key) {
		t.Fatal("the access log holds the talosconfig's key")
	}
}
