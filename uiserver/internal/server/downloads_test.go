package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/tools/testenv"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
)

// downloadGet fetches a download and returns the status, the headers and the body.
func downloadGet(t *testing.T, path, tok string) (int, http.Header, []byte) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}

	req.Header.Set("Authorization", "Bearer "+tok)

	c := httpClient()
	c.Timeout = 2 * time.Minute

	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck

	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}

	return resp.StatusCode, resp.Header, b
}

func downloadEvents(t *testing.T) []corev1.Event {
	t.Helper()

	list := &corev1.EventList{}
	if err := admin.List(t.Context(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}

	var out []corev1.Event

	for _, e := range list.Items {
		if e.Reason == download.EventReason {
			out = append(out, e)
		}
	}

	return out
}

func downloadRequests(t *testing.T) []string {
	t.Helper()

	list := &ichorv1alpha1.TalosCredentialRequestList{}
	if err := admin.List(t.Context(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}

	var out []string

	for _, r := range list.Items {
		if r.Spec.Purpose != ichorv1alpha1.PurposeReader {
			out = append(out, r.Name+" ("+r.Spec.Purpose+")")
		}
	}

	return out
}

// TestAdminDownloads downloads a support bundle, an etcd snapshot and a
// packet capture of the emulated control plane through ichor-ui as an admin,
// each after a Warning Event naming the user, with a certificate a
// TalosCredentialRequest created as that user signed; a viewer and an
// operator are refused, with no request made and no Event.
func TestAdminDownloads(t *testing.T) {
	const captureQuery = "?interface=enp0s1&duration=1s&snapLen=128"

	// The suite shares its namespace: the Warning Events this test makes
	// would show in the other tests' lists of recent Events (TestClusterHealth).
	t.Cleanup(func() {
		err := admin.DeleteAllOf(context.Background(), &corev1.Event{}, client.InNamespace(testNS),
			client.MatchingFields{"reason": download.EventReason})
		if err != nil {
			t.Errorf("deleting the download Events: %v", err)
		}
	})

	paths := map[string]string{
		"support-bundle": "/api/v1/nodes/" + nodeName + "/support-bundle",
		"etcd-snapshot":  "/api/v1/nodes/" + nodeName + "/etcd-snapshot",
		"packet-capture": "/api/v1/nodes/" + nodeName + "/packet-capture" + captureQuery,
	}

	if len(paths) != len(server.DownloadRoutes) {
		t.Fatalf("routes %v, the test covers %d", server.DownloadRoutes, len(paths))
	}

	for _, who := range []struct{ name, tok string }{{"viewer", viewer(t)}, {"operator", operator(t)}} {
		for kind, path := range paths {
			code, _, body := downloadGet(t, path, who.tok)

			msg := map[string]any{}
			_ = json.Unmarshal(body, &msg)

			text, _ := msg["message"].(string)
			if code != http.StatusForbidden || !strings.Contains(text, "may not download talosclusters/"+kind) || !strings.Contains(text, "ichor-admin") {
				t.Errorf("%s downloading %s: %d %s, want 403 naming download on talosclusters/%s and ichor-admin", who.name, kind, code, body, kind)
			}
		}
	}

	// Bad parameters are refused before anything is made either.
	for _, q := range []string{"?duration=1s", "?interface=enp0s1&duration=1h", "?interface=enp0s1&snapLen=10", "?interface=a/b"} {
		code, _, body := downloadGet(t, "/api/v1/nodes/"+nodeName+"/packet-capture"+q, adminTok(t))
		if code != http.StatusBadRequest {
			t.Errorf("packet capture %s: %d %s, want 400", q, code, body)
		}
	}

	if ev := downloadEvents(t); len(ev) != 0 {
		t.Fatalf("refused downloads left Events: %v", ev)
	}

	if reqs := downloadRequests(t); len(reqs) != 0 {
		t.Fatalf("refused downloads made TalosCredentialRequests: %v", reqs)
	}

	tok := adminTok(t)

	// The support bundle: a gzip tar of the node's reads.
	code, hdr, body := downloadGet(t, paths["support-bundle"], tok)
	if code != http.StatusOK {
		t.Fatalf("support bundle: %d %s", code, body)
	}

	if ct := hdr.Get("Content-Type"); ct != "application/gzip" || !strings.Contains(hdr.Get("Content-Disposition"), ".tar.gz") {
		t.Errorf("support bundle headers: %s, %s", ct, hdr.Get("Content-Disposition"))
	}

	entries := tarEntries(t, body)
	for _, want := range []string{"summary", "dmesg.log", "mounts", "service-logs/etcd.log", "service-logs/etcd.state", "service-logs/kubelet.log", "resources/linkstatuses.net.talos.dev.yaml"} {
		if _, ok := entries[nodeName+"/"+want]; !ok {
			t.Errorf("support bundle has no %s/%s; it has %v", nodeName, want, keys(entries))
		}
	}

	if s := string(entries[nodeName+"/summary"]); !strings.Contains(s, "Tag:") {
		t.Errorf("summary: %q", s)
	}

	if s := string(entries[nodeName+"/resources/linkstatuses.net.talos.dev.yaml"]); !strings.Contains(s, "enp0s1") {
		t.Errorf("link statuses do not name enp0s1: %.300s", s)
	}

	for name := range entries {
		if strings.Contains(name, "machineconfig") {
			t.Errorf("the bundle holds %s: a Sensitive resource type", name)
		}
	}

	// The etcd snapshot: etcd's own format, the database then its sha256.
	code, _, body = downloadGet(t, paths["etcd-snapshot"], tok)
	if code != http.StatusOK {
		t.Fatalf("etcd snapshot: %d %s", code, body)
	}

	if len(body) < 4096+sha256.Size {
		t.Fatalf("etcd snapshot of %d bytes", len(body))
	}

	if sum := sha256.Sum256(body[:len(body)-sha256.Size]); !bytes.Equal(sum[:], body[len(body)-sha256.Size:]) {
		t.Error("the etcd snapshot's trailer is not the sha256 of its database")
	}

	// The packet capture: a pcap stream with the snap length asked for.
	code, hdr, body = downloadGet(t, paths["packet-capture"], tok)
	if code != http.StatusOK {
		t.Fatalf("packet capture: %d %s", code, body)
	}

	if len(body) < 24 || binary.LittleEndian.Uint32(body) != 0xa1b2c3d4 || binary.LittleEndian.Uint32(body[16:]) != 128 {
		t.Fatalf("packet capture of %d bytes is not a pcap with snap length 128: % x", len(body), body[:min(len(body), 24)])
	}

	if ct := hdr.Get("Content-Type"); ct != "application/vnd.tcpdump.pcap" {
		t.Errorf("packet capture Content-Type %s", ct)
	}

	// One Warning Event per download, naming the user, on the TalosMachine.
	events := downloadEvents(t)
	if len(events) != 3 {
		t.Fatalf("%d download Events, want 3: %v", len(events), events)
	}

	for _, kind := range []string{"a support bundle", "an etcd snapshot", "a packet capture of node " + nodeName + " (interface enp0s1, 1s, snap length 128)"} {
		found := false

		for _, e := range events {
			if e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "TalosMachine" && e.InvolvedObject.Name == nodeName &&
				strings.HasPrefix(e.Message, "ichor:ada downloads "+kind) && strings.Contains(e.Message, " of node "+nodeName) {
				found = true
			}
		}

		if !found {
			t.Errorf("no Warning Event on TalosMachine %s naming ichor:ada for %s: %v", nodeName, kind, events)
		}
	}

	// The download's requests are deleted once the download ends.
	testenv.EventuallyOK(t, time.Minute, "no download TalosCredentialRequest left behind", func() (bool, string) {
		reqs := downloadRequests(t)

		return len(reqs) == 0, fmt.Sprint(reqs)
	})

	// The etcd snapshot comes from control planes only; without a token nothing is served.
	code, _, body = downloadGet(t, "/api/v1/nodes/nope/etcd-snapshot", tok)
	if code != http.StatusNotFound {
		t.Errorf("etcd snapshot of an unknown machine: %d %s, want 404", code, body)
	}

	code, _, body = downloadGet(t, paths["etcd-snapshot"], "not-a-token")
	if code != http.StatusUnauthorized {
		t.Errorf("download with a bad token: %d %s, want 401", code, body)
	}
}

func tarEntries(t *testing.T, b []byte) map[string][]byte {
	t.Helper()

	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("support bundle is not gzip: %v", err)
	}

	tr := tar.NewReader(gz)
	out := map[string][]byte{}

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatalf("support bundle tar: %v (after %v)", err, keys(out))
		}

		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}

		out[h.Name] = data
	}

	return out
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}

	return out
}
